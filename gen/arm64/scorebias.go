package main

import (
	"fmt"

	. "github.com/fastattn/fastattn/gen/neon"
)

// scoreBias emits ScoreBiasNEON, the twin of fallback.ScoreBias: per key,
// the key's row of nv vectors loaded, the term added, stored back.
// Registers: the scores V0..V3, the slopes V8..V11, the distances
// V12..V15 (stepped by 1.0 per key, exact), 1.0 in V16, the key's bias
// broadcast in V17, the terms V20..V23.
func (g *gen) scoreBias() {
	g.Func("ScoreBiasNEON", "(s *float32, lds int, slope *float32, dist *float32, bias *float32, nk int, nv int)", 56,
		"ScoreBiasNEON is",
		"",
		"\tfor c := 0; c < nk; c++ { for r := 0; r < nv*4; r++ {",
		"\t\ts[c*lds+r] += fma(slope[r], dist[r] + c, bias[c])",
		"\t}}",
		"",
		"with nv in 1..4, nk >= 1, lds in elements; slope and dist both nil",
		"(no ALiBi term) or both set, bias nil (no key term).",
	)
	g.loadArgs("s", "lds", "slope", "dist", "bias", "nk", "nv")
	g.Inst("LSL $2, R1, R1")
	g.loadConst("one", 16)
	g.panels("sb", func(nv int) {
		g.scoreBiasPanel(nv)
		g.Inst("RET")
	})
}

// scoreBiasPanel is ScoreBias on nv vectors: three loops, for the bias
// alone, ALiBi alone (the product rounded once, as fma(..., 0)) and both.
func (g *gen) scoreBiasPanel(nv int) {
	l := fmt.Sprintf("b%d", nv)
	next := func(loop string) {
		g.Inst("VST1 %s, (R0)", vlist(0, nv))
		g.Inst("ADD R1, R0, R0")
		g.Inst("SUBS $1, R5, R5")
		g.Inst("BNE %s%s", l, loop)
		g.Inst("RET")
	}
	g.Inst("CBNZ R2, %salibi", l)
	g.Label(l + "bias")
	g.Inst("VLD1R.P 4(R4), [%s]", V(17).S4())
	g.Inst("VLD1 (R0), %s", vlist(0, nv))
	for j := 0; j < nv; j++ {
		g.Emit(EncFADD(V(j), V(j), 17))
	}
	next("bias")

	g.Label(l + "alibi")
	g.Inst("VLD1 (R2), %s", vlist(8, nv))
	g.Inst("VLD1 (R3), %s", vlist(12, nv))
	g.Inst("CBNZ R4, %sboth", l)
	g.Label(l + "slopes")
	g.Inst("VLD1 (R0), %s", vlist(0, nv))
	for j := 0; j < nv; j++ {
		g.Emit(EncFMUL(V(20+j), V(8+j), V(12+j)))
		g.Emit(EncFADD(V(j), V(j), V(20+j)))
		g.Emit(EncFADD(V(12+j), V(12+j), 16))
	}
	next("slopes")

	g.Label(l + "both")
	g.Inst("VLD1R.P 4(R4), [%s]", V(17).S4())
	g.Inst("VLD1 (R0), %s", vlist(0, nv))
	for j := 0; j < nv; j++ {
		g.move(V(20+j), 17)
		g.Emit(EncFMLA(V(20+j), V(8+j), V(12+j)))
		g.Emit(EncFADD(V(j), V(j), V(20+j)))
		g.Emit(EncFADD(V(12+j), V(12+j), 16))
	}
	next("both")
}
