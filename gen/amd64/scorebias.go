// ScoreBias<ISA>: the ALiBi term and the per-key bias added to a
// transposed score tile, one key's row of up to 4 row vectors at a time
// (the scores, the slopes and the distances of a row vector in registers).

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// scoreBias emits ScoreBias: the ALiBi term and the per-key bias added to
// a transposed score tile, key by key (a key's row of nv vectors is
// contiguous). The distances are kept in registers and stepped by 1 per
// key, exact in float32, so the term is fma(slope, dist + c, bias[c]) as
// in fallback.ScoreBias, bit for bit.
func (g *gen) scoreBias() {
	g.fn("ScoreBias", "func(s *float32, lds int, slope, dist, bias *float32, nk, nv int)",
		"",
		"\tfor c := 0; c < nk; c++ { for r := 0; r < nv*lanes; r++ {",
		"\t\ts[c*lds+r] += fma(slope[r], dist[r] + c, bias[c])",
		"\t}}",
		"",
		fmt.Sprintf("with nv in 1..%d, nk >= 1, lds in elements; slope and dist both nil", g.isa.softNV),
		"(no ALiBi term) or both set, bias nil (no key term).",
	)
	g.byRowVectors(g.isa.softNV, g.scoreBiasPanel)
}

// scoreBiasPanel is ScoreBias on nv vectors of rows: three loops, for the
// bias alone, ALiBi alone and both.
func (g *gen) scoreBiasPanel(nv int) {
	b := g.isa.bytes()
	sp, lds := g.param("s"), g.stride("lds")
	slope, dist, bias := g.param("slope"), g.param("dist"), g.param("bias")
	n := g.param("nk")
	lbl := func(s string) string { return label("vecs", nv, s) }
	add := func(t reg.VecVirtual) { // s[c][:] += t, one vector at a time
		for j := 0; j < nv; j++ {
			x := g.vec()
			g.VADDPS(operand.Mem{Base: sp, Disp: j * b}, t, x)
			g.VMOVUPS(x, operand.Mem{Base: sp, Disp: j * b})
		}
	}
	next := func(loop string, ptrs ...reg.GPVirtual) {
		g.ADDQ(lds, sp)
		for _, p := range ptrs {
			g.ADDQ(operand.Imm(4), p)
		}
		g.DECQ(n)
		g.JNZ(operand.LabelRef(lbl(loop)))
	}
	g.TESTQ(slope, slope)
	g.JNZ(operand.LabelRef(lbl("alibi")))
	// The bias alone: one broadcast per key.
	g.Label(lbl("bias"))
	t := g.vec()
	g.VBROADCASTSS(operand.Mem{Base: bias}, t)
	add(t)
	next("bias", bias)
	g.ret()

	g.Label(lbl("alibi"))
	sl, d := make([]reg.VecVirtual, nv), make([]reg.VecVirtual, nv)
	for j := range sl {
		sl[j], d[j] = g.vec(), g.vec()
		g.VMOVUPS(operand.Mem{Base: slope, Disp: j * b}, sl[j])
		g.VMOVUPS(operand.Mem{Base: dist, Disp: j * b}, d[j])
	}
	one := g.vec()
	g.VMOVUPS(g.cst("one"), one)
	g.TESTQ(bias, bias)
	g.JNZ(operand.LabelRef(lbl("both")))
	// ALiBi alone: slope·(dist + c), rounded once like fma(..., 0).
	g.Label(lbl("slopes"))
	for j := 0; j < nv; j++ {
		x := g.vec()
		g.VMULPS(d[j], sl[j], x)
		g.VADDPS(operand.Mem{Base: sp, Disp: j * b}, x, x)
		g.VMOVUPS(x, operand.Mem{Base: sp, Disp: j * b})
		g.VADDPS(one, d[j], d[j])
	}
	next("slopes")
	g.ret()
	// Both: fma(slope, dist + c, bias[c]).
	g.Label(lbl("both"))
	bc := g.vec()
	g.VBROADCASTSS(operand.Mem{Base: bias}, bc)
	for j := 0; j < nv; j++ {
		x := g.vec()
		g.VMOVUPS(bc, x)
		g.VFMADD231PS(d[j], sl[j], x)
		g.VADDPS(operand.Mem{Base: sp, Disp: j * b}, x, x)
		g.VMOVUPS(x, operand.Mem{Base: sp, Disp: j * b})
		g.VADDPS(one, d[j], d[j])
	}
	next("both", bias)
}
