package main

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// exp returns exp(y) in a new register, consuming y (fallback/exp.go is
// the scalar twin):
//
//	keep = !(y < expMin)                 lanes below it give exactly 0; NaN stays
//	n    = round(y·log2e)                nearest even
//	r    = y - n·ln2hi - n·ln2lo         Cody–Waite: n·ln2hi is exact
//	p    = 1 + (r + r²·((p0·r+p1)·r⁴ + (p2·r+p3)·r² + (p4·r+p5)))
//	exp  = p·2^n                         VSCALEFPS (AVX-512) or adding n+127
//	                                     as the exponent bits (AVX2)
//
// With clampHigh, y is first clamped to expMax (so 2^n cannot overflow);
// Softmax passes y <= 0 and skips it. Below expMin, AVX2's n+127 is no
// valid exponent (down to the integer indefinite of -Inf), but those lanes
// are cleared by the final AND, which also keeps NaN (NaN·anything).
// The split polynomial and the missing low clamp took the AVX2 Softmax
// from 2.5 to 2.9 Gelem/s and the AVX-512 one from 6.0 to 6.4 (Zen 5):
// the Horner chain's latency, not the FMA ports, was the limit.
func (g *gen) exp(y reg.VecVirtual, clampHigh bool) reg.VecVirtual {
	const nltUQ = 0x15 // not less than, unordered true: NaN lanes are kept
	keep := g.compare(nltUQ, g.k("expMin"), y)
	if clampHigh {
		hi := g.vec()
		g.VMOVUPS(g.cst("expMax"), hi)
		g.VMINPS(y, hi, y)
	}
	n := g.vec()
	g.VMULPS(g.k("log2e"), y, n)
	if g.x.avx512() {
		g.VRNDSCALEPS(operand.U8(0), n, n)
	} else {
		g.VROUNDPS(operand.U8(0), n, n)
	}
	g.VFNMADD231PS(g.k("ln2hi"), n, y)
	g.VFNMADD231PS(g.k("ln2lo"), n, y)
	// The polynomial in split form: three independent first-degree pieces,
	// then steps in r², so the dependent chain is 4 FMAs and an add, not 7
	// FMAs (the 1 added last, as Horner's form does, keeps r's low bits).
	// The third piece is written after the first step so that it reuses
	// the second's register: AVX2 has 16 (the core reorders anyway).
	r2, p, b := g.vec(), g.vec(), g.vec()
	g.VMULPS(y, y, r2)
	g.VMOVUPS(g.k("p0"), p)
	g.VFMADD213PS(g.k("p1"), y, p) // p = p0·r + p1
	g.VMOVUPS(g.k("p2"), b)
	g.VFMADD213PS(g.k("p3"), y, b) // b = p2·r + p3
	g.VFMADD213PS(b, r2, p)        // p = p·r² + b
	a := g.vec()
	g.VMOVUPS(g.k("p4"), a)
	g.VFMADD213PS(g.k("p5"), y, a) // a = p4·r + p5
	g.VFMADD213PS(a, r2, p)        // p = p·r² + a: P(r)
	g.VFMADD213PS(y, r2, p)        // p = P·r² + r
	g.VADDPS(g.k("one"), p, p)     // p = 1 + p
	if g.x.avx512() {
		g.VSCALEFPS_Z(n, p, keep.k, p)
		return p
	}
	g.VCVTPS2DQ(n, n) // exact: n is integral
	g.VPADDD(g.cst("bias127"), n, n)
	g.VPSLLD(operand.U8(23), n, n)
	g.VMULPS(n, p, p)
	g.VANDPS(keep.v, p, p)
	return p
}

