// GemmBF16NEON, the bfloat16 mode's product kernel on FEAT_BF16 (Neoverse
// V1/N2, Graviton 3, Apple M2 on): GemmNEON's 6×4 tile with a dword
// broadcast of A (a pair of bfloat16 terms, VLD1R) per row and BFDOT
// instead of FMLA. Per pair step, nv vector loads of B (each 4 columns'
// pairs) and 6 broadcasts feed 6·nv BFDOT, each 8 products. Arm's BFDOT
// rounds differently from x86's VDPBF16PS (FPCR.EBF = 0: the pair's two
// products are summed and rounded to odd, then added to the accumulator
// and rounded to odd, denormals flushed to zero); fallback.GemmBF16Odd is
// its Go twin.

package main

import (
	"fmt"

	. "github.com/fastattn/fastattn/gen/neon"
)

// gLka is GemmBF16NEON's k step of A in bytes (the registers of GemmNEON
// otherwise).
const gLka R = 20

// gemmBF16 emits GemmBF16NEON.
func (g *gen) gemmBF16() {
	g.Func("GemmBF16NEON", "(c *float32, ldc int, a *uint32, lda int, lka int, b *uint32, ldb int, m int, k int, nv int, tail int, acc int)", 96,
		"GemmBF16NEON is",
		"",
		"\tfor i := 0; i < m; i++ {",
		"\t\tfor j := 0; j < nv*4; j++ {",
		"\t\t\tc[i*ldc+j] = (acc != 0 ? c[i*ldc+j] : 0) ⊕_{p<k} dot2(a[i*lda+p*lka], b[p*ldb+j])",
		"",
		"where each uint32 holds two bfloat16 (the first term in the low half) and",
		"⊕ is BFDOT's (fallback.GemmBF16Odd). Strides in uint32; nv in 1..4,",
		"whole vectors only (tail must be 4: the caller does the last n%4",
		"columns), m >= 0, k >= 1. It needs FEAT_BF16. Register tile: 6 rows of",
		"A (a VLD1R dword broadcast each) × nv vectors of a B row.",
	)
	g.loadArgs(arg{"c", gC}, arg{"ldc", gLdc}, arg{"a", gA}, arg{"lda", gLda}, arg{"lka", gLka}, arg{"b", gB}, arg{"ldb", gLdb},
		arg{"m", rRows}, arg{"k", gK}, arg{"nv", rNV}, arg{"acc", gAcc})
	g.toBytes(gLdc, gLda, gLka, gLdb)
	g.panelRows("gemmbf16", func(mr, nv int, l string) {
		g.tileStart(mr, nv, l, acc)
		g.Inst("MOVD %s, %s", gB, gBrow)
		g.Inst("MOVD %s, %s", gK, gStep)
		g.Comment(fmt.Sprintf("The k loop, a pair of terms a step: a row of B, %d broadcasts of A, %d BFDOT.", mr, mr*nv))
		g.Label(l)
		g.Inst("VLD1.P (%s)(%s), %s", gBrow, gLdb, vlist(24, nv))
		for i := 0; i < mr; i++ {
			bc := V(28 + i%2)
			g.Inst("VLD1R.P (%s)(%s), [%s]", gArow0+R(i), gLka, bc.S4())
			for j := 0; j < nv; j++ {
				g.Emit(EncBFDOT(acc(i, j), V(24+j), bc))
			}
		}
		g.Inst("SUBS $1, %s, %s", gStep, gStep)
		g.Inst("BNE %s", l)
		g.tileEnd(mr, nv, acc)
	})
}
