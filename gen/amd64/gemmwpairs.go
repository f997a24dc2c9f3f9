// GemmWPairs<ISA>, the projections' kernel for bfloat16 weights held in
// pairs: rows 2p and 2p+1 of a packed panel interleaved, each dword
// (row 2p's element in the low half, row 2p+1's in the high), the layout
// AMX's B operand and VDPBF16PS read. One copy of the weights in that
// layout then serves every product: the tiles and the bfloat16 kernels
// read it as it is, and this kernel (float32 mode, and decode's GEMVs)
// widens each dword into two float32 vectors as it loads it: a 16-bit
// shift for the even row, a mask of the high halves for the odd one.
// Per pair of rows that is two loads, a shift and a mask per vector of
// columns, where the row layout took two widening loads and two shifts.

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// gemmWPairs emits GemmWPairs<ISA>: Gemm with B a block of packed
// bfloat16 weights held in pairs, in Gemm's order (the same bits as Gemm
// on the widened rows).
func (g *gen) gemmWPairs(packed bool) {
	x := g.isa
	name, a0, a1 := "GemmWPairs", "a[i*lda+2p]", "a[i*lda+2p+1]"
	if packed {
		name, a0, a1 = "GemmWPairsPacked", "A(i, 2p)", "A(i, 2p+1)"
	}
	doc := []string{
		"",
		"\tfor i := 0; i < m; i++ {",
		"\t\tfor j := 0; j < (nv-1)*lanes+tail; j++ {",
		"\t\t\tc[i*ldc+j] = (acc != 0 ? c[i*ldc+j] : 0) + Σ_{p<k} " + a0 + " · lo(b[p*ldb+j]) + " + a1 + " · hi(b[p*ldb+j])",
		"",
		"with lo and hi the float32 values of a dword's low and high bfloat16,",
		"the terms added in order of 2p, 2p+1 (the widened rows' Gemm). k counts",
		fmt.Sprintf("pairs; nv in 1..%d, tail in 1..%d, m >= 0, k >= 1, strides in elements", x.nv, x.lanes),
		"(lda in float32s, ldb in uint32s). B is read in whole vectors, nv of",
		"them per pair row: a packed panel is padded to its width. Nothing past",
		"column (nv-1)*lanes+tail of C is touched.",
		fmt.Sprintf("Register tile: %d rows of A × nv vectors, as Gemm's.", x.mk)}
	if packed {
		doc = append(doc, "A is packed as GemmPacked reads it (kernels.PackA), 2k <= lda.")
	}
	g.fn(name, "func(c *float32, ldc int, a *float32, lda int, b *uint32, ldb int, m, k, nv, tail, acc int)", doc...)
	r := g.gemmParams(f32, x.mk) // ldb: uint32s, shifted to bytes as float32's
	r.pairs = true
	r.packed = packed
	rows := g.param("m")
	g.panelRows(rows, &r.tailRegs, func(mr, nv int, masked bool, l string) { g.gemmBlock(r, mr, nv, masked, l) })
}

// pairSteps returns the B loads of a GemmWPairs step: the low halves of
// a pair row's vector j shifted into float32 (row 2p), and its high
// halves masked (row 2p+1).
func (g *gen) pairSteps(bp reg.GPVirtual) (lo, hi func(j int, dst reg.VecVirtual)) {
	b := g.isa.bytes()
	lo = func(j int, dst reg.VecVirtual) {
		g.VMOVUPS(operand.Mem{Base: bp, Disp: j * b}, dst)
		g.VPSLLD(operand.U8(16), dst, dst)
	}
	hi = func(j int, dst reg.VecVirtual) {
		g.VMOVUPS(operand.Mem{Base: bp, Disp: j * b}, dst)
		if g.isa.avx512() {
			g.VPANDD(g.cst("hiHalves"), dst, dst)
		} else {
			g.VPAND(g.cst("hiHalves"), dst, dst)
		}
	}
	return lo, hi
}
