// Decode<F32|F16|BF16><ISA>: the fused decode step over K/V in blocks of
// T = lanes keys. Scores: R = 4, 2 or 1 rows at a time, in R passes of T/R
// keys, T accumulators (row × key), so one K load feeds R FMAs; each pass
// folded to one vector, the R vectors transposed to a vector per row. PV:
// up to 4 (AVX-512) or 2 (AVX2) rows × 4-8 vectors, wider for fewer rows.

package main

import (
	"fmt"
	"math/bits"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// Decode<E><ISA> is the fused flash loop of a decode step: up to 16 query
// rows of one KV head over nk keys every row sees, K and V (of storage E)
// read once from memory, in blocks of T = lanes keys:
//
//	scores  in groups of R rows (scoreGroups): R passes over the block,
//	        each of T/R keys, with T accumulators (one per row and key),
//	        each a dot product along d; per step of d the R q vectors
//	        are loaded once and each K vector loaded (and widened) feeds
//	        R FMAs. A tree of shuffles and adds folds a pass's
//	        accumulators into one vector (row i's keys in block i), and
//	        the R vectors are transposed by blocks into one vector of T
//	        scores per row (key c in lane c);
//	softmax on that vector: horizontal max and sum by a butterfly;
//	PV      a tile of rows × vectors of O (pvTile) accumulates the T
//	        weights (broadcast) times the V rows.
//
// How the bytes come in depends on whether a tensor's rows are adjacent
// (stride = row bytes: a Cache, BHSD, MQA):
//
//	adjacent  each block's K rows, then its V rows, are first touched in
//	          address order, one byte load per 64-byte line (touchRows),
//	          so the memory system sees two ascending streams and the
//	          column-wise loads above hit L1. Without the touch the first
//	          access to each line is the column-wise one, T streams a row
//	          apart, which the prefetchers of some cores do not follow
//	          (Zen 4: a plain loop reading 16 rows that way gets 5–8 GB/s
//	          against 20–29 in address order; bench's
//	          BenchmarkReadPattern). Software prefetch ahead, in either
//	          order, measured slower there. A call of one row is not
//	          touched: its score loop reads each key's K row whole
//	          (decodeRowKeys) and its PV each V row whole when one panel
//	          covers it, in address order themselves (touchBlock). Calls
//	          of several rows of the float kernels of AVX-512 and the
//	          float32 one of AVX2 take the strided path instead
//	          (prefetchesRows).
//	strided   (BSHD: each row on its own page, where no hardware
//	          prefetcher helps) the first decodeAhead blocks are
//	          prefetched up front; then the K rows decodeAhead blocks on
//	          are prefetched by the first row group's score loop and the V
//	          rows by the PV loop, a line per vector loaded. A touch
//	          measured slower there. The prefetches go to L2
//	          (PREFETCHT1), not L1: rows a multiple of 4 KiB apart (a BSHD
//	          row's stride is heads × row bytes) fall in one L1 set, whose
//	          8 ways cannot hold 2 blocks of 16 rows ahead, so prefetches
//	          into L1 evicted each other before use. T0 → T1 ran the MHA
//	          step 1,32,32,1,4096,128 BSHD 1.4× as fast (f32 10.4–12.8 →
//	          7.5–8.4 ms, int8 5.4–5.9 → 3.6–4.2, Zen 4, one thread) and
//	          the GQA step 1,32,8,1,8192,128 1.1–1.4×.
//
// The last partial block is moved back to end at nk and its first lanes
// masked, so no row past nk is read (nk >= T is the caller's).

// decodeAhead is how many blocks ahead Decode prefetches strided rows.
const decodeAhead = 2

// prefetchesRows reports whether the kernel treats adjacent rows as
// strided ones when it has several query rows: no touch, the prefetches
// decodeAhead blocks on. Its column-wise walk then finds each block in L2
// (the touch's loads stalled the walk on the block's misses), which ran
// the AVX-512 float kernels 1.13–1.73× as fast from memory (GQA rows 4
// and 16, 2^17 keys, Zen 4, one thread, best of three alternated) and
// AVX2's float32 one 1.1–1.4×; AVX2's 16-bit and every int8, int4 and
// DecodeQ8 kernel ran level or slower (0.68–1.14×), and keep the touch.
func (g *gen) prefetchesRows(e elem, q8 bool) bool {
	if q8 || e.quantized() {
		return false
	}
	return g.isa.avx512() || e == f32
}

// scratchLayout is where Decode keeps things in its scratch s, in float32
// elements: the weights [16][T] from 0, the rescale factors [16] at alpha,
// on AVX2 the masks (K and V lanes, K and V dword pairs, the skipped
// lanes of the last block), one ymm vector each; total floats in all (a
// block's int8 scales and scaled weights follow).
type scratchLayout struct {
	alpha, maskK, maskV, pairsK, pairsV, skips, total int
}

func (g *gen) decodeLayout() scratchLayout {
	alpha := decodeRows * g.isa.lanes
	maskK := alpha + decodeRows
	return scratchLayout{alpha: alpha, maskK: maskK, maskV: maskK + 8, pairsK: maskK + 16,
		pairsV: maskK + 20, skips: maskK + 24, total: maskK + 32}
}

// aheadLog is log2 of the keys Decode prefetches strided rows ahead
// (decodeAhead blocks).
func (g *gen) aheadLog() uint8 { return g.lanesLog() + 1 }

// decodeScratch is the floats of Decode's scratch.
func (g *gen) decodeScratch() int { return g.decodeLayout().total }

// pvTile is Decode's PV register tile: up to rows × vecs(rows) vectors of
// accumulators, wider for fewer rows so a one-row step still has 8
// independent FMA chains (AVX-512: 4×4 or 2×8 of 32 registers, plus a V
// vector and the broadcasts; AVX2: 2×4 or 1×8 of 16).
func (g *gen) pvTile() (rows int, vecs func(nr int) int) {
	wide := func(few bool) int {
		if few {
			return 8
		}
		return 4
	}
	if g.isa.avx512() {
		return 4, func(nr int) int { return wide(nr <= 2) }
	}
	return 2, func(nr int) int { return wide(nr == 1) }
}

// decodeLocals are Decode's values kept in its stack frame between
// phases (GP registers are too few to hold them all).
type decodeLocals struct {
	kp, vp, rem, skip operand.Mem       // current block's K and V rows; keys left; masked lanes
	kfull, qstride    operand.Mem       // unmasked K vectors; q row bytes
	ldk, ldv, ldo     operand.Mem       // strides in bytes
	krow, vrow        operand.Mem       // bytes of a K and a V row
	row, qrow, g0, rr operand.Mem       // score row, its q; PV row group and its rows
	vec               operand.Mem       // PV: first vector of the panel
	kAhead, vAhead    operand.Mem       // bytes from a row to the one prefetched: 0 if adjacent
	kSkip             reg.OpmaskVirtual // AVX-512: the skipped lanes of the block

	// int8 only: the current block's scale rows, their strides in bytes,
	// the scales per K and V row, and where the V scales and the scaled
	// weights start in the scratch (bytes from s; the K scales start at
	// total floats).
	ksp, vsp, ldks, ldvs, nbk, nbv, vsOff, wOff operand.Mem

	// DecodeQ8 only: where the transposed K block starts in the scratch
	// (bytes from s); a one-row call's q scale, correction and K scale
	// row pointers as its chunks advance them (decodeRowQ8).
	ktOff, qsp, qcp, kscp operand.Mem
}

// scaleShift is log2 of the vectors of one int8 scale block (32/lanes).
func (g *gen) scaleShift() uint8 { return 5 - g.lanesLog() }

// scaleEntryLog is log2 of the bytes of one scale in the scale scratch:
// a float32 on AVX-512 (multiplied in by an embedded broadcast), a whole
// vector of it on AVX2 (whose VMULPS has no broadcast operand: the fill
// broadcasts instead, at the cost of a wider store).
func (g *gen) scaleEntryLog() uint8 {
	if g.isa.avx512() {
		return 2
	}
	return g.lanesLog() + 2
}

// scaleEntryBytes is the bytes of one scale in the scale scratch.
func (g *gen) scaleEntryBytes() int { return 1 << g.scaleEntryLog() }

// scaleRowLog is log2 of the bytes of one block's row of the scale
// scratch (lanes scales, key c's at c entries).
func (g *gen) scaleRowLog() uint8 { return g.lanesLog() + g.scaleEntryLog() }

// The doc lines of the int4 kernels' operands (DecodeI4, DecodeQ8I4).
const (
	i4Rows   = "int4 K/V rows (fallback.KVInt4: ggml's q4_0 blocks, ldk and ldv in bytes): nibble"
	i4Values = "u of element i stands for float32(u-8)·ks[c*ldks+i/32] (v likewise with vs, ldvs)"
)

func (g *gen) decode(e elem, form q8Form) {
	q8 := form != q8None
	x := g.isa
	T := x.lanes
	sig := fmt.Sprintf("func(q *float32, rows, kvec, ktail int, k %s, ldk int, v %s, ldv int, nk, vvec, vtail int, o, m, l, s, alibi *float32", e.goType(), e.goType())
	scaled := []string{"elements of k's type (16-bit: widened in registers); s is scratch."}
	score := "\t\tsc = Σ_d k[c*ldk+d]·q[r*dk+d]               (dk = (kvec-1)*lanes + ktail)"
	name := "Decode" + e.name()
	if e.quantized() {
		sig += ", ks *float32, ldks int, vs *float32, ldvs int"
		scaled = []string{"elements of k's type; k[c*ldk+d] stands for float32(k[c*ldk+d])·ks[c*ldks+d/32]",
			"(v likewise with vs, ldvs), dequantized in registers; s is scratch",
			"(fixed part, then a block's K and V scales, block-major)."}
		if e == i4 {
			scaled = []string{i4Rows, i4Values + ",",
				"turned into float32 in registers (no conversion: u or'ed into 2^23's bits, minus",
				"2^23+8). dk is whole blocks (kvec·lanes a multiple of 32, ktail = lanes): the",
				"caller pads q's rows with zeros to them. s is scratch (fixed part, then a block's",
				"K and V scales, block-major)."}
		}
	}
	if q8 {
		name = form.kernel(x)
		if e == i4 {
			name += "I4"
		}
		sig += ", q8 *int8, ldq8 int, qs *float32, qc *int32"
		score = "\t\tsc = Σ_b fma(float32(D_b)·ks[c*ldks+b], qs[r*nb+b], sc), D_b = Σ_{d in block b} k[c*ldk+d]·q8[r*ldq8+d]"
		switch {
		case e == i4:
			scaled = []string{i4Rows, i4Values + ".",
				"The scores are integer dot products (" + form.dot(x) + ") of the unsigned nibbles",
				"by q8: the rows quantized, each block's bytes in the order a block's nibbles",
				"unpack to (element j, then j+16, for j = 0..15), zeros to ldq8 (a multiple of",
				"64), qs their scales and qc[r*nb+b] = -8·Σ q8 of block b, so that a sum started",
				"at qc is D_b, exact in int32; q is not read. Several rows: each block's K rows",
				"unpacked into the scratch, transposed by dwords. s is scratch."}
			if !x.avx512() {
				scaled = append(scaled, "One row only (rows = 1): several run faster widened to int8 (kernels/amd64.go).")
			}
		case form != q8Sign:
			scaled = append(scaled, "The scores are integer dot products ("+form.dot(x)+"): q8 holds the rows quantized",
				"(ldq8 bytes apart, nb = ⌈dk/32⌉ blocks of 32, zeros past dk), qs their scales",
				"and qc[r*nb+b] = -128·Σ q8 of block b; q is not read. dk is a multiple of 4.",
				"Each block's K rows are copied once into the scratch transposed by dwords, each",
				"byte plus 128 (unsigned), so that lane c of a product is key c's: the sum",
				"starts at qc and D_b is exact in int32.")
		default:
			scaled = append(scaled, "The scores are integer dot products (VPSIGNB, VPMADDUBSW, VPMADDWD): q8 holds",
				"the rows quantized (ldq8 bytes apart, nb = ⌈dk/32⌉ blocks of 32, zeros past dk,",
				"none -128), qs their scales; q and qc are not read. dk is a multiple of 4.",
				"Each block's K rows are copied once into the scratch transposed by dwords, so",
				"that lane c of a product is key c's; each product is |k|·(q·sign(k)), so no",
				"16-bit pair saturates and D_b is exact in int32.")
		}
	}
	doc := []string{"",
		"\tfor each block of lanes keys c, for r := 0; r < rows; r++ {",
		score,
		"\t\tif alibi != nil: sc += alibi[r]·(alibi[rows+r] + c)   (slope, distance to key 0)",
		"\t\tmNew = max(m[r], max_c sc);  base = max(mNew, -MaxFloat32)",
		"\t\tp[c] = fallback.WeightExp32(sc - base);  alpha = fallback.WeightExp32(m[r] - base)",
		"\t\tl[r] = l[r]·alpha + Σ_c p[c];  m[r] = mNew",
		"\t\to[r*dv+j] = alpha·o[r*dv+j] + Σ_c p[c]·v[c*ldv+j]   (dv = (vvec-1)*lanes + vtail)",
		"",
		"fallback.Decode is the twin. rows in 1..16, nk >= lanes, strides in",
	}
	g.fn(name, sig+")", append(doc, scaled...)...)
	sl := g.decodeLayout()
	var lc decodeLocals
	for _, p := range []*operand.Mem{&lc.kp, &lc.vp, &lc.rem, &lc.skip, &lc.kfull, &lc.qstride, &lc.ldk,
		&lc.ldv, &lc.ldo, &lc.krow, &lc.vrow, &lc.row, &lc.qrow, &lc.g0, &lc.rr, &lc.vec, &lc.kAhead, &lc.vAhead} {
		*p = g.AllocLocal(8)
	}
	if e.quantized() {
		for _, p := range []*operand.Mem{&lc.ksp, &lc.vsp, &lc.ldks, &lc.ldvs, &lc.nbk, &lc.nbv, &lc.vsOff, &lc.wOff} {
			*p = g.AllocLocal(8)
		}
	}
	if q8 {
		for _, p := range []*operand.Mem{&lc.ktOff, &lc.qsp, &lc.qcp, &lc.kscp} {
			*p = g.AllocLocal(8)
		}
	}
	eshift := e.log()
	store := func(r reg.GPVirtual, m operand.Mem) { g.MOVQ(r, m) }
	load := func(m operand.Mem) reg.GPVirtual {
		r := g.GP64()
		g.MOVQ(m, r)
		return r
	}

	// Prologue: strides, row sizes, masks.
	sp := g.param("s")
	ldk, ldv := g.param("ldk"), g.param("ldv")
	g.SHLQ(operand.U8(eshift), ldk)
	g.SHLQ(operand.U8(eshift), ldv)
	store(ldk, lc.ldk)
	store(ldv, lc.ldv)
	kvec, ktail := g.param("kvec"), g.param("ktail")
	vvec, vtail := g.param("vvec"), g.param("vtail")
	// A row of (vec-1)·lanes + tail elements: its bytes as float32 (a q or
	// O row) and as e (a K or V row).
	rowBytes := func(vec, tail reg.GPVirtual, f32Bytes, eBytes operand.Mem) {
		n, t := g.GP64(), g.GP64()
		g.LEAQ(operand.Mem{Base: vec, Disp: -1}, n)
		g.SHLQ(operand.U8(g.lanesLog()), n)
		g.ADDQ(tail, n)
		g.MOVQ(n, t)
		g.SHLQ(operand.U8(2), t)
		store(t, f32Bytes)
		if e == i4 { // whole blocks of 16 bytes
			g.ADDQ(operand.Imm(31), n)
			g.SHRQ(operand.U8(5), n)
			g.SHLQ(operand.U8(4), n)
		}
		g.SHLQ(operand.U8(eshift), n)
		store(n, eBytes)
	}
	rowBytes(kvec, ktail, lc.qstride, lc.krow)
	rowBytes(vvec, vtail, lc.ldo, lc.vrow)
	// kfull = kvec, less one when the last vector is partial.
	kfull := g.GP64()
	g.MOVQ(kvec, kfull)
	g.CMPQ(ktail, operand.Imm(uint64(T)))
	g.JEQ(operand.LabelRef("kwhole"))
	g.DECQ(kfull)
	g.Label("kwhole")
	store(kfull, lc.kfull)
	var mkK, mkV kvMask
	if x.avx512() {
		mkK.tailRegs, mkV.tailRegs = g.tailMask(ktail), g.tailMask(vtail)
	} else {
		// The masks (tailMask's table entries) copied into the scratch,
		// where they stay addressable without a register each.
		copyMask := func(n reg.GPVirtual, off int) operand.Mem {
			y := g.YMM()
			g.VMOVDQU(g.tailMask(n).ymask, y)
			m := operand.Mem{Base: sp, Disp: 4 * off}
			g.VMOVDQU(y, m)
			return m
		}
		half := func(n reg.GPVirtual) reg.GPVirtual { // 16-bit: tail/2 dwords; int8: tail/4
			h := g.GP64()
			g.MOVQ(n, h)
			if e.quantized() {
				g.SHRQ(operand.U8(2), h)
			} else {
				g.SHRQ(operand.U8(1), h)
			}
			return h
		}
		mkK.ymask, mkV.ymask = copyMask(ktail, sl.maskK), copyMask(vtail, sl.maskV)
		// 8 lanes written, the first 4 (16-bit) or 2 (int8) used.
		mkK.pairs, mkV.pairs = copyMask(half(ktail), sl.pairsK), copyMask(half(vtail), sl.pairsV)
	}
	kp, vp, nk := g.param("k"), g.param("v"), g.param("nk")
	store(kp, lc.kp)
	store(vp, lc.vp)
	store(nk, lc.rem)
	if e.quantized() {
		g.Comment("int8: scale rows, strides and counts; the V scales' place in the scratch.")
		for _, t := range []struct {
			ptr, ld, row, nb operand.Mem
			name, ldName     string
		}{{lc.ksp, lc.ldks, lc.krow, lc.nbk, "ks", "ldks"}, {lc.vsp, lc.ldvs, lc.vrow, lc.nbv, "vs", "ldvs"}} {
			store(g.param(t.name), t.ptr)
			ld := g.param(t.ldName) // in floats
			g.SHLQ(operand.U8(2), ld)
			store(ld, t.ld)
			nb := load(t.row) // int8: bytes = elements; int4: 16 bytes a block
			if e == i4 {
				g.SHRQ(operand.U8(4), nb)
			} else {
				g.ADDQ(operand.Imm(31), nb)
				g.SHRQ(operand.U8(5), nb)
			}
			store(nb, t.nb)
		}
		off := load(lc.nbk)
		g.SHLQ(operand.U8(g.scaleRowLog()), off)
		g.ADDQ(operand.U32(uint64(4*sl.total)), off)
		store(off, lc.vsOff)
		// The V scales are plain floats, T per scale block.
		w := load(lc.nbv)
		g.SHLQ(operand.U8(g.lanesLog()+2), w)
		g.ADDQ(off, w)
		store(w, lc.wOff)
		if q8 {
			// The transposed K block follows the scaled weights.
			kt := load(lc.nbv)
			g.IMUL3Q(operand.U32(uint64(wBlockBytes(T))), kt, kt)
			g.ADDQ(w, kt)
			store(kt, lc.ktOff)
		}
	}
	// The pointers each block advances: K and V rows, and int8 scale rows.
	advancing := []struct{ ptr, ld operand.Mem }{{lc.kp, lc.ldk}, {lc.vp, lc.ldv}}
	if e.quantized() {
		advancing = append(advancing, struct{ ptr, ld operand.Mem }{lc.ksp, lc.ldks}, struct{ ptr, ld operand.Mem }{lc.vsp, lc.ldvs})
	}
	// Strided rows: the prefetch distance, and the first decodeAhead blocks
	// prefetched before the loop prefetches further.
	for _, t := range []struct {
		ptr, ld, row, ahead operand.Mem
		lbl                 string
	}{{lc.kp, lc.ldk, lc.krow, lc.kAhead, "pfk0"}, {lc.vp, lc.ldv, lc.vrow, lc.vAhead, "pfv0"}} {
		a := load(t.ld)
		g.CMPQ(a, t.row)
		g.JNE(operand.LabelRef(label(t.lbl, "strided")))
		if g.prefetchesRows(e, q8) {
			g.CMPQ(g.arg("rows"), operand.Imm(1))
			g.JNE(operand.LabelRef(label(t.lbl, "strided")))
		}
		g.MOVQ(operand.U32(0), t.ahead)
		g.JMP(operand.LabelRef(label(t.lbl, "done")))
		g.Label(label(t.lbl, "strided"))
		g.SHLQ(operand.U8(g.aheadLog()), a)
		store(a, t.ahead)
		g.prefetchRows(t.ptr, t.ld, t.row, decodeAhead*T, t.lbl)
		g.Label(label(t.lbl, "done"))
	}

	g.Comment(fmt.Sprintf("A block of %d keys. The last one, if partial, is moved back to end at", T),
		"nk; its first skip lanes (keys already done) are masked.")
	g.Label("block")
	rem, skip := load(lc.rem), g.GP64()
	g.MOVQ(operand.U32(0), skip)
	g.CMPQ(rem, operand.Imm(uint64(T)))
	g.JGE(operand.LabelRef("whole"))
	g.MOVQ(operand.U32(uint64(T)), skip)
	g.SUBQ(rem, skip)
	g.MOVQ(operand.U32(uint64(T)), rem)
	store(rem, lc.rem)
	for _, p := range advancing {
		back, ptr := load(p.ld), load(p.ptr)
		g.IMULQ(skip, back)
		g.SUBQ(back, ptr)
		store(ptr, p.ptr)
	}
	g.Label("whole")
	store(skip, lc.skip)
	// The skipped lanes are the first skip: a tail mask of skip lanes.
	sm := g.tailMask(skip)
	if x.avx512() {
		lc.kSkip = sm.kmask
	} else {
		y := g.YMM()
		g.VMOVDQU(sm.ymask, y)
		g.VMOVDQU(y, operand.Mem{Base: sp, Disp: 4 * sl.skips})
	}

	g.Comment("Adjacent rows: the block's K rows, then its V rows, touched in address order.")
	g.touchBlock(lc, q8)
	if e.quantized() {
		g.Comment("int8: the block's scales into the scratch, block-major.")
		g.fillScales(lc, sp, q8)
	}
	// AVX2's int4 kernels take one row (decodeQ8I4Max): straight to q8row,
	// and PV of one row.
	oneRow := e == i4 && q8 && !x.avx512()
	if q8 && !oneRow {
		g.CMPQ(g.arg("rows"), operand.Imm(1))
		g.JEQ(operand.LabelRef("q8row"))
		g.Comment("DecodeQ8: the block's K rows into the scratch, transposed by dwords (VPDPBUSD: plus 128).")
		g.transposeQ8(e, lc, sp, form)
	}

	if !oneRow {
		g.Comment(fmt.Sprintf("Scores and softmax in groups of %v rows (with strided K, the first group prefetches).", scoreGroups))
		g.MOVQ(operand.U32(0), lc.row)
		q := g.param("q")
		store(q, lc.qrow)
		// The first group prefetches the K rows decodeAhead blocks on, one line
		// per vector it loads; the others find the block in L1. (DecodeQ8's
		// transpose reads the rows and prefetches instead.)
		prefetches := []bool{true, false}
		if q8 {
			prefetches = prefetches[1:]
		} else {
			g.CMPQ(lc.kAhead, operand.U32(0))
			g.JEQ(operand.LabelRef(groupLabel("rowgroup", 0, false)))
		}
		for _, prefetch := range prefetches {
			g.Label(groupLabel("rowgroup", 0, prefetch))
			left := g.GP64()
			g.MOVQ(g.arg("rows"), left)
			g.SUBQ(lc.row, left)
			if !prefetch {
				g.JZ(operand.LabelRef("pv"))
			}
			for _, R := range scoreGroups {
				g.CMPQ(left, operand.Imm(uint64(R)))
				g.JGE(operand.LabelRef(groupLabel("scores", R, prefetch)))
			}
			for _, R := range scoreGroups {
				g.Label(groupLabel("scores", R, prefetch))
				if q8 {
					g.decodeScoresQ8(e, lc, sp, R, form)
				} else {
					g.decodeScores(e, lc, mkK, sp, R, prefetch)
				}
				r, q := load(lc.row), load(lc.qrow)
				g.ADDQ(operand.Imm(uint64(R)), r)
				for range R {
					g.ADDQ(lc.qstride, q)
				}
				store(r, lc.row)
				store(q, lc.qrow)
				g.JMP(operand.LabelRef(groupLabel("rowgroup", 0, false)))
			}
		}
	}
	if q8 {
		g.Comment("DecodeQ8, one row: each key's sums over K as it is, folded.")
		g.Label("q8row")
		g.MOVQ(operand.U32(0), lc.row)
		g.decodeRowQ8(e, lc, sp, form)
	}
	g.Label("pv")
	if e.quantized() {
		g.Comment("int8: each row's weights times the V scales of each scale block.")
		g.scaleWeights(lc, sp)
	}

	g.Comment("PV (strided V: the rows decodeAhead blocks on prefetched as it goes), then the next block.")
	g.decodePV(e, lc, mkV, sp, oneRow)
	for _, p := range advancing {
		step, ptr := load(p.ld), load(p.ptr)
		g.SHLQ(operand.U8(g.lanesLog()), step)
		g.ADDQ(step, ptr)
		store(ptr, p.ptr)
	}
	rem = load(lc.rem)
	g.SUBQ(operand.Imm(uint64(T)), rem)
	store(rem, lc.rem)
	g.JNZ(operand.LabelRef("block"))
	g.ret()
}

// fillScales copies the scales of the block's T keys (int8) into the
// scale scratch, block-major: K's from total floats on, scale b of key c
// at entry b·T + c (scaleEntryBytes each), then V's from lc.vsOff bytes
// on (a float each), so that the score loop finds the scales of one
// scale block of T keys in one row, key c's at a displacement, and
// scaleWeights a vector of them: fillScales512 (a transpose) on
// AVX-512, fillScales2 (a key at a time) on AVX2. DecodeQ8 (q8) wants
// K's scales of a scale block as a vector over the keys too, so on AVX2
// they are floats then, not broadcast: rows of 4·T bytes, in the room
// the broadcast layout reserves.
func (g *gen) fillScales(lc decodeLocals, sp reg.GPVirtual, q8 bool) {
	sl := g.decodeLayout()
	for i, t := range []struct {
		ptr, ld, nb operand.Mem
		name        string
	}{{lc.ksp, lc.ldks, lc.nbk, "scalesk"}, {lc.vsp, lc.ldvs, lc.nbv, "scalesv"}} {
		src, dst, n := g.GP64(), g.GP64(), g.GP64()
		g.MOVQ(t.ptr, src)
		if i == 0 {
			g.LEAQ(operand.Mem{Base: sp, Disp: 4 * sl.total}, dst)
		} else {
			g.MOVQ(lc.vsOff, dst)
			g.ADDQ(sp, dst)
		}
		g.MOVQ(t.nb, n)
		if g.isa.avx512() {
			g.fillScales512(t.ld, src, dst, n, t.name)
		} else {
			g.fillScales2(t.ld, src, dst, n, t.name, i == 0 && !q8)
		}
	}
}

// fillScales2 is fillScales' AVX2 loop for one tensor: n scale blocks of
// the T = 8 keys whose scale rows start at src, ld bytes apart, to dst,
// the keys unrolled: with broadcast (K's) each scale broadcast to a
// vector, else (V's) copied as a float.
func (g *gen) fillScales2(ldm operand.Mem, src, dst, n reg.GPVirtual, name string, broadcast bool) {
	T := g.isa.lanes
	entry := 4
	if broadcast {
		entry = g.scaleEntryBytes()
	}
	ld := g.GP64()
	g.MOVQ(ldm, ld)
	keys := g.keyRows(src, ld, T)
	g.Label(name)
	for c := range T {
		m := keys.row(c)
		if broadcast {
			y := g.vec()
			g.VBROADCASTSS(m, y)
			g.VMOVUPS(y, operand.Mem{Base: dst, Disp: c * entry})
		} else {
			f := g.GP32()
			g.MOVL(m, f)
			g.MOVL(f, operand.Mem{Base: dst, Disp: c * entry})
		}
	}
	for _, b := range keys.bases {
		g.ADDQ(operand.Imm(4), b)
	}
	g.ADDQ(operand.U32(uint64(T*entry)), dst)
	g.DECQ(n)
	g.JNZ(operand.LabelRef(name))
}

// fillScales512 is fillScales' AVX-512 loop for one tensor: n scale
// blocks of the T = 16 keys whose scale rows start at src, ld bytes
// apart, to dst, a float per scale. Four scale blocks at a time: key
// c's four scales (16 bytes, a masked load: the last group may have
// fewer) go to 128-bit lane c/4 of vector c%4; a 4×4 transpose in each
// 128-bit lane (unpack low/high of floats, then of pairs) leaves in
// vector b the scale b of keys 0..15 in order. (VPGATHERDD, a gather per
// scale block, cost a fifth of a one-row int8 step in L2 on Zen 4.)
func (g *gen) fillScales512(ldm operand.Mem, src, dst, n reg.GPVirtual, name string) {
	T, entry := g.isa.lanes, 4
	ld := g.GP64()
	g.MOVQ(ldm, ld)
	keys := g.keyRows(src, ld, T)
	g.Label(name)
	// The group's blocks: min(n, 4), as a mask of lanes.
	cnt := g.GP64()
	g.MOVQ(operand.U32(4), cnt)
	g.CMPQ(n, cnt)
	g.CMOVQLT(n, cnt)
	k := g.tailMask(cnt).kmask
	z := make([]reg.VecVirtual, 4)
	for i := range z {
		z[i] = g.vec()
		for L := range 4 {
			if L == 0 {
				g.VMOVUPS_Z(keys.row(4*L+i), k, z[i])
				continue
			}
			t := g.vec()
			g.VMOVUPS_Z(keys.row(4*L+i), k, t)
			g.VINSERTF32X4(operand.U8(L), t.AsX(), z[i], z[i])
		}
	}
	lo01, hi01, lo23, hi23 := g.vec(), g.vec(), g.vec(), g.vec()
	g.VUNPCKLPS(z[1], z[0], lo01) // k0b0 k1b0 k0b1 k1b1
	g.VUNPCKHPS(z[1], z[0], hi01) // k0b2 k1b2 k0b3 k1b3
	g.VUNPCKLPS(z[3], z[2], lo23)
	g.VUNPCKHPS(z[3], z[2], hi23)
	out := []reg.VecVirtual{g.vec(), g.vec(), g.vec(), g.vec()}
	g.VUNPCKLPD(lo23, lo01, out[0]) // k0b0 k1b0 k2b0 k3b0
	g.VUNPCKHPD(lo23, lo01, out[1])
	g.VUNPCKLPD(hi23, hi01, out[2])
	g.VUNPCKHPD(hi23, hi01, out[3])
	for b, o := range out {
		if b > 0 {
			g.CMPQ(cnt, operand.Imm(uint64(b)))
			g.JLE(operand.LabelRef(name + "_stored"))
		}
		g.VMOVUPS(o, operand.Mem{Base: dst, Disp: b * T * entry})
	}
	g.Label(name + "_stored")
	for _, b := range keys.bases {
		g.ADDQ(operand.Imm(16), b)
	}
	g.ADDQ(operand.U32(uint64(4*T*entry)), dst)
	g.SUBQ(cnt, n)
	g.JNZ(operand.LabelRef(name))
}

// keyRows addresses the rows of a block's keys, ld bytes apart, without
// a register per key: key c at bases[c/4] + (c%4)·ld, with ld3 = 3·ld
// (an index scale of 3 does not exist).
type keyRows struct {
	bases   []reg.GPVirtual
	ld, ld3 reg.GPVirtual
}

// keyRows emits ld3 and the bases of n keys whose first row is at
// first (which becomes bases[0]): base i = first + 4i·ld.
func (g *gen) keyRows(first, ld reg.GPVirtual, n int) keyRows {
	kr := keyRows{bases: []reg.GPVirtual{first}, ld: ld, ld3: g.GP64()}
	g.LEAQ(operand.Mem{Base: ld, Index: ld, Scale: 2}, kr.ld3)
	for len(kr.bases) < (n+3)/4 {
		b := g.GP64()
		g.LEAQ(operand.Mem{Base: kr.bases[len(kr.bases)-1], Index: ld, Scale: 4}, b)
		kr.bases = append(kr.bases, b)
	}
	return kr
}

// aheadRows addresses the rows dist bytes (a local) past kr's: its
// bases moved, its strides shared.
func (g *gen) aheadRows(kr keyRows, dist operand.Mem) keyRows {
	d := g.GP64()
	g.MOVQ(dist, d)
	ahead := kr
	ahead.bases = nil
	for _, b := range kr.bases {
		a := g.GP64()
		g.LEAQ(operand.Mem{Base: b, Index: d, Scale: 1}, a)
		ahead.bases = append(ahead.bases, a)
	}
	return ahead
}

// row is the address of key c's row.
func (kr keyRows) row(c int) operand.Mem {
	m := operand.Mem{Base: kr.bases[c/4]}
	switch c % 4 {
	case 1, 2:
		m.Index, m.Scale = kr.ld, uint8(c%4)
	case 3:
		m.Index, m.Scale = kr.ld3, 1
	}
	return m
}

// wBlockBytes is the bytes of one scale block of Decode's scaled weights
// (int8): DecodeRows rows of T.
func wBlockBytes(T int) int { return 4 * T * decodeRows }

// decodeRows is the most rows one Decode call takes (fallback.DecodeRows).
const decodeRows = 16

// scaleWeights writes, for int8 V, each row's weights of the block times
// the V scales of each scale block (row r of block b at lc.wOff +
// b·wBlockBytes + 4·T·r bytes from s), so that PV multiplies each
// widened V vector by a broadcast of the product instead of scaling it:
// one product per row, scale block and key, where scaling the V vectors
// takes one per vector and key.
func (g *gen) scaleWeights(lc decodeLocals, sp reg.GPVirtual) {
	T := g.isa.lanes
	vs, w, nb := g.GP64(), g.GP64(), g.GP64()
	g.MOVQ(lc.vsOff, vs)
	g.ADDQ(sp, vs)
	g.MOVQ(lc.wOff, w)
	g.ADDQ(sp, w)
	g.MOVQ(lc.nbv, nb)
	g.Label("scaleblock")
	sv := g.vec()
	g.VMOVUPS(operand.Mem{Base: vs}, sv)
	r, pr, wr := g.GP64(), g.GP64(), g.GP64()
	g.MOVQ(g.arg("rows"), r)
	g.MOVQ(sp, pr)
	g.MOVQ(w, wr)
	g.Label("scalerow")
	t := g.vec()
	g.VMULPS(operand.Mem{Base: pr}, sv, t)
	g.VMOVUPS(t, operand.Mem{Base: wr})
	g.ADDQ(operand.Imm(uint64(4*T)), pr)
	g.ADDQ(operand.Imm(uint64(4*T)), wr)
	g.DECQ(r)
	g.JNZ(operand.LabelRef("scalerow"))
	g.ADDQ(operand.Imm(uint64(4*T)), vs)
	g.ADDQ(operand.U32(uint64(wBlockBytes(T))), w)
	g.DECQ(nb)
	g.JNZ(operand.LabelRef("scaleblock"))
}

// scale multiplies the widened int8 vector kv by its scale at m in the
// scale scratch: a float32 broadcast (AVX-512), or a vector of it (AVX2).
func (g *gen) scale(m operand.Mem, kv reg.VecVirtual) {
	if g.isa.avx512() {
		g.VMULPS_BCST(m, kv, kv)
		return
	}
	g.VMULPS(m, kv, kv)
}

// touchBlock touches the block's T K rows, then its T V rows, each
// tensor only if its rows are adjacent (no prefetch distance) and read
// column-wise: a one-row call (but DecodeQ8's, which walks K by chunks of
// every key) reads K key after key, and V so too when a row of it is one
// PV panel, in address order themselves (Zen 4, one row, 2^17 keys from
// memory, five alternated runs: f32 10.1–13.6 → 11.1–20.4 GB/s, f16
// 14.5–16.8 → 14.9–27.1; DecodeQ8 int8 without the V touch 19.6–21.1 →
// 24.4–26.9, and without the K touch too 22.7–23.3, three runs).
func (g *gen) touchBlock(lc decodeLocals, q8 bool) {
	for _, t := range []struct {
		ptr, ld, row, ahead operand.Mem
		name                string
	}{{lc.kp, lc.ldk, lc.krow, lc.kAhead, "touchk"}, {lc.vp, lc.ldv, lc.vrow, lc.vAhead, "touchv"}} {
		g.CMPQ(t.ahead, operand.U32(0))
		g.JNE(operand.LabelRef(label(t.name, "skip")))
		// One row reads K key after key (decodeRowKeys; but DecodeQ8's
		// decodeRowQ8 reads a chunk of every key at a time, and in memory
		// runs faster touched), and V too when it is one panel.
		if !q8 || t.name == "touchv" {
			g.CMPQ(g.arg("rows"), operand.Imm(1))
			if t.name == "touchv" {
				g.JNE(operand.LabelRef(label(t.name, "go")))
				_, vecs := g.pvTile()
				g.CMPQ(g.arg("vvec"), operand.Imm(uint64(vecs(1))))
				g.JLE(operand.LabelRef(label(t.name, "skip")))
				g.Label(label(t.name, "go"))
			} else {
				g.JEQ(operand.LabelRef(label(t.name, "skip")))
			}
		}
		p, cnt := g.GP64(), g.GP64()
		g.MOVQ(t.ptr, p)
		g.MOVQ(operand.U32(uint64(g.isa.lanes)), cnt)
		g.touchRows(p, t.ld, t.row, cnt, t.name)
		g.Label(label(t.name, "skip"))
	}
}

// prefetchRows prefetches every 64-byte line of the first n rows of
// rowBytes bytes (a local) at stride ld (a local) from the pointer in the
// local base.
func (g *gen) prefetchRows(base, ld, rowBytes operand.Mem, n int, lbl string) {
	p := g.GP64()
	g.MOVQ(base, p)
	cnt := g.GP64()
	g.MOVQ(operand.U32(uint64(n)), cnt)
	g.eachLine(p, ld, rowBytes, cnt, lbl, false, func(m operand.Mem) { g.PREFETCHT1(m) })
}

// touchRows loads one byte at every 64-byte offset of each of cnt rows of
// rowBytes bytes (a local) at stride ld (a local) from p, row after row:
// the block's lines requested in address order. A byte, so the load never
// passes the row's end; the value is dropped (the loads are independent
// and overlap). p and cnt are consumed.
func (g *gen) touchRows(p reg.GPVirtual, ld, rowBytes operand.Mem, cnt reg.GPVirtual, lbl string) {
	g.eachLine(p, ld, rowBytes, cnt, lbl, false, func(m operand.Mem) { g.MOVBLZX(m, g.GP32()) })
}

// eachLine emits visit at every 64-byte offset below rowBytes of each of
// cnt rows at stride ld from p, row after row (p and cnt are consumed),
// and with lastLine also at each row's last element, whose line those
// offsets miss when the row does not start a line (rowBytes then in a
// register: the element is at rowBytes-4 on from the row).
func (g *gen) eachLine(p reg.GPVirtual, ld, rowBytes operand.Op, cnt reg.GPVirtual, lbl string, lastLine bool, visit func(operand.Mem)) {
	g.Label(lbl)
	off := g.GP64()
	g.MOVQ(operand.U32(0), off)
	g.Label(label(lbl, "line"))
	visit(operand.Mem{Base: p, Index: off, Scale: 1})
	g.ADDQ(operand.Imm(64), off)
	g.CMPQ(off, rowBytes)
	g.JLT(operand.LabelRef(label(lbl, "line")))
	if lastLine {
		visit(operand.Mem{Base: p, Index: rowBytes.(reg.GPVirtual), Scale: 1, Disp: -4})
	}
	g.ADDQ(ld, p)
	g.DECQ(cnt)
	g.JNZ(operand.LabelRef(lbl))
}

// groupLabel names the code of a row group of R rows (0: the dispatch).
func groupLabel(what string, R int, prefetch bool) string {
	parts := []any{what}
	if R > 0 {
		parts = append(parts, "rows", R)
	}
	if prefetch {
		parts = append(parts, "prefetched")
	}
	return label(parts...)
}

// scoreGroups are the row counts Decode scores together, largest first:
// R rows take R passes over the block, each of T/R keys, with T
// accumulators (row i, key j of the pass) fed by one K vector load per key
// and R q vectors per step of d, so a K vector loaded (and widened) serves
// R rows instead of one. Groups of 2 serve the row counts 2, 3, 6, 7
// (GQA ratios 2 and 7, or 3 new positions of an MHA head); before them
// those rows went one by one. Zen 4, one thread, the kernel over 512 keys
// in L2, alternated with {4, 1}: avx512 float16 2 rows 56 → 68–71
// GFLOP/s, 3 rows 59 → 69–70, 6 rows 73 → 83, 7 rows 71–72 → 79–81;
// avx2 float16 2 rows 35–36 → 56–57, 6 rows 56 → 68. The bench's GQA
// step 1,16,8,1,8192,128 float16: avx512 1.56–1.58 → 1.13–1.15 ms, avx2
// 2.31 → 1.69–1.76; 1,28,4,1,8192,128 avx512 1.86–1.87 → 1.66.
var scoreGroups = []int{4, 2, 1}

// decodeScores emits the scores of R rows (from the row in lc.row) for
// the block, then each row's softmax step. Pass p folds the T
// accumulators so that lane c holds row c/(T/R)'s key p·T/R + c%(T/R)
// (accOf maps lanes to accumulators); the R folded vectors are then
// transposed by blocks of T/R lanes into one vector of T keys per row.
func (g *gen) decodeScores(e elem, lc decodeLocals, mk kvMask, sp reg.GPVirtual, R int, prefetch bool) {
	lb := groupLabel("scores", R, prefetch)
	T := g.isa.lanes
	kpp := T / R // keys per pass
	accOf := g.foldOrder()
	folded := make([]reg.VecVirtual, R)
	// The same T accumulators, q and K registers serve every pass (fewer
	// virtual registers for avo's greedy allocator); each pass's folded
	// vector is copied out of them.
	acc := make([]reg.VecVirtual, T)
	for i := range acc {
		acc[i] = g.vec()
	}
	qv := make([]reg.VecVirtual, R)
	for i := range qv {
		qv[i] = g.vec()
	}
	kv := g.vec()
	for pass := range R {
		for _, a := range acc {
			g.zero(a)
		}
		// K rows of the block: groups of 4 from kb[i], addressed base,
		// +ld, +2ld, +3ld.
		ld := g.GP64()
		g.MOVQ(lc.ldk, ld)
		first := pass * kpp
		k0 := g.GP64()
		g.MOVQ(lc.kp, k0)
		if first > 0 {
			t := g.GP64()
			g.IMUL3Q(operand.Imm(uint64(first)), ld, t)
			g.ADDQ(t, k0)
		}
		lp := label(lb, "pass", pass)
		if R == 1 && !prefetch { // one row over adjacent rows: key after key
			qm := g.GP64()
			g.MOVQ(lc.qrow, qm)
			g.decodeRowKeys(e, lc, mk, sp, k0, ld, qm, acc, accOf, lp)
			folded[pass] = g.vec()
			g.VMOVUPS(g.fold(acc), folded[pass])
			continue
		}
		kb := g.keyRows(k0, ld, kpp)
		var ka keyRows // with prefetch: the rows decodeAhead blocks on
		if prefetch {
			ka = g.aheadRows(kb, lc.kAhead)
		}
		// q rows: qm + i·qs; row 3 from a second base, qm3 = qm + 2·qs.
		qm := g.GP64()
		g.MOVQ(lc.qrow, qm)
		var qs, qm3 reg.GPVirtual // (one row: no register for the stride)
		if R > 1 {
			qs = g.GP64()
			g.MOVQ(lc.qstride, qs)
		}
		if R == 4 {
			qm3 = g.GP64()
			g.LEAQ(operand.Mem{Base: qm, Index: qs, Scale: 2}, qm3)
		}
		qAt := func(i int) operand.Mem {
			switch i {
			case 0:
				return operand.Mem{Base: qm}
			case 3:
				return operand.Mem{Base: qm3, Index: qs, Scale: 1}
			}
			return operand.Mem{Base: qm, Index: qs, Scale: uint8(i)}
		}
		cnt := g.GP64() // whole vectors left
		// A step is one vector of d, or of int4 a block of 32 (its
		// vectors in turn, the K rows' 16 bytes loaded once per vector).
		vecsPerStep, kBytes := 1, e.bytes()*T
		var i4c i4Consts
		if e == i4 {
			vecsPerStep, kBytes = 32/T, 16
			if g.isa.avx512() || R == 1 {
				i4c = g.i4Consts()
			} else {
				i4c = g.i4ConstsInMemory()
			}
		}
		step := func(masked bool) {
			var srow reg.GPVirtual
			for v := range vecsPerStep {
				for i := range qv {
					m := qAt(i)
					m.Disp += 4 * T * v
					g.loadKV(f32, mk, m, masked, qv[i])
				}
				// int8, int4: the scale row of this vector's block, (kfull
				// - cnt) >> scaleShift rows into the K scale scratch.
				if e.quantized() && v == 0 {
					srow = g.GP64()
					g.MOVQ(lc.kfull, srow)
					g.SUBQ(cnt, srow)
					g.SHRQ(operand.U8(g.scaleShift()), srow)
					g.SHLQ(operand.U8(g.scaleRowLog()), srow)
				}
				for j := range kpp {
					if prefetch && !masked && v == 0 {
						g.PREFETCHT1(ka.row(j))
					}
					k := kv
					if e == i4 {
						k = g.loadI4Vec(kb.row(j), v, i4c)
					} else {
						g.loadKV(e, mk, kb.row(j), masked, kv)
					}
					if e.quantized() {
						g.scale(operand.Mem{Base: sp, Index: srow, Scale: 1, Disp: 4*g.decodeLayout().total + (first+j)*g.scaleEntryBytes()}, k)
					}
					for i := range R {
						g.VFMADD231PS(k, qv[i], acc[accOf[i*kpp+j]])
					}
				}
			}
		}
		g.MOVQ(lc.kfull, cnt)
		g.TESTQ(cnt, cnt)
		g.JZ(operand.LabelRef(label(lp, "last_dims")))
		g.Label(label(lp, "dims"))
		step(false)
		g.ADDQ(operand.Imm(uint64(4*T*vecsPerStep)), qm)
		if qm3 != nil {
			g.ADDQ(operand.Imm(uint64(4*T*vecsPerStep)), qm3)
		}
		for _, b := range append(kb.bases, ka.bases...) {
			g.ADDQ(operand.Imm(uint64(kBytes)), b)
		}
		if vecsPerStep == 1 {
			g.DECQ(cnt)
		} else {
			g.SUBQ(operand.Imm(uint64(vecsPerStep)), cnt)
		}
		g.JNZ(operand.LabelRef(label(lp, "dims")))
		g.Label(label(lp, "last_dims"))
		if e != i4 { // int4's q rows come in whole blocks: no tail
			g.CMPQ(g.arg("ktail"), operand.Imm(uint64(T)))
			g.JEQ(operand.LabelRef(label(lp, "fold")))
			step(true)
		}
		g.Label(label(lp, "fold"))
		folded[pass] = g.vec()
		g.VMOVUPS(g.fold(acc), folded[pass])
	}
	g.decodeSoftmaxRows(lc, sp, g.transposeBlocks(folded), lb)
}

// decodeRowKeys is the score loop of one row (R = 1) in address order:
// key after key, each key's row read whole (its vectors in order, each
// times q's, q read from memory) into its accumulator, so that K streams
// in address order as a plain dot product per key would read it and the
// block needs no touch (the column-wise walk of several rows needs one:
// a strict core's prefetchers do not follow 16 streams a row apart).
// Adjacent rows only: over strided rows (BSHD) the column-wise walk with
// its prefetches ran faster (f32 14–16 GB/s against 11–12.6, Zen 4).
// int8 sums a whole scale block's products unscaled and scales the sum
// once (the MHA step 1,32,32,1,4096,128 BHSD, int8: 3.1–3.8 → 2.5–2.9 ms,
// int4 3.9–4.1 → 3.4–4.5, three alternated pairs, Zen 4, one thread).
func (g *gen) decodeRowKeys(e elem, lc decodeLocals, mk kvMask, sp reg.GPVirtual, k0, ld, qm reg.GPVirtual, acc []reg.VecVirtual, accOf []int, lp string) {
	T := g.isa.lanes
	kv, qv := g.vec(), g.vec()
	var i4c i4Consts
	if e == i4 {
		i4c = g.i4Consts()
	}
	kj := k0 // key j's row
	for j := range T {
		lk := label(lp, "key", j)
		pk, q, cnt := g.GP64(), g.GP64(), g.GP64()
		g.MOVQ(kj, pk)
		if j < T-1 {
			g.ADDQ(ld, kj)
		}
		g.MOVQ(qm, q)
		// int8, int4: the scale of key j's vector, in scale block (step >>
		// scaleShift).
		var srow reg.GPVirtual
		if e.quantized() {
			srow = g.GP64()
			g.MOVQ(operand.U32(0), srow)
		}
		scaleAt := func() operand.Mem {
			t := g.GP64()
			g.MOVQ(srow, t)
			g.SHRQ(operand.U8(g.scaleShift()), t)
			g.SHLQ(operand.U8(g.scaleRowLog()), t)
			return operand.Mem{Base: sp, Index: t, Scale: 1, Disp: 4*g.decodeLayout().total + j*g.scaleEntryBytes()}
		}
		g.MOVQ(lc.kfull, cnt)
		if e.quantized() {
			// Whole scale blocks first: their V vectors' products summed
			// unscaled, then times the block's scale into the key's
			// accumulator (one multiply and one scale address per block
			// instead of per vector). int4 has whole blocks only (its q
			// rows are padded to them), each block's 16 bytes made into
			// its vectors by i4Vectors.
			V, kBytes := 1<<g.scaleShift(), 32
			if e == i4 {
				kBytes = 16
			}
			lb := label(lk, "blocks")
			g.CMPQ(cnt, operand.Imm(uint64(V)))
			g.JL(operand.LabelRef(label(lb, "done")))
			g.Label(lb)
			var i4At func(int) reg.VecVirtual
			if e == i4 {
				i4At = g.i4Vectors(pk, V, i4c)
			}
			t := g.vec()
			for v := range V {
				k := kv
				if i4At != nil {
					k = i4At(v)
				} else {
					g.loadKV(e, mk, operand.Mem{Base: pk, Disp: v * T}, false, kv)
				}
				if v == 0 {
					g.VMULPS(operand.Mem{Base: q}, k, t)
				} else {
					g.VFMADD231PS(operand.Mem{Base: q, Disp: 4 * v * T}, k, t)
				}
			}
			if g.isa.avx512() {
				g.VFMADD231PS_BCST(scaleAt(), t, acc[accOf[j]])
			} else {
				g.VFMADD231PS(scaleAt(), t, acc[accOf[j]])
			}
			g.ADDQ(operand.Imm(uint64(V)), srow)
			g.ADDQ(operand.Imm(uint64(kBytes)), pk)
			g.ADDQ(operand.Imm(uint64(4*V*T)), q)
			g.SUBQ(operand.Imm(uint64(V)), cnt)
			g.CMPQ(cnt, operand.Imm(uint64(V)))
			g.JGE(operand.LabelRef(lb))
			g.Label(label(lb, "done"))
			if e == i4 {
				continue
			}
		}
		g.TESTQ(cnt, cnt)
		g.JZ(operand.LabelRef(label(lk, "last")))
		g.Label(lk)
		g.loadKV(e, mk, operand.Mem{Base: pk}, false, kv)
		if e.quantized() {
			g.scale(scaleAt(), kv)
			g.INCQ(srow)
		}
		g.VFMADD231PS(operand.Mem{Base: q}, kv, acc[accOf[j]])
		g.ADDQ(operand.Imm(uint64(e.bytes()*T)), pk)
		g.ADDQ(operand.Imm(uint64(4*T)), q)
		g.DECQ(cnt)
		g.JNZ(operand.LabelRef(lk))
		g.Label(label(lk, "last"))
		g.CMPQ(g.arg("ktail"), operand.Imm(uint64(T)))
		g.JEQ(operand.LabelRef(label(lk, "done")))
		g.loadKV(f32, mk, operand.Mem{Base: q}, true, qv)
		g.loadKV(e, mk, operand.Mem{Base: pk}, true, kv)
		if e.quantized() {
			g.scale(scaleAt(), kv)
		}
		g.VFMADD231PS(qv, kv, acc[accOf[j]])
		g.Label(label(lk, "done"))
	}
}

// transposeBlocks turns R vectors of R blocks of T/R lanes (vector p,
// block i: row i's keys of pass p) into R vectors of one row each (vector
// i: block i of every pass, in pass order), by the shuffles of the fold's
// first levels; the order is checked by simulating them.
func (g *gen) transposeBlocks(vs []reg.VecVirtual) []reg.VecVirtual {
	R, T := len(vs), g.isa.lanes
	if R == 1 {
		return vs
	}
	var steps []shuffle
	switch {
	case g.isa.avx512() && R == 2: // blocks of 8 lanes
		steps = []shuffle{{"shuff32x4", 0x44, 0xee}}
	case g.isa.avx512(): // R == 4, blocks of 4 lanes
		steps = []shuffle{{"shuff32x4", 0x44, 0xee}, {"shuff32x4", 0x88, 0xdd}}
	case R == 2: // AVX2, blocks of 4 lanes
		steps = []shuffle{{"perm2f128", 0x20, 0x31}}
	default: // AVX2, R == 4, blocks of 2 lanes
		steps = []shuffle{{"shufps", 0x44, 0xee}, {"perm2f128", 0x20, 0x31}}
	}
	// Simulate on labels (row·T + key) and check each result is one row's
	// keys in order. Each level pairs vector 2i with 2i+1 into lo (slot
	// i) and hi (slot i + len/2): after log2 R levels slot order is the
	// row order checked below.
	lab := make([][]int, R)
	for p := range lab {
		lab[p] = make([]int, T)
		for c := range lab[p] {
			lab[p][c] = (c/(T/R))*T + p*(T/R) + c%(T/R)
		}
	}
	cur := vs
	for _, st := range steps {
		n := len(cur)
		nextLab, next := make([][]int, n), make([]reg.VecVirtual, n)
		for i := 0; i < n/2; i++ {
			a, b := cur[2*i], cur[2*i+1]
			la, lb := lab[2*i], lab[2*i+1]
			nextLab[i] = shuffleLanes(st.op, st.lo, la, lb)
			nextLab[i+n/2] = shuffleLanes(st.op, st.hi, la, lb)
			lo, hi := g.vec(), g.vec()
			g.shuffle(st.op, st.lo, a, b, lo)
			g.shuffle(st.op, st.hi, a, b, hi)
			next[i], next[i+n/2] = lo, hi
		}
		cur, lab = next, nextLab
	}
	// Slot order after the levels: find each row's vector.
	rows := make([]reg.VecVirtual, R)
	for s, l := range lab {
		row := l[0] / T
		for c, x := range l {
			if x != row*T+c {
				panic(fmt.Sprintf("transposeBlocks: R=%d slot %d lane %d holds %d", R, s, c, x))
			}
		}
		rows[row] = cur[s]
	}
	return rows
}

// decodeSoftmaxRows emits the online-softmax steps of the rows from
// lc.row, row i's scores in svs[i]: a group of softmaxGroup rows together
// (decodeSoftmaxGroup), any other count row by row (decodeSoftmax).
func (g *gen) decodeSoftmaxRows(lc decodeLocals, sp reg.GPVirtual, svs []reg.VecVirtual, lb string) {
	if len(svs) == softmaxGroup {
		g.decodeSoftmaxGroup(lc, sp, svs, lb)
		return
	}
	for i, sv := range svs {
		g.decodeSoftmax(lc, sp, sv, i, label(lb, "row", i))
	}
}

// decodeSoftmax emits row lc.row+i's online-softmax step on its scores
// sv (key c in lane c): ALiBi, the mask of skipped lanes, then m, l, the
// weights and alpha in the scratch.
func (g *gen) decodeSoftmax(lc decodeLocals, sp reg.GPVirtual, sv reg.VecVirtual, i int, lb string) {
	sl := g.decodeLayout()
	g.decodeScoreTerms(lc, sp, sv, i, lb)

	// The online-softmax step of the row.
	r := g.GP64()
	g.MOVQ(lc.row, r)
	if i > 0 {
		g.ADDQ(operand.Imm(uint64(i)), r)
	}
	mp, lp := g.param("m"), g.param("l")
	mAt := operand.Mem{Base: mp, Index: r, Scale: 4}
	lAt := operand.Mem{Base: lp, Index: r, Scale: 4}
	mx := g.vec()
	g.VMOVUPS(sv, mx)
	g.butterfly(mx, g.VMAXPS)
	mo, mn, base := g.vec(), g.vec(), g.vec()
	g.VBROADCASTSS(mAt, mo)
	g.VMAXPS(mx, mo, mn)
	g.VMAXPS(g.cst("negMax"), mn, base)
	g.VSUBPS(base, sv, sv)
	p := g.weightExps([]reg.VecVirtual{sv})[0]
	pr := g.GP64()
	g.MOVQ(r, pr)
	g.SHLQ(operand.U8(g.lanesLog()+2), pr)
	g.VMOVUPS(p, operand.Mem{Base: sp, Index: pr, Scale: 1})
	g.butterfly(p, g.VADDPS)
	g.VSUBPS(base, mo, mo)
	alpha := g.weightExps([]reg.VecVirtual{mo})[0]
	lv := g.vec()
	g.VBROADCASTSS(lAt, lv)
	g.VFMADD213PS(p, alpha, lv) // l·alpha + Σp
	g.VMOVSS(lv.AsX(), lAt)
	g.VMOVSS(mn.AsX(), mAt)
	g.VMOVSS(alpha.AsX(), operand.Mem{Base: sp, Index: r, Scale: 4, Disp: 4 * sl.alpha})
}

// decodeScoreTerms adds row lc.row+i's ALiBi terms to its scores sv and
// sets the lanes of skipped keys to -Inf.
func (g *gen) decodeScoreTerms(lc decodeLocals, sp reg.GPVirtual, sv reg.VecVirtual, i int, lb string) {
	x := g.isa
	sl := g.decodeLayout()
	// ALiBi: sc += slope·(dist + c) for key c of the call, the block's
	// first key being nk - rem (the moved-back block included); the
	// distances are integers, exact in float32, and the product is
	// rounded once, as in fallback.ScoreBias.
	ap := g.param("alibi")
	g.TESTQ(ap, ap)
	g.JZ(operand.LabelRef(label(lb, "noalibi")))
	{
		r := g.GP64()
		g.MOVQ(lc.row, r)
		if i > 0 {
			g.ADDQ(operand.Imm(uint64(i)), r)
		}
		kpos := g.GP64()
		g.MOVQ(g.arg("nk"), kpos)
		g.SUBQ(lc.rem, kpos)
		d := g.vec()
		g.zero(d) // defined first: VCVTSI2SSQ's merge would read it
		g.VCVTSI2SSQ(kpos, d.AsX(), d.AsX())
		rows := g.GP64()
		g.MOVQ(g.arg("rows"), rows)
		g.LEAQ(operand.Mem{Base: ap, Index: rows, Scale: 4}, rows) // the distances
		g.VADDSS(operand.Mem{Base: rows, Index: r, Scale: 4}, d.AsX(), d.AsX())
		g.VBROADCASTSS(d.AsX(), d)
		g.VADDPS(g.iota(), d, d)
		sl := g.vec()
		g.VBROADCASTSS(operand.Mem{Base: ap, Index: r, Scale: 4}, sl)
		g.VMULPS(sl, d, d)
		g.VADDPS(d, sv, sv)
	}
	g.Label(label(lb, "noalibi"))

	// Lanes of keys before the block's start (a moved-back last block)
	// are -Inf: a blend, so a NaN there cannot leak.
	ninf := g.vec()
	g.VMOVUPS(g.cst("negInf"), ninf)
	if x.avx512() {
		g.blend(laneMask{k: lc.kSkip}, ninf, sv, sv)
	} else {
		m := g.vec()
		g.VMOVUPS(operand.Mem{Base: sp, Disp: 4 * sl.skips}, m)
		g.blend(laneMask{v: m}, ninf, sv, sv)
	}
}

// softmaxGroup is the rows whose online-softmax steps
// decodeSoftmaxGroup takes together.
const softmaxGroup = 4

// decodeSoftmaxGroup emits decodeSoftmax for the softmaxGroup rows from
// lc.row at once, with the same bits: the four rows' maxima and
// sums are one shuffle tree (groupReduce: the butterfly's pairings, so
// the same sums) instead of a butterfly each; their m, alpha and l are
// computed in lanes 0..3 of one vector (one exp for the four alphas);
// and the weights' four exps run side by side: about 125 instructions
// where four rows one by one took about 240. The kernel alone (Zen 4, 512
// keys in L2, rows 4 and 16): float32 82–88 → 86–94 GFLOP/s, float16
// 79–85 → 81–90, bfloat16 66–83 → 85–90; the GQA step 1,32,8,1,8192,128
// float16 71.8–72.9 → 75.8–76.3, bfloat16 71.3–72.6 → 76.1–76.7,
// 8,32,8,1,2048,128 float16 67.7–70.9 → 74.1–74.9 (one thread, three
// alternated bench rounds); AVX2 (the exps two and two), the kernel at
// 8 and 16 rows: float32 65–66 → 68–70, float16 71–74 → 74–78, int8
// 58–59 → 60–62, the int8 mode 65–71 → 76. NaN scores keep their rows NaN, but their
// payloads may differ from the rows one by one (VMAXPS returns its second
// operand where either is NaN).
func (g *gen) decodeSoftmaxGroup(lc decodeLocals, sp reg.GPVirtual, svs []reg.VecVirtual, lb string) {
	sl := g.decodeLayout()
	for i, sv := range svs {
		g.decodeScoreTerms(lc, sp, sv, i, label(lb, "row", i))
	}
	r := g.GP64()
	g.MOVQ(lc.row, r)
	mp, lp := g.param("m"), g.param("l")
	mAt := operand.Mem{Base: mp, Index: r, Scale: 4}
	lAt := operand.Mem{Base: lp, Index: r, Scale: 4}
	// The rows' maxima in lanes 0..3 (row i in lane i); the old ones, the
	// new ones and the bases beside them, in xmm registers of their own
	// (an xmm write into a wider virtual register is a partial definition
	// to avo, which would keep that register live around the block loop).
	mx := g.groupReduce(svs, g.VMAXPS)
	mo, mn, base := g.XMM(), g.XMM(), g.XMM()
	g.VMOVUPS(mAt, mo)
	g.VMAXPS(mx.AsX(), mo, mn)
	g.VMAXPS(g.cst("negMax"), mn, base)
	g.VMOVUPS(mn, mAt)
	d := g.vec() // the alphas' exponents, mo - base, in lanes 0..3
	g.zero(d)
	g.VSUBPS(base, mo, d.AsX())
	// Each row's weights: its scores less its base, broadcast from lane i.
	for i, sv := range svs {
		b := g.vec()
		if i == 0 {
			g.VBROADCASTSS(base, b)
		} else {
			t := g.XMM()
			g.VPERMILPS(operand.U8(uint8(i*0x55)), base, t)
			g.VBROADCASTSS(t, b)
		}
		g.VSUBPS(b, sv, sv)
	}
	// The exps side by side: all four on AVX-512, two and two on AVX2
	// (whose 16 registers hold two exps' temporaries beside the rest).
	side := softmaxGroup
	if !g.isa.avx512() {
		side = 2
	}
	var ps []reg.VecVirtual
	for i := 0; i < softmaxGroup; i += side {
		ps = append(ps, g.weightExps(svs[i:i+side])...)
	}
	pr := g.GP64()
	g.MOVQ(r, pr)
	g.SHLQ(operand.U8(g.lanesLog()+2), pr)
	for i, p := range ps {
		g.VMOVUPS(p, operand.Mem{Base: sp, Index: pr, Scale: 1, Disp: i * g.isa.bytes()})
	}
	alpha := g.weightExps([]reg.VecVirtual{d})[0]
	sum := g.groupReduce(ps, g.VADDPS)
	lv := g.XMM()
	g.VMOVUPS(lAt, lv)
	g.VFMADD213PS(sum.AsX(), alpha.AsX(), lv) // l·alpha + Σp
	g.VMOVUPS(lv, lAt)
	g.VMOVUPS(alpha.AsX(), operand.Mem{Base: sp, Index: r, Scale: 4, Disp: 4 * sl.alpha})
}

// groupReduce combines the lanes of each of four vectors with op
// (VMAXPS, VADDPS) and returns vector i's result in lane i (lanes 4 and
// up unspecified): the butterfly's steps (halves, quarters on AVX-512,
// then pairs and neighbours within a 128-bit block) with the same
// operands paired, so each result has the bits of butterfly's, done for
// four vectors at once: the halves (and quarters) of two vectors a
// shuffle pair. The vectors are kept.
func (g *gen) groupReduce(vs []reg.VecVirtual, op func(ops ...operand.Op)) reg.VecVirtual {
	if len(vs) != softmaxGroup {
		panic("groupReduce: four vectors")
	}
	within := func(v reg.VecVirtual) {
		t := g.vec()
		g.VPERMILPS(operand.U8(0x4e), v, t)
		op(t, v, v)
		g.VPERMILPS(operand.U8(0xb1), v, t)
		op(t, v, v)
	}
	if g.isa.avx512() {
		pair := func(a, b reg.VecVirtual, lo, hi uint8) reg.VecVirtual {
			l, h := g.vec(), g.vec()
			g.VSHUFF32X4(operand.U8(lo), b, a, l)
			g.VSHUFF32X4(operand.U8(hi), b, a, h)
			op(h, l, l)
			return l
		}
		// Halves: blocks 0,1 hold a's block j ∘ block j+2, blocks 2,3 b's.
		ab := pair(vs[0], vs[1], 0x44, 0xee)
		cd := pair(vs[2], vs[3], 0x44, 0xee)
		// Quarters: block i holds vector i's (b0∘b2)∘(b1∘b3); then pairs
		// and neighbours within the block.
		v := pair(ab, cd, 0x88, 0xdd)
		within(v)
		// Each block's first lane into lanes 0..3.
		idx := g.vec()
		g.VMOVUPS(g.firsts, idx)
		g.VPERMPS(v, idx, v)
		return v
	}
	// AVX2: halves, so that block 0 holds a's (c's) lanes and block 1
	// b's (d's); then pairs and neighbours within blocks.
	pair := func(a, b reg.VecVirtual) reg.VecVirtual {
		l, h := g.vec(), g.vec()
		g.VPERM2F128(operand.U8(0x20), b, a, l)
		g.VPERM2F128(operand.U8(0x31), b, a, h)
		op(h, l, l)
		within(l)
		return l
	}
	ab, cd := pair(vs[0], vs[1]), pair(vs[2], vs[3])
	// Interleaved by blocks, [a c a c | b d b d], then the two halves'
	// first lanes interleaved, [a b c d].
	u, hi, r := g.vec(), g.XMM(), g.XMM()
	g.VUNPCKLPS(cd, ab, u)
	g.VEXTRACTF128(operand.U8(1), u, hi)
	g.VUNPCKLPS(hi, u.AsX(), r)
	return r
}

// shuffle is one level of the fold: two shuffles of a pair of vectors
// (lo, hi immediates) whose sum halves the vectors to fold.
type shuffle struct {
	op     string // "shuff32x4", "perm2f128" or "shufps"
	lo, hi uint8
}

// foldLevels fold lanes vectors into one: AVX-512 halves then quarters
// across 128-bit blocks (VSHUFF32X4), AVX2 halves (VPERM2F128), then both
// pairs and neighbours within blocks (VSHUFPS).
func (g *gen) foldLevels() []shuffle {
	in := []shuffle{{"shufps", 0x44, 0xee}, {"shufps", 0x88, 0xdd}}
	if g.isa.avx512() {
		return append([]shuffle{{"shuff32x4", 0x44, 0xee}, {"shuff32x4", 0x88, 0xdd}}, in...)
	}
	return append([]shuffle{{"perm2f128", 0x20, 0x31}}, in...)
}

// shuffle emits the shuffle op (a shuffle's op) with immediate imm of a
// (src1) and b (src2) into dst.
func (g *gen) shuffle(op string, imm uint8, a, b, dst reg.VecVirtual) {
	switch op {
	case "shuff32x4":
		g.VSHUFF32X4(operand.U8(imm), b, a, dst)
	case "perm2f128":
		g.VPERM2F128(operand.U8(imm), b, a, dst)
	case "shufps":
		g.VSHUFPS(operand.U8(imm), b, a, dst)
	default:
		panic("shuffle: no op " + op)
	}
}

// shuffleLanes is the lanes of a shuffle of a (src1) and b (src2), for
// simulating the fold.
func shuffleLanes(op string, imm uint8, a, b []int) []int {
	n := len(a)
	out := make([]int, n)
	sel := func(i int) int { return int(imm>>(2*i)) & 3 }
	switch op {
	case "shuff32x4": // 4 blocks of 4: two from a, two from b
		for blk := 0; blk < 4; blk++ {
			src := a
			if blk >= 2 {
				src = b
			}
			copy(out[4*blk:4*blk+4], src[4*sel(blk):4*sel(blk)+4])
		}
	case "perm2f128": // 2 halves of 4, each any half of a or b
		halves := [][]int{a[:4], a[4:], b[:4], b[4:]}
		copy(out[:4], halves[imm&3])
		copy(out[4:], halves[(imm>>4)&3])
	case "shufps": // in each 128-bit block: two lanes of a, two of b
		for blk := 0; blk < n; blk += 4 {
			for i := 0; i < 4; i++ {
				src := a
				if i >= 2 {
					src = b
				}
				out[blk+i] = src[blk+sel(i)]
			}
		}
	}
	return out
}

// foldOrder simulates the fold on labels and returns, for each key c, the
// accumulator whose sum ends in lane c.
func (g *gen) foldOrder() []int {
	n := g.isa.lanes
	vs := make([][]int, n)
	for i := range vs {
		vs[i] = make([]int, n)
		for l := range vs[i] {
			vs[i][l] = i
		}
	}
	for _, lv := range g.foldLevels() {
		next := make([][]int, len(vs)/2)
		for i := range next {
			a, b := vs[2*i], vs[2*i+1]
			x, y := shuffleLanes(lv.op, lv.lo, a, b), shuffleLanes(lv.op, lv.hi, a, b)
			for l := range x {
				if x[l] != y[l] {
					panic("fold: a lane adds two accumulators")
				}
			}
			next[i] = x
		}
		vs = next
	}
	return vs[0]
}

// fold adds each of the lanes vectors across its lanes, leaving the sum
// of vs[i] in lane foldOrder⁻¹(i) of the returned vector.
func (g *gen) fold(vs []reg.VecVirtual) reg.VecVirtual {
	for _, lv := range g.foldLevels() {
		next := make([]reg.VecVirtual, len(vs)/2)
		for i := range next {
			a, b := vs[2*i], vs[2*i+1]
			hi := g.vec()
			g.shuffle(lv.op, lv.hi, a, b, hi)
			g.shuffle(lv.op, lv.lo, a, b, a)
			g.VADDPS(hi, a, a)
			next[i] = a
		}
		vs = next
	}
	return vs[0]
}

// butterfly combines all lanes of v with op (VADDPS, VMAXPS), leaving the
// result in every lane: swap halves, (quarters,) pairs and neighbours.
func (g *gen) butterfly(v reg.VecVirtual, op func(ops ...operand.Op)) {
	t := g.vec()
	if g.isa.avx512() {
		g.VSHUFF32X4(operand.U8(0x4e), v, v, t)
		op(t, v, v)
		g.VSHUFF32X4(operand.U8(0xb1), v, v, t)
		op(t, v, v)
	} else {
		g.VPERM2F128(operand.U8(0x01), v, v, t)
		op(t, v, v)
	}
	g.VPERMILPS(operand.U8(0x4e), v, t)
	op(t, v, v)
	g.VPERMILPS(operand.U8(0xb1), v, t)
	op(t, v, v)
}

// decodePV emits the PV update of the block: for each group of rows and
// each panel of vectors of dv (pvTile), O = alpha·O + Σ_c p[c]·V[c], over
// the keys from skip to T.
func (g *gen) decodePV(e elem, lc decodeLocals, mk kvMask, sp reg.GPVirtual, oneRow bool) {
	RP, vecs := g.pvTile()
	if oneRow {
		RP = 1
	}
	T := g.isa.lanes
	for nr := 1; nr <= RP; nr++ {
		// Panels start at multiples of vecs: decodePVTile finds an int8
		// panel's first scale block from its first vector, which needs
		// every panel to start on a scale block.
		if vecs(nr)*T%32 != 0 {
			panic(fmt.Sprintf("decodePV: %d-row panels of %d vectors do not start on int8 scale blocks", nr, vecs(nr)))
		}
	}
	g.MOVQ(operand.U32(0), lc.g0)
	g.Comment(fmt.Sprintf("PV in groups of up to %d rows, each over panels of vectors of dv.", RP))
	g.Label("group")
	rr := g.GP64()
	g.MOVQ(g.arg("rows"), rr)
	g.SUBQ(lc.g0, rr)
	g.CMPQ(rr, operand.Imm(uint64(RP)))
	g.JLE(operand.LabelRef("grouprows"))
	g.MOVQ(operand.U32(uint64(RP)), rr)
	g.Label("grouprows")
	g.MOVQ(rr, lc.rr)
	g.MOVQ(operand.U32(0), lc.vec)
	g.Label("panel")
	left := g.GP64()
	g.MOVQ(g.arg("vvec"), left)
	g.SUBQ(lc.vec, left)
	for nr := RP; nr >= 1; nr-- {
		g.CMPQ(lc.rr, operand.Imm(uint64(nr)))
		g.JEQ(operand.LabelRef(label("rows", nr)))
	}
	for nr := RP; nr >= 1; nr-- {
		NV := vecs(nr)
		g.Label(label("rows", nr))
		g.CMPQ(left, operand.Imm(uint64(NV)))
		g.JGT(operand.LabelRef(label("rows", nr, "vecs", NV, "whole")))
		for nv := NV; nv >= 1; nv-- {
			next := label("rows", nr, "not", nv)
			g.CMPQ(left, operand.Imm(uint64(nv)))
			g.JNE(operand.LabelRef(next))
			g.CMPQ(g.arg("vtail"), operand.Imm(uint64(T)))
			g.JEQ(operand.LabelRef(label("rows", nr, "vecs", nv, "whole")))
			g.JMP(operand.LabelRef(label("rows", nr, "vecs", nv, "masked")))
			g.Label(next)
		}
		g.JMP(operand.LabelRef("panelnext")) // not reached: left >= 1
	}
	for nr := RP; nr >= 1; nr-- {
		for nv := vecs(nr); nv >= 1; nv-- {
			for _, masked := range []bool{false, true} {
				g.Label(label("rows", nr, "vecs", nv, maskWord(masked)))
				g.decodePVTile(e, lc, mk, sp, nr, nv, masked)
				g.ADDQ(operand.Imm(uint64(nv)), lc.vec)
				g.JMP(operand.LabelRef("panelnext"))
			}
		}
	}
	g.Label("panelnext")
	v := g.GP64()
	g.MOVQ(lc.vec, v)
	g.CMPQ(v, g.arg("vvec"))
	g.JLT(operand.LabelRef("panel"))
	g0 := g.GP64()
	g.MOVQ(lc.g0, g0)
	g.ADDQ(lc.rr, g0)
	g.MOVQ(g0, lc.g0)
	g.CMPQ(g0, g.arg("rows"))
	g.JLT(operand.LabelRef("group"))
}

// decodePVTile emits one nr × nv tile of PV: the accumulators start as
// alpha·O, take the weights of keys skip..T-1 of the nr rows (broadcast)
// times nv vectors of each V row, and are stored back.
func (g *gen) decodePVTile(e elem, lc decodeLocals, mk kvMask, sp reg.GPVirtual, nr, nv int, masked bool) {
	T := g.isa.lanes
	vecBytes := T * e.bytes() // of a V vector in memory
	if e == i4 {
		vecBytes = T / 2
	}
	b := g.isa.bytes()
	sl := g.decodeLayout()
	// O rows: o + g0·ldo + vec·lanes·4.
	ob, ldo, t := g.GP64(), g.GP64(), g.GP64()
	g.Load(g.Param("o"), ob)
	g.MOVQ(lc.ldo, ldo)
	g.MOVQ(lc.g0, t)
	g.IMULQ(ldo, t)
	g.ADDQ(t, ob)
	g.MOVQ(lc.vec, t)
	g.SHLQ(operand.U8(g.lanesLog()+2), t)
	g.ADDQ(t, ob)
	g0 := g.GP64()
	g.MOVQ(lc.g0, g0)
	oAt := func(i, j int) operand.Mem {
		m := operand.Mem{Base: ob, Disp: j * b}
		if i > 0 { // rows 1 and 2: ob + i·ldo (row 3 below)
			m.Index, m.Scale = ldo, uint8(i)
		}
		return m
	}
	if nr == 4 {
		// Row 3 is ob + 3·ldo: keep 2·ldo + ldo as a separate base.
		ob3 := g.GP64()
		g.LEAQ(operand.Mem{Base: ob, Index: ldo, Scale: 2}, ob3)
		prev := oAt
		oAt = func(i, j int) operand.Mem {
			if i == 3 {
				return operand.Mem{Base: ob3, Index: ldo, Scale: 1, Disp: j * b}
			}
			return prev(i, j)
		}
	}
	acc := make([][]reg.VecVirtual, nr)
	for i := range acc {
		al := g.vec()
		g.VBROADCASTSS(operand.Mem{Base: sp, Index: g0, Scale: 4, Disp: 4 * (sl.alpha + i)}, al)
		acc[i] = make([]reg.VecVirtual, nv)
		for j := range acc[i] {
			acc[i][j] = g.vec()
			g.loadVec(mk.tailRegs, oAt(i, j), j, nv, masked, acc[i][j])
			g.VMULPS(al, acc[i][j], acc[i][j])
		}
	}
	// V rows from key skip, vector vec; weights p[g0+i][skip..].
	vb, ldv, pb, cnt := g.GP64(), g.GP64(), g.GP64(), g.GP64()
	g.MOVQ(lc.ldv, ldv)
	g.MOVQ(lc.skip, cnt)
	g.MOVQ(lc.vp, vb)
	g.MOVQ(cnt, t)
	g.IMULQ(ldv, t)
	g.ADDQ(t, vb)
	g.MOVQ(lc.vec, t)
	g.SHLQ(operand.U8(bits.TrailingZeros(uint(vecBytes))), t)
	g.ADDQ(t, vb)
	g.MOVQ(g0, pb)
	g.SHLQ(operand.U8(g.lanesLog()), pb)
	g.ADDQ(cnt, pb)
	g.LEAQ(operand.Mem{Base: sp, Index: pb, Scale: 4}, pb)
	// int8: the scaled weights of row g0, key skip, in the scale block of
	// vector vec (vec·T is a multiple of 32: panels start on scale blocks),
	// row i of scale block jb of the panel at wBlock·jb + 4·T·i.
	nbp := 1
	if e.quantized() {
		nbp = (nv*T + 31) / 32
		t2 := g.GP64()
		g.MOVQ(lc.vec, t2)
		g.SHRQ(operand.U8(g.scaleShift()), t2)
		g.IMUL3Q(operand.U32(uint64(wBlockBytes(T))), t2, t2)
		g.ADDQ(lc.wOff, t2)
		g.ADDQ(t2, pb)
	}
	g.NEGQ(cnt)
	g.ADDQ(operand.Imm(uint64(T)), cnt) // keys skip..T-1
	// The V rows decodeAhead blocks on, to prefetch (strided V; adjacent:
	// va = vb, and nothing is prefetched).
	va := g.GP64()
	g.MOVQ(lc.vAhead, va)
	g.ADDQ(vb, va)
	l := label("rows", nr, "vecs", nv, maskWord(masked), "keys")
	var i4c i4Consts
	if e == i4 {
		i4c = g.i4Consts()
	}
	g.Label(l)
	// bc[i][jb]: row i's weight of this key, times its V scale of the
	// panel's scale block jb if int8: broadcast into a register (AVX2),
	// or (AVX-512) read by each FMA as an embedded broadcast, which takes
	// no vector op.
	weight := func(i, jb int) operand.Mem { return operand.Mem{Base: pb, Disp: 4*T*i + jb*wBlockBytes(T)} }
	bc := make([][]reg.VecVirtual, nr)
	if !g.isa.avx512() {
		for i := range bc {
			bc[i] = make([]reg.VecVirtual, nbp)
			for jb := range bc[i] {
				bc[i][jb] = g.vec()
				g.VBROADCASTSS(weight(i, jb), bc[i][jb])
			}
		}
	}
	// Strided V only (va != vb): the row's lines decodeAhead blocks on.
	g.CMPQ(va, vb)
	g.JEQ(operand.LabelRef(label(l, "fetched")))
	for j := 0; j < nv; j++ {
		if e != i4 || j*vecBytes%64 == 0 {
			g.PREFETCHT1(operand.Mem{Base: va, Disp: j * vecBytes})
		}
	}
	g.Label(label(l, "fetched"))
	var i4At func(int) reg.VecVirtual
	if e == i4 {
		i4At = g.i4Vectors(vb, nv, i4c)
	}
	for j := 0; j < nv; j++ {
		var vv reg.VecVirtual
		if i4At != nil {
			vv = i4At(j)
		} else {
			vv = g.vec()
			g.loadKV(e, mk, operand.Mem{Base: vb, Disp: j * vecBytes}, masked && j == nv-1, vv)
		}
		for i := 0; i < nr; i++ {
			// Vector j is in the panel's scale block j·T/32 (int8; the
			// other types have the one weight, nbp = 1).
			if jb := min(j*T/32, nbp-1); g.isa.avx512() {
				g.VFMADD231PS_BCST(weight(i, jb), vv, acc[i][j])
			} else {
				g.VFMADD231PS(vv, bc[i][jb], acc[i][j])
			}
		}
	}
	g.ADDQ(ldv, vb)
	g.ADDQ(ldv, va)
	g.ADDQ(operand.Imm(4), pb)
	g.DECQ(cnt)
	g.JNZ(operand.LabelRef(l))
	for i := range acc {
		for j := range acc[i] {
			g.storeVec(mk.tailRegs, acc[i][j], oAt(i, j), j, nv, masked)
		}
	}
}
