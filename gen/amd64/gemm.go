// Gemm<ISA>, the kernel of QK and of the projections. Register tile: mk
// = 6 rows of A (one broadcast each) × nv vectors of a B row: AVX-512 6×4
// (24 accumulators + 4 B vectors + 1 broadcast of 32 zmm), AVX2 6×2
// (12 + 2 + 1 of 16 ymm, the tail mask in memory).

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// gemmRegs are the registers a GEMM panel keeps across row groups.
type gemmRegs struct {
	cp, ldc  reg.GPVirtual // C row of the current row group; C row stride in bytes
	ap       reg.GPVirtual // A row of the current row group
	a        rowStride     // A's rows, read in place at stride lda
	ldb      reg.GPVirtual // B row stride in bytes
	acc      reg.GPVirtual // nonzero: add to C (f32 only; GemmW tests its argument)
	tailRegs               // the last vector's mask
	e        elem          // B's storage type: f32 (Gemm), f16, bf16 (GemmW), i8 (GemvWI8's parameters)
	pairs    bool          // B is bfloat16 pairs (GemmWPairs): a step takes two rows of A's
	packed   bool          // A in micro-panels (GemmPacked): a tile's mr rows as [k][mr] floats
}

// aAt returns the address of A's element for row i of a tile of mr rows,
// u steps of k on from aa: in place, rows at stride lda and columns 4
// bytes apart; packed, the tile's column of mr floats at aa, the next
// mr·4 bytes on.
func (r gemmRegs) aAt(aa reg.GPVirtual, i, u, mr int) operand.Mem {
	if r.packed {
		return operand.Mem{Base: aa, Disp: 4 * (u*mr + i)}
	}
	return r.a.at(aa, i).Offset(4 * u)
}

// aStep is how far one step of k moves a tile of mr rows on in A, bytes.
func (r gemmRegs) aStep(mr int) int {
	if r.packed {
		return 4 * mr
	}
	return 4
}

// gemm emits Gemm<ISA>, the kernel of QK and of the projections: one panel
// of nv vectors of C columns, every row of A.
func (g *gen) gemm() {
	x := g.isa
	g.fn("Gemm", "func(c *float32, ldc int, a *float32, lda int, b *float32, ldb int, m, k, nv, tail, acc int)",
		"",
		"\tfor i := 0; i < m; i++ {",
		"\t\tfor j := 0; j < (nv-1)*lanes+tail; j++ {",
		"\t\t\tc[i*ldc+j] = (acc != 0 ? c[i*ldc+j] : 0) + Σ_{p<k} a[i*lda+p] · b[p*ldb+j]",
		"",
		fmt.Sprintf("with nv in 1..%d, tail in 1..%d, m >= 0, k >= 1, strides in elements.", x.nv, x.lanes),
		"Nothing past column (nv-1)*lanes+tail of C or B is touched (masked",
		"last vector). QK is this with C = Sᵀ, A = K read in place, B = Qᵀ.",
		fmt.Sprintf("Register tile: %d rows of A (one broadcast each, at stride lda) × nv", x.mk),
		fmt.Sprintf("vectors of a B row; the last m%%%d rows in shorter tiles.", x.mk),
	)
	r := g.gemmParams(f32, x.mk)
	r.acc = g.param("acc")
	rows := g.param("m")
	g.panelRows(rows, &r.tailRegs, func(mr, nv int, masked bool, l string) { g.gemmBlock(r, mr, nv, masked, l) })
}

