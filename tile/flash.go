package tile

import (
	"math"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// Workspace is one worker's scratch: O(rows·(keys + dk + dv)) floats,
// never O(Lq·Lk). It grows on first use and is then reused, so steady-state
// calls allocate nothing. A Workspace serves one item at a time.
type Workspace struct {
	qt       []float32       // packed, scaled Qᵀ: [dk][rowsPad]
	s        []float32       // scores, then weights, transposed: [keys][rowsPad]
	o        []float32       // output accumulator: [rows][dv]
	m, l, al []float32       // running max, running sum, rescale: [rowsPad]
	qr       []float32       // with dot, the fused decode or the int8 mode: the scaled query rows, [rows][dk]
	masked   []bool          // [keys]: the key is masked for some row of the block
	zeros    []float32       // [keys] of 0: the weights of the poisoned probe
	probe    []float32       // [dv]: the poisoned probe's output
	kb, vb   []float32       // 16-bit K/V: the block widened, [keys][dk], [keys][dv]
	h16      []uint16        // the bfloat16 mode: one chunk being rounded (bf16.go)
	ab       []float32       // the bfloat16 mode of Gemm: the A block rounded, [rows][depth]
	ap       []uint32        // the bfloat16 mode of Gemm on bfloat16 kernels: the A block as pairs, [rows][depth/2]
	qp       []uint32        // the bfloat16 kernels: Qᵀ paired, [dk/2][rowsPad]
	pp       []uint32        // the bfloat16 kernels: the weights paired, [keys/2][rowsPad]
	pt       []uint32        // on AMX tiles: pp transposed, each row's pairs in a row, [rows][keys/2]
	ot       []float32       // on AMX tiles: the output accumulator transposed, Oᵀ, [dv][rowsPad] (outcols.go)
	vp       []uint32        // the bfloat16 kernels: the V block paired, [keys/2][dv]
	kp       []uint32        // the bfloat16 kernels: a K block rounded, [keys][dk/2] pairs
	ds       []float32       // the fused decode kernel's scratch
	wb       []float32       // Gemm: a 16-bit or int8 weight block widened, [depth][cols]
	cb       []float32       // Gemm: an item's block of C where C's rows alias (gemmScratchPad)
	slope    []float32       // ALiBi: each row's slope, [rowsPad] (0 for padding)
	dist     []float32       // ALiBi: each row's distance to the block's first key
	at       []int           // ALiBi: each row's key position (i + offset)
	alibi    []float32       // ALiBi of the fused decode kernel: slopes, then distances
	acc      []float64       // a merged row, [dv] (Merging)
	q8       kernels.QueryQ8 // the int8 mode: the item's rows quantized (q8.go), in q8own or a memo slot
	q8own    kernels.QueryQ8 // a flash item's quantized rows
	useQ8    bool            // the fused decode runs DecodeQ8 on q8
	q8Finite bool            // every row of q8 was quantized (none has a NaN or ±Inf)
	q8Scores bool            // the item's blocks take their scores from ScoresQ8 (q8.go)
	quads    kernels.QuadsQ8 // with q8Scores: the rows packed for ScoresQ8
	kq8      []byte          // with q8Scores: a K block packed for ScoresQ8, [keys][KeysQ8Stride(dk)]
	k8       []int8          // with q8Scores, int4 K: a page run of its rows widened to int8, [keys][blocks·32]
	q8key    q8Key           // the split item in progress (zero: a flash item)
	q8memo   *q8Memo         // a split step's quantized rows, per KV head (shared with heads)
	heads    []Workspace     // an interleaved split item's heads, one each (headgroups.go)
	headRuns []*itemRun      // their items in progress
	dot      bool            // scores by Dot (rows not transposed) instead of QK
	packV    bool            // f32 V blocks are copied contiguous into vb (packsV)
	run      itemRun         // the item in progress (begin)

	// Stride is how many workers share the job in progress, set by the
	// runner before a job's items: a worker taking items from a shared
	// counter most likely runs item n+Stride after item n, so the flash
	// loop prefetches that item's query rows (0 is taken as 1).
	Stride int
}

// grow returns buf with length n, reallocating only when it is too small.
func grow[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	return buf[:n]
}

var negInf = float32(math.Inf(-1))

// itemRun is one work item in progress: what every step of its flash
// loop reads. The loop's state (the running max, sum and output, the
// score tile) lives in ws.
type itemRun struct {
	ks *kernels.Set
	p  *Problem
	it item
	ws *Workspace
	rp int  // the item's rows padded to whole vectors
	bc int  // keys per KV block
	dp bool // the bfloat16 mode on the set's bfloat16 kernels (bf16.go)
	ot bool // the output accumulator is ws.ot, not ws.o (outcols.go)
	// oRows: O's rows (ws.o) may hold sums, a PV having written them
	// (rowsO precedes every such write in a bfloat16-kernel item); until
	// then they are the zeros beginRows cleared.
	oRows bool
	// otZero: Oᵀ (ws.ot) holds only the zeros colsO cleared, no PV having
	// added to it yet.
	otZero bool
}

// flashItem runs item it of problem p: the flash-attention forward of one
// block of query rows over all its keys, in blocks of bc.
func flashItem(ks *kernels.Set, p *Problem, it item, bc int, ws *Workspace) {
	ws.q8key = q8Key{}
	r := begin(ks, p, it, bc, ws, false)
	r.keys(0, p.KVLen, false)
	r.store()
}

// begin readies ws for item it with KV blocks of bc keys: the packed Qᵀ
// block (or the scaled rows, for Dot and, when fused, the fused decode
// kernel) and an empty running state (m = -Inf, l = 0, O = 0).
func begin(ks *kernels.Set, p *Problem, it item, bc int, ws *Workspace, fused bool) *itemRun {
	rows := it.nh * it.nq
	rp := (rows + ks.Lanes - 1) / ks.Lanes * ks.Lanes // rows padded to whole vectors
	ws.qt = grow(ws.qt, p.HeadDim*rp)
	ws.s = grow(ws.s, bc*rp)
	ws.al = grow(ws.al, rp)
	if cap(ws.masked) < bc {
		ws.masked = make([]bool, bc)
		ws.zeros = make([]float32, bc)
	}
	ws.masked = ws.masked[:bc]
	ws.probe = grow(ws.probe, p.ValueDim)
	ws.dot = ks.HasDot() && rows <= ks.DotRows()
	ws.packV = !ws.dot && packsV(ks, p)
	if fused {
		ws.ds = grow(ws.ds, ks.DecodeScratch(p.HeadDim, p.ValueDim))
	}
	r := beginRows(ks, p, it, bc, ws, fused, ws.dot || fused || p.Q8)
	ws.q8Scores = p.Q8 && !ws.dot && ws.q8Finite && scoresQ8On(ks, p)
	switch {
	case ws.dot:
	case ws.q8Scores:
		packQuads(p, rows, rp, ws)
	case p.Q8:
		packRowsT(ks, p, rows, rp, ws)
	default:
		packQ(ks, p, it, rp, ws.qt)
	}
	r.dp = usesPairs(ks, p, ws.dot)
	switch {
	case r.dp:
		r.pairQuery()
	case p.BF16:
		r.roundQuery()
	}
	return r
}

// beginRows readies what ws holds of item it's rows: with scaled, the
// scaled rows (and in the int8 mode their quantized form), ALiBi's rows,
// and an empty running state. Alone (an interleaved head, headgroups.go)
// it readies an item whose keys all run through the fused kernel, on the
// decode scratch ws already holds.
func beginRows(ks *kernels.Set, p *Problem, it item, bc int, ws *Workspace, fused, scaled bool) *itemRun {
	rows := it.nh * it.nq
	rp := (rows + ks.Lanes - 1) / ks.Lanes * ks.Lanes
	ws.o = grow(ws.o, rows*p.ValueDim)
	ws.m = grow(ws.m, rp)
	ws.l = grow(ws.l, rp)
	if scaled {
		ws.qr = grow(ws.qr, rows*p.HeadDim)
		packRows(p, it, ws.qr)
	}
	ws.useQ8 = false
	if p.Q8 {
		quantizeRows(ks, p, rows, ws, fused)
	}
	if p.Slopes != nil {
		alibiRows(p, it, rp, ws)
	}
	for r := range ws.m {
		ws.m[r] = negInf
	}
	clear(ws.l)
	clear(ws.o)
	ws.run = itemRun{ks: ks, p: p, it: it, ws: ws, rp: rp, bc: bc}
	return &ws.run
}

// keys runs the flash loop of the item over the keys in [from, to) that
// its rows may see.
//
// Keys every row sees whole, [allLo, allHi), run by visibleKeys: unmasked
// in blocks of Bc or with fused through the fused decode kernel in one
// call, less the stretches a bias or mask removes; the edges below and
// above (the causal triangle, the window's edges) run as their own blocks
// and are masked.
func (r *itemRun) keys(from, to int, fused bool) {
	lo, allLo, allHi, hi := keySpans(r.p, r.it)
	if r.dp { // with or without the call's pairs: the same blocks, the same bits
		lo, allLo, allHi, hi = evenSpans(lo, allLo, allHi, hi, r.p.KVLen)
	}
	clip := func(a, b int) (int, int) { return max(a, from), min(b, to) }
	a, b := clip(allLo, allHi)
	r.visibleKeys(a, b, fused)
	a, b = clip(lo, allLo)
	r.edges(a, b)
	a, b = clip(allHi, hi)
	r.edges(a, b)
}

// keySpans returns the keys item it's rows may see, [lo, hi), and within
// them those every row sees, [allLo, allHi) (empty, at hi, when no key is
// seen by every row: then everything is edge).
func keySpans(p *Problem, it item) (lo, allLo, allHi, hi int) {
	lo, hi = p.KVLen, 0
	allLo, allHi = 0, p.KVLen
	for i := it.i0; i < it.i0+it.nq; i++ {
		l, h := p.keyRange(it.b, i)
		allLo, allHi = max(allLo, l), min(allHi, h)
		if h > l {
			lo, hi = min(lo, l), max(hi, h)
		}
	}
	if allLo >= allHi {
		allLo, allHi = hi, hi
	}
	allLo, allHi = max(allLo, lo), min(allHi, hi)
	return lo, allLo, allHi, hi
}

// evenSpans moves keySpans' bounds to even keys, for the call's paired V
// (VPairs, VTPairs) on the bfloat16 kernels, whose pairs start at even
// keys (and for every call of those kernels alike: a paged cache, read in
// place, and its contiguous copy cut the same blocks): the span every row
// sees shrinks to its even bounds, the span any row sees grows to them
// (to kvLen at most), so every block starts at an even key and an odd one
// ends at the last key. The keys moved are masked in the edge blocks for
// the rows that do not see them. Without it a causal item's diagonal
// starts one past its first position, at an odd key for every other
// item, and its blocks paired V for themselves.
func evenSpans(lo, allLo, allHi, hi, kvLen int) (int, int, int, int) {
	if lo >= hi {
		return lo, allLo, allHi, hi
	}
	lo, hi = lo&^1, min(hi+hi&1, kvLen)
	allLo, allHi = (allLo+1)&^1, allHi&^1
	if allLo >= allHi {
		allLo, allHi = hi, hi
	}
	return lo, allLo, allHi, hi
}

// edgeKeys is the key block of the edge segments of a one-head item: 16
// keys, whatever the set's vectors. The rows that see none of a block's
// keys are skipped (whole vectors of them), so about edgeKeys/(2·rows)
// of the item's diagonal square (rows × rows keys) is computed in vain
// instead of 1/2: at 64 rows, 2,560 row-keys computed for the 2,080 of
// the triangle (3,072 with blocks of 32). Smaller blocks waste less of
// the triangle but pay each block's fixed cost (five kernel calls and
// the mask) more often. Zen 4, one thread, AVX-512, 15 rounds of 60
// calls alternated in one process (medians): causal 1,8,8,512,512,64 at
// 0.875 (BSHD) and 0.881 (BHSD) of full's GFLOP/s with 32 keys, 0.887
// and 0.892 with 16, 0.820 and 0.850 with 64 (a second run: 0.853 →
// 0.889, 0.881 → 0.888); 1,16,16,1024,1024,128 0.922 → 0.941 and 0.917 →
// 0.931; 1,8,8,2048,2048,64 level (0.967 → 0.962, 0.961 → 0.963). On Zen
// 5 bench medians had put 32 ahead (184.3–190.9 GFLOP/s against
// 178.9–189.7, BSHD, four alternated rounds), within those rounds'
// spread; AVX2's 16 and 32 were level.
const edgeKeys = 16

// edges runs the masked keys [from, to). With one query head per item the
// rows are consecutive positions, so each block of edgeKeys keys runs only
// on the rows (whole vectors of them) that see one of its keys.
func (r *itemRun) edges(from, to int) {
	p, it := r.p, r.it
	if it.nh > 1 || (r.dp && r.ks.AMX()) {
		// Several heads' rows, or AMX tiles: whole masked blocks. On tiles
		// a block of 16 keys would run on the bfloat16 instruction (half
		// the FMA rate on the Xeons with tiles), so the triangle's wasted
		// half of a block at the tiles' rate costs less than sixteen-key
		// edges.
		r.blocks(from, to, true, true)
		return
	}
	lanes := r.ks.Lanes
	for kb := from; kb < to; kb += edgeKeys {
		nk := min(edgeKeys, to-kb)
		first, _ := p.posRange(it.b, kb)
		_, last := p.posRange(it.b, kb+nk-1)
		r0 := min(max(first-it.i0, 0), it.nq) / lanes * lanes
		r1 := (min(max(last-it.i0, 0), it.nq) + lanes - 1) / lanes * lanes
		if r1 > r0 {
			r.block(kb, nk, true, true, r0, r1)
		}
	}
}

// block runs one KV block of nk keys from kb on rows [r0, r1) (whole
// vectors; rows outside keep their state): scores, softcap, ALiBi, the
// bias and mask if filter, the causal/window/length masks if the block is
// an edge, the online softmax and the PV update.
func (r *itemRun) block(kb, nk int, edge, filter bool, r0, r1 int) {
	ks, p, it, ws, rp := r.ks, r.p, r.it, r.ws, r.rp
	dk, dv, rows := p.HeadDim, p.ValueDim, it.nh*it.nq
	var kblk, vblk []float32 // the bfloat16 kernels read V's rows only when they must (pvPairs)
	var ldk, ldv int
	inPlace := !r.dp && r.readsInPlace(kb, nk) // paged float32 rows across pages: a call per page's run
	if ws.q8Scores {                           // K packed for ScoresQ8 below, never widened
		vblk, ldv = r.kvBlock(kb, nk, true)
	} else if !r.dp && !inPlace {
		kblk, ldk = r.kvBlock(kb, nk, false)
		vblk, ldv = kblk, ldk // V inside K, widened with it: its rows are the copy's prefixes
		if !p.VInK || !p.copiesKV() {
			vblk, ldv = r.kvBlock(kb, nk, true)
		}
	}
	s := ws.s[:nk*rp]
	if r.dp {
		r.scoresPairs(kb, nk, r0, r1)
	} else if inPlace {
		r.scoresByPage(kb, nk, r0, r1)
	} else if ws.q8Scores {
		r.scoresQ8(kb, nk, r0, r1)
	} else if ws.dot {
		ks.Dot(s[r0:], rp, kblk, ldk, ws.qr[r0*dk:], dk, nk, min(r1, rows)-r0, dk)
	} else {
		ks.QK(s[r0:], rp, kblk, ldk, ws.qt[r0:], rp, nk, r1-r0, dk)
	}
	softcap := p.Softcap
	filter = filter && (p.Bias != nil || p.Mask != nil)
	masked := edge || filter
	if masked {
		clear(ws.masked[:nk])
	}
	if filter || p.Slopes != nil {
		if softcap > 0 { // the cap comes before the terms
			applySoftcap(s, rp, nk, r0, min(r1, rows), softcap)
			softcap = 0
		}
		r.addTerms(kb, nk, r0, r1, filter)
	}
	if edge {
		mask(p, it, kb, nk, rp, s, ws.masked, r0, r1)
	}
	switch {
	case r.dp: // the weights also rounded and paired over keys, PV's B (pvPairs)
		ws.pp = grow(ws.pp, (nk+1)/2*rp)
		ks.SoftmaxPairs(s[r0:], rp, ws.m[r0:], ws.l[r0:], ws.al[r0:], nk, r1-r0, softcap, ws.pp[r0:], rp)
	case p.BF16: // the float32 kernels' PV reads the weights rounded
		ks.SoftmaxRound(s[r0:], rp, ws.m[r0:], ws.l[r0:], ws.al[r0:], nk, r1-r0, softcap)
	default:
		ks.Softmax(s[r0:], rp, ws.m[r0:], ws.l[r0:], ws.al[r0:], nk, r1-r0, softcap)
	}
	if (r.dp || inPlace) && masked && anyOf(ws.masked[:nk]) {
		vblk, ldv = r.kvBlock(kb, nk, true) // for the poison check (and its PV)
		inPlace = false
	}
	poisoned := masked && anyOf(ws.masked[:nk]) && r.poisoned(vblk, ldv, nk)
	if r.dp && !poisoned {
		r.pvPairs(kb, nk, r0, r1, vblk, ldv)
		return
	}
	r.rowsO() // the paths below update O's rows
	if r.dp { // a poisoned block's weights, for the float32 PV
		r.roundWeights(nk, r0, r1)
	}
	if poisoned {
		r.pvPoisoned(kb, nk, r0, min(r1, rows), vblk, ldv)
		return
	}
	if inPlace {
		r.pvByPage(kb, nk, r0, min(r1, rows))
		return
	}
	ks.PV(ws.o[r0*dv:], dv, s[r0:], rp, vblk, ldv, ws.al[r0:], min(r1, rows)-r0, nk, dv)
}

// kvBlock returns nk rows of the item's K (or V, if value) from key kb as
// float32, with their stride: the tensor itself, or for 16-bit and int8
// storage a contiguous copy widened (dequantized) once per block, which
// every row of the item then reads from cache. In the bfloat16 mode on
// the float32 kernels the copy is always made, and rounded unless its
// rows are bfloat16 already.
func (r *itemRun) kvBlock(kb, nk int, value bool) ([]float32, int) {
	p, ws := r.p, r.ws
	rows := p.kvRows(r.it.b, kb, r.it.g, value)
	rounding := p.BF16 && !r.dp && !p.KVRounded // the bfloat16 kernels pair (and round) the block themselves
	whole := p.pageRun(kb, nk) == nk
	if whole && rows.Type == fallback.KVFloat32 && !(value && ws.packV) && !rounding {
		return rows.F32, rows.Ld
	}
	dim, buf := p.HeadDim, &ws.kb
	if value {
		dim, buf = p.ValueDim, &ws.vb
	}
	*buf = grow(*buf, nk*dim)
	for c0 := 0; c0 < nk; { // one run a block of paged K/V, else one run
		n := p.pageRun(kb+c0, nk-c0)
		rows := p.kvRows(r.it.b, kb+c0, r.it.g, value)
		out := (*buf)[c0*dim:]
		switch rows.Type {
		case fallback.KVFloat32:
			for c := range n {
				copy(out[c*dim:(c+1)*dim], rows.F32[c*rows.Ld:])
			}
		case fallback.KVInt8, fallback.KVInt4:
			r.ks.DequantRows(out, dim, rows, n, dim)
		default:
			r.ks.WidenRows(out, dim, rows.U16, rows.Ld, n, dim, rows.Type)
		}
		c0 += n
	}
	if rounding && rows.Type != fallback.KVBFloat16 {
		r.roundBF16((*buf)[:nk*dim])
	}
	return *buf, dim
}

// aliasBytes is the span of the address bits that pick an L1 set (64 sets
// of 64-byte lines on every x86 core since Sandy Bridge, and Apple's and
// Neoverse's): rows whose stride is a multiple of it all land in the same
// few sets, of L1 and of L2 alike.
const aliasBytes = 4096

// packPanels is the fewest PV column panels for which copying a V block
// whose rows alias (see aliasBytes) pays for itself. Measured on Zen 5, one
// thread, B=1 Lq=Lk=1024..2048: AVX2 (16-column panels) at dv=64, 4 panels,
// and dv=128, 8 panels, runs 12–20% faster with the copy, PV's time falling
// by a third (each panel re-read the aliased block from L3); AVX-512 at
// dv=128, 2 panels, runs 7% slower (the copy costs more than the second
// pass saves). Strides that do not alias (2 KiB, or 15 heads of 128) lose
// 3–6% to the copy on every set.
const packPanels = 4

// packsV reports whether the flash loop copies each f32 V block
// contiguous before PV: when V's rows alias in the caches and PV walks the
// block in enough column panels to re-read it from farther out. 16-bit
// blocks are widened into contiguous scratch anyway.
func packsV(ks *kernels.Set, p *Problem) bool {
	if p.KVType != fallback.KVFloat32 {
		return false
	}
	_, ld := p.kvRow(0, 0, 0, p.vWidth())
	return ld != p.ValueDim && ld*4%aliasBytes == 0 && ks.Panels(p.ValueDim) >= packPanels
}

// packQ writes the item's query rows, times the scale, transposed into qt
// ([dk][rp]), one head's run of positions at a time; the padding rows are
// zero.
func packQ(ks *kernels.Set, p *Problem, it item, rp int, qt []float32) {
	dk := p.HeadDim
	for hh := 0; hh < it.nh; hh++ {
		off, stride := p.row(it.b, it.i0, it.h0+hh, p.Heads, p.QLen, dk)
		ks.TransposeScale(qt[hh*it.nq:], rp, p.Q[off:], stride, it.nq, dk, p.Scale)
	}
	for d := 0; d < dk; d++ {
		clear(qt[d*rp+it.nh*it.nq : (d+1)*rp])
	}
}

// packRows copies the item's query rows, times the scale, into qr
// ([rows][dk], row-major), for Dot.
func packRows(p *Problem, it item, qr []float32) {
	dk := p.HeadDim
	for hh := 0; hh < it.nh; hh++ {
		off, stride := p.row(it.b, it.i0, it.h0+hh, p.Heads, p.QLen, dk)
		for ii := 0; ii < it.nq; ii++ {
			dst := qr[(hh*it.nq+ii)*dk:][:dk]
			for d, x := range p.Q[off+ii*stride:][:dk] {
				dst[d] = x * p.Scale
			}
		}
	}
}

// applySoftcap caps the scores of rows [r0, r1) of an nk-key tile (used
// when a bias must be added between the softcap and the softmax).
func applySoftcap(s []float32, lds, nk, r0, r1 int, c float32) {
	for k := 0; k < nk; k++ {
		sk := s[k*lds+r0 : k*lds+r1]
		for r, x := range sk {
			sk[r] = fallback.Softcap32(x, c)
		}
	}
}

// mask sets to -Inf the scores of keys [kb, kb+nk) that a row of the
// block's rows [r0, r1) may not see, and marks in masked the keys some row
// of the item may not see: for each key, the positions that see it are
// one run (posRange), so the rest is two runs per head.
func mask(p *Problem, it item, kb, nk, lds int, s []float32, masked []bool, r0, r1 int) {
	lk := p.keyLen(it.b)
	for c := 0; c < nk; c++ {
		a, b := 0, 0 // visible positions, item-relative
		if j := kb + c; j < lk {
			lo, hi := p.posRange(it.b, j)
			a, b = min(max(lo-it.i0, 0), it.nq), min(max(hi-it.i0, 0), it.nq)
			b = max(a, b)
		}
		if a == 0 && b == it.nq {
			continue
		}
		masked[c] = true
		sc := s[c*lds : c*lds+it.nh*it.nq]
		for hh := 0; hh < it.nh; hh++ {
			h0 := hh * it.nq // the head's first row
			fillRows(sc, h0, h0+a, r0, r1)
			fillRows(sc, h0+b, h0+it.nq, r0, r1)
		}
	}
}

// fillRows sets rows [from, to) ∩ [r0, r1) of a key's scores to -Inf: the
// block's other rows are not run (edges run only the rows that see one of
// its keys).
func fillRows(sc []float32, from, to, r0, r1 int) {
	from, to = max(from, r0), min(to, r1, len(sc))
	if from < to {
		fill(sc[from:to], negInf)
	}
}

// fill sets every element of x to v.
func fill(x []float32, v float32) {
	for i := range x {
		x[i] = v
	}
}

// store writes the item's output rows: each accumulated row divided by
// its softmax sum (copied, then scaled in place by the PV kernel with no
// keys), and the LSE. rowResult decides the rows whose sum is not a
// positive number: no key seen (zeros, LSE -Inf) or NaN.
func (r *itemRun) store() {
	r.rowsO()
	ks, p, it, ws := r.ks, r.p, r.it, r.ws
	dv := p.ValueDim
	plain := p.Sinks == nil && p.LSE == nil
	for hh := 0; hh < it.nh; hh++ {
		h := it.h0 + hh
		for ii := 0; ii < it.nq; ii++ {
			r := hh*it.nq + ii
			if l := ws.l[r]; plain && l > 0 {
				ws.al[r] = 1 / l // rowResult's common case, without its call
				continue
			}
			ws.al[r], ws.m[r] = rowResult(p, it.b, h, it.i0+ii, ws.m[r], ws.l[r])
		}
	}
	// The rows are scaled where they are contiguous and in L1, then copied
	// out: scaled after the copy, they were read back at the output's
	// stride, which in BSHD can alias in the caches (on Zen 5, S3 BSHD's
	// stores took 0.86 ms of a 39.6 ms call, BHSD's 0.49; now 0.47–0.50).
	ks.PV(ws.o, dv, nil, 0, nil, 0, ws.al, it.nh*it.nq, 0, dv)
	for hh := 0; hh < it.nh; hh++ {
		h := it.h0 + hh
		off, stride := p.row(it.b, it.i0, h, p.Heads, p.QLen, dv)
		for ii := 0; ii < it.nq; ii++ {
			r := hh*it.nq + ii
			o := p.Out[off+ii*stride : off+ii*stride+dv]
			// No key: zeros, whatever the accumulator holds. (A sink far
			// above every score can make the factor of a row with keys 0
			// too; that row is scaled, not cleared.)
			if ws.al[r] == 0 && ws.l[r] == 0 {
				clear(o)
				continue
			}
			copy(o, ws.o[r*dv:(r+1)*dv])
		}
		if p.LSE != nil {
			copy(p.LSE[(it.b*p.Heads+h)*p.QLen+it.i0:][:it.nq], ws.m[hh*it.nq:(hh+1)*it.nq])
		}
	}
}

// rowResult turns a row's final softmax state (max m, sum l) into the
// factor its accumulated output is scaled by and its LSE:
//
//	l > 0:                     1/l, m + ln l      (with a sink: see sunk)
//	l NaN:                     NaN, NaN   (a NaN or +Inf score)
//	l = 0, the row sees keys:  NaN, NaN   (every score it sees is -Inf: overflow)
//	l = 0, it sees none:       0, -Inf    (zeros; the LSE is the sink, if any)
//
// The log of the common case is taken only when the caller asked for the
// LSE (p.LSE): one log per row was a fifth of storing a prefill item's
// rows (S1's stores 0.24–0.25 → 0.19–0.21 ms on Zen 4); without it lse is
// m, unused.
func rowResult(p *Problem, b, h, i int, m, l float32) (scale, lse float32) {
	switch {
	case l > 0 && p.Sinks != nil:
		return sunk(p, h, float64(m), float64(l))
	case l > 0 && p.LSE == nil:
		return 1 / l, m
	case l > 0:
		return 1 / l, m + float32(math.Log(float64(l)))
	case l == 0 && !p.seesKey(b, h, i):
		if p.Sinks != nil {
			return 0, p.Sinks[h]
		}
		return 0, negInf
	}
	nan := float32(math.NaN())
	return nan, nan
}

// sunk is rowResult of a row with max m and sum l > 0 whose head h has a
// sink σ, one more term of the denominator with no value:
//
//	den = l + e^(σ-m);  scale = 1/den;  lse = m + ln den
//
// in float64; when e^(σ-m) would overflow, factored the other way:
// den = e^(σ-m)·(1 + l·e^(m-σ)), so scale = e^(m-σ)/(1 + l·e^(m-σ)) and
// lse = σ + ln(1 + l·e^(m-σ)). One exp and one log a row.
func sunk(p *Problem, h int, m, l float64) (scale, lse float32) {
	sink := float64(p.Sinks[h])
	if t := sink - m; t < 700 {
		den := l + math.Exp(t)
		return float32(1 / den), float32(m + math.Log(den))
	}
	e := math.Exp(m - sink)
	return float32(e / (1 + l*e)), float32(sink + math.Log1p(l*e))
}

// anyOf reports whether any element of x is true.
func anyOf(x []bool) bool {
	for _, b := range x {
		if b {
			return true
		}
	}
	return false
}
