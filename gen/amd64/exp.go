package main

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// expKernel emits Exp<ISA>: dst[i] = exp(src[i]) over whole vectors.
func (g *gen) expKernel() {
	b := g.x.bytes()
	g.fn("Exp", "func(dst, src *float32, n int)",
		"",
		"\tfor i := 0; i < n; i++ {",
		"\t\tdst[i] = fallback.Exp32(src[i])   (up to rounding: at most 2 ulp from e^x)",
		"",
		"with n a multiple of the vector width (the caller does the tail).",
	)
	dp, sp, n := g.GP64(), g.GP64(), g.GP64()
	g.Load(g.Param("dst"), dp)
	g.Load(g.Param("src"), sp)
	g.Load(g.Param("n"), n)
	g.SHRQ(operand.U8(map[bool]uint8{true: 4, false: 3}[g.x.avx512()]), n)
	g.TESTQ(n, n)
	g.JZ(operand.LabelRef("done"))
	g.Label("loop")
	y := g.vec()
	g.VMOVUPS(operand.Mem{Base: sp}, y)
	e := g.exp(y, true)
	g.VMOVUPS(e, operand.Mem{Base: dp})
	g.ADDQ(operand.Imm(uint64(b)), sp)
	g.ADDQ(operand.Imm(uint64(b)), dp)
	g.DECQ(n)
	g.JNZ(operand.LabelRef("loop"))
	g.Label("done")
	g.ret()
}

// peakChains is the number of independent FMA chains of the peak loop:
// enough to cover FMA latency (4-5 cycles) × throughput (2 per cycle).
const peakChains = 12

// peak emits FMAPeak<ISA>: iters rounds of independent register-only FMAs,
// the machine's FMA throughput with no memory traffic.
func (g *gen) peak() {
	g.fn("FMAPeak", "func(iters int)",
		"",
		"\tfor i := 0; i < iters; i++ {",
		"\t\tfor c := 0; c < 12; c++ { acc[c] = acc[c]*a + b }   (one vector FMA each)",
		"",
		"so one call computes iters·12·lanes·2 floating-point operations.",
	)
	n := g.param("iters")
	acc := make([]reg.VecVirtual, peakChains)
	for i := range acc {
		acc[i] = g.vec()
		g.zero(acc[i])
	}
	a, b := g.vec(), g.vec()
	g.zero(a)
	g.zero(b)
	g.TESTQ(n, n)
	g.JZ(operand.LabelRef("done"))
	g.Label("loop")
	for i := range acc {
		g.VFMADD213PS(b, a, acc[i])
	}
	g.DECQ(n)
	g.JNZ(operand.LabelRef("loop"))
	g.Label("done")
	g.ret()
}
