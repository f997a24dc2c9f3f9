package tile

import (
	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// Split items over BSHD K/V take a group of adjacent KV heads.
//
// In BSHD a key position's rows of every KV head lie side by side, so one
// head's keys are a run of a row's bytes (512 at 128 float32 dims) every
// KVHeads rows: an item that walks one head's keys reads a few lines per
// page and leaves the page's other lines to the items of the next heads,
// long after. However the item order tries, the pages are then read in
// scattered runs. A split item over BSHD K/V therefore takes the KV heads
// of about a page of a key position's row (groupBytes, at most
// maxGroupHeads) and runs their keys interleaved: a step of about
// stepBytes of each head's K rows in turn (stepKeys: 32 keys of 128
// float32 dims, 64 of 16-bit ones), so each page is read whole within a
// few microseconds. Measured on Zen 4 (one thread, the fused decode kernel
// alone, 32 heads × 4096 keys × 128 float32 dims, best of 20): heads one
// after another in chunks of 512 keys 6.8–7.6 ms (17–19 GB/s), groups of 8
// heads in steps of 32 keys 5.1–5.3 ms (25–26 GB/s, the read probe's
// rate); steps of 16 keys 5.9, of 64 6.6, of 128 7.4 ms; groups of 4
// heads 5.6, of 16 6.0, of 32 6.4 ms. The GQA step (8 KV heads, 4 rows
// each, 8192 keys) ran 4.2 → 3.1 ms. 16-bit rows, which the kernels'
// arithmetic binds more, gained less, and take steps of the same bytes
// rather than keys (steps of 32 keys paid a call's fixed costs too
// often). int8 and int4 K/V are not grouped: their kernels' arithmetic
// binds them (24–47% of the read probe), and grouped they ran level or
// up to 1.2× slower (GQA and batched steps, Zen 4, two alternated rounds).
//
// The fused kernel's running state makes the interleaved calls exact: a
// call over keys [a, c) then one over [c, e) leaves the state of one call
// over [a, e) bit for bit when c - a is a whole number of its blocks (the
// steps are multiples of 16 keys, from the first key every row sees), so
// results are those of the heads run one after another
// (TestInterleavedHeads).
const (
	groupBytes     = 4096
	maxGroupHeads  = 16
	interleaveKeys = 32
	stepBytes      = 16 << 10
)

// headGroup returns the KV heads a split item of p takes: those of a
// key-major item (keymajor.go), or adjacent heads covering about
// groupBytes of a key position's K row when K and V are BSHD, not paged
// and not quantized, else 1.
func headGroup(p *Problem) int {
	if keyMajor(p) {
		return keyMajorGroup(p)
	}
	return pageGroup(p)
}

// pageGroup is headGroup's interleaved group: adjacent heads covering
// about groupBytes of a key position's K row when K and V are BSHD, not
// paged and not quantized, else 1.
func pageGroup(p *Problem) int {
	if p.KVHeadsMajor || p.PageKeys > 0 || p.KVHeads < 2 || p.KVType.Quantized() {
		return 1
	}
	return max(1, min(p.KVHeads, maxGroupHeads, groupBytes/kRowBytes(p)))
}

// kRowBytes is the bytes of a K row of p (int8 and int4: their scales
// not counted).
func kRowBytes(p *Problem) int {
	return fallback.StoredWidth(p.KVType, p.HeadDim) * max(p.KVType.Bytes(), 1)
}

// stepKeys is the keys of each head in turn of an interleaved item: about
// stepBytes of its K rows, a multiple of 16 keys (every set's block), in
// [interleaveKeys, splitMaxKeys/4] (a chunk of splitMaxKeys keys then
// holds several steps): 32 keys of 128 float32 dims, 64 of 16-bit ones.
func stepKeys(p *Problem) int {
	return min(splitMaxKeys/4, max(interleaveKeys, stepBytes/kRowBytes(p)/16*16))
}

// groupHeadsMax is the most KV heads an item of head dim dk groups: a
// page's worth of its narrowest rows (16-bit), at most maxGroupHeads;
// below 2, none.
func groupHeadsMax(dk int) int {
	return min(maxGroupHeads, groupBytes/(2*dk))
}

// groupWorkspaceBytes bounds the bytes of the Workspaces a worker keeps
// for the heads of an interleaved item (Workspace.heads): per head, its
// rows' share of a split item (at most splitRows rows): the query rows,
// the output, the row state and ALiBi's rows. The decode scratch and the
// int8 mode's memo are the worker's own, shared.
func groupWorkspaceBytes(dk, dv int) float64 {
	n := groupHeadsMax(dk)
	if n < 2 {
		return 0
	}
	return float64(n) * (4*(splitRows*(float64(dk)+float64(dv))+6*splitRows) + 8*splitRows)
}

// reserveHeads is Reserve's share for the heads of an interleaved item.
func (ws *Workspace) reserveHeads(dk, dv int) {
	n := groupHeadsMax(dk)
	if n < 2 {
		return
	}
	ws.growHeads(n)
	for i := range ws.heads {
		h := &ws.heads[i]
		h.qr, h.o = reserve(h.qr, splitRows*dk), reserve(h.o, splitRows*dv)
		h.m, h.l = reserve(h.m, splitRows), reserve(h.l, splitRows)
		h.slope, h.dist = reserve(h.slope, splitRows), reserve(h.dist, splitRows)
		h.alibi = reserve(h.alibi, 2*splitRows)
		if cap(h.at) < splitRows {
			h.at = make([]int, 0, splitRows)
		}
	}
}

// headBytes is the memory ws's heads hold beside what they share with ws.
func (ws *Workspace) headBytes() int {
	n := 0
	for i := range ws.heads {
		h := &ws.heads[i]
		n += 4*(cap(h.qr)+cap(h.o)+cap(h.m)+cap(h.l)+cap(h.slope)+cap(h.dist)+cap(h.alibi)) + 8*cap(h.at)
	}
	return n
}

// headSpaces returns n Workspaces for the heads of an interleaved item,
// sharing ws's decode scratch (grown to the kernel's need) and memo.
func (ws *Workspace) headSpaces(n, scratch int) []Workspace {
	ws.growHeads(n)
	ws.ds = grow(ws.ds, scratch)
	mm := ws.memo()
	hs := ws.heads[:n]
	for i := range hs {
		hs[i].ds, hs[i].q8memo = ws.ds, mm
	}
	return hs
}

// growHeads gives ws at least n heads' Workspaces and room for n of
// their items in progress.
func (ws *Workspace) growHeads(n int) {
	for len(ws.heads) < n {
		ws.heads = append(ws.heads, Workspace{})
	}
	if cap(ws.headRuns) < n {
		ws.headRuns = make([]*itemRun, 0, n)
	}
}

// runGroup runs the heads [g0, g1) of batch b over chunk's keys [k0, k1)
// and saves each head's partial state: key by key across the heads
// (keymajor.go) where p and ks allow, else in interleaved groups of
// pageGroup heads.
func (sp Split) runGroup(ks *kernels.Set, p *Problem, b, g0, g1, chunk, k0, k1 int, ws *Workspace, part []float32) {
	if !keyMajor(p) {
		sp.runInterleaved(ks, p, b, g0, g1, chunk, k0, k1, ws, part)
		return
	}
	if sp.runKeyMajor(ks, p, b, g0, g1, chunk, k0, k1, ws, part) {
		return
	}
	n := pageGroup(p)
	for g := g0; g < g1; g += n {
		sp.runInterleaved(ks, p, b, g, min(g+n, g1), chunk, k0, k1, ws, part)
	}
}

// runInterleaved runs the heads [g0, g1) of batch b over chunk's keys
// [k0, k1) and saves each head's partial state. With the fused kernel and
// keys every row sees whole (no edge, no bias or mask, at least two
// steps), the heads run interleaved; otherwise one after another.
func (sp Split) runInterleaved(ks *kernels.Set, p *Problem, b, g0, g1, chunk, k0, k1 int, ws *Workspace, part []float32) {
	fused := sp.Fused(ks, p)
	it := sp.headItem(p, b, g0)
	lo, a, e, hi := keySpans(p, it)
	a, e = max(a, k0), min(e, k1)
	plain := p.Bias == nil && p.Mask == nil && max(lo, k0) == a && min(hi, k1) == e
	step := stepKeys(p)
	if g1-g0 < 2 || !fused || !plain || e-a < 2*step {
		for g := g0; g < g1; g++ {
			sp.runHead(ks, p, b, g, chunk, k0, k1, ws, part)
		}
		return
	}
	hs := ws.headSpaces(g1-g0, ks.DecodeScratch(p.HeadDim, p.ValueDim))
	runs := ws.headRuns[:0]
	for g := g0; g < g1; g++ {
		h := &hs[g-g0]
		h.q8key = q8Key{call: sp.call, b: b, g: g}
		runs = append(runs, beginRows(ks, p, sp.headItem(p, b, g), splitBlock, h, true, true))
	}
	ws.headRuns = runs
	for c := a; c < e; {
		n := step
		if e-c < 2*step {
			n = e - c
		}
		for _, r := range runs {
			r.keys(c, c+n, fused)
		}
		c += n
	}
	for i, r := range runs {
		sp.save(p, r.it, chunk, &hs[i], part)
	}
}

// headItem is the item of KV head g of batch b: all its query rows.
func (sp Split) headItem(p *Problem, b, g int) item {
	group := p.Heads / p.KVHeads
	return item{b: b, g: g, h0: g * group, nh: group, i0: 0, nq: p.QLen}
}
