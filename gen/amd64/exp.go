// The vector exp (fallback.Exp32's algorithm, split polynomial) that
// Softmax, Decode and the softcap inline, its constants held in registers
// on AVX-512, and Exp<ISA>, exp over whole vectors (one per step).

package main

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// expKernel emits Exp<ISA>: dst[i] = exp(src[i]) over whole vectors.
func (g *gen) expKernel() {
	b := g.isa.bytes()
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
	g.SHRQ(operand.U8(g.lanesLog()), n) // vectors
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

// exp returns exp(y) in a new register, consuming y (fallback/exp.go is
// the scalar twin):
//
//	keep = !(y < expMin)                 lanes below it give exactly 0; NaN stays
//	n    = round(y·log2e)                nearest even
//	r    = y - n·ln2hi - n·ln2lo         Cody–Waite: n·ln2hi is exact
//	q    = r + r²·((p0·r+p1)·r⁴ + (p2·r+p3)·r² + (p4·r+p5))
//	exp  = (1 + q)·2^n                   VSCALEFPS (AVX-512), or 2^n as
//	                                     exponent bits and q·2^n + 2^n (AVX2)
//
// AVX2 rounds with one FMA, t = y·log2e + (1.5·2^23 + 127): t's ulp is 1,
// so t is rounded to an integer, n = t - (1.5·2^23 + 127) exactly, and t's
// low mantissa bits hold n + 127, which a shift by 23 turns into 2^n
// (no convert, no integer add). It may pick the other n where the product
// y·log2e lies within rounding of a half (the multiply-then-round may
// too); r is then just past ±ln2/2, where the polynomial is as accurate.
// q·2^n + 2^n is one rounding of 2^n·(1 + q), the same bits as 1 + q
// rounded then scaled wherever the result is normal. The AVX2 Softmax in
// cache (Zen 5): 2.74–2.78 Gelem/s before, 2.97–3.02 with the scaling FMA,
// 3.05–3.17 with the rounding too; the worst error stays 1.01 ulp.
// AVX-512 keeps VRNDSCALEPS and VSCALEFPS: the same two steps there ran
// its Softmax 1–4% faster but its 4-row decode kernel 3% slower (L2).
//
// With clampHigh, y is first clamped to expMax (so 2^n cannot overflow);
// Softmax passes y <= 0 and skips it. Below expMin, AVX2's exponent bits
// are garbage (down to -Inf's NaN), but those lanes are cleared by the
// final AND, which also keeps NaN (NaN·anything). The split polynomial
// and the missing low clamp took the AVX2 Softmax from 2.5 to 2.9 Gelem/s
// and the AVX-512 one from 6.0 to 6.4 (Zen 5): the Horner chain's latency,
// not the FMA ports, was the limit.
func (g *gen) exp(y reg.VecVirtual, clampHigh bool) reg.VecVirtual {
	return g.exps([]reg.VecVirtual{y}, clampHigh)[0]
}

// exps is exp over several vectors, emitted one step at a time across
// them so that the core sees their chains side by side.
func (g *gen) exps(ys []reg.VecVirtual, clampHigh bool) []reg.VecVirtual {
	const nltUQ = 0x15 // not less than, unordered true: NaN lanes are kept
	m := len(ys)
	keep := make([]laneMask, m)
	for i, y := range ys {
		keep[i] = g.compare(nltUQ, g.k("expMin"), y)
	}
	if clampHigh {
		for _, y := range ys {
			hi := g.vec()
			g.VMOVUPS(g.cst("expMax"), hi)
			g.VMINPS(y, hi, y)
		}
	}
	// n, and on AVX2 scale = 2^n.
	n, scale := make([]reg.VecVirtual, m), make([]reg.VecVirtual, m)
	for i, y := range ys {
		n[i] = g.vec()
		if g.isa.avx512() {
			g.VMULPS(g.k("log2e"), y, n[i])
			g.VRNDSCALEPS(operand.U8(0), n[i], n[i])
			continue
		}
		scale[i] = g.vec()
		g.VMOVUPS(g.cst("roundMagic"), scale[i])
		g.VFMADD231PS(g.k("log2e"), y, scale[i]) // t
		g.VSUBPS(g.cst("roundMagic"), scale[i], n[i])
		g.VPSLLD(operand.U8(23), scale[i], scale[i])
	}
	for i, y := range ys {
		g.VFNMADD231PS(g.k("ln2hi"), n[i], y)
	}
	for i, y := range ys {
		g.VFNMADD231PS(g.k("ln2lo"), n[i], y)
	}
	// The polynomial in split form: three independent first-degree pieces,
	// then steps in r², so the dependent chain is 4 FMAs, not 7 (the 1
	// added last, as Horner's form does, keeps r's low bits).
	r2, p := make([]reg.VecVirtual, m), make([]reg.VecVirtual, m)
	for i, y := range ys {
		r2[i], p[i] = g.vec(), g.vec()
		g.VMULPS(y, y, r2[i])
		g.VMOVUPS(g.k("p0"), p[i])
		g.VFMADD213PS(g.k("p1"), y, p[i]) // p = p0·r + p1
	}
	for i, y := range ys {
		b := g.vec()
		g.VMOVUPS(g.k("p2"), b)
		g.VFMADD213PS(g.k("p3"), y, b) // b = p2·r + p3
		g.VFMADD213PS(b, r2[i], p[i])  // p = p·r² + b
	}
	for i, y := range ys {
		a := g.vec()
		g.VMOVUPS(g.k("p4"), a)
		g.VFMADD213PS(g.k("p5"), y, a) // a = p4·r + p5
		g.VFMADD213PS(a, r2[i], p[i])  // p = p·r² + a: P(r)
	}
	for i, y := range ys {
		g.VFMADD213PS(y, r2[i], p[i]) // p = P·r² + r: q
	}
	for i := range ys {
		if g.isa.avx512() {
			g.VADDPS(g.k("one"), p[i], p[i]) // p = 1 + q
			g.VSCALEFPS_Z(n[i], p[i], keep[i].k, p[i])
			continue
		}
		g.VFMADD213PS(scale[i], scale[i], p[i]) // p = q·2^n + 2^n
		g.VANDPS(keep[i].v, p[i], p[i])
	}
	return p
}

// k returns a constant as an operand: its register while held, else its
// memory vector.
func (g *gen) k(name string) operand.Op {
	if r, ok := g.held[name]; ok {
		return r
	}
	return g.cst(name)
}

// hold loads constants into registers for the code that follows, on
// AVX-512 only (AVX2's 16 registers are all needed by the kernels).
func (g *gen) hold(names ...string) {
	if !g.isa.avx512() {
		return
	}
	g.held = map[string]reg.VecVirtual{}
	for _, n := range names {
		r := g.vec()
		g.VMOVUPS(g.cst(n), r)
		g.held[n] = r
	}
}

// release ends hold.
func (g *gen) release() { g.held = nil }

// weightExps returns e^d of each d <= 0 in a new register, consuming the
// ds: the softmax weights' exp, fallback.WeightExp32's steps (see there
// for the error):
//
//	keep = !(d < wexpMin)            lanes below give exactly 0; NaN stays
//	y    = d·log2e
//	t    = y + 1.5·2^23              t's ulp is 1: y rounded to n, n in t's low bits
//	r    = y - (t - 1.5·2^23)        exact
//	p    = (((((w0·r+w1)·r+w2)·r+w3)·r+w4)·r+w5)·r + 1     2^r, Horner
//	e^d  = p's bits + t's bits << 23                      n added to p's exponent
//
// Against exps: one multiply and six FMAs where exps has ten, no rounding
// or scaling instruction, the 2^n an integer add. On Zen 4 the FMA pipes
// are what the QK and PV products wait on; the AVX-512 Softmax ran
// 1.15–1.25× as fast there, AVX2's 1.04–1.12×. The masked add
// zeroes the lanes below the clamp (AVX-512); AVX2 clears them with an
// AND after the add, which also keeps NaN (NaN's bits plus a shifted NaN's
// low bits, which are 0, stay NaN).
func (g *gen) weightExps(ds []reg.VecVirtual) []reg.VecVirtual {
	const nltUQ = 0x15 // not less than, unordered true: NaN lanes are kept
	m := len(ds)
	keep := make([]laneMask, m)
	t := make([]reg.VecVirtual, m)
	for i, d := range ds {
		keep[i] = g.compare(nltUQ, g.k("wexpMin"), d)
		g.VMULPS(g.k("log2e"), d, d) // y
		t[i] = g.vec()
		g.VADDPS(g.k("weightRound"), d, t[i])
	}
	for i, d := range ds {
		n := g.vec()
		g.VSUBPS(g.k("weightRound"), t[i], n)
		g.VSUBPS(n, d, d) // r
	}
	p := make([]reg.VecVirtual, m)
	for i := range ds {
		p[i] = g.vec()
		g.VMOVUPS(g.k("w0"), p[i])
	}
	for _, c := range []string{"w1", "w2", "w3", "w4", "w5", "one"} {
		for i, d := range ds {
			g.VFMADD213PS(g.k(c), d, p[i]) // p = p·r + c
		}
	}
	for i := range ds {
		g.VPSLLD(operand.U8(23), t[i], t[i])
		if g.isa.avx512() {
			g.VPADDD_Z(t[i], p[i], keep[i].k, p[i])
			continue
		}
		g.VPADDD(t[i], p[i], p[i])
		g.VANDPS(keep[i].v, p[i], p[i])
	}
	return p
}