// expConsts are the constants of exp's inner steps.
var expConsts = []string{"expMin", "log2e", "ln2hi", "ln2lo", "p0", "p1", "p2", "p3", "p4", "p5", "one"}

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
	if !g.x.avx512() {
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

// softcap replaces x by c·tanh(x/c), keeping -Inf lanes at -Inf, with
// fallback.Tanh32's two forms of tanh(a), a = |y|, y = x/c:
//
//	a <  tanhSmall: a + (a·z)·P(z), z = a², Horner in FMAs
//	a >= tanhSmall: (1 - e)/(1 + e), e = exp(-2a)
//
// blended per lane, then y's sign. The bit operations are VPANDD/VPORD on
// AVX-512 (AVX512F; VANDPS on zmm would need AVX512DQ).
func (g *gen) softcap(x, c, inv reg.VecVirtual) {
	and, or := g.VANDPS, g.VORPS
	if g.x.avx512() {
		and, or = g.VPANDD, g.VPORD
	}
	y := g.vec()
	g.VMULPS(inv, x, y)
	sign := g.vec()
	and(g.cst("signMask"), y, sign)
	and(g.cst("absMask"), y, y) // a
	// The polynomial form, q = a + (a·z)·P(z).
	z, q := g.vec(), g.vec()
	g.VMULPS(y, y, z)
	g.VMOVUPS(g.cst("t0"), q)
	for _, t := range []string{"t1", "t2", "t3", "t4"} {
		g.VFMADD213PS(g.cst(t), z, q) // q = q·z + t
	}
	g.VMULPS(y, z, z)      // a·z
	g.VFMADD213PS(y, z, q) // q = q·(a·z) + a
	const lt = 0x01        // less than, ordered: NaN takes the exp form, which keeps it
	small := g.compare(lt, g.cst("tanhSmall"), y)
	// The exp form.
	g.VMULPS(g.cst("minusTwo"), y, y)
	e := g.exp(y, false)
	num, den := g.vec(), g.vec()
	g.VMOVUPS(g.cst("one"), num)
	g.VSUBPS(e, num, num) // 1 - e
	g.VADDPS(g.cst("one"), e, den)
	g.VDIVPS(den, num, num)
	g.blend(small, q, num, num) // num = small ? q : num
	or(sign, num, num)
	g.VMULPS(c, num, num)
	const eq = 0x00
	g.blend(g.compare(eq, g.cst("negInf"), x), x, num, x) // -Inf stays -Inf
}

// laneMask is a per-lane condition: an opmask on AVX-512, a vector of
// all-ones or all-zeros lanes on AVX2.
type laneMask struct {
	k reg.OpmaskVirtual
	v reg.VecVirtual
}

// compare returns the lanes where the predicate pred (a VCMPPS immediate)
// holds of b and a, in that order.
func (g *gen) compare(pred uint8, a operand.Op, b reg.VecVirtual) laneMask {
	if g.x.avx512() {
		m := laneMask{k: g.K()}
		g.VCMPPS(operand.U8(pred), a, b, m.k)
		return m
	}
	m := laneMask{v: g.vec()}
	g.VCMPPS(operand.U8(pred), a, b, m.v)
	return m
}

// blend sets dst = m ? set : clear, lane by lane.
func (g *gen) blend(m laneMask, set, clear, dst reg.VecVirtual) {
	if g.x.avx512() {
		g.VBLENDMPS(set, clear, m.k, dst)
		return
	}
	g.VBLENDVPS(m.v, set, clear, dst)
}

// softmax emits Softmax<ISA>: one online-softmax step for nv vectors of
// rows over nk keys.
func (g *gen) softmax() {
	x := g.x
	g.fn("Softmax", "func(s *float32, lds int, m, l, alpha *float32, nk, nv int, softcap float32)",
		"",
		"\tfor r := 0; r < nv*lanes; r++ {",
		"\t\tx[c] = softcap > 0 ? softcap·tanh(s[c*lds+r]/softcap) : s[c*lds+r]   (-Inf stays)",
		"\t\tmNew = max(m[r], max_c x[c]);  base = max(mNew, -MaxFloat32)",
		"\t\ts[c*lds+r] = exp(x[c] - base)",
		"\t\talpha[r] = exp(m[r] - base);  l[r] = l[r]·alpha[r] + Σ_c s[c*lds+r];  m[r] = mNew",
		"",
		"with nv in 1..4, nk >= 1, lds in elements. base keeps -Inf - -Inf out:",
		"a row with no key yet gets weights 0, alpha 0 and l 0. Each key's row",
		"of nv vectors is loaded at once: nv independent max and exp chains.",
	)
	sp := g.param("s")
	lds := g.stride("lds")
	g.byRowVectors(x.softNV, func(nv int) { g.softmaxPanel(sp, lds, nv) })
}

// byRowVectors emits a jump on the argument nv (1..n; any other value returns)
// to one copy of panel per value, each followed by a return.
func (g *gen) byRowVectors(n int, panel func(nv int)) {
	nv := g.param("nv")
	for v := n; v >= 1; v-- {
		g.CMPQ(nv, operand.Imm(uint64(v)))
		g.JEQ(operand.LabelRef(label("nv", v)))
	}
	g.ret()
	for v := n; v >= 1; v-- {
		g.Label(label("nv", v))
		panel(v)
		g.ret()
	}
}

func (g *gen) softmaxPanel(sp, lds reg.GPVirtual, nv int) {
	b := g.x.bytes()
	mp, lp, ap := g.GP64(), g.GP64(), g.GP64()
	g.Load(g.Param("m"), mp)
	g.Load(g.Param("l"), lp)
	g.Load(g.Param("alpha"), ap)

	// Pass 1: the new running max, capping the scores first if asked.
	mx := make([]reg.VecVirtual, nv)
	for j := range mx {
		mx[j] = g.vec()
		g.VMOVUPS(operand.Mem{Base: mp, Disp: j * b}, mx[j])
	}
	c, row := g.GP64(), g.GP64()
	capped := label("nv", nv, "capped")
	cs, zero := g.XMM(), g.XMM()
	g.Load(g.Param("softcap"), cs)
	g.VXORPS(zero, zero, zero)
	g.VUCOMISS(zero, cs)
	g.JA(operand.LabelRef(capped))
	// No softcap.
	g.Load(g.Param("nk"), c)
	g.MOVQ(sp, row)
	g.Label(label("nv", nv, "max"))
	for j := 0; j < nv; j++ {
		t := g.vec()
		g.VMOVUPS(operand.Mem{Base: row, Disp: j * b}, t)
		g.VMAXPS(t, mx[j], mx[j])
	}
	g.ADDQ(lds, row)
	g.DECQ(c)
	g.JNZ(operand.LabelRef(label("nv", nv, "max")))
	g.JMP(operand.LabelRef(label("nv", nv, "exp")))
	// With softcap: cap each score in place, then the max.
	g.Label(capped)
	cap, inv := g.vec(), g.vec()
	g.VBROADCASTSS(cs, cap)
	g.VMOVUPS(g.cst("one"), inv)
	g.VDIVPS(cap, inv, inv)
	g.Load(g.Param("nk"), c)
	g.MOVQ(sp, row)
	g.Label(label("nv", nv, "capmax"))
	for j := 0; j < nv; j++ {
		t := g.vec()
		g.VMOVUPS(operand.Mem{Base: row, Disp: j * b}, t)
		g.softcap(t, cap, inv)
		g.VMOVUPS(t, operand.Mem{Base: row, Disp: j * b})
		g.VMAXPS(t, mx[j], mx[j])
	}
	g.ADDQ(lds, row)
	g.DECQ(c)
	g.JNZ(operand.LabelRef(label("nv", nv, "capmax")))

	// Pass 2: weights and their sums. With 32 registers the exp constants
	// stay in registers (no load per use).
	g.Label(label("nv", nv, "exp"))
	g.hold(expConsts...)
	defer g.release()
	// alpha = exp(m - base) and m = mNew first, so the new maxima need no
	// registers during the weights loop (AVX2 has 16: 4 bases, 4 sums and
	// exp's temporaries fill them).
	base := make([]reg.VecVirtual, nv)
	sum := make([]reg.VecVirtual, nv)
	for j := range base {
		base[j] = g.vec()
		g.VMAXPS(g.cst("negMax"), mx[j], base[j])
		y := g.vec()
		g.VMOVUPS(operand.Mem{Base: mp, Disp: j * b}, y)
		g.VSUBPS(base[j], y, y)
		a := g.exp(y, false)
		g.VMOVUPS(a, operand.Mem{Base: ap, Disp: j * b})
		g.VMOVUPS(mx[j], operand.Mem{Base: mp, Disp: j * b})
		sum[j] = g.vec()
		g.zero(sum[j])
	}
	g.Load(g.Param("nk"), c)
	g.MOVQ(sp, row)
	g.Label(label("nv", nv, "weights"))
	for j := 0; j < nv; j++ {
		y := g.vec()
		g.VMOVUPS(operand.Mem{Base: row, Disp: j * b}, y)
		g.VSUBPS(base[j], y, y)
		p := g.exp(y, false)
		g.VMOVUPS(p, operand.Mem{Base: row, Disp: j * b})
		g.VADDPS(p, sum[j], sum[j])
	}
	g.ADDQ(lds, row)
	g.DECQ(c)
	g.JNZ(operand.LabelRef(label("nv", nv, "weights")))

	// l = l·alpha + sum.
	for j := 0; j < nv; j++ {
		l := g.vec()
		g.VMOVUPS(operand.Mem{Base: lp, Disp: j * b}, l)
		g.VFMADD231PS(operand.Mem{Base: ap, Disp: j * b}, l, sum[j])
		g.VMOVUPS(sum[j], operand.Mem{Base: lp, Disp: j * b})
	}
}
