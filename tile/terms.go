package tile

// The terms a score gains after QK and the softcap, before the softmax:
// ALiBi (slope·distance, computed, never stored), the additive bias and
// the boolean mask. A bias or mask that is the same for every row of an
// item (broadcast over query positions, and over heads or one head per
// item) is "uniform": one row of it, a value per key, serves the whole
// tile, added by the ScoreBias kernel, and its masked keys are whole
// columns of the tile. Otherwise each row reads its own entries (Go).

// itemRows returns the bias and mask entries of keys [kb, kb+n) that
// every row of item it shares: the row of a bias (mask) broadcast over
// query positions, and over heads or with one head per item; nil for one
// that is absent or differs between the item's rows.
func (p *Problem) itemRows(it item, kb, n int) (bias []float32, mask []bool) {
	shared := func(heads, qlen int) bool { return (heads == 1 || it.nh == 1) && (qlen == 1 || it.nq == 1) }
	if p.Bias != nil && shared(p.BiasHeads, p.BiasQLen) {
		bias = p.Bias[p.biasAt(it.b, it.h0, it.i0, kb):][:n]
	}
	if p.Mask != nil && shared(p.MaskHeads, p.MaskQLen) {
		mask = p.Mask[p.maskAt(it.b, it.h0, it.i0, kb):][:n]
	}
	return bias, mask
}

// keyMasked reports whether key c of shared rows (either may be nil) is
// masked: a -Inf bias entry or a false mask entry.
func keyMasked(bias []float32, mask []bool, c int) bool {
	return (bias != nil && bias[c] == negInf) || (mask != nil && !mask[c])
}

// alibiRows readies the item's ALiBi slopes in ws.slope (zero for the
// padding rows) and each row's key position in ws.at.
func alibiRows(p *Problem, it item, rp int, ws *Workspace) {
	ws.slope = grow(ws.slope, rp)
	ws.dist = grow(ws.dist, rp)
	if cap(ws.at) < rp {
		ws.at = make([]int, rp)
	}
	ws.at = ws.at[:rp]
	clear(ws.slope)
	clear(ws.at)
	off := p.offset(it.b)
	for hh := 0; hh < it.nh; hh++ {
		for ii := 0; ii < it.nq; ii++ {
			r := hh*it.nq + ii
			ws.slope[r] = p.Slopes[it.h0+hh]
			ws.at[r] = it.i0 + ii + off
		}
	}
}

// addTerms adds the ALiBi terms and, with filter, the bias and the mask
// to rows [r0, r1) of the item's tile of keys [kb, kb+nk), marking in
// ws.masked the keys a bias or mask masks for some row.
func (r *itemRun) addTerms(kb, nk, r0, r1 int, filter bool) {
	ks, p, it, ws, rp := r.ks, r.p, r.it, r.ws, r.rp
	s := ws.s[:nk*rp]
	var slope, dist []float32
	if p.Slopes != nil {
		slope, dist = ws.slope[r0:r1], ws.dist[r0:r1]
		for i := range dist {
			dist[i] = float32(kb - ws.at[r0+i]) // exact below 2^24
		}
	}
	var bias []float32
	var mask []bool
	if filter {
		bias, mask = p.itemRows(it, kb, nk)
	}
	ks.ScoreBias(s[r0:], rp, slope, dist, bias, nk, r1-r0)
	if !filter {
		return
	}
	// Every addition before any masking: a masked score stays -Inf.
	if p.Bias != nil && bias == nil {
		addBias(p, it, kb, nk, rp, s, ws.masked)
	}
	if p.Mask != nil && mask == nil {
		maskRows(p, it, kb, nk, rp, s, ws.masked)
	}
	if bias != nil || mask != nil {
		rows := min(r1, it.nh*it.nq)
		for c := 0; c < nk; c++ {
			if keyMasked(bias, mask, c) {
				maskColumn(s, rp, c, r0, rows, ws.masked)
			}
		}
	}
}

// maskColumn masks key c for rows [r0, r1) of a tile: -Inf, whatever the
// score was (NaN included).
func maskColumn(s []float32, lds, c, r0, r1 int, masked []bool) {
	fill(s[c*lds+r0:c*lds+r1], negInf)
	masked[c] = true
}

// addBias adds the item's bias entries for keys [kb, kb+nk) to the tile,
// row by row. A -Inf entry masks its key whatever the score (a NaN from a
// NaN key included) and marks the key in masked.
func addBias(p *Problem, it item, kb, nk, lds int, s []float32, masked []bool) {
	for hh := 0; hh < it.nh; hh++ {
		for ii := 0; ii < it.nq; ii++ {
			r := hh*it.nq + ii
			off := p.biasAt(it.b, it.h0+hh, it.i0+ii, kb)
			for c, x := range p.Bias[off : off+nk] {
				if x == negInf {
					s[c*lds+r] = negInf
					masked[c] = true
				} else {
					s[c*lds+r] += x
				}
			}
		}
	}
}

// maskRows masks the tile's entries whose mask entry is false, row by
// row, and marks their keys in masked.
func maskRows(p *Problem, it item, kb, nk, lds int, s []float32, masked []bool) {
	for hh := 0; hh < it.nh; hh++ {
		for ii := 0; ii < it.nq; ii++ {
			r := hh*it.nq + ii
			off := p.maskAt(it.b, it.h0+hh, it.i0+ii, kb)
			for c, keep := range p.Mask[off : off+nk] {
				if !keep {
					s[c*lds+r] = negInf
					masked[c] = true
				}
			}
		}
	}
}
