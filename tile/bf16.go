package tile

import (
	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// The bfloat16 compute mode (Problem.BF16) on the float32 kernels. Both
// products take bfloat16 operands: the scaled query rows and the keys
// for QK, the weights and the values for PV, each rounded to the nearest
// bfloat16 (ties to even) where the loop already holds it. A product of
// two bfloat16 values is exact in float32 (8 + 8 significant bits), so a
// float32 kernel's FMA on the rounded operands adds the exact product and
// rounds the sum once, as a bfloat16 dot-product instruction does; only
// the order of the sums is the kernel's. The softmax stays float32: each
// row's running sum l adds the unrounded weights, and only the copy PV
// reads is rounded (FlashAttention's order on GPUs).
//
// Rounding goes through the set's Narrow and Widen kernels, in chunks of
// roundChunk elements of the worker's scratch.

// roundChunk is the elements one narrow-then-widen pass rounds.
const roundChunk = 2048

// roundBF16 rounds x to bfloat16 in place through the set's kernels.
func (r *itemRun) roundBF16(x []float32) { roundBF16(r.ks, r.ws, x) }

// roundBF16 rounds x to bfloat16 in place through ks's kernels, a chunk
// of ws's scratch at a time.
func roundBF16(ks *kernels.Set, ws *Workspace, x []float32) {
	ws.h16 = grow(ws.h16, roundChunk)
	for len(x) > 0 {
		n := min(len(x), roundChunk)
		ks.Narrow(ws.h16[:n], x[:n], fallback.KVBFloat16)
		ks.Widen(x[:n], ws.h16[:n], fallback.KVBFloat16)
		x = x[n:]
	}
}

// roundedRows returns rows rows of n elements of a, at stride lda,
// rounded to bfloat16 into ws's scratch ([rows][n]): a projection's A
// block in the bfloat16 mode (Gemm.BF16).
func roundedRows(ks *kernels.Set, ws *Workspace, a []float32, lda, rows, n int) []float32 {
	ws.ab = grow(ws.ab, rows*n)
	for i := range rows {
		copy(ws.ab[i*n:(i+1)*n], a[i*lda:])
	}
	roundBF16(ks, ws, ws.ab)
	return ws.ab
}

// roundWeights rounds the weights PV reads in rows [r0, r1) of an nk-key
// tile (after Softmax has added them, unrounded, to the running sums): the
// whole tile in one pass when the rows are all of it, else key by key.
func (r *itemRun) roundWeights(nk, r0, r1 int) {
	rp, s := r.rp, r.ws.s
	if r0 == 0 && r1 == rp {
		r.roundBF16(s[:nk*rp])
		return
	}
	for c := range nk {
		r.roundBF16(s[c*rp+r0 : c*rp+r1])
	}
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
func (p *Problem) copiesKV() bool { return p.KVType != fallback.KVFloat32 || p.BF16 }
