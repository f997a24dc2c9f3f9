package main

import (
	"fmt"

	. "github.com/fastattn/fastattn/gen/neon"
)

// gemm emits GemmNEON. Registers: R0 C row of the row group, R1 ldc bytes,
// R2 A row of the row group, R3 lda bytes, R4 B, R5 ldb bytes, R6 rows
// left, R7 k, R8 nv, R9 accumulate flag; in a tile R10..R15 the A rows,
// R16 the B row, R17 the k counter, R19 the C row walker.
func (g *gen) gemm() {
	g.Func("GemmNEON", "(c *float32, ldc int, a *float32, lda int, b *float32, ldb int, m, k, nv, tail, acc int)", 88,
		"GemmNEON is",
		"",
		"\tfor i := 0; i < m; i++ {",
		"\t\tfor j := 0; j < nv*4; j++ {",
		"\t\t\tc[i*ldc+j] = (acc != 0 ? c[i*ldc+j] : 0) + Σ_{p<k} a[i*lda+p] · b[p*ldb+j]",
		"",
		"with nv in 1..4, whole vectors only (tail must be 4: the caller does",
		"the last n%4 columns), m >= 0, k >= 1, strides in elements. QK is",
		"this with C = Sᵀ, A = K read in place, B = Qᵀ. Register tile: 6 rows",
		"of A (a VLD1R broadcast each, at stride lda) × nv vectors of a B row;",
		"the last m%6 rows in tiles of 4, 2 and 1 rows.",
	)
	for i, a := range []string{"c", "ldc", "a", "lda", "b", "ldb", "m", "k", "nv"} {
		g.Inst("MOVD %s+%d(FP), R%d", a, 8*i, i)
	}
	g.Inst("MOVD acc+80(FP), R9")
	for _, r := range []int{1, 3, 5} {
		g.Inst("LSL $2, R%d, R%d", r, r)
	}
	g.panels("gemm", func(nv int) {
		g.rowGroups(fmt.Sprintf("g%d", nv), func(mr int, l string) { g.gemmBlock(mr, nv, l) })
	})
}

func (g *gen) gemmBlock(mr, nv int, l string) {
	// Start from zero or from C.
	g.Inst("MOVD R0, R19")
	g.Inst("CBNZ R9, %sload", l)
	for i := 0; i < mr; i++ {
		for j := 0; j < nv; j++ {
			g.zero(acc(i, j))
		}
	}
	g.Inst("B %sstart", l)
	g.Label(l + "load")
	for i := 0; i < mr; i++ {
		g.Inst("VLD1 (R19), %s", vlist(acc(i, 0), nv))
		g.Inst("ADD R1, R19, R19")
	}
	g.Label(l + "start")
	for i := 0; i < mr; i++ { // A row pointers
		if i == 0 {
			g.Inst("MOVD R2, R10")
		} else {
			g.Inst("ADD R3, R%d, R%d", 9+i, 10+i)
		}
	}
	g.Inst("MOVD R4, R16")
	g.Inst("MOVD R7, R17")
	g.Label(l)
	g.Inst("VLD1.P (R16)(R5), %s", vlist(24, nv))
	for i := 0; i < mr; i++ {
		bc := V(28 + i%2)
		g.Inst("VLD1R.P 4(R%d), [%s]", 10+i, bc.S4())
		for j := 0; j < nv; j++ {
			g.Inst("VFMLA %s, %s, %s", V(24+j).S4(), bc.S4(), acc(i, j).S4())
		}
	}
	g.Inst("SUBS $1, R17, R17")
	g.Inst("BNE %s", l)
	for i := 0; i < mr; i++ {
		g.Inst("VST1 %s, (R0)", vlist(acc(i, 0), nv))
		g.Inst("ADD R1, R0, R0")
	}
	for i := 0; i < mr; i++ {
		g.Inst("ADD R3, R2, R2")
	}
}

