package tile

import (
	"unsafe"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// The bfloat16 compute mode (Problem.BF16) on the float32 kernels. Both
// products take bfloat16 operands: the scaled query rows and the keys
// for QK, the weights and the values for PV, each rounded to the nearest
// bfloat16 (ties to even) where the loop already holds it. A product of
// two bfloat16 values is exact in float32 (8 + 8 significant bits), so a
// float32 kernel's FMA on the rounded operands adds the exact product and
// rounds the sum once, as VDPBF16PS does (BFDOT rounds to odd); only
// the order of the sums is the kernel's. The softmax stays float32: each
// row's running sum l adds the unrounded weights, and only the copy PV
// reads is rounded (FlashAttention's order on GPUs): SoftmaxRound stores
// each weight rounded as it adds it to l, in the softmax's one pass.
//
// Other rounding goes through the set's RoundBF16 kernel, or its Narrow
// and Widen kernels in chunks of roundChunk elements of the worker's
// scratch.

// roundChunk is the elements one narrow-then-widen pass rounds.
const roundChunk = 2048

// roundBF16 rounds x to bfloat16 in place through the set's kernels.
func (r *itemRun) roundBF16(x []float32) { roundBF16(r.ks, r.ws, x) }

// roundBF16 rounds x to bfloat16 in place through ks's kernels, a chunk
// of ws's scratch at a time.
func roundBF16(ks *kernels.Set, ws *Workspace, x []float32) { roundThrough(ks, &ws.h16, x) }

// roundInto writes src rounded to bfloat16 to dst: as it copies, on the
// set's RoundBF16 kernel where it has one, else copied, then rounded in
// place.
func roundInto(ks *kernels.Set, ws *Workspace, dst, src []float32) {
	if ks.HasRoundBF16() {
		ks.RoundBF16(dst, src)
		return
	}
	copy(dst, src)
	roundBF16(ks, ws, dst)
}

// roundThrough rounds x to bfloat16 in place: in one pass on the set's
// RoundBF16 kernel where it has one, else through Narrow and Widen, a
// chunk of roundChunk elements of *h (grown to it) at a time.
func roundThrough(ks *kernels.Set, h *[]uint16, x []float32) {
	if ks.HasRoundBF16() {
		ks.RoundBF16(x, x)
		return
	}
	*h = grow(*h, roundChunk)
	for len(x) > 0 {
		n := min(len(x), roundChunk)
		ks.Narrow((*h)[:n], x[:n], fallback.KVBFloat16)
		ks.Widen(x[:n], (*h)[:n], fallback.KVBFloat16)
		x = x[n:]
	}
}

// roundedPairs returns rows rows of n (even) elements of a, at stride
// lda, rounded to bfloat16 into ws's scratch, two elements of a row per
// uint32 ([rows][n/2]): GemmBF16's A in the projections.
func roundedPairs(ks *kernels.Set, ws *Workspace, a []float32, lda, rows, n int) []uint32 {
	return pairsInto(ks, &ws.ap, a, lda, rows, n, n/2)
}

// pairsInto is roundedPairs into *dst (grown to it), its rows ldp
// uint32 apart (ldp >= n/2).
func pairsInto(ks *kernels.Set, dst *[]uint32, a []float32, lda, rows, n, ldp int) []uint32 {
	*dst = grow(*dst, (rows-1)*ldp+n/2)
	h := unsafe.Slice((*uint16)(unsafe.Pointer(&(*dst)[0])), 2*len(*dst))
	for i := range rows {
		ks.Narrow(h[2*i*ldp:2*i*ldp+n], a[i*lda:i*lda+n], fallback.KVBFloat16)
	}
	return *dst
}

// roundedRows returns rows rows of n elements of a, at stride lda,
// rounded to bfloat16 into ws's scratch ([rows][n]): a projection's A
// block in the bfloat16 mode (Gemm.BF16).
func roundedRows(ks *kernels.Set, ws *Workspace, a []float32, lda, rows, n int) []float32 {
	return rowsInto(ks, &ws.ab, &ws.h16, a, lda, rows, n)
}

// rowsInto is roundedRows into *dst (grown to it), rounding through *h.
func rowsInto(ks *kernels.Set, dst *[]float32, h *[]uint16, a []float32, lda, rows, n int) []float32 {
	*dst = grow(*dst, rows*n)
	for i := range rows {
		copy((*dst)[i*n:(i+1)*n], a[i*lda:])
	}
	roundThrough(ks, h, *dst)
	return *dst
}

// roundWeights rounds the weights PV reads in rows [r0, r1) of an nk-key
// tile, after SoftmaxPairs has added them, unrounded, to the running sums:
// a poisoned block's on the bfloat16 kernels (elsewhere SoftmaxRound
// rounds them as it stores them). One pass over the tile's span from key
// 0's row r0 to key nk-1's row r1: the rows between, outside [r0, r1),
// are no weights of this block (PV reads none of them, and the next
// block's scores overwrite them), so rounding them too costs less than a
// call per key (causal's edge blocks take rows ranges of 8–64 of a
// tile's).
func (r *itemRun) roundWeights(nk, r0, r1 int) {
	r.roundBF16(r.ws.s[r0 : (nk-1)*r.rp+r1])
}

// roundQuery rounds the item's packed, scaled query block once, in
// begin: the rows Dot reads, or the Qᵀ block QK reads.
func (r *itemRun) roundQuery() {
	if r.ws.dot {
		r.roundBF16(r.ws.qr[:r.it.nh*r.it.nq*r.p.HeadDim])
		return
	}
	r.roundBF16(r.ws.qt[:r.p.HeadDim*r.rp])
}

// copiesKV reports whether the flash loop reads K and V blocks from a
// copy in the workspace (widened, dequantized or rounded) rather than in
// place.
func (p *Problem) copiesKV() bool {
	return p.KVType != fallback.KVFloat32 || (p.BF16 && !p.KVRounded)
}

// The bfloat16 mode on a set's bfloat16 kernels (kernels.Set.HasBF16):
// QK multiplies K's bfloat16 rows (read in place when K is stored as
// bfloat16, else rounded into the workspace) by the paired Qᵀ; the
// float32 softmax also rounds the weights and pairs them over keys in the
// same pass (SoftmaxPairs), the V block is paired once per call (or per
// block, where the call's pairs do not line up), and PV is GemmBF16 on
// them, after the rescale of O by alpha (transposed on AMX tiles:
// outcols.go). The same roundings as on the float32 kernels, summed by
// VDPBF16PS. Items of Dot rows (a decode step's few rows) and odd head
// dims stay on the float32 kernels; so does the PV of a block with a
// masked non-finite value (its weights rounded, its values not: they are
// NaN or Inf to the rows that see them).

// pairsOn reports whether ks runs p's bfloat16 mode on its bfloat16
// kernels (even head dims: K's rows hold whole pairs), where they are not
// slower than its float32 kernels (kernels.Set.BF16Preferred).
func pairsOn(ks *kernels.Set, p *Problem) bool {
	return p.BF16 && ks.BF16Preferred() && p.HeadDim%2 == 0
}

// usesPairs reports whether an item of p runs the bfloat16 kernels (not
// the Dot rows of a decode step).
func usesPairs(ks *kernels.Set, p *Problem, dot bool) bool { return pairsOn(ks, p) && !dot }

// PairValues sets p.PairV, p.PairVT and p.RoundInF32 for set ks, before
// Regroups: V read by ks's bfloat16 kernels (V inside K included) is
// worth pairing once per call; on the float32 kernels the copy holds
// float32 rounded values, read in place, rather than bfloat16 ones each
// item widens again.
//
// On AMX tiles V's columns are paired (VTPairs, for the transposed PV)
// where the call has more query rows per KV head than V has columns:
// the transposes then cost once per call (keys·dv per KV head) what
// row-major PV would pay per block in weight transposes (rows·keys). With
// fewer rows (MLA's absorbed decode: 128 rows, dv 512) V's rows are
// paired (VPairs) and each block's weights transposed.
func PairValues(ks *kernels.Set, p *Problem) {
	p.PairV = pairsOn(ks, p)
	p.PairVT = p.PairV && ks.AMX() && p.QLen*(p.Heads/p.KVHeads) > p.ValueDim
	p.RoundInF32 = p.BF16 && !pairsOn(ks, p)
}

// pairQuery packs the item's scaled Qᵀ block ([dk][rp]) in pairs of
// dims, rounded: [dk/2][rp].
func (r *itemRun) pairQuery() {
	dk, rp := r.p.HeadDim, r.rp
	r.ws.qp = grow(r.ws.qp, dk/2*rp)
	r.ks.PairBF16(r.ws.qp, rp, r.ws.qt, rp, dk, rp)
}

// scoresPairs is the block's score tile on the bfloat16 kernels: K's
// pairs by the paired Qᵀ, a page's run of keys per call where paged
// bfloat16 K is read in place (keyPairs would gather a block that
// crosses pages into the workspace, widened and narrowed again, for every
// item), else the block in one call. Each score sums its own key's
// products, so the runs give the block's bits. On AMX tiles pages of
// fewer than 32 keys (a tile block) keep the gather: their runs would go
// to VDPBF16PS, at half the FMA rate on the Xeons with tiles.
func (r *itemRun) scoresPairs(kb, nk, r0, r1 int) {
	p, ws, rp, dk := r.p, r.ws, r.rp, r.p.HeadDim
	if p.PageKeys == 0 || p.KVType != fallback.KVBFloat16 || (r.ks.AMX() && p.PageKeys < gemmTileRows) {
		ka, lda := r.keyPairs(kb, nk)
		r.ks.GemmBF16(ws.s[r0:], rp, ka, lda, 1, ws.qp[r0:], rp, nk, r1-r0, dk/2, false)
		return
	}
	for c := 0; c < nk; {
		n := p.pageRun(kb+c, nk-c)
		ka, lda := r.keyPairs(kb+c, n)
		r.ks.GemmBF16(ws.s[c*rp+r0:], rp, ka, lda, 1, ws.qp[r0:], rp, n, r1-r0, dk/2, false)
		c += n
	}
}

// keyPairs returns nk K rows from key kb as bfloat16 pairs and their
// stride in pairs: the cache's own rows when K is stored as bfloat16 at an
// even stride and 4-byte alignment, else the block (widened or
// dequantized first, for 16-bit and int8 storage, or gathered where it
// crosses a block of paged K/V) rounded into the workspace.
func (r *itemRun) keyPairs(kb, nk int) ([]uint32, int) {
	p, ws := r.p, r.ws
	dk := p.HeadDim
	rows := p.kvRows(r.it.b, kb, r.it.g, false)
	whole := p.pageRun(kb, nk) == nk
	if whole && rows.Type == fallback.KVBFloat16 && rows.Ld%2 == 0 && uintptr(unsafe.Pointer(&rows.U16[0]))%4 == 0 {
		n := ((nk-1)*rows.Ld + dk) / 2
		return unsafe.Slice((*uint32)(unsafe.Pointer(&rows.U16[0])), n), rows.Ld / 2
	}
	ws.kp = grow(ws.kp, nk*dk/2) // uint32: the uint16 view below is aligned
	k16 := unsafe.Slice((*uint16)(unsafe.Pointer(&ws.kp[0])), nk*dk)
	if whole && rows.Type == fallback.KVFloat32 {
		for c := range nk {
			r.ks.Narrow(k16[c*dk:(c+1)*dk], rows.F32[c*rows.Ld:][:dk], fallback.KVBFloat16)
		}
	} else {
		kblk, _ := r.kvBlock(kb, nk, false) // contiguous, widened or dequantized
		r.ks.Narrow(k16, kblk[:nk*dk], fallback.KVBFloat16)
	}
	return ws.kp, dk / 2
}

// pvPairs is the PV update of rows [r0, r1) (whole vectors) of the block
// of nk keys from kb on the bfloat16 kernels: on AMX tiles transposed
// where the call's VTPairs line up with the block (pvColumns), else O
// rescaled by alpha, then the weights (paired over keys by SoftmaxPairs)
// times V paired: the call's VPairs where they line up with the block,
// else the block's rows (v at stride ldv, read here if v is nil) rounded
// and paired for this item.
func (r *itemRun) pvPairs(kb, nk, r0, r1 int, v []float32, ldv int) {
	if r.ks.AMX() && r.pvColumns(kb, nk, r0, r1) {
		return
	}
	zero := !r.oRows && !r.ot // O's rows are still beginRows' zeros
	r.rowsO()
	r1 = min(r1, r.it.nh*r.it.nq) // O's rows: no padding
	ks, ws, rp, dv := r.ks, r.ws, r.rp, r.p.ValueDim
	half := (nk + 1) / 2
	vp := r.valuePairs(kb, nk)
	if vp == nil {
		if v == nil {
			v, ldv = r.kvBlock(kb, nk, true)
		}
		ws.vp = grow(ws.vp, half*dv)
		ks.PairBF16(ws.vp, dv, v, ldv, nk, dv)
		vp = ws.vp
	}
	o := ws.o[r0*dv:]
	r.rescaleRows(r0, r1, zero)
	if ks.AMX() {
		// AMX's A operand holds its pairs along its rows: the weights'
		// pairs of each row in a row, [rows][half], so that GemmBF16 runs
		// the PV on tiles as it runs the QK (the same sums, pair by pair).
		rows := r1 - r0
		ws.pt = grow(ws.pt, rows*half)
		ks.Transpose32(ws.pt, half, ws.pp[r0:], rp, half, rows)
		ks.GemmBF16(o, dv, ws.pt, half, 1, vp, dv, rows, dv, half, true)
		return
	}
	ks.GemmBF16(o, dv, ws.pp[r0:], 1, rp, vp, dv, r1-r0, dv, half, true)
}

// rescaleRows scales O's rows [r0, r1) by their alphas before a PV on
// the bfloat16 kernels adds to them, skipping every row the multiply
// would leave as it is (keeps): the first block's, where O is still
// zeros, and, once the running maxima settle, most rows of a block (the
// pass over all of them ran at 0.37 ns a float on Zen 3 at dv 512,
// whose 2 KiB rows share a few L1 sets: 28% of MLA's absorbed decode
// in the mode, products left out).
func (r *itemRun) rescaleRows(r0, r1 int, zero bool) {
	ws, dv, al := r.ws, r.p.ValueDim, r.ws.al
	for i := r0; i < r1; {
		if keeps(al[i], zero) {
			i++
			continue
		}
		j := i + 1
		for j < r1 && !keeps(al[j], zero) {
			j++
		}
		r.ks.PV(ws.o[i*dv:], dv, nil, 0, nil, 0, al[i:], j-i, 0, dv)
		i = j
	}
}

// keeps reports whether scaling an output row (or column) by alpha leaves
// every value as it is: alpha is 1, or the output is zeros (zero) and
// alpha finite (a NaN or an infinity would make a zero NaN; alphas are
// never negative, so no zero turns to -0). An output that has had sums
// added holds no -0 either (it starts as +0, and +0 + -0 is +0).
func keeps(alpha float32, zero bool) bool { return alpha == 1 || zero && alpha-alpha == 0 }

// pairsLineUp reports whether the call's paired V (VPairs, VTPairs) lines
// up with the block of nk keys from kb: the block starts on a pair, and an
// odd block ends at the last key (whose pair holds 0), never mid-pair (the
// next key's value, which its weight 0 would multiply, may be NaN).
func pairsLineUp(p *Problem, kb, nk int) bool {
	return kb%2 == 0 && (nk%2 == 0 || kb+nk == p.KVLen)
}

// valuePairs returns the call's paired V (Problem.VPairs) for the block
// of nk keys from kb, or nil where there is none or it does not line up
// (pairsLineUp).
func (r *itemRun) valuePairs(kb, nk int) []uint32 {
	p := r.p
	if p.VPairs == nil || !pairsLineUp(p, kb, nk) {
		return nil
	}
	off := ((r.it.b*p.KVHeads+r.it.g)*valueHalf(p) + kb/2) * p.ValueDim
	return p.VPairs[off:]
}
