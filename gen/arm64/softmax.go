// SoftmaxNEON: one online-softmax step over a transposed score tile, up
// to 4 vectors of rows per call, each key's row of vectors loaded at once:
// the running max in V0..V3, the bases in V4..V7, the sums in V8..V11,
// exp's constants in V16..V27 for the softcap, the weights' exp's in
// V16..V25 after it; and the softcap (tanh) it inlines.

package main

import (
	"fmt"

	. "github.com/fastattn/fastattn/gen/neon"
)

// SoftmaxNEON's general registers: the arguments (nv in rNV) and the
// walkers of the passes over the keys.
const (
	sS     R = 0 // s
	sLds   R = 1 // lds, bytes
	sM     R = 2 // m
	sL     R = 3 // l
	sAlpha R = 4 // alpha
	sNK    R = 5 // nk
	sRow   R = 6 // the key's row
	sKeys  R = 7 // the key counter
	sVec   R = 9 // the vector in the row
)

// keyLoop emits a loop over the nk keys of the tile: body emitted once
// with sRow at the key's row (from sS, stepped by sLds), under label l.
func (g *gen) keyLoop(l string, body func()) {
	g.Inst("MOVD %s, %s", sS, sRow)
	g.Inst("MOVD %s, %s", sNK, sKeys)
	g.Label(l)
	body()
	g.Inst("ADD %s, %s, %s", sLds, sRow, sRow)
	g.Inst("SUBS $1, %s, %s", sKeys, sKeys)
	g.Inst("BNE %s", l)
}

// softmax emits SoftmaxNEON. Vector registers: V0..V3 the running max,
// V4..V7 the base, V8..V11 the sums, V12..V15 and V29 temporaries,
// V16..V27 the exp constants (loaded for the softcap's pass only), then
// V16..V25 the weights' exp constants, V28, V30, V31 more constants.
func (g *gen) softmax() {
	g.Func("SoftmaxNEON", "(s *float32, lds int, m *float32, l *float32, alpha *float32, nk int, nv int, softcap float32)", 60,
		"SoftmaxNEON is",
		"",
		"\tfor r := 0; r < nv*4; r++ {",
		"\t\tx[c] = softcap > 0 ? softcap·tanh(s[c*lds+r]/softcap) : s[c*lds+r]   (-Inf stays)",
		"\t\tmNew = max(m[r], max_c x[c]);  base = max(mNew, -MaxFloat32)",
		"\t\ts[c*lds+r] = fallback.WeightExp32(x[c] - base)   (e^(x[c]-base) up to rounding)",
		"\t\talpha[r] = fallback.WeightExp32(m[r] - base);  l[r] = l[r]·alpha[r] + Σ_c s[c*lds+r];  m[r] = mNew",
		"",
		"with nv in 1..4, nk >= 1, lds in elements.",
	)
	g.loadArgs(arg{"s", sS}, arg{"lds", sLds}, arg{"m", sM}, arg{"l", sL}, arg{"alpha", sAlpha}, arg{"nk", sNK}, arg{"nv", rNV})
	g.toBytes(sLds)
	g.panels("softmax", func(nv int) {
		g.softmaxPanel(nv)
		g.Inst("RET")
	})
}