// pv emits PVNEON. Registers: R0 o row of the row group, R1 ldo bytes, R2
// p column of the row group, R3 ldp bytes, R4 v, R5 ldv bytes, R6 rows
// left, R7 nk, R8 nv, R9 alpha (0: none); in a tile R16 the V row, R17 the
// P row, R15 the key counter, R19 the o row walker.
func (g *gen) pv() {
	g.Func("PVNEON", "(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, alpha *float32, rows, nk, nv, tail int)", 88,
		"PVNEON is",
		"",
		"\tfor r := 0; r < rows; r++ {",
		"\t\tfor j := 0; j < nv*4; j++ {",
		"\t\t\to[r*ldo+j] = alpha[r]·o[r*ldo+j] + Σ_{c<nk} p[c*ldp+r] · v[c*ldv+j]",
		"",
		"with alpha == nil meaning 1, nv in 1..4, whole vectors only (tail must",
		"be 4), rows >= 0, nk >= 0, strides in elements. Register tile: 6 rows",
		"× nv vectors of a V row read in place at stride ldv; the 6 P entries",
		"of a key come in two loads (4 + 2 lanes) and are used by lane (FMLA by",
		"element); the last rows%6 in tiles of 4, 2 and 1 rows.",
	)
	for i, a := range []string{"o", "ldo", "p", "ldp", "v", "ldv"} {
		g.Inst("MOVD %s+%d(FP), R%d", a, 8*i, i)
	}
	g.Inst("MOVD alpha+48(FP), R9")
	g.Inst("MOVD rows+56(FP), R6")
	g.Inst("MOVD nk+64(FP), R7")
	g.Inst("MOVD nv+72(FP), R8")
	for _, r := range []int{1, 3, 5} {
		g.Inst("LSL $2, R%d, R%d", r, r)
	}
	g.panels("pv", func(nv int) {
		g.rowGroups(fmt.Sprintf("p%d", nv), func(mr int, l string) { g.pvBlock(mr, nv, l) })
	})
}

func (g *gen) pvBlock(mr, nv int, l string) {
	g.Inst("MOVD R0, R19")
	for i := 0; i < mr; i++ {
		g.Inst("VLD1 (R19), %s", vlist(acc(i, 0), nv))
		g.Inst("ADD R1, R19, R19")
	}
	// The online-softmax rescale: o[r] *= alpha[r].
	g.Inst("CBZ R9, %snoscale", l)
	for i := 0; i < mr; i++ {
		g.Inst("VLD1R.P 4(R9), [%s]", V(28).S4())
		for j := 0; j < nv; j++ {
			g.Emit(EncFMUL(acc(i, j), acc(i, j), 28))
		}
	}
	g.Label(l + "noscale")
	g.Inst("CBZ R7, %sstore", l)
	g.Inst("MOVD R4, R16")
	g.Inst("MOVD R2, R17")
	g.Inst("MOVD R7, R15")
	g.Label(l)
	g.Inst("VLD1.P (R16)(R5), %s", vlist(24, nv))
	// P[c][r..r+mr): lanes of V28 (rows 0-3) and V29 (rows 4-5).
	switch mr {
	case 6:
		g.Inst("VLD1 (R17), [%s]", V(28).S4())
		g.Inst("FMOVD 16(R17), F29")
	case 4:
		g.Inst("VLD1 (R17), [%s]", V(28).S4())
	case 2:
		g.Inst("FMOVD (R17), F28")
	case 1:
		g.Inst("FMOVS (R17), F28")
	}
	for i := 0; i < mr; i++ {
		for j := 0; j < nv; j++ {
			g.Emit(EncFMLAElem(acc(i, j), V(24+j), V(28+i/4), i%4))
		}
	}
	g.Inst("ADD R3, R17, R17")
	g.Inst("SUBS $1, R15, R15")
	g.Inst("BNE %s", l)
	g.Label(l + "store")
	for i := 0; i < mr; i++ {
		g.Inst("VST1 %s, (R0)", vlist(acc(i, 0), nv))
		g.Inst("ADD R1, R0, R0")
	}
	g.Inst("ADD $%d, R2, R2", 4*mr)
}

// peakChains is the independent FMA chains of FMAPeakNEON: enough for 4
// FMA pipes of 4-cycle latency (Neoverse V1/V2, Apple M).
const peakChains = 24

// peak emits FMAPeakNEON: peakChains independent FMA chains.
func (g *gen) peak() {
	g.Func("FMAPeakNEON", "(iters int)", 8,
		"FMAPeakNEON is",
		"",
		"\tfor i := 0; i < iters; i++ {",
		fmt.Sprintf("\t\tfor c := 0; c < %d; c++ { acc[c] += a*b }   (one vector FMA each)", peakChains),
		"",
		fmt.Sprintf("so one call computes iters·%d·4·2 floating-point operations.", peakChains),
	)
	g.Inst("MOVD iters+0(FP), R0")
	for i := 0; i < peakChains+2; i++ {
		g.zero(V(i))
	}
	g.Inst("CBZ R0, done")
	g.Label("loop")
	for i := 0; i < peakChains; i++ {
		g.Inst("VFMLA %s, %s, %s", V(peakChains).S4(), V(peakChains+1).S4(), V(i).S4())
	}
	g.Inst("SUBS $1, R0, R0")
	g.Inst("BNE loop")
	g.Label("done")
	g.Inst("RET")
}
