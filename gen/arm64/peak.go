// FMAPeakNEON: peakChains independent register-only FMA chains (V0..V23,
// each += V24·V25), the machine's FMA throughput with no memory traffic,
// for the bench's %-of-peak figures.

package main

import (
	"fmt"

	. "github.com/fastattn/fastattn/gen/neon"
)

// peakChains is the independent FMA chains of FMAPeakNEON: enough for 4
// FMA pipes of 4-cycle latency (Neoverse V1/V2, Apple M).
const peakChains = 24

// peak emits FMAPeakNEON.
func (g *gen) peak() {
	g.Func("FMAPeakNEON", "(iters int)", 8,
		"FMAPeakNEON is",
		"",
		"\tfor i := 0; i < iters; i++ {",
		fmt.Sprintf("\t\tfor c := 0; c < %d; c++ { acc[c] += a*b }   (one vector FMA each)", peakChains),
		"",
		fmt.Sprintf("so one call computes iters·%d·4·2 floating-point operations.", peakChains),
	)
	const iters R = 0
	g.loadArgs(arg{"iters", iters})
	for i := 0; i < peakChains+2; i++ {
		g.zero(V(i))
	}
	g.Inst("CBZ %s, done", iters)
	g.Label("loop")
	for i := 0; i < peakChains; i++ {
		g.VFMLA(V(i), V(peakChains+1), V(peakChains))
	}
	g.Inst("SUBS $1, %s, %s", iters, iters)
	g.Inst("BNE loop")
	g.Label("done")
	g.Inst("RET")
}