// gemmPacked emits GemmPacked<ISA>: Gemm with A packed in micro-panels
// (kernels.PackA), so that a step of k reads a tile's mr elements of A
// from one run of mr·4 bytes instead of mr rows lda apart: a 6-row tile's
// rows at a stride of 16 KiB (K = 4096) fall in one L1 set, and their
// streams cost the prefetchers six pages at a time.
func (g *gen) gemmPacked() {
	x := g.isa
	if x.mk != 6 {
		panic("gemmPacked: kernels.PackA groups rows by 6")
	}
	g.fn("GemmPacked", "func(c *float32, ldc int, a *float32, lda int, b *float32, ldb int, m, k, nv, tail, acc int)",
		"",
		"\tfor i := 0; i < m; i++ {",
		"\t\tfor j := 0; j < (nv-1)*lanes+tail; j++ {",
		"\t\t\tc[i*ldc+j] = (acc != 0 ? c[i*ldc+j] : 0) + Σ_{p<k} A(i, p) · b[p*ldb+j]",
		"",
		"with A(i, p) = a[r0*lda + p*mr + i-r0] for row i in the tile of mr rows",
		"from row r0: tiles of 6 rows, then the last m%6 in tiles of 4, 2 and 1",
		"(each if m%6 has that bit), the layout kernels.PackA writes, k <= lda.",
		fmt.Sprintf("nv in 1..%d, tail in 1..%d, m >= 0, k >= 1, strides in elements.", x.nv, x.lanes),
		"Nothing past column (nv-1)*lanes+tail of C or B is touched. Gemm's",
		"tiles and order of sums: the same bits.",
	)
	r := g.gemmParams(f32, x.mk)
	r.packed = true
	r.acc = g.param("acc")
	rows := g.param("m")
	g.panelRows(rows, &r.tailRegs, func(mr, nv int, masked bool, l string) { g.gemmBlock(r, mr, nv, masked, l) })
}

// gemmW emits GemmW<E><ISA>, Gemm with B a block of a packed weight
// matrix of 16-bit type e: each B vector is widened as it is loaded, so
// every product is a[i][p] times the float32 value fallback.WidenWeights
// gives, in Gemm's order (the same bits as Gemm on the widened matrix).
// (Int8 and int4 weights are widened a block at a time by WidenWI8 and
// WidenWI4 for Gemm instead: an item's block then serves all its row
// groups, where widening in registers repeated the sign extension,
// conversion and scaling for every group of 6 rows; the layer's forward
// with int8 weights ran at 0.85 of float32's speed that way, 0.95 now.)
func (g *gen) gemmW(e elem, packed bool) {
	x := g.isa
	name, aDoc := "GemmW"+e.name(), "a[i*lda+p]"
	if packed {
		name, aDoc = "GemmWPacked"+e.name(), "A(i, p)"
	}
	doc := []string{
		"",
		"\tfor i := 0; i < m; i++ {",
		"\t\tfor j := 0; j < (nv-1)*lanes+tail; j++ {",
		"\t\t\tc[i*ldc+j] = (acc != 0 ? c[i*ldc+j] : 0) + Σ_{p<k} " + aDoc + " · w(p, j)",
		"",
		fmt.Sprintf("with w(p, j) = b[p*ldb+j] widened from %s.", map[elem]string{f16: "float16", bf16: "bfloat16"}[e]),
		fmt.Sprintf("nv in 1..%d, tail in 1..%d, m >= 0, k >= 1, strides in elements. B is", x.nv, x.lanes),
		"read in whole vectors, nv of them per row: a packed panel is padded to",
		"its width. Nothing past column (nv-1)*lanes+tail of C is touched."}
	if packed {
		doc = append(doc, "A is packed as GemmPacked reads it (kernels.PackA), k <= lda.")
	}
	g.fn(name, fmt.Sprintf("func(c *float32, ldc int, a *float32, lda int, b %s, ldb int, m, k, nv, tail, acc int)", e.goType()), doc...)
	r := g.gemmParams(e, x.mk)
	r.packed = packed
	rows := g.param("m")
	g.panelRows(rows, &r.tailRegs, func(mr, nv int, masked bool, l string) { g.gemmBlock(r, mr, nv, masked, l) })
}

// gemmParams loads the parameters of a Gemm-shaped kernel whose B is of
// type e: C and its stride, A and its stride for tiles of up to rows rows,
// and B's row stride in bytes.
func (g *gen) gemmParams(e elem, rows int) gemmRegs {
	r := gemmRegs{e: e}
	r.cp = g.param("c")
	r.ldc = g.stride("ldc")
	r.ap = g.param("a")
	r.a = g.strided("lda", rows)
	r.ldb = g.param("ldb")
	if e.log() > 0 {
		g.SHLQ(operand.U8(e.log()), r.ldb)
	}
	return r
}

