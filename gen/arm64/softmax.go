package main

import (
	"fmt"

	. "github.com/fastattn/fastattn/gen/neon"
)

// The exp constants live in V16..V27 for a whole kernel.
const (
	cExpMin V = 16 + iota
	cLog2e
	cLn2hi
	cLn2lo
	cP0 // p0..p5 in V20..V25
	_
	_
	_
	_
	_
	cOne
	cBias
)

// loadExpConsts fills V16..V27.
func (g *gen) loadExpConsts() {
	for i, name := range []string{"expMin", "log2e", "ln2hi", "ln2lo", "p0", "p1", "p2", "p3", "p4", "p5", "one", "bias"} {
		g.loadConst(name, cExpMin+V(i))
	}
}

// exp computes exp(y) with temporaries n, p, t and lt, consuming y, and
// returns the register holding the result (p or t). It is fallback.Exp32's
// algorithm in vector form:
//
//	lt = y < expMin (false for NaN); y = max(y, expMin) [and min(y, hi)]
//	n = round(y·log2e); r = y - n·ln2hi - n·ln2lo     (FRINTN; two FMLS)
//	p = ((((((p0·r+p1)·r+p2)·r+p3)·r+p4)·r+p5)·r+1)·r+1  (Horner: FMLA accumulates,
//	                                                  so each step copies the
//	                                                  next coefficient first)
//	exp = p·2^n, 2^n = (int(n) << 23) + bits(1.0); lanes with lt cleared.
func (g *gen) exp(y, n, p, t, lt V, hi V, clampHigh bool) V {
	g.Emit(EncFCMGT(lt, cExpMin, y))
	g.Emit(EncFMAX(y, y, cExpMin))
	if clampHigh {
		g.Emit(EncFMIN(y, y, hi))
	}
	g.Emit(EncFMUL(n, y, cLog2e))
	g.Emit(EncFRINTN(n, n))
	g.Emit(EncFMLS(y, n, cLn2hi))
	g.Emit(EncFMLS(y, n, cLn2lo))
	g.move(p, cP0)
	for _, c := range []V{cP0 + 1, cP0 + 2, cP0 + 3, cP0 + 4, cP0 + 5, cOne, cOne} {
		g.move(t, c)
		g.Emit(EncFMLA(t, p, y))
		p, t = t, p
	}
	g.Emit(EncFCVTZS(n, n))
	g.Emit(EncSHL(n, n, 23))
	g.Emit(EncADD(n, n, cBias))
	g.Emit(EncFMUL(p, p, n))
	g.Emit(EncBIC(p, p, lt))
	return p
}

// softmax emits SoftmaxNEON. Registers: R0 s, R1 lds bytes, R2 m, R3 l,
// R4 alpha, R5 nk, R8 nv, R6 the key row, R7 the key counter, R9 the vector
// in the row. V0..V3 the running max, V4..V7 the base, V8..V11 the sums,
// V12..V15 and V29 temporaries, V16..V27 the exp constants, V28, V30, V31
// more constants.
func (g *gen) softmax() {
	g.Func("SoftmaxNEON", "(s *float32, lds int, m *float32, l *float32, alpha *float32, nk int, nv int, softcap float32)", 60,
		"SoftmaxNEON is",
		"",
		"\tfor r := 0; r < nv*4; r++ {",
		"\t\tx[c] = softcap > 0 ? softcap·tanh(s[c*lds+r]/softcap) : s[c*lds+r]   (-Inf stays)",
		"\t\tmNew = max(m[r], max_c x[c]);  base = max(mNew, -MaxFloat32)",
		"\t\ts[c*lds+r] = exp(x[c] - base)",
		"\t\talpha[r] = exp(m[r] - base);  l[r] = l[r]·alpha[r] + Σ_c s[c*lds+r];  m[r] = mNew",
		"",
		"with nv in 1..4, nk >= 1, lds in elements.",
	)
	g.loadArgs("s", "lds", "m", "l", "alpha", "nk", "nv")
	g.Inst("LSL $2, R1, R1")
	g.loadExpConsts()
	g.panels("soft", func(nv int) {
		g.softmaxPanel(nv)
		g.Inst("RET")
	})
}

