// PVNEON, the flash loop's O = alpha·O + P·V. Register tile: mk = 6 rows
// × nv ≤ 4 vectors of a V row (V24..V27, read in place at stride ldv):
// 24 accumulators V0..V23 (acc). The 6 P entries of a key come in two
// loads (V28: rows 0-3, V29: rows 4-5) and are used by lane (FMLA by
// element), so a key costs nv + 2 loads for 6·nv FMAs.

package main

import (
	"fmt"

	. "github.com/fastattn/fastattn/gen/neon"
)

// PVNEON's general registers: the arguments (rows in rRows, nv in rNV),
// strides in bytes, and the walkers of a tile.
const (
	pO     R = 0  // o row of the row group
	pLdo   R = 1  // ldo, bytes
	pP     R = 2  // p column of the row group
	pLdp   R = 3  // ldp, bytes
	pV     R = 4  // v
	pLdv   R = 5  // ldv, bytes
	pNK    R = 7  // nk
	pAlpha R = 9  // alpha (0: none), stepped through the rows
	pKeys  R = 15 // the key counter
	pVrow  R = 16 // the V row
	pProw  R = 17 // the P row
	pOrow  R = 19 // the o row walker
)

// pv emits PVNEON.
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
	g.loadArgs(arg{"o", pO}, arg{"ldo", pLdo}, arg{"p", pP}, arg{"ldp", pLdp}, arg{"v", pV}, arg{"ldv", pLdv}, arg{"alpha", pAlpha}, arg{"rows", rRows}, arg{"nk", pNK}, arg{"nv", rNV})
	g.toBytes(pLdo, pLdp, pLdv)
	g.panelRows("pv", g.pvBlock)
}

// pvBlock emits one mr×nv tile: o rows from pO, P columns from pP, then
// advances both by mr rows.
func (g *gen) pvBlock(mr, nv int, l string) {
	g.Comment(fmt.Sprintf("Tile of %d rows × %d vectors of o, rescaled by alpha (if any).", mr, nv))
	g.Inst("MOVD %s, %s", pO, pOrow)
	for i := 0; i < mr; i++ {
		g.Inst("VLD1 (%s), %s", pOrow, vlist(acc(i, 0), nv))
		g.Inst("ADD %s, %s, %s", pLdo, pOrow, pOrow)
	}
	g.Inst("CBZ %s, %s_noscale", pAlpha, l)
	for i := 0; i < mr; i++ {
		g.Inst("VLD1R.P 4(%s), [%s]", pAlpha, V(28).S4())
		for j := 0; j < nv; j++ {
			g.Emit(EncFMUL(acc(i, j), acc(i, j), 28))
		}
	}
	g.Label(l + "_noscale")
	g.Inst("CBZ %s, %s_store", pNK, l)
	g.Inst("MOVD %s, %s", pV, pVrow)
	g.Inst("MOVD %s, %s", pP, pProw)
	g.Inst("MOVD %s, %s", pNK, pKeys)
	g.Comment(fmt.Sprintf("The key loop: a row of V, the key's %d weights, %d FMAs by element.", mr, mr*nv))
	g.Label(l)
	g.Inst("VLD1.P (%s)(%s), %s", pVrow, pLdv, vlist(24, nv))
	// P[c][r..r+mr): lanes of V28 (rows 0-3) and V29 (rows 4-5).
	switch mr {
	case 6:
		g.Inst("VLD1 (%s), [%s]", pProw, V(28).S4())
		g.Inst("FMOVD 16(%s), %s", pProw, V(29).F())
	case 4:
		g.Inst("VLD1 (%s), [%s]", pProw, V(28).S4())
	case 2:
		g.Inst("FMOVD (%s), %s", pProw, V(28).F())
	case 1:
		g.Inst("FMOVS (%s), %s", pProw, V(28).F())
	}
	for i := 0; i < mr; i++ {
		for j := 0; j < nv; j++ {
			g.Emit(EncFMLAElem(acc(i, j), V(24+j), V(28+i/4), i%4))
		}
	}
	g.Inst("ADD %s, %s, %s", pLdp, pProw, pProw)
	g.Inst("SUBS $1, %s, %s", pKeys, pKeys)
	g.Inst("BNE %s", l)
	g.Comment("Store the tile.")
	g.Label(l + "_store")
	for i := 0; i < mr; i++ {
		g.Inst("VST1 %s, (%s)", vlist(acc(i, 0), nv), pO)
		g.Inst("ADD %s, %s, %s", pLdo, pO, pO)
	}
	g.Inst("ADD $%d, %s, %s", 4*mr, pP, pP)
}
