package tile

// Keys every row of an item sees may still be masked by a bias or a mask.
// When those are uniform over the item's rows (a key-padding mask, a
// per-key bias), the span splits into runs: long runs of masked keys are
// skipped like blocks outside the causal range, runs with no bias and no
// masked key run plain (the fused decode kernel may take them), and the
// rest run in flash blocks that add the bias and mask their keys.

// minSkip is the shortest run of masked keys that is skipped; shorter ones
// are masked inside their blocks, so a sprinkle of masked keys does not
// cut the span into tiny blocks.
const minSkip = 16

// visibleKeys runs the keys [a, b) that every row of the item sees under
// the causal, window and key-length rules.
func (r *itemRun) visibleKeys(a, b int, fused bool) {
	p := r.p
	if p.Bias == nil && p.Mask == nil {
		r.plainKeys(a, b, fused, false)
		return
	}
	bias, mask := p.itemRows(r.it, 0, p.KVLen)
	if (bias == nil) != (p.Bias == nil) || (mask == nil) != (p.Mask == nil) {
		r.plainKeys(a, b, false, true) // rows differ: in blocks, row by row
		return
	}
	run := func(a, b int) { // a run with no long masked stretch
		if a >= b {
			return
		}
		clean := true
		for j := a; j < b && clean; j++ {
			clean = !keyMasked(bias, mask, j) && (bias == nil || bias[j] == 0)
		}
		r.plainKeys(a, b, fused && clean, !clean)
	}
	start := a
	for j := a; j < b; {
		if !keyMasked(bias, mask, j) {
			j++
			continue
		}
		e := j + 1
		for e < b && keyMasked(bias, mask, e) {
			e++
		}
		if e-j >= minSkip {
			run(start, j)
			start = e
		}
		j = e
	}
	run(start, b)
}

// plainKeys runs keys [a, b) that every row sees: with fused through the
// fused decode kernel in one call (one a block's run on paged K/V), else
// in flash blocks of Bc keys that, with filter, add the bias and apply the
// mask.
func (r *itemRun) plainKeys(a, b int, fused, filter bool) {
	for fused && r.p.pageRun(a, b-a) < b-a { // paged: a call per block's run
		n := r.p.pageRun(a, b-a)
		r.plainKeys(a, a+n, fused, filter)
		a += n
	}
	ks, p, it, ws := r.ks, r.p, r.it, r.ws
	if fused && b-a >= ks.DecodeKeys() {
		rows := it.nh * it.nq
		var alibi []float32
		if p.Slopes != nil { // the slopes, then the distances to key a
			alibi = grow(ws.alibi, 2*rows)
			copy(alibi, ws.slope[:rows])
			for row := 0; row < rows; row++ {
				alibi[rows+row] = float32(a - ws.at[row])
			}
			ws.alibi = alibi
		}
		k, v := p.kvRows(it.b, a, it.g, false), p.kvRows(it.b, a, it.g, true)
		if ws.useQ8 {
			ks.DecodeQ8(ws.q8, rows, p.HeadDim, k, v, b-a, p.ValueDim, ws.o, ws.m, ws.l, ws.ds, alibi)
			return
		}
		ks.Decode(ws.qr, rows, p.HeadDim, k, v, b-a, p.ValueDim, ws.o, ws.m, ws.l, ws.ds, alibi)
		return
	}
	r.blocks(a, b, false, filter)
}

// blocks runs keys [a, b) on all the item's rows in even blocks of at most
// Bc (evenBlocks), each an edge (masked) if edge, with the bias and mask
// if filter.
func (r *itemRun) blocks(a, b int, edge, filter bool) {
	step := evenBlocks(b-a, r.bc)
	for kb := a; kb < b; kb += step {
		r.block(kb, min(step, b-kb), edge, filter, 0, r.rp)
	}
}

// evenBlocks returns the block length for n keys in blocks of at most bc:
// as few blocks as bc allows, of one length (a multiple of 16 where bc
// is), so the last is never a sliver. Under a causal mask an item's keys
// seen by every row end one past its first position, and blocks of bc
// from the start would leave, say, one key of 257 to a block of its own,
// paying a whole block's calls and O rescale for it.
func evenBlocks(n, bc int) int {
	if n <= 0 {
		return bc
	}
	blocks := (n + bc - 1) / bc
	return min(bc, ((n+blocks-1)/blocks+15)/16*16)
}