// gemmBlock emits one mr×nv tile: C rows cp..cp+mr-1 from A rows ap.., then
// advances cp and ap by mr rows. Without acc the first step of k
// multiplies instead of adding to zeros: the accumulators need no
// zeroing loads (avo would take an XOR's read as a use), and their FMA
// chains start on the step's own loads. A GemmW tile widens each B row
// as it loads it.
func (g *gen) gemmBlock(r gemmRegs, mr, nv int, masked bool, lbl string) {
	b := g.isa.bytes()
	acc := g.tile(mr, nv)
	bp := g.param("b")
	aa := g.GP64()
	g.MOVQ(r.ap, aa)
	p := g.param("k")
	load := func(j int, dst reg.VecVirtual) {
		g.loadVec(r.tailRegs, operand.Mem{Base: bp, Disp: j * b}, j, nv, masked, dst)
	}
	if r.e != f32 {
		// Whole vectors: the packed panel's rows are padded to its width.
		load = func(j int, dst reg.VecVirtual) {
			g.widen(r.e, operand.Mem{Base: bp, Disp: j * g.isa.lanes * r.e.bytes()}, dst)
		}
	}
	// step emits one step of k: a row of B, mr broadcasts of A, mr·nv
	// FMAs (VMULPS if first), then the next row of B and column of A. A
	// GemmWPairs step is two such, both rows from one pair row of B.
	step := func(first bool) {
		at := func(i int) operand.Mem { return r.aAt(aa, i, 0, mr) }
		adv := r.aStep(mr)
		if r.pairs {
			lo, hi := g.pairSteps(bp)
			g.broadcastStep(lo, nv, at, acc, first)
			g.broadcastStep(hi, nv, func(i int) operand.Mem { return r.aAt(aa, i, 1, mr) }, acc, false)
			adv = 2 * r.aStep(mr)
		} else {
			g.broadcastStep(load, nv, at, acc, first)
		}
		g.ADDQ(r.ldb, bp)
		g.ADDQ(operand.Imm(uint64(adv)), aa)
		g.DECQ(p)
	}
	g.Comment(fmt.Sprintf("Tile of %d rows × %d vectors: the first step of k multiplies, or the", mr, nv),
		"accumulators start at C.")
	if r.e == f32 && !r.pairs {
		g.TESTQ(r.acc, r.acc)
	} else {
		g.CMPQ(g.arg("acc"), operand.Imm(0))
	}
	g.JNZ(operand.LabelRef(label(lbl, "load")))
	step(true)
	g.JZ(operand.LabelRef(label(lbl, "store")))
	unrolled := !r.pairs
	if unrolled {
		g.JMP(operand.LabelRef(label(lbl, "by4")))
	} else {
		g.JMP(operand.LabelRef(lbl))
	}
	g.Label(label(lbl, "load"))
	g.loadTile(r, acc, masked)
	if unrolled {
		g.gemmSteps4(r, acc, bp, aa, p, load, lbl)
	}
	g.Comment(fmt.Sprintf("The k loop: a row of B, %d broadcasts of A, %d FMAs.", mr, mr*nv))
	g.Label(lbl)
	step(false)
	g.JNZ(operand.LabelRef(lbl))
	g.Comment("Store the tile row by row; cp ends one row past it.")
	g.Label(label(lbl, "store"))
	g.storeTile(r, acc, masked)
}

// gemmUnroll is the steps of k one pass of a float32 Gemm tile's main
// loop takes: four, with A's columns at fixed offsets and one loop test,
// ran a 6×16 AVX2 tile at 86–94% of the FMA peak from L1 where one step
// a pass ran at 77–88% (Zen 3, alternated runs).
const gemmUnroll = 4

