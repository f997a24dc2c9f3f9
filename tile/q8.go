package tile

import (
	"sync/atomic"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// The int8 compute mode (Problem.Q8, K stored as int8): each scaled query
// row is quantized per block of 32 dims, as K's rows are
// (fallback.QuantizeQuery: llama.cpp's q8_0 rule), and its scores are the
// products of the quantized rows with K. The fused decode of a set with
// DecodeQ8 computes them as integer dot products; every other path
// (flash blocks, Dot, sets without the kernel) multiplies, in float32,
// the values the quantized rows stand for, which ws.qr and the packed Qᵀ
// then hold: the same products, up to the order and rounding of the
// float32 sums. A row with a NaN or ±Inf (after the scale) is not
// quantized: it keeps its values (its scores are NaN or infinite as in
// the float32 mode), and the item's fused decode runs the float32 kernel.
//
// A split decode step's chunk items of one (batch, KV head) hold the same
// rows: a worker quantizes them once per step (q8Memo), not once per
// chunk (which cost 15% of an 8-head GQA step at 8192 keys).

// splitCalls numbers the split plans (NewAttention), so that a worker's
// memo of quantized rows never serves another call.
var splitCalls atomic.Uint64

// q8Key names the rows of a split item for the memo: the plan's call,
// the batch and the KV head (call 0: a flash item, no memo).
type q8Key struct {
	call uint64
	b, g int
}

// q8Memo holds, per KV head, the last rows a worker quantized for a split
// step (tags[g] names them), each slot rows·(ld bytes, nb scales, nb
// corrections, dk dequantized values): about 1.3 times the bytes of a
// step's query rows (at most 16 per KV head), per worker.
type q8Memo struct {
	tags   []q8Key
	finite []bool
	q      []int8
	s      []float32
	c      []int32
	qr     []float32
}

// memo returns ws's memo, made on first use (Reserve makes it ahead;
// an interleaved item's heads share their worker's).
func (ws *Workspace) memo() *q8Memo {
	if ws.q8memo == nil {
		ws.q8memo = new(q8Memo)
	}
	return ws.q8memo
}

// ensure readies the memo for kvHeads slots of rows rows of dk (a
// reallocation forgets every slot; it never shrinks).
func (mm *q8Memo) ensure(kvHeads, rows, dk int) {
	nb, ld := fallback.Int8Blocks(dk), fallback.QueryQ8Ld(dk)
	if len(mm.tags) >= kvHeads && len(mm.q) >= kvHeads*rows*ld && len(mm.s) >= kvHeads*rows*nb && len(mm.qr) >= kvHeads*rows*dk {
		return
	}
	heads := max(kvHeads, len(mm.tags))
	mm.tags = make([]q8Key, heads)
	mm.finite = make([]bool, heads)
	mm.q = make([]int8, max(kvHeads*rows*ld, len(mm.q)))
	mm.s = make([]float32, max(kvHeads*rows*nb, len(mm.s)))
	mm.c = make([]int32, len(mm.s))
	mm.qr = make([]float32, max(kvHeads*rows*dk, len(mm.qr)))
}

// slot returns the memo's views of KV head g's rows (rows of dk, nb
// blocks, ld bytes), readying the memo for kvHeads slots of that size.
func (mm *q8Memo) slot(g, kvHeads, rows, dk, nb, ld int) (kernels.QueryQ8, []float32) {
	mm.ensure(kvHeads, rows, dk)
	q := kernels.QueryQ8{Q: mm.q[g*rows*ld:][:rows*ld], S: mm.s[g*rows*nb:][:rows*nb], Corr: mm.c[g*rows*nb:][:rows*nb], Ld: ld}
	return q, mm.qr[g*rows*dk:][:rows*dk]
}

// ReserveQ8 readies ws for the int8 mode's split items of problems of up
// to kvHeads KV heads of head dim dk (the memo of their quantized rows:
// at most splitRows a KV head), so that they never allocate on ws. A
// flash item's rows need only Reserve.
func (ws *Workspace) ReserveQ8(kvHeads, dk int) {
	ws.memo().ensure(kvHeads, splitRows, dk)
}

// quantizeRows applies the mode to the item's rows scaled in ws.qr
// ([rows][dk]), and with fused readies ws.q8 for DecodeQ8 where the set
// has it (ws.useQ8). A split item's rows come from, or go to, the memo.
func quantizeRows(ks *kernels.Set, p *Problem, rows int, ws *Workspace, fused bool) {
	dk := p.HeadDim
	nb, ld := fallback.Int8Blocks(dk), fallback.QueryQ8Ld(dk)
	qr := ws.qr[:rows*dk]
	key := ws.q8key
	if key.call != 0 {
		mm := ws.memo()
		q, vals := mm.slot(key.g, p.KVHeads, rows, dk, nb, ld)
		ws.q8 = q
		if mm.tags[key.g] != key {
			mm.finite[key.g] = quantizeInto(ks, q, qr, rows, dk, true)
			copy(vals, qr)
			mm.tags[key.g] = key
		} else {
			copy(qr, vals)
		}
		ws.q8Finite = mm.finite[key.g]
		ws.useQ8 = fused && ws.q8Finite && q8Kernel(ks, p)
		return
	}
	// Its own buffers, never the memo's (ws.q8 may still view a slot of a
	// split plan whose items this worker runs next).
	own := &ws.q8own
	own.Q = grow(own.Q, rows*ld)
	own.S = grow(own.S, rows*nb)
	own.Corr = grow(own.Corr, rows*nb)
	own.Ld = ld
	ws.q8 = *own
	// Rows whose scores all come from ScoresQ8 and DecodeQ8 need not hold
	// the values they stand for: quantized only, unless a row is not
	// finite (then the item's float32 kernels read every row's values).
	values := ws.dot || !scoresQ8On(ks, p) || fused && !q8Kernel(ks, p)
	ws.q8Finite = quantizeInto(ks, ws.q8, qr, rows, dk, values)
	if !ws.q8Finite && !values {
		dequantizeFinite(ws.q8, qr, rows, dk)
	}
	ws.useQ8 = fused && ws.q8Finite && q8Kernel(ks, p)
}

// q8Kernel reports whether a fused item of p runs DecodeQ8: the set has
// it for p's dims, whatever the rows. (One row ran slower on DecodeQ8 than on the
// float32 kernel while DecodeQ8 transposed K for it too: the MHA step
// 1,32,32,1,4096,128 BHSD 2.3–2.4 ms against 2.6–3.3, Zen 4, one
// thread; its one-row path reads K as it is now, gen/amd64/decodeq8.go.)
func q8Kernel(ks *kernels.Set, p *Problem) bool {
	return ks.HasDecodeQ8(p.HeadDim, p.ValueDim)
}

// quantizeInto quantizes the finite rows of qr ([rows][dk]) into q
// (ks.QuantizeRowQ8) and, with values, replaces them by the values they
// then stand for; it reports whether every row was finite (a row that is
// not keeps its values, and is left unquantized).
func quantizeInto(ks *kernels.Set, q kernels.QueryQ8, qr []float32, rows, dk int, values bool) bool {
	nb := fallback.Int8Blocks(dk)
	finite := true
	for r := range rows {
		one := fallback.QueryQ8{Q: q.Q[r*q.Ld:], S: q.S[r*nb:], Corr: q.Corr[r*nb:], Ld: q.Ld}
		if !ks.QuantizeRowQ8(one, qr[r*dk:(r+1)*dk], dk, values) {
			finite = false
		}
	}
	return finite
}

// dequantizeFinite replaces the finite rows of qr by the values their
// quantized form in q stands for (what quantizeInto does with values).
func dequantizeFinite(q kernels.QueryQ8, qr []float32, rows, dk int) {
	nb := fallback.Int8Blocks(dk)
	for r := range rows {
		if row := qr[r*dk : (r+1)*dk]; fallback.NonFinite(row) < 0 {
			fallback.DequantizeQuery(row, fallback.QueryQ8{Q: q.Q[r*q.Ld:], S: q.S[r*nb:], Ld: q.Ld}, 1, dk)
		}
	}
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

// scoresQ8On reports whether the int8 mode's blocks of p take their
// scores from ScoresQ8 on ks: int8 or int4 K (widened to int8 first) on
// a set with the kernel. The item's rows must also all be finite
// (ws.q8Finite); Dot's rows keep Dot.
func scoresQ8On(ks *kernels.Set, p *Problem) bool {
	return ks.HasScoresQ8() && (p.KVType == fallback.KVInt8 || p.KVType == fallback.KVInt4)
}

// packQuads packs the item's quantized rows (ws.q8) for ScoresQ8 into
// ws.quads, rp rows (the padding rows zero).
func packQuads(p *Problem, rows, rp int, ws *Workspace) {
	dk := p.HeadDim
	nb := fallback.Int8Blocks(dk)
	q := &ws.quads
	q.Q = grow(q.Q, nb*fallback.Int8Block*rp)
	q.S = grow(q.S, nb*rp)
	q.C = grow(q.C, nb*rp)
	q.Ld = rp
	fallback.PackQueryQ8(*q, ws.q8, rows, dk)
}

// scoresQ8 writes the scores of rows [r0, r1) over the KV block of nk keys
// from kb: the block's int8 K rows (int4 widened to int8) packed (a run a
// page of a paged cache),
// then ScoresQ8 on them and the packed rows.
func (r *itemRun) scoresQ8(kb, nk, r0, r1 int) {
	p, ws := r.p, r.ws
	dk := p.HeadDim
	ld := fallback.KeysQ8Stride(dk)
	ws.kq8 = grow(ws.kq8, nk*ld)
	for c0 := 0; c0 < nk; {
		n := p.pageRun(kb+c0, nk-c0)
		rows := p.kvRows(r.it.b, kb+c0, r.it.g, false)
		if rows.Type == fallback.KVInt4 { // its rows as int8 under the same scales
			nb := fallback.Int8Blocks(dk)
			w := nb * fallback.Int8Block
			ws.k8 = grow(ws.k8, n*w)
			r.ks.WidenInt4Rows(ws.k8, w, rows, n, nb)
			rows = fallback.KVRows{I8: ws.k8, S: rows.S, Type: fallback.KVInt8, Ld: w, LdS: rows.LdS}
		}
		r.ks.PackKeysQ8(ws.kq8[c0*ld:], ld, rows, n, dk)
		c0 += n
	}
	q := ws.quads
	q.Q, q.S, q.C = q.Q[4*r0:], q.S[r0:], q.C[r0:]
	r.ks.ScoresQ8(ws.s[r0:], r.rp, ws.kq8, ld, q, nk, r1-r0, dk)
}
