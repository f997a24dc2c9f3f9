package tile

// On AMX tiles the flash loop's PV runs transposed: Oᵀ += Vᵀ·Pᵀ. A is V's
// columns paired over keys, as the call's Regroup stored them once
// (VTPairs: each column a row of pairs, as AMX's A reads its rows); B is
// the weights as SoftmaxPairs leaves them, paired over keys with the rows
// in lanes ([keys/2][rowsPad]: B's layout). So the weights go to the tiles
// as the softmax wrote them, without the per-block transpose of their
// pairs to rows that P·V needs (transposePairs: 10% of S1's time in the
// mode on the Xeon, TransposeScale's share of its profile). The item
// holds O as Oᵀ ([dv][rowsPad], ws.ot), so the online softmax's rescale
// scales columns (ScaleColumns): only the span of them whose maximum moved
// (a multiply by 1 changes nothing), none where Oᵀ is still the zeros it
// starts as (the first block: its alphas are 0). O goes back to rows once
// per item, before its stores (or before a block that writes O's rows: a
// poisoned block, a block whose keys do not line up with the pairs), by
// one transpose of rows × dv; it starts as Oᵀ's zeros.
//
// Every element of Oᵀ sums the same products in the same order as O's
// row-major update (the pairs in key order, each TDPBF16PS or VDPBF16PS
// adding its pair's high product, then its low one), so the two layouts
// give the same bits.

// colsO makes ws.ot the item's output accumulator, Oᵀ, from O's rows (the
// padding rows' columns 0): zeros where no PV has written O yet, the
// common case (the first block), else their transpose.
func (r *itemRun) colsO() {
	if r.ot {
		return
	}
	ws, dv, rows := r.ws, r.p.ValueDim, r.it.nh*r.it.nq
	ws.ot = grow(ws.ot, dv*r.rp)
	clear(ws.ot)
	r.otZero = !r.oRows
	if r.oRows {
		r.ks.TransposeScale(ws.ot, r.rp, ws.o, dv, rows, dv, 1)
	}
	r.ot = true
}

// rowsO makes ws.o the item's output accumulator again, where it is Oᵀ,
// before a write to O's rows (or their stores).
// The transposes multiply by 1, which keeps every value (a NaN stays a
// NaN; none is signalling: O is sums of products).
func (r *itemRun) rowsO() {
	r.oRows = true
	if !r.ot {
		return
	}
	r.ks.TransposeScale(r.ws.o, r.p.ValueDim, r.ws.ot, r.rp, r.p.ValueDim, r.it.nh*r.it.nq, 1)
	r.ot = false
}

// pvColumns is the PV update of rows [r0, r1) (whole vectors, padding
// included) of the block of nk keys from kb on AMX tiles, transposed:
// Oᵀ scaled by alpha per column, then += Vᵀ·Pᵀ. It reports false, doing
// nothing, where the call has no VTPairs lined up with the block
// (pairsLineUp).
func (r *itemRun) pvColumns(kb, nk, r0, r1 int) bool {
	p, ks, ws, rp, dv := r.p, r.ks, r.ws, r.rp, r.p.ValueDim
	if p.VTPairs == nil || !pairsLineUp(p, kb, nk) {
		return false
	}
	half := (nk + 1) / 2
	r.colsO()
	if c0, c1 := changedColumns(ws.al, r0, r1, r.otZero); c0 < c1 {
		ks.ScaleColumns(ws.ot[c0:], rp, ws.al[c0:], c1-c0, dv)
	}
	ld := valueColumnStride(p)
	vt := p.VTPairs[(r.it.b*p.KVHeads+r.it.g)*dv*ld+kb/2:]
	ks.GemmBF16(ws.ot[r0:], rp, vt, ld, 1, ws.pp[r0:], rp, dv, r1-r0, half, true)
	r.otZero = false
	return true
}

// changedColumns returns the span [c0, c1) of columns within [r0, r1)
// that a scaling of Oᵀ by alphas would change: from the first column to
// the last that keeps does not hold for (c0 == c1: none).
func changedColumns(alphas []float32, r0, r1 int, zero bool) (c0, c1 int) {
	c0, c1 = r0, r1
	for c0 < c1 && keeps(alphas[c0], zero) {
		c0++
	}
	for c1 > c0 && keeps(alphas[c1-1], zero) {
		c1--
	}
	return c0, c1
}
