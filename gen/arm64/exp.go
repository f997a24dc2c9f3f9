// The vector exp (fallback.Exp32's algorithm, Horner's form) that Softmax
// inlines, its constants held in V16..V27 for a whole kernel, and ExpNEON,
// exp over whole vectors (one per step, V12..V15 and V29 temporaries).

package main

import (
	"github.com/fastattn/fastattn/gen/expconst"
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
	g.VMOV(p, cP0)
	for _, c := range []V{cP0 + 1, cP0 + 2, cP0 + 3, cP0 + 4, cP0 + 5, cOne, cOne} {
		g.VMOV(t, c)
		g.VFMLA(t, p, y)
		p, t = t, p
	}
	g.Emit(EncFCVTZS(n, n))
	g.VSHL(n, n, 23)
	g.VADD(n, n, cBias)
	g.Emit(EncFMUL(p, p, n))
	g.Emit(EncBIC(p, p, lt))
	return p
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
	const dst, src, n R = 0, 1, 2
	g.loadArgs(arg{"dst", dst}, arg{"src", src}, arg{"n", n})
	g.Inst("LSR $2, %s, %s", n, n) // vectors
	g.Inst("CBZ %s, done", n)
	g.loadExpConsts()
	g.loadConst("expMax", 28)
	g.Label("loop")
	g.Inst("VLD1.P 16(%s), [%s]", src, V(12).S4())
	p := g.exp(12, 13, 14, 15, 29, 28, true)
	g.Inst("VST1.P [%s], 16(%s)", p.S4(), dst)
	g.Inst("SUBS $1, %s, %s", n, n)
	g.Inst("BNE loop")
	g.Label("done")
	g.Inst("RET")
}

// The softmax weights' exp constants, loaded into V16..V25 in place of
// exp's for the Softmax's weights pass (loadWeightExpConsts).
const (
	cWExpMin V = 16 + iota
	cWLog2e
	cWRound
	cW0 // w0..w5 in V19..V24
	_
	_
	_
	_
	_
	cWOne
)

// loadWeightExpConsts fills V16..V25 with weightExp's constants (exp's
// are gone until loadExpConsts).
func (g *gen) loadWeightExpConsts() {
	for i, name := range expconst.WeightExpNames {
		g.loadConst(name, cWExpMin+V(i))
	}
}

// weightExp computes e^d for d <= 0 with temporaries p, t and lt,
// consuming d, and returns the register holding the result (p or t): the
// softmax weights' exp, fallback.WeightExp32's steps in vector form:
//
//	lt = d < wexpMin (false for NaN)
//	y = d·log2e; u = y + 1.5·2^23; r = y - (u - 1.5·2^23)   (u holds round(y) in its low bits)
//	p = (((((w0·r+w1)·r+w2)·r+w3)·r+w4)·r+w5)·r+1          (Horner, as exp)
//	e^d = p + (u << 23) as integers; lanes with lt cleared.
//
// u is kept in n.
func (g *gen) weightExp(d, n, p, t, lt V) V {
	g.Emit(EncFCMGT(lt, cWExpMin, d))
	g.Emit(EncFMUL(d, d, cWLog2e))
	g.Emit(EncFADD(n, d, cWRound))
	g.Emit(EncFSUB(t, n, cWRound))
	g.Emit(EncFSUB(d, d, t))
	g.VMOV(p, cW0)
	for _, c := range []V{cW0 + 1, cW0 + 2, cW0 + 3, cW0 + 4, cW0 + 5, cWOne} {
		g.VMOV(t, c)
		g.VFMLA(t, p, d)
		p, t = t, p
	}
	g.VSHL(n, n, 23)
	g.VADD(p, p, n)
	g.Emit(EncBIC(p, p, lt))
	return p
}
