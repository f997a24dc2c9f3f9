// GemmNEON, the kernel of QK and of the projections. Register tile: mk = 6
// rows of A (a VLD1R broadcast each, alternating V28/V29) × nv ≤ 4 vectors
// of a B row (V24..V27): 24 accumulators V0..V23 (acc). Per k step, nv
// vector loads and 6 broadcast loads feed 6·nv FMAs.

package main

import (
	"fmt"

	. "github.com/fastattn/fastattn/gen/neon"
)

// GemmNEON's general registers: the arguments (rows in rRows, nv in rNV),
// strides in bytes, and the walkers of a tile.
const (
	gC     R = 0  // C row of the row group
	gLdc   R = 1  // ldc, bytes
	gA     R = 2  // A row of the row group
	gLda   R = 3  // lda, bytes
	gB     R = 4  // B
	gLdb   R = 5  // ldb, bytes
	gK     R = 7  // k
	gAcc   R = 9  // nonzero: add to C
	gArow0 R = 10 // the tile's A rows: R10..R15
	gBrow  R = 16 // the B row
	gStep  R = 17 // the k counter
	gCrow  R = 19 // the C row walker
)

// gemm emits GemmNEON.
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
	g.loadArgs(arg{"c", gC}, arg{"ldc", gLdc}, arg{"a", gA}, arg{"lda", gLda}, arg{"b", gB}, arg{"ldb", gLdb}, arg{"m", rRows}, arg{"k", gK}, arg{"nv", rNV}, arg{"acc", gAcc})
	g.toBytes(gLdc, gLda, gLdb)
	g.panelRows("gemm", g.gemmTile(func(nv int) {
		g.Inst("VLD1.P (%s)(%s), %s", gBrow, gLdb, vlist(24, nv))
	}))
}

// gemmTile returns the emitter of one mr×nv tile whose B row is brought
// into V24.. by loadB (from gBrow, which it advances by gLdb): C rows
// from gC, A rows from gA, then advances both by mr rows.
func (g *gen) gemmTile(loadB func(nv int)) func(mr, nv int, l string) {
	return func(mr, nv int, l string) { g.gemmBlock(loadB, mr, nv, l) }
}

// tileStart starts an mr×nv tile whose accumulators are acc(i, j), rows
// consecutive: at 0, or at C's rows (gAcc != 0), from gC; then the tile's
// A row pointers from gA into gArow0...
func (g *gen) tileStart(mr, nv int, l string, acc func(i, j int) V) {
	g.Comment(fmt.Sprintf("Tile of %d rows × %d vectors: the accumulators start at 0, or at C.", mr, nv))
	g.Inst("MOVD %s, %s", gC, gCrow)
	g.Inst("CBNZ %s, %s_load", gAcc, l)
	for i := 0; i < mr; i++ {
		for j := 0; j < nv; j++ {
			g.zero(acc(i, j))
		}
	}
	g.Inst("B %s_start", l)
	g.Label(l + "_load")
	for i := 0; i < mr; i++ {
		g.Inst("VLD1 (%s), %s", gCrow, vlist(acc(i, 0), nv))
		g.Inst("ADD %s, %s, %s", gLdc, gCrow, gCrow)
	}
	g.Label(l + "_start")
	for i := 0; i < mr; i++ { // A row pointers
		if i == 0 {
			g.Inst("MOVD %s, %s", gA, gArow0)
		} else {
			g.Inst("ADD %s, %s, %s", gLda, gArow0+R(i-1), gArow0+R(i))
		}
	}
}

// tileEnd stores a tile's accumulators acc(i, j) row by row from gC and
// moves gC and gA past its mr rows.
func (g *gen) tileEnd(mr, nv int, acc func(i, j int) V) {
	g.Comment("Store the tile row by row.")
	for i := 0; i < mr; i++ {
		g.Inst("VST1 %s, (%s)", vlist(acc(i, 0), nv), gC)
		g.Inst("ADD %s, %s, %s", gLdc, gC, gC)
	}
	for i := 0; i < mr; i++ {
		g.Inst("ADD %s, %s, %s", gLda, gA, gA)
	}
}

// gemmBlock emits one tile of gemmTile.
func (g *gen) gemmBlock(loadB func(nv int), mr, nv int, l string) {
	g.tileStart(mr, nv, l, acc)
	g.Inst("MOVD %s, %s", gB, gBrow)
	g.Inst("MOVD %s, %s", gK, gStep)
	g.Comment(fmt.Sprintf("The k loop: a row of B, %d broadcasts of A, %d FMAs.", mr, mr*nv))
	g.Label(l)
	loadB(nv)
	for i := 0; i < mr; i++ {
		bc := V(28 + i%2)
		g.Inst("VLD1R.P 4(%s), [%s]", gArow0+R(i), bc.S4())
		for j := 0; j < nv; j++ {
			g.VFMLA(acc(i, j), bc, V(24+j))
		}
	}
	g.Inst("SUBS $1, %s, %s", gStep, gStep)
	g.Inst("BNE %s", l)
	g.tileEnd(mr, nv, acc)
}
