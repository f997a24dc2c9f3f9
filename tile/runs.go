package tile

import "github.com/fastattn/fastattn/fallback"

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
		r.prefetchPage(a+n, b)
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
		r.rowsO()
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

// pageAhead is how many rows of the next block of float32 K and V a
// paged decode asks for before it runs the current block: the hardware
// prefetchers stop at a block's end and take several misses to follow
// the next one, which lies anywhere in the pool. On Zen 3 (AVX2, one
// thread, bench -prefix, three alternated runs) the paged step without
// sharing went from 0.90–1.01× (median 0.92) the contiguous cache's
// speed to 0.93–1.02× (0.97) at B 32, P 4096; B 8 was level (0.95–1.07).
const pageAhead = 16

// prefetchPage asks for the first rows of the block of float32 K and V
// that starts at key j (keys up to end), which the fused decode reads
// after the block it is about to run.
func (r *itemRun) prefetchPage(j, end int) {
	p := r.p
	if p.KVType != fallback.KVFloat32 || j >= end {
		return
	}
	n := min(pageAhead, p.pageRun(j, end-j))
	k, v := p.kvRows(r.it.b, j, r.it.g, false), p.kvRows(r.it.b, j, r.it.g, true)
	r.ks.PrefetchLines(k.F32, k.Ld, n, p.HeadDim)
	r.ks.PrefetchLines(v.F32, v.Ld, n, p.vWidth())
}