func (g *gen) softmaxPanel(nv int) {
	l := fmt.Sprintf("s%d", nv)
	g.Inst("VLD1 (R2), %s", vlist(0, nv)) // the running max starts at m
	// Softcap? (F30 = softcap; compare with 0.)
	g.Inst("FMOVS softcap+56(FP), F30")
	g.Inst("FCMPS $(0.0), F30")
	g.Inst("BGT %scapped", l)

	// Pass 1: the max over the keys.
	g.Inst("MOVD R0, R6")
	g.Inst("MOVD R5, R7")
	g.Label(l + "max")
	g.Inst("VLD1 (R6), %s", vlist(12, nv))
	for j := 0; j < nv; j++ {
		g.Emit(EncFMAX(V(j), V(j), V(12+j)))
	}
	g.Inst("ADD R1, R6, R6")
	g.Inst("SUBS $1, R7, R7")
	g.Inst("BNE %smax", l)
	g.Inst("B %sweights", l)

	// Pass 1 with softcap: x = c·tanh(x/c) in place, then the max, with
	// fallback.Tanh32's two forms of tanh(a), a = |y|, y = x/c: below
	// tanhSmall a + (a·z)·P(z), z = a² (V28 a, V9 z, V10/V11 Horner, the
	// coefficients t0..t4 loaded in turn through R24); above it
	// (1-e)/(1+e), e = exp(-2a); blended by V11 = a < tanhSmall (V8), then
	// y's sign. V30 = c, V31 = 1/c, V6 = sign mask (-0.0), V7 = -Inf.
	g.Label(l + "capped")
	g.Inst("VDUP V30.S[0], V30.S4")
	g.Emit(EncFDIV(31, cOne, 30))
	g.zero(6)
	g.Emit(EncFNEG(6, 6))
	g.loadConst("negInf", 7)
	g.loadConst("tanhSmall", 8)
	g.Inst("MOVD R0, R6")
	g.Inst("MOVD R5, R7")
	g.Label(l + "capmax")
	g.Inst("MOVD R6, R9")
	for j := 0; j < nv; j++ {
		g.Inst("VLD1 (R9), [%s]", V(12).S4())
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
		g.constAddr("t0", 24)
		g.Inst("VLD1R.P 4(R24), [%s]", V(10).S4())
		p, t := V(10), V(11)
		for range 4 { // t1..t4: t = coefficient + p·z
			g.Inst("VLD1R.P 4(R24), [%s]", t.S4())
			g.Emit(EncFMLA(t, p, 9))
			p, t = t, p
		}
		g.Emit(EncFCMGT(t, 8, 28)) // small = tanhSmall > a (false for NaN)
		g.Emit(EncFMUL(9, 28, 9))  // a·z
		g.Emit(EncFMLA(28, 9, p))  // a + (a·z)·P(z)
		g.Emit(EncBSL(t, 28, 14))  // small ? polynomial : exp form
		g.move(5, 6)
		g.Emit(EncBSL(5, 13, t)) // y's sign bit, tanh(a)'s others
		g.Emit(EncFMUL(5, 5, 30))
		g.Emit(EncFCMEQ(13, 12, 7))
		g.Emit(EncBSL(13, 12, 5)) // -Inf stays -Inf
		g.Inst("VST1.P [%s], 16(R9)", V(13).S4())
		g.Emit(EncFMAX(V(j), V(j), 13))
	}
	g.Inst("ADD R1, R6, R6")
	g.Inst("SUBS $1, R7, R7")
	g.Inst("BNE %scapmax", l)

	// Pass 2: base = max(mNew, -MaxFloat32), weights and their sums.
	g.Label(l + "weights")
	g.loadConst("negMax", 28)
	for j := 0; j < nv; j++ {
		g.Emit(EncFMAX(V(4+j), V(j), 28))
		g.zero(V(8 + j))
	}
	g.Inst("MOVD R0, R6")
	g.Inst("MOVD R5, R7")
	g.Label(l + "exp")
	g.Inst("MOVD R6, R9")
	for j := 0; j < nv; j++ {
		g.Inst("VLD1 (R9), [%s]", V(12).S4())
		g.Emit(EncFSUB(12, 12, V(4+j)))
		p := g.exp(12, 13, 14, 15, 29, 0, false)
		g.Inst("VST1.P [%s], 16(R9)", p.S4())
		g.Emit(EncFADD(V(8+j), V(8+j), p))
	}
	g.Inst("ADD R1, R6, R6")
	g.Inst("SUBS $1, R7, R7")
	g.Inst("BNE %sexp", l)

	// alpha = exp(m - base); l = l·alpha + sum; m = mNew.
	for j := 0; j < nv; j++ {
		g.Inst("VLD1 (R2), [%s]", V(12).S4())
		g.Emit(EncFSUB(12, 12, V(4+j)))
		a := g.exp(12, 13, 14, 15, 29, 0, false)
		g.Inst("VST1.P [%s], 16(R4)", a.S4())
		g.Inst("VLD1 (R3), [%s]", V(30).S4())
		g.Emit(EncFMLA(V(8+j), 30, a))
		g.Inst("VST1.P [%s], 16(R3)", V(8+j).S4())
		g.Inst("VST1.P [%s], 16(R2)", V(j).S4())
	}
}

// expKernel emits ExpNEON over whole vectors.
func (g *gen) expKernel() {
	g.Func("ExpNEON", "(dst *float32, src *float32, n int)", 24,
		"ExpNEON is",
		"",
		"\tfor i := 0; i < n; i++ {",
		"\t\tdst[i] = fallback.Exp32(src[i])   (up to rounding: at most 2 ulp from e^x)",
		"",
		"with n a multiple of 4 (the caller does the tail).",
	)
	g.Inst("MOVD dst+0(FP), R0")
	g.Inst("MOVD src+8(FP), R1")
	g.Inst("MOVD n+16(FP), R2")
	g.Inst("LSR $2, R2, R2")
	g.Inst("CBZ R2, done")
	g.loadExpConsts()
	g.loadConst("expMax", 28)
	g.Label("loop")
	g.Inst("VLD1.P 16(R1), [%s]", V(12).S4())
	p := g.exp(12, 13, 14, 15, 29, 28, true)
	g.Inst("VST1.P [%s], 16(R0)", p.S4())
	g.Inst("SUBS $1, R2, R2")
	g.Inst("BNE loop")
	g.Label("done")
	g.Inst("RET")
}