func (g *gen) softmaxPanel(nv int) {
	l := fmt.Sprintf("softmax_vecs%d_", nv)
	g.Inst("VLD1 (%s), %s", sM, vlist(0, nv)) // the running max starts at m
	// Softcap? (F30 = softcap; compare with 0.)
	g.Inst("FMOVS %s, %s", g.Arg("softcap"), V(30).F())
	g.Inst("FCMPS $(0.0), %s", V(30).F())
	g.Inst("BGT %scapped", l)

	// Pass 1: the max over the keys.
	g.keyLoop(l+"max", func() {
		g.Inst("VLD1 (%s), %s", sRow, vlist(12, nv))
		for j := 0; j < nv; j++ {
			g.Emit(EncFMAX(V(j), V(j), V(12+j)))
		}
	})
	g.Inst("B %sweights", l)

	// Pass 1 with softcap: x = c·tanh(x/c) in place, then the max, with
	// fallback.Tanh32's two forms of tanh(a), a = |y|, y = x/c: below
	// tanhSmall a + (a·z)·P(z), z = a² (V28 a, V9 z, V10/V11 Horner, the
	// coefficients t0..t4 loaded in turn through R24); above it
	// (1-e)/(1+e), e = exp(-2a); blended by V11 = a < tanhSmall (V8), then
	// y's sign. V30 = c, V31 = 1/c, V6 = sign mask (-0.0), V7 = -Inf.
	g.Label(l + "capped")
	g.loadExpConsts() // tanh's exp form (the weights' pass loads its own)
	g.Inst("VDUP %s, %s", V(30).S(0), V(30).S4())
	g.Emit(EncFDIV(31, cOne, 30))
	g.zero(6)
	g.Emit(EncFNEG(6, 6))
	g.loadConst("negInf", 7)
	g.loadConst("tanhSmall", 8)
	g.keyLoop(l+"capmax", func() {
		g.Inst("MOVD %s, %s", sRow, sVec)
		for j := 0; j < nv; j++ {
			g.Inst("VLD1 (%s), [%s]", sVec, V(12).S4())
			g.Emit(EncFMUL(13, 12, 31)) // y
			g.Emit(EncFABS(5, 13))
			g.Emit(EncFADD(5, 5, 5))
			g.Emit(EncFNEG(5, 5)) // -2a
			e := g.exp(5, 14, 15, 4, 29, 0, false)
			g.Emit(EncFSUB(14, cOne, e))
			g.Emit(EncFADD(e, e, cOne))
			g.Emit(EncFDIV(14, 14, e)) // the exp form
			g.Emit(EncFABS(28, 13))    // a
			g.Emit(EncFMUL(9, 28, 28)) // z
			g.constAddr("t0", rConst)
			g.Inst("VLD1R.P 4(%s), [%s]", rConst, V(10).S4())
			p, t := V(10), V(11)
			for range 4 { // t1..t4: t = coefficient + p·z
				g.Inst("VLD1R.P 4(%s), [%s]", rConst, t.S4())
				g.VFMLA(t, p, 9)
				p, t = t, p
			}
			g.Emit(EncFCMGT(t, 8, 28)) // small = tanhSmall > a (false for NaN)
			g.Emit(EncFMUL(9, 28, 9))  // a·z
			g.VFMLA(28, 9, p)          // a + (a·z)·P(z)
			g.VBSL(t, 28, 14)          // small ? polynomial : exp form
			g.VMOV(5, 6)
			g.VBSL(5, 13, t) // y's sign bit, tanh(a)'s others
			g.Emit(EncFMUL(5, 5, 30))
			g.Emit(EncFCMEQ(13, 12, 7))
			g.VBSL(13, 12, 5) // -Inf stays -Inf
			g.Inst("VST1.P [%s], 16(%s)", V(13).S4(), sVec)
			g.Emit(EncFMAX(V(j), V(j), 13))
		}
	})

	// Pass 2: base = max(mNew, -MaxFloat32), weights and their sums.
	g.Label(l + "weights")
	g.loadConst("negMax", 28)
	g.loadWeightExpConsts()
	for j := 0; j < nv; j++ {
		g.Emit(EncFMAX(V(4+j), V(j), 28))
		g.zero(V(8 + j))
	}
	g.keyLoop(l+"exp", func() {
		g.Inst("MOVD %s, %s", sRow, sVec)
		for j := 0; j < nv; j++ {
			g.Inst("VLD1 (%s), [%s]", sVec, V(12).S4())
			g.Emit(EncFSUB(12, 12, V(4+j)))
			p := g.weightExp(12, 13, 14, 15, 29)
			g.Inst("VST1.P [%s], 16(%s)", p.S4(), sVec)
			g.Emit(EncFADD(V(8+j), V(8+j), p))
		}
	})

	// alpha = exp(m - base); l = l·alpha + sum; m = mNew.
	for j := 0; j < nv; j++ {
		g.Inst("VLD1 (%s), [%s]", sM, V(12).S4())
		g.Emit(EncFSUB(12, 12, V(4+j)))
		a := g.weightExp(12, 13, 14, 15, 29)
		g.Inst("VST1.P [%s], 16(%s)", a.S4(), sAlpha)
		g.Inst("VLD1 (%s), [%s]", sL, V(30).S4())
		g.VFMLA(V(8+j), 30, a)
		g.Inst("VST1.P [%s], 16(%s)", V(8+j).S4(), sL)
		g.Inst("VST1.P [%s], 16(%s)", V(j).S4(), sM)
	}
}
