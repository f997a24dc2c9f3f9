// HeadScores<E>AVX2, HeadPV<E>AVX2: a decode step of one query row per KV
// head over BSHD K/V, read key by key across the heads: each key's rows of
// every head of the item lie side by side, so walking keys outer and
// heads inner reads K and V in address order, one ascending stream each.
// Walked head by head instead, each head's rows are a page apart (BSHD's
// stride is heads × row bytes), which no hardware prefetcher follows and
// which fall in one L1 set. Generated for AVX2 only: the loops are bound
// by the memory, and the AVX-512 set runs them as they are.

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// headUnroll is the vectors of a head's row each step of the head loops
// takes: four independent FMA chains (the scores' accumulators, the PV's
// output vectors).
const headUnroll = 4

// headScores emits HeadScores<E>AVX2.
func (g *gen) headScores(e elem) {
	g.fn("HeadScores"+e.name(), fmt.Sprintf("func(s *float32, lds int, q *float32, k %s, ldk int, nk, heads, nvec int)", e.goType()),
		"",
		"\tfor j := 0; j < nk; j++ {",
		"\t\tfor h := 0; h < heads; h++ {",
		"\t\t\ts[j*lds+h] = Σ_{d<nvec*lanes} q[h*nvec*lanes+d] · widen(k[j*ldk+h*nvec*lanes+d])",
		"",
		"with nk, heads, nvec >= 1, strides in elements: key j's rows of the",
		"heads side by side, read in address order. Four accumulators take",
		"vectors 4i..4i+3 of a row (the rest go to the first), summed as",
		"(a0+a1)+(a2+a3), then across lanes.",
	)
	sp, lds := g.param("s"), g.stride("lds")
	kp, ldk := g.param("k"), g.param("ldk")
	g.SHLQ(operand.U8(e.log()), ldk)
	nk := g.param("nk")
	zr := g.vec()
	g.zero(zr)
	eb := g.isa.lanes * e.bytes()
	g.Label("key")
	qp, kr, so, h := g.param("q"), g.GP64(), g.GP64(), g.param("heads")
	g.MOVQ(kp, kr)
	g.MOVQ(sp, so)
	g.Label("head")
	acc := make([]reg.VecVirtual, headUnroll)
	for i := range acc {
		acc[i] = g.vec()
		g.zeroFrom(zr, acc[i])
	}
	nv := g.param("nvec")
	g.Label("quad")
	g.CMPQ(nv, operand.Imm(headUnroll))
	g.JLT(operand.LabelRef("single"))
	for i := range acc {
		kv := g.vec()
		g.widen(e, operand.Mem{Base: kr, Disp: i * eb}, kv)
		g.VFMADD231PS(operand.Mem{Base: qp, Disp: i * g.isa.bytes()}, kv, acc[i])
	}
	g.ADDQ(operand.Imm(uint64(headUnroll*g.isa.bytes())), qp)
	g.ADDQ(operand.Imm(uint64(headUnroll*eb)), kr)
	g.SUBQ(operand.Imm(headUnroll), nv)
	g.JMP(operand.LabelRef("quad"))
	g.Label("single")
	g.TESTQ(nv, nv)
	g.JZ(operand.LabelRef("sum"))
	kv := g.vec()
	g.widen(e, operand.Mem{Base: kr}, kv)
	g.VFMADD231PS(operand.Mem{Base: qp}, kv, acc[0])
	g.ADDQ(operand.Imm(uint64(g.isa.bytes())), qp)
	g.ADDQ(operand.Imm(uint64(eb)), kr)
	g.DECQ(nv)
	g.JMP(operand.LabelRef("single"))
	g.Label("sum")
	g.VADDPS(acc[1], acc[0], acc[0])
	g.VADDPS(acc[3], acc[2], acc[2])
	g.VADDPS(acc[2], acc[0], acc[0])
	x := g.reduce(acc[0])
	g.VMOVSS(x, operand.Mem{Base: so})
	g.ADDQ(operand.Imm(4), so)
	g.DECQ(h)
	g.JNZ(operand.LabelRef("head"))
	g.ADDQ(lds, sp)
	g.ADDQ(ldk, kp)
	g.DECQ(nk)
	g.JNZ(operand.LabelRef("key"))
	g.ret()
}

