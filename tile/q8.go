package tile

import (
	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// The int8 compute mode (Problem.Q8, K stored as int8): each scaled query
// row is quantized once per item, per block of 32 dims, as K's rows are
// (fallback.QuantizeQuery: llama.cpp's q8_0 rule), and its scores are the
// products of the quantized rows with K. The fused decode of a set with
// DecodeQ8 computes them as integer dot products; every other path
// (flash blocks, Dot, sets without the kernel) multiplies, in float32,
// the values the quantized rows stand for, which ws.qr and the packed Qᵀ
// then hold: the same products, up to the order and rounding of the
// float32 sums. A row with a NaN or ±Inf (after the scale) is not
// quantized: it keeps its values (its scores are NaN or infinite as in
// the float32 mode), and the item's fused decode runs the float32 kernel.

// quantizeRows applies the mode to the item's rows scaled in ws.qr
// ([rows][dk]), and with fused readies ws.q8 for DecodeQ8 where the set
// has it (ws.useQ8).
func quantizeRows(ks *kernels.Set, p *Problem, rows int, ws *Workspace, fused bool) {
	dk := p.HeadDim
	nb, ld := fallback.Int8Blocks(dk), fallback.QueryQ8Ld(dk)
	ws.q8.Q = grow(ws.q8.Q, rows*ld)
	ws.q8.S = grow(ws.q8.S, rows*nb)
	ws.q8.Corr = grow(ws.q8.Corr, rows*nb)
	ws.q8.Ld = ld
	finite := true
	for r := range rows {
		row := ws.qr[r*dk : (r+1)*dk]
		if fallback.NonFinite(row) >= 0 {
			finite = false // the row keeps its values
			continue
		}
		one := fallback.QueryQ8{Q: ws.q8.Q[r*ld:], S: ws.q8.S[r*nb:], Corr: ws.q8.Corr[r*nb:], Ld: ld}
		fallback.QuantizeQuery(one, row, 1, dk)
		fallback.DequantizeQuery(row, one, 1, dk)
	}
	ws.useQ8 = fused && finite && ks.HasDecodeQ8(dk, p.ValueDim)
}

// packRowsT packs the item's rows already scaled in ws.qr into Qᵀ ([dk][rp],
// the padding rows zero), as packQ packs them from Q.
func packRowsT(ks *kernels.Set, p *Problem, rows, rp int, ws *Workspace) {
	dk := p.HeadDim
	ks.TransposeScale(ws.qt, rp, ws.qr, dk, rows, dk, 1)
	for d := 0; d < dk; d++ {
		clear(ws.qt[d*rp+rows : (d+1)*rp])
	}
}
