// ScaleColumns<ISA>: the online softmax's rescale of a transposed output
// accumulator (Oᵀ, [dv][rows], the flash loop on AMX tiles) by each row's
// alpha: up to softNV vectors of factors held in registers, each row of
// x multiplied by them in place.

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// scaleColumns emits ScaleColumns<ISA>.
func (g *gen) scaleColumns() {
	x := g.isa
	g.fn("ScaleColumns", "func(x *float32, ldx int, f *float32, n, nv int)",
		"",
		"\tfor i := 0; i < n; i++ {",
		"\t\tfor r := 0; r < nv*lanes; r++ {",
		"\t\t\tx[i*ldx+r] *= f[r]",
		"",
		fmt.Sprintf("with nv in 1..%d (any other value returns), n >= 1, ldx in elements:", x.softNV),
		"one multiply an element, as fallback.ScaleColumns.",
	)
	xp, ldx := g.param("x"), g.stride("ldx")
	g.byRowVectors(x.softNV, func(nv int) {
		b := x.bytes()
		fp := g.param("f")
		f := make([]reg.VecVirtual, nv)
		for j := range f {
			f[j] = g.vec()
			g.VMOVUPS(operand.Mem{Base: fp, Disp: j * b}, f[j])
		}
		n, row := g.param("n"), g.GP64()
		g.MOVQ(xp, row)
		l := label("vecs", nv, "rows")
		g.Label(l)
		for j := range f {
			t := g.vec()
			g.VMULPS(operand.Mem{Base: row, Disp: j * b}, f[j], t)
			g.VMOVUPS(t, operand.Mem{Base: row, Disp: j * b})
		}
		g.ADDQ(ldx, row)
		g.DECQ(n)
		g.JNZ(operand.LabelRef(l))
	})
}