// headPV emits HeadPV<E>AVX2.
func (g *gen) headPV(e elem) {
	g.fn("HeadPV"+e.name(), fmt.Sprintf("func(o *float32, ldo int, p *float32, ldp int, v %s, ldv int, alpha *float32, nk, heads, nvec int)", e.goType()),
		"",
		"\tfor h := 0; h < heads; h++ {",
		"\t\to[h*ldo+d] *= alpha[h]                       for d < nvec*lanes",
		"\tfor j := 0; j < nk; j++ {",
		"\t\tfor h := 0; h < heads; h++ {",
		"\t\t\to[h*ldo+d] += p[j*ldp+h] · widen(v[j*ldv+h*nvec*lanes+d])   for d < nvec*lanes",
		"",
		"with nk, heads, nvec >= 1, strides in elements: one multiply and one",
		"FMA an element, key j's rows of the heads read in address order.",
	)
	op, ldo := g.param("o"), g.stride("ldo")
	b := g.isa.bytes()
	// The rescale: each head's row of O by its alpha.
	{
		ap, h, or := g.param("alpha"), g.param("heads"), g.GP64()
		g.MOVQ(op, or)
		g.Label("scale_head")
		a := g.vec()
		g.VBROADCASTSS(operand.Mem{Base: ap}, a)
		nv, at := g.param("nvec"), g.GP64()
		g.MOVQ(or, at)
		g.Label("scale_vec")
		t := g.vec()
		g.VMULPS(operand.Mem{Base: at}, a, t)
		g.VMOVUPS(t, operand.Mem{Base: at})
		g.ADDQ(operand.Imm(uint64(b)), at)
		g.DECQ(nv)
		g.JNZ(operand.LabelRef("scale_vec"))
		g.ADDQ(ldo, or)
		g.ADDQ(operand.Imm(4), ap)
		g.DECQ(h)
		g.JNZ(operand.LabelRef("scale_head"))
	}
	pp, ldp := g.param("p"), g.stride("ldp")
	vp, ldv := g.param("v"), g.param("ldv")
	g.SHLQ(operand.U8(e.log()), ldv)
	nk := g.param("nk")
	eb := g.isa.lanes * e.bytes()
	g.Label("key")
	pr, vr, orow, h := g.GP64(), g.GP64(), g.GP64(), g.param("heads")
	g.MOVQ(pp, pr)
	g.MOVQ(vp, vr)
	g.MOVQ(op, orow)
	g.Label("head")
	w := g.vec()
	g.VBROADCASTSS(operand.Mem{Base: pr}, w)
	nv, at := g.param("nvec"), g.GP64()
	g.MOVQ(orow, at)
	step := func(n int) {
		for i := 0; i < n; i++ {
			vv, t := g.vec(), g.vec()
			g.widen(e, operand.Mem{Base: vr, Disp: i * eb}, vv)
			g.VMOVUPS(operand.Mem{Base: at, Disp: i * b}, t)
			g.VFMADD231PS(vv, w, t)
			g.VMOVUPS(t, operand.Mem{Base: at, Disp: i * b})
		}
		g.ADDQ(operand.Imm(uint64(n*b)), at)
		g.ADDQ(operand.Imm(uint64(n*eb)), vr)
	}
	g.Label("quad")
	g.CMPQ(nv, operand.Imm(headUnroll))
	g.JLT(operand.LabelRef("single"))
	step(headUnroll)
	g.SUBQ(operand.Imm(headUnroll), nv)
	g.JMP(operand.LabelRef("quad"))
	g.Label("single")
	g.TESTQ(nv, nv)
	g.JZ(operand.LabelRef("next"))
	step(1)
	g.DECQ(nv)
	g.JMP(operand.LabelRef("single"))
	g.Label("next")
	g.ADDQ(operand.Imm(4), pr)
	g.ADDQ(ldo, orow)
	g.DECQ(h)
	g.JNZ(operand.LabelRef("head"))
	g.ADDQ(ldp, pp)
	g.ADDQ(ldv, vp)
	g.DECQ(nk)
	g.JNZ(operand.LabelRef("key"))
	g.ret()
}
