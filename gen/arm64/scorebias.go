// ScoreBiasNEON, the twin of fallback.ScoreBias: per key, the key's row of
// nv ≤ 4 vectors (V0..V3) loaded, the term added, stored back; the
// slopes in V8..V11, the distances in V12..V15 (stepped by 1.0 per key,
// exact), 1.0 in V16, the key's bias broadcast in V17, the terms V20..V23.

package main

import (
	"fmt"

	. "github.com/fastattn/fastattn/gen/neon"
)

// ScoreBiasNEON's general registers: its arguments (nv in rNV).
const (
	bS     R = 0 // s, stepped key by key
	bLds   R = 1 // lds, bytes
	bSlope R = 2 // slope (0: no ALiBi term)
	bDist  R = 3 // dist
	bBias  R = 4 // bias (0: no key term), stepped key by key
	bNK    R = 5 // nk, counted down
)

// scoreBias emits ScoreBiasNEON.
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
	g.loadArgs(arg{"s", bS}, arg{"lds", bLds}, arg{"slope", bSlope}, arg{"dist", bDist}, arg{"bias", bBias}, arg{"nk", bNK}, arg{"nv", rNV})
	g.toBytes(bLds)
	g.loadConst("one", 16)
	g.panels("bias", func(nv int) {
		g.scoreBiasPanel(nv)
		g.Inst("RET")
	})
}

// scoreBiasPanel is ScoreBias on nv vectors: three loops, for the bias
// alone, ALiBi alone (the product rounded once, as fma(..., 0)) and both.
func (g *gen) scoreBiasPanel(nv int) {
	l := fmt.Sprintf("bias_vecs%d_", nv)
	next := func(loop string) {
		g.Inst("VST1 %s, (%s)", vlist(0, nv), bS)
		g.Inst("ADD %s, %s, %s", bLds, bS, bS)
		g.Inst("SUBS $1, %s, %s", bNK, bNK)
		g.Inst("BNE %s%s", l, loop)
		g.Inst("RET")
	}
	g.Inst("CBNZ %s, %salibi", bSlope, l)
	g.Label(l + "bias")
	g.Inst("VLD1R.P 4(%s), [%s]", bBias, V(17).S4())
	g.Inst("VLD1 (%s), %s", bS, vlist(0, nv))
	for j := 0; j < nv; j++ {
		g.Emit(EncFADD(V(j), V(j), 17))
	}
	next("bias")

	g.Label(l + "alibi")
	g.Inst("VLD1 (%s), %s", bSlope, vlist(8, nv))
	g.Inst("VLD1 (%s), %s", bDist, vlist(12, nv))
	g.Inst("CBNZ %s, %sboth", bBias, l)
	g.Label(l + "slopes")
	g.Inst("VLD1 (%s), %s", bS, vlist(0, nv))
	for j := 0; j < nv; j++ {
		g.Emit(EncFMUL(V(20+j), V(8+j), V(12+j)))
		g.Emit(EncFADD(V(j), V(j), V(20+j)))
		g.Emit(EncFADD(V(12+j), V(12+j), 16))
	}
	next("slopes")

	g.Label(l + "both")
	g.Inst("VLD1R.P 4(%s), [%s]", bBias, V(17).S4())
	g.Inst("VLD1 (%s), %s", bS, vlist(0, nv))
	for j := 0; j < nv; j++ {
		g.VMOV(V(20+j), 17)
		g.VFMLA(V(20+j), V(8+j), V(12+j))
		g.Emit(EncFADD(V(j), V(j), V(20+j)))
		g.Emit(EncFADD(V(12+j), V(12+j), 16))
	}
	next("both")
}
