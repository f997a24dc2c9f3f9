package tile

import (
	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// Reserve grows ws to what any work item of head dims dk and dv can ask
// of it on set ks — the largest blocks BlocksFor returns (maxRows rows,
// maxKeys keys), every optional buffer (16-bit K/V blocks, the fused
// decode's scratch, ALiBi rows, a merged row, the heads of an
// interleaved split item) — and its widened weight
// block to wbFloats floats (WeightBlockFloats; 0 for attention alone).
// Items of such problems then never allocate on ws, whichever worker runs
// them. It keeps what ws holds and never shrinks it.
func (ws *Workspace) Reserve(ks *kernels.Set, dk, dv, wbFloats int) {
	rp := (maxRows + ks.Lanes - 1) / ks.Lanes * ks.Lanes
	ws.qt = reserve(ws.qt, dk*rp)
	ws.s = reserve(ws.s, maxKeys*rp)
	ws.o = reserve(ws.o, maxRows*dv)
	ws.m, ws.l, ws.al = reserve(ws.m, rp), reserve(ws.l, rp), reserve(ws.al, rp)
	if cap(ws.masked) < maxKeys {
		ws.masked, ws.zeros = make([]bool, 0, maxKeys), make([]float32, maxKeys)
	}
	ws.probe = reserve(ws.probe, dv)
	ws.qr = reserve(ws.qr, maxRows*dk)
	ws.ds = reserve(ws.ds, ks.DecodeScratch(dk, dv))
	ws.kb, ws.vb = reserve(ws.kb, maxKeys*dk), reserve(ws.vb, maxKeys*dv)
	ws.slope, ws.dist = reserve(ws.slope, rp), reserve(ws.dist, rp)
	if cap(ws.at) < rp {
		ws.at = make([]int, 0, rp)
	}
	ws.alibi = reserve(ws.alibi, 2*rp)
	if cap(ws.acc) < dv {
		ws.acc = make([]float64, 0, dv)
	}
	ws.wb = reserve(ws.wb, wbFloats)
	ws.reserveHeads(dk, dv)
	ws.memo()
	// The int8 mode's rows of a flash item (quantizeRows).
	nb, ld := fallback.Int8Blocks(dk), fallback.QueryQ8Ld(dk)
	ws.q8own.Q = reserveAny(ws.q8own.Q, maxRows*ld)
	ws.q8own.S, ws.q8own.Corr = reserve(ws.q8own.S, maxRows*nb), reserveAny(ws.q8own.Corr, maxRows*nb)
	if ks.HasScoresQ8() {
		ws.quads.Q = reserveAny(ws.quads.Q, nb*fallback.Int8Block*rp)
		ws.quads.S, ws.quads.C = reserve(ws.quads.S, nb*rp), reserveAny(ws.quads.C, nb*rp)
		ws.kq8 = reserveAny(ws.kq8, maxKeys*fallback.KeysQ8Stride(dk))
		ws.k8 = reserveAny(ws.k8, maxKeys*nb*fallback.Int8Block)
	}
	if ks.HasBF16() {
		ws.qp = reserveAny(ws.qp, dk/2*rp)
		ws.pp = reserveAny(ws.pp, (maxKeys/2+1)*rp)
		ws.vp = reserveAny(ws.vp, (maxKeys/2+1)*dv)
		ws.kp = reserveAny(ws.kp, maxKeys*dk/2)
		if ks.AMX() {
			ws.pt = reserveAny(ws.pt, (maxKeys/2+1)*rp)
			ws.ot = reserve(ws.ot, dv*rp)
		}
	}
}

// ReserveGemm grows ws to the most any Gemm item asks of its scratch for
// C (gemmScratchFloats), so that a layer's projections never allocate on
// it. It keeps what ws holds and never shrinks it.
func (ws *Workspace) ReserveGemm() { ws.cb = reserve(ws.cb, gemmScratchFloats) }

// WeightBlockFloats is the most floats a Gemm item over k input rows of
// panels cols wide widens at once (the depth step, or all k rows for a
// decode step's GEMV), for Workspace.Reserve.
func WeightBlockFloats(k, cols int) int {
	return max(gemmDepth(cols), k) * cols
}

// reserve returns buf with room for n values, its length unchanged.
func reserve(buf []float32, n int) []float32 { return reserveAny(buf, n) }

// reserveAny is reserve for any element type.
func reserveAny[T any](buf []T, n int) []T {
	if cap(buf) >= n {
		return buf
	}
	return make([]T, len(buf), n)
}

// Bytes returns the memory ws holds (the capacity of its buffers).
func (ws *Workspace) Bytes() int {
	n := 4 * (cap(ws.qt) + cap(ws.s) + cap(ws.o) + cap(ws.m) + cap(ws.l) + cap(ws.al) + cap(ws.qr) +
		cap(ws.zeros) + cap(ws.probe) + cap(ws.kb) + cap(ws.vb) + cap(ws.ds) + cap(ws.wb) +
		cap(ws.slope) + cap(ws.dist) + cap(ws.alibi) + cap(ws.ab) + cap(ws.ap) + cap(ws.qp) + cap(ws.pp) + cap(ws.vp) + cap(ws.kp) + cap(ws.pt) + cap(ws.ot) + cap(ws.cb))
	n += cap(ws.quads.Q) + 4*(cap(ws.quads.S)+cap(ws.quads.C)) + cap(ws.kq8) + cap(ws.k8)
	return n + cap(ws.masked) + 8*cap(ws.at) + 8*cap(ws.acc) + 2*cap(ws.h16) + ws.headBytes()
}
