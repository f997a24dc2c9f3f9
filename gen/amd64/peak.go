// FMAPeak<ISA>: 12 independent register-only FMA chains, the machine's
// FMA throughput with no memory traffic (4-5 cycles of latency × 2 FMAs
// a cycle), for the bench's %-of-peak figures.

package main

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

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
	g.peakLoop(peakChains, func(acc, a, b reg.VecVirtual) { g.VFMADD213PS(b, a, acc) })
}

// peakLoop emits the body of a throughput loop: chains accumulators and
// two operands from zero, then iters rounds of op(acc[c], a, b) for every
// chain, each independent of the others.
func (g *gen) peakLoop(chains int, op func(acc, a, b reg.VecVirtual)) {
	n := g.param("iters")
	acc := make([]reg.VecVirtual, chains)
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
		op(acc[i], a, b)
	}
	g.DECQ(n)
	g.JNZ(operand.LabelRef("loop"))
	g.Label("done")
	g.ret()
}
