package tile

import "github.com/fastattn/fastattn/fallback"

// Paged K/V (Problem.PageKeys): a serving cache keeps its keys in blocks
// of a pool, each sequence a table of blocks, so that sequences grow,
// fork and share prefixes without copying rows. Every reader of K and V
// takes its rows from kvRows, which on paged K/V are contiguous only to
// the end of a block; the readers cut their runs there (pageRun): the
// fused decode kernel is called once per block's run; a flash block of
// float32 rows that crosses pages has its scores and its PV update
// computed a page's run per call, reading the rows in place (the scores
// are independent, and PV's sums go on in key order across the calls, so
// the bits are those of unpaged K/V); 16-bit and int8 rows are widened
// into the workspace a run at a time, as they are anyway; the bfloat16
// mode's pairs and a masked block's poison check gather the block; and a
// Regroup copies block by block. Measured on Zen 4 (one thread, a cascade
// of 128 query rows per KV head over 4,096 keys in pages of 64, D 128):
// gathering every block spent 19% of the step copying rows, and blocks
// cut to the pages' 64 keys ran QK and PV 30% slower than the planned 352.

// pagedRow is kvRow on paged K/V: the offset of key j of KV head g of
// batch b in rows of dim elements. A key past the table or in a released
// block reads block 0 (its rows are never used: no row sees such keys).
func (p *Problem) pagedRow(b, j, g, dim int) int {
	blk, n := int32(0), j/p.PageKeys
	if pages := p.Pages[b]; n < len(pages) && pages[n] >= 0 {
		blk = pages[n]
	}
	return ((int(blk)*p.KVHeads+g)*p.PageKeys + j%p.PageKeys) * dim
}

// pageRun returns how many of the n keys from j on lie contiguously in
// j's block: n on K/V that is not paged.
func (p *Problem) pageRun(j, n int) int {
	if p.PageKeys == 0 {
		return n
	}
	return min(n, p.PageKeys-j%p.PageKeys)
}

// readsInPlace reports whether the flash block of nk keys from kb reads
// paged float32 rows in place across pages (scoresByPage, pvByPage).
func (r *itemRun) readsInPlace(kb, nk int) bool {
	p := r.p
	return p.PageKeys > 0 && p.KVType == fallback.KVFloat32 && !p.BF16 && !r.ws.packV && p.pageRun(kb, nk) < nk
}

// scoresByPage is the block's score tile (QK, or Dot) a page's run of
// keys per call, into the tile's rows of those keys.
func (r *itemRun) scoresByPage(kb, nk, r0, r1 int) {
	ks, p, ws, rp, dk := r.ks, r.p, r.ws, r.rp, r.p.HeadDim
	rows := r.it.nh * r.it.nq
	for c := 0; c < nk; {
		n := p.pageRun(kb+c, nk-c)
		k := p.kvRows(r.it.b, kb+c, r.it.g, false)
		if ws.dot {
			ks.Dot(ws.s[c*rp+r0:], rp, k.F32, k.Ld, ws.qr[r0*dk:], dk, n, min(r1, rows)-r0, dk)
		} else {
			ks.QK(ws.s[c*rp+r0:], rp, k.F32, k.Ld, ws.qt[r0:], rp, n, r1-r0, dk)
		}
		c += n
	}
}

// pvByPage is the block's PV update a page's run of keys per call: the
// first rescales O by alpha, the others add on.
func (r *itemRun) pvByPage(kb, nk, r0, r1 int) {
	ks, p, ws, rp, dv := r.ks, r.p, r.ws, r.rp, r.p.ValueDim
	alpha := ws.al[r0:]
	for c := 0; c < nk; {
		n := p.pageRun(kb+c, nk-c)
		v := p.kvRows(r.it.b, kb+c, r.it.g, true)
		ks.PV(ws.o[r0*dv:], dv, ws.s[c*rp+r0:], rp, v.F32, v.Ld, alpha, r1-r0, n, dv)
		alpha = nil
		c += n
	}
}
