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
// and ap advance by mr rows. A one-row tile sums two blocks at a time
// (blockPairs) while 64 rows are left.
func (g *gen) gemvBlock(r gemmRegs, mr, nv int, masked bool, lbl string) {
	b := g.isa.bytes()
	acc := g.tile(mr, nv)
	bp, sp := g.param("b"), g.param("s")
	aa := g.GP64()
	g.MOVQ(r.ap, aa)
	p := g.param("k")
	pair, far := g.pairs(r, mr)
	g.startTile(r, acc, masked, lbl, pair)
	// sums emits one step of block blk (0, or 1: the pair's second) into
	// its block sums part.
	sums := func(blk int, part [][]reg.VecVirtual, first bool) {
		load := func(j int, dst reg.VecVirtual) {
			g.widen(i8, pairMem(operand.Mem{Base: bp, Disp: j * g.isa.lanes}, blk, far, 1), dst)
		}
		g.broadcastStep(load, nv, func(i int) operand.Mem { return pairA(r.a.at(aa, i), blk) }, part, first)
	}
	next := func() {
		g.ADDQ(r.ldb, bp)
		g.ADDQ(operand.Imm(4), aa)
	}
	// fold adds block blk's sums times its scales to the accumulators.
	fold := func(blk int, part [][]reg.VecVirtual) {
		for j := 0; j < nv; j++ {
			for i := 0; i < mr; i++ {
				g.VFMADD231PS(pairMem(operand.Mem{Base: sp, Disp: j * b}, blk, r.ldb, 4), part[i][j], acc[i][j])
			}
		}
	}
	if pair {
		part0, part1 := g.tile(mr, nv), g.tile(mr, nv)
		g.blockPairs(p, lbl, func(first bool) {
			sums(0, part0, first)
			sums(1, part1, first)
			next()
		}, func() {
			fold(0, part0)
			fold(1, part1)
			g.LEAQ(operand.Mem{Base: sp, Index: r.ldb, Scale: 8}, sp) // two rows of scales
			g.ADDQ(far, bp)                                           // past the second block's rows
			g.ADDQ(operand.Imm(32*4), aa)
		})
	}
	part := g.tile(mr, nv)
	g.blockSteps(p, func(first bool) { sums(0, part, first); next() }, lbl)
	g.Comment("The block's sums times its scales, into the accumulators; the next scale row.")
	g.Label(label(lbl, "scale"))
	fold(0, part)
	g.LEAQ(operand.Mem{Base: sp, Index: r.ldb, Scale: 4}, sp) // ldb bytes of int8 = ldb scales
	g.TESTQ(p, p)
	g.JNZ(operand.LabelRef(label(lbl, "blocks")))
	g.Comment("Store the tile row by row; cp ends one row past it.")
	g.Label(label(lbl, "store"))
	g.storeTile(r, acc, masked)
}

// pairs reports whether a tile of mr rows sums its blocks in pairs
// (blockPairs: one row, AVX2 only — AVX-512's one-row tile has four
// chains already) and, if so, returns 32 rows of B in bytes, where a
// pair's second block starts.
func (g *gen) pairs(r gemmRegs, mr int) (bool, reg.GPVirtual) {
	if mr != 1 || g.isa.avx512() {
		return false, nil
	}
	far := g.GP64()
	g.MOVQ(r.ldb, far)
	g.SHLQ(operand.U8(5), far)
	return true, far
}

// pairMem is m for the first block of a pair (blk 0), or m moved by
// index·scale bytes for the second.
func pairMem(m operand.Mem, blk int, index reg.GPVirtual, scale uint8) operand.Mem {
	if blk == 1 {
		m.Index, m.Scale = index, scale
	}
	return m
}

// pairA is the A element at m for block blk of a pair: 32 floats on for
// the second.
func pairA(m operand.Mem, blk int) operand.Mem {
	m.Disp += blk * 32 * 4
	return m
}

// blockPairs emits the pair loop of a one-row GEMV tile at lbl_pairs: while
// 64 rows of k are left (p), 32 steps (step(true) first) each summing a
// row of two consecutive blocks into two sets of block sums, then fold
// (which scales them into the accumulators in block order, the first
// block's first, and moves past both blocks); then on to lbl_blocks, or
// to lbl_store when no row is left. A
// row's sums are the same as block by block, and its FMA chains twice as
// many: with one row, the 2 vectors of an AVX2 panel alone leave the
// 4-cycle FMA latency as the bound (16 int8 weights per 4 cycles). AVX2
// only: AVX-512's one-row tile has 4 chains, and pairs there read int8
// panels from memory slower (Intel Xeon, 4096² GEMV from L3: 8.5–15.8
// GB/s against 12.9–17.8 block by block), for 5–10% in L2.
func (g *gen) blockPairs(p reg.GPVirtual, lbl string, step func(first bool), fold func()) {
	g.Comment("Pairs of blocks: 32 steps, each a row of two blocks, while 64 rows of k are left.")
	g.Label(label(lbl, "pairs"))
	g.CMPQ(p, operand.U32(64))
	g.JGE(operand.LabelRef(label(lbl, "pair")))
	g.TESTQ(p, p)
	g.JNZ(operand.LabelRef(label(lbl, "blocks")))
	g.JMP(operand.LabelRef(label(lbl, "store")))
	g.Label(label(lbl, "pair"))
	g.SUBQ(operand.U32(64), p)
	n := g.GP64()
	g.MOVQ(operand.U32(32), n)
	step(true)
	g.DECQ(n)
	g.Label(label(lbl, "pairsteps"))
	step(false)
	g.DECQ(n)
	g.JNZ(operand.LabelRef(label(lbl, "pairsteps")))
	fold()
	g.JMP(operand.LabelRef(label(lbl, "pairs")))
}

// startTile starts a GEMV tile's accumulators at C's rows (acc != 0) or
// at zero, then goes on to the tile's blocks (label lbl_blocks), or with
// pairs to its pairs of blocks (lbl_pairs), which must follow.
func (g *gen) startTile(r gemmRegs, acc [][]reg.VecVirtual, masked bool, lbl string, pairs bool) {
	g.Comment(fmt.Sprintf("Tile of %d rows × %d vectors: the accumulators start at C, or at zero.", len(acc), len(acc[0])))
	g.CMPQ(g.arg("acc"), operand.Imm(0))
	g.JNZ(operand.LabelRef(label(lbl, "load")))
	for i := range acc {
		for j := range acc[i] {
			g.zero(acc[i][j])
		}
	}
	entry := label(lbl, "blocks")
	if pairs {
		entry = label(lbl, "pairs")
	}
	g.JMP(operand.LabelRef(entry))
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
