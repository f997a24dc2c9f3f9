// The column panels of Gemm and PV and the row vectors of Softmax and
// ScoreBias: a dispatch on the nv argument (1..maxNV vectors) to one copy
// of the kernel's body per value, so every register of a tile is named
// at generation time.

package main

import "fmt"

// maxNV is the most vectors of a panel: 4 (16 columns), with mk = 6 rows
// the 24 accumulators of the Gemm and PV tiles.
const maxNV = 4

// panels emits a jump on the argument nv in rNV (1..maxNV; any other
// value returns) to one copy of panel per value, labelled prefix_vecsN.
func (g *gen) panels(prefix string, panel func(nv int)) {
	for v := maxNV; v >= 1; v-- {
		g.Inst("CMP $%d, %s", v, rNV)
		g.Inst("BEQ %s_vecs%d", prefix, v)
	}
	g.Inst("RET")
	for nv := maxNV; nv >= 1; nv-- {
		g.Comment(fmt.Sprintf("Panel of %d vectors.", nv))
		g.Label(fmt.Sprintf("%s_vecs%d", prefix, nv))
		panel(nv)
	}
}
