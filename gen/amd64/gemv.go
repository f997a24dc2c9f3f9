// GemvWI8<ISA>, the projection of a decode step's few rows through int8
// weights. Dequantizing every weight before its FMA (as the int8 GemmW
// kernel that preceded WidenWI8 did) takes four vector operations per
// weight vector (sign extension, conversion, scale, FMA), which at one
// row per call bound the kernel on the vector ports before memory (Zen 4,
// one thread: 21 GB/s of int8 panels against 26–29 GB/s of bandwidth). Here the products of a block of 32 rows of B
// are summed unscaled, and the block's scales applied once to the sum:
// three operations per weight vector, and one FMA per block. Register
// tile: 3 rows × nv vectors of accumulators and as many of block sums
// (AVX-512 3×4: 12 + 12 + 4 + 1 = 29 zmm; AVX2 3×2: 6 + 6 + 2 + 1 = 15 ymm).

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// gemvRows is the height of GemvWI8's register tile.
const gemvRows = 3

// gemvI8 emits GemvWI8<ISA>.
func (g *gen) gemvI8() {
	x := g.isa
	g.fn("GemvWI8", "func(c *float32, ldc int, a *float32, lda int, b *int8, ldb int, m, k, nv, tail, acc int, s *float32)",
		"",
		"\tfor i := 0; i < m; i++ {",
		"\t\tfor j := 0; j < (nv-1)*lanes+tail; j++ {",
		"\t\t\tc[i*ldc+j] = (acc != 0 ? c[i*ldc+j] : 0)",
		"\t\t\tfor each block q0 = 0, 32, ... < k:",
		"\t\t\t\tc[i*ldc+j] = fma(Σ_{q0<=p<q0+32, p<k} a[i*lda+p] · float32(b[p*ldb+j]), s[(q0/32)*ldb+j], c[i*ldc+j])",
		"",
		"the block sums in order of p (the first a product, then FMAs).",
		fmt.Sprintf("nv in 1..%d, tail in 1..%d, m >= 0, k >= 1, strides in elements. B and s", x.nv, x.lanes),
		"are read in whole vectors, nv of them per row: a packed panel is padded",
		"to its width. Nothing past column (nv-1)*lanes+tail of C is touched.",
		fmt.Sprintf("Register tile: %d rows × nv vectors, accumulators and block sums.", gemvRows),
	)
	r := g.gemmParams(i8, gemvRows)
	rows := g.param("m")
	mk := g.isa.mk
	g.isa.mk = gemvRows // rowGroups' tile height
	g.panelRows(rows, &r.tailRegs, func(mr, nv int, masked bool, l string) { g.gemvBlock(r, mr, nv, masked, l) })
	g.isa.mk = mk
}

// gemvBlock emits one mr×nv tile of GemvWI8: the accumulators start at C
// (or zero), then each block of up to 32 rows of B is summed into the
// block sums and added to the accumulators times the block's scales; cp
// and ap advance by mr rows.
func (g *gen) gemvBlock(r gemmRegs, mr, nv int, masked bool, lbl string) {
	b := g.isa.bytes()
	acc, part := g.tile(mr, nv), g.tile(mr, nv)
	bp, sp := g.param("b"), g.param("s")
	aa := g.GP64()
	g.MOVQ(r.ap, aa)
	p := g.param("k")
	g.startTile(r, acc, masked, lbl)
	load := func(j int, dst reg.VecVirtual) { g.widen(i8, operand.Mem{Base: bp, Disp: j * g.isa.lanes}, dst) }
	step := func(first bool) {
		g.broadcastStep(load, nv, func(i int) operand.Mem { return r.a.at(aa, i) }, part, first)
		g.ADDQ(r.ldb, bp)
		g.ADDQ(operand.Imm(4), aa)
	}
	g.blockSteps(p, step, lbl)
	g.Comment("The block's sums times its scales, into the accumulators; the next scale row.")
	g.Label(label(lbl, "scale"))
	for j := 0; j < nv; j++ {
		for i := 0; i < mr; i++ {
			g.VFMADD231PS(operand.Mem{Base: sp, Disp: j * b}, part[i][j], acc[i][j])
		}
	}
	g.LEAQ(operand.Mem{Base: sp, Index: r.ldb, Scale: 4}, sp) // ldb bytes of int8 = ldb scales
	g.TESTQ(p, p)
	g.JNZ(operand.LabelRef(label(lbl, "blocks")))
	g.Comment("Store the tile row by row; cp ends one row past it.")
	g.storeTile(r, acc, masked)
}

// startTile starts a GEMV tile's accumulators at C's rows (acc != 0) or
// at zero, then jumps to the tile's blocks (label lbl_blocks).
func (g *gen) startTile(r gemmRegs, acc [][]reg.VecVirtual, masked bool, lbl string) {
	g.Comment(fmt.Sprintf("Tile of %d rows × %d vectors: the accumulators start at C, or at zero.", len(acc), len(acc[0])))
	g.CMPQ(g.arg("acc"), operand.Imm(0))
	g.JNZ(operand.LabelRef(label(lbl, "load")))
	for i := range acc {
		for j := range acc[i] {
			g.zero(acc[i][j])
		}
	}
	g.JMP(operand.LabelRef(label(lbl, "blocks")))
	g.Label(label(lbl, "load"))
	g.loadTile(r, acc, masked)
}

// blockSteps emits a block of a GEMV tile at label lbl_blocks: n =
// min(32, p) steps (step(true) first, then step(false)), p reduced by n,
// ending at label lbl_scale.
func (g *gen) blockSteps(p reg.GPVirtual, step func(first bool), lbl string) {
	g.Comment("A block: n = min(32, rows of k left) steps of B rows summed unscaled.")
	g.Label(label(lbl, "blocks"))
	n := g.GP64()
	g.MOVQ(operand.U32(32), n)
	g.CMPQ(p, operand.U32(32))
	g.CMOVQLT(p, n)
	g.SUBQ(n, p)
	step(true)
	g.DECQ(n)
	g.JZ(operand.LabelRef(label(lbl, "scale")))
	g.Label(label(lbl, "steps"))
	step(false)
	g.DECQ(n)
	g.JNZ(operand.LabelRef(label(lbl, "steps")))
}