// gemmSteps4 emits a Gemm tile's main loop (unrolled4): gemmUnroll steps
// of k a pass, each step's A column at an offset from aa and B's row at
// bp, aa moved once a pass.
func (g *gen) gemmSteps4(r gemmRegs, acc [][]reg.VecVirtual, bp, aa, p reg.GPVirtual, load func(j int, dst reg.VecVirtual), lbl string) {
	mr, nv := len(acc), len(acc[0])
	g.Comment(fmt.Sprintf("%d steps of k a pass: %d rows of B, %d broadcasts of A, %d FMAs.", gemmUnroll, gemmUnroll, gemmUnroll*mr, gemmUnroll*mr*nv))
	g.unrolled4(p, lbl, func(u int) {
		g.broadcastStep(load, nv, func(i int) operand.Mem { return r.aAt(aa, i, u, mr) }, acc, false)
		g.ADDQ(r.ldb, bp)
	}, func() { g.ADDQ(operand.Imm(uint64(gemmUnroll*r.aStep(mr))), aa) })
}

// unrolled4 emits, at label(lbl, "by4"), a loop of gemmUnroll steps a
// pass (step(u) for each, then pass()) while count, the steps left, has
// them, counting them off; then a jump to label(lbl, "store") if none are
// left, else a fall through to the caller's one-step loop.
func (g *gen) unrolled4(count reg.GPVirtual, lbl string, step func(u int), pass func()) {
	g.Label(label(lbl, "by4"))
	g.CMPQ(count, operand.Imm(gemmUnroll))
	g.JLT(operand.LabelRef(label(lbl, "rest")))
	g.Label(label(lbl, "steps4"))
	for u := 0; u < gemmUnroll; u++ {
		step(u)
	}
	pass()
	g.SUBQ(operand.Imm(gemmUnroll), count)
	g.CMPQ(count, operand.Imm(gemmUnroll))
	g.JGE(operand.LabelRef(label(lbl, "steps4")))
	g.Label(label(lbl, "rest"))
	g.TESTQ(count, count)
	g.JZ(operand.LabelRef(label(lbl, "store")))
}

// loadTile loads the accumulators of a tile from C's rows at cp.
func (g *gen) loadTile(r gemmRegs, acc [][]reg.VecVirtual, masked bool) {
	b, nv := g.isa.bytes(), len(acc[0])
	t := g.GP64()
	g.MOVQ(r.cp, t)
	for i := range acc {
		for j := range acc[i] {
			g.loadVec(r.tailRegs, operand.Mem{Base: t, Disp: j * b}, j, nv, masked, acc[i][j])
		}
		if i < len(acc)-1 {
			g.ADDQ(r.ldc, t)
		}
	}
}

// storeTile stores a tile's accumulators row by row from cp, which ends
// one row past it, and moves ap on by the tile's rows.
func (g *gen) storeTile(r gemmRegs, acc [][]reg.VecVirtual, masked bool) {
	b, nv := g.isa.bytes(), len(acc[0])
	for i := range acc {
		for j := 0; j < nv; j++ {
			g.storeVec(r.tailRegs, acc[i][j], operand.Mem{Base: r.cp, Disp: j * b}, j, nv, masked)
		}
		g.ADDQ(r.ldc, r.cp)
	}
	g.advance(r.ap, r.a, len(acc))
}

// broadcastStep emits one step of the Gemm and PV register tiles: the nv
// vectors of a row (load(j, dst) loads vector j), then for each tile row
// i a broadcast of at(i) into an FMA with every vector (a multiply
// instead if first: the accumulators start there).
func (g *gen) broadcastStep(load func(j int, dst reg.VecVirtual), nv int, at func(i int) operand.Mem, acc [][]reg.VecVirtual, first bool) {
	vv := make([]reg.VecVirtual, nv)
	for j := range vv {
		vv[j] = g.vec()
		load(j, vv[j])
	}
	for i := range acc {
		bc := g.vec()
		g.VBROADCASTSS(at(i), bc)
		for j := 0; j < nv; j++ {
			if first {
				g.VMULPS(vv[j], bc, acc[i][j])
			} else {
				g.VFMADD231PS(vv[j], bc, acc[i][j])
			}
		}
	}
}
