// Softmax<ISA>: one online-softmax step over a transposed score tile, up
// to softNV vectors of rows per call (AVX-512 4, AVX2 2), each key's row
// of vectors loaded at once (independent max and exp chains, the exps
// emitted side by side); and the softcap (tanh) it inlines.

package main

import (
	"fmt"

	"github.com/fastattn/fastattn/gen/expconst"
	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

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
	if g.isa.avx512() {
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

// softmax emits Softmax<ISA>: one online-softmax step for nv vectors of
// rows over nk keys.
func (g *gen) softmax() {
	x := g.isa
	g.fn("Softmax", "func(s *float32, lds int, m, l, alpha *float32, nk, nv int, softcap float32)",
		"",
		"\tfor r := 0; r < nv*lanes; r++ {",
		"\t\tx[c] = softcap > 0 ? softcap·tanh(s[c*lds+r]/softcap) : s[c*lds+r]   (-Inf stays)",
		"\t\tmNew = max(m[r], max_c x[c]);  base = max(mNew, -MaxFloat32)",
		"\t\ts[c*lds+r] = fallback.WeightExp32(x[c] - base)   (e^(x[c]-base) up to rounding)",
		"\t\talpha[r] = fallback.WeightExp32(m[r] - base);  l[r] = l[r]·alpha[r] + Σ_c s[c*lds+r];  m[r] = mNew",
		"",
		fmt.Sprintf("with nv in 1..%d, nk >= 1, lds in elements. base keeps -Inf - -Inf out:", x.softNV),
		"a row with no key yet gets weights 0, alpha 0 and l 0. Each key's row",
		"of nv vectors is loaded at once: nv independent max and exp chains.",
	)
	g.softmaxPanels(plainWeights)
}

// softmaxPanels emits a softmax kernel's body: a jump on nv to one panel
// of softmaxPanel per vector count, storing out of the weights.
func (g *gen) softmaxPanels(out softmaxOut) {
	sp := g.param("s")
	lds := g.stride("lds")
	g.byRowVectors(g.isa.softNV, func(nv int) { g.softmaxPanel(sp, lds, nv, out) })
}

// softmaxOut is what a softmax kernel stores of its weights.
type softmaxOut int

const (
	plainWeights      softmaxOut = iota // the weights (Softmax)
	roundedWeights                      // the weights rounded to bfloat16, as float32 (SoftmaxRound)
	pairedWeights                       // the weights, and their bfloat16 pairs over keys (SoftmaxPairs)
	pairedWeightsBF16                   // pairedWeights rounded by VCVTNE2PS2BF16 (SoftmaxPairsBF16)
)

// softmaxRound emits SoftmaxRound<ISA>: Softmax whose stored weights are
// rounded to bfloat16 (the bfloat16 mode on the float32 kernels, whose PV
// then reads the rounded weights), in the same pass.
func (g *gen) softmaxRound() {
	x := g.isa
	g.fn("SoftmaxRound", "func(s *float32, lds int, m, l, alpha *float32, nk, nv int, softcap float32)",
		"",
		"	Softmax(s, lds, m, l, alpha, nk, nv, softcap), then",
		"	s[c*lds+r] = fallback.BF16ToF32(fallback.F32ToBF16(s[c*lds+r]))   for c < nk, r < nv*lanes",
		"",
		"in one pass: each weight rounded as it is stored, the sums l adding the",
		fmt.Sprintf("unrounded weights as Softmax does. nv in 1..%d, nk >= 1.", x.softNV),
	)
	g.softmaxPanels(roundedWeights)
}

// softmaxPairs emits SoftmaxPairs<ISA>: Softmax that also writes the
// weights rounded to bfloat16 and paired over keys, as PairBF16 would
// from the weights it stores, in the same pass (the bfloat16 kernels' B
// operand of PV: Vᵀ·Pᵀ on AMX tiles, P·V on VDPBF16PS). With native
// (AVX-512 only), SoftmaxPairsBF16<ISA>: the rounding is VCVTNE2PS2BF16's
// and VPERMW interleaves the pair's words, two instructions where the
// integer rounding takes twenty. The same bits: the instruction rounds as
// fallback.F32ToBF16 on every input but denormals, and no weight is one
// (fallback.WeightExp32 returns 0 below 2^-125).
func (g *gen) softmaxPairs(native bool) {
	x := g.isa
	name, out := "SoftmaxPairs", pairedWeights
	if native {
		name, out = "SoftmaxPairsBF16", pairedWeightsBF16
	}
	g.fn(name, "func(s *float32, lds int, m, l, alpha *float32, nk, nv int, softcap float32, p *uint32, ldp int)",
		"",
		"	Softmax(s, lds, m, l, alpha, nk, nv, softcap), then",
		"	for c := 0; c < (nk+1)/2; c++ {",
		"		for r := 0; r < nv*lanes; r++ {",
		"			p[c*ldp+r] = bf16(s[2c*lds+r]) | bf16(s[(2c+1)*lds+r])<<16   (0 for key nk)",
		"",
		"with bf16 fallback.F32ToBF16's rounding, in one pass: the weights of",
		"each pair of keys rounded and paired as they are stored, their sums",
		"added key by key as Softmax adds them. ldp in uint32; with nv in",
		fmt.Sprintf("1..%d, nk >= 1.", x.softNV),
	)
	g.softmaxPanels(out)
}

// keyLoop emits a loop over the nk keys of a transposed tile: body
// emitted once with row, the address of the key's row of s (starting at
// sp, stepped by lds bytes), under label l.
func (g *gen) keyLoop(sp, lds reg.GPVirtual, l string, body func(row reg.GPVirtual)) {
	c, row := g.GP64(), g.GP64()
	g.Load(g.Param("nk"), c)
	g.MOVQ(sp, row)
	g.Label(l)
	body(row)
	g.ADDQ(lds, row)
	g.DECQ(c)
	g.JNZ(operand.LabelRef(l))
}

// byRowVectors emits a jump on the argument nv (1..n; any other value returns)
// to one copy of panel per value, each followed by a return.
func (g *gen) byRowVectors(n int, panel func(nv int)) {
	nv := g.param("nv")
	for v := n; v >= 1; v-- {
		g.CMPQ(nv, operand.Imm(uint64(v)))
		g.JEQ(operand.LabelRef(label("vecs", v)))
	}
	g.ret()
	for v := n; v >= 1; v-- {
		g.Label(label("vecs", v))
		panel(v)
		g.ret()
	}
}

func (g *gen) softmaxPanel(sp, lds reg.GPVirtual, nv int, out softmaxOut) {
	b := g.isa.bytes()
	mp, lp, ap := g.GP64(), g.GP64(), g.GP64()
	g.Load(g.Param("m"), mp)
	g.Load(g.Param("l"), lp)
	g.Load(g.Param("alpha"), ap)

	g.Comment(fmt.Sprintf("Softmax of %d vectors of rows. Pass 1: the new running max.", nv))
	mx := make([]reg.VecVirtual, nv)
	for j := range mx {
		mx[j] = g.vec()
		g.VMOVUPS(operand.Mem{Base: mp, Disp: j * b}, mx[j])
	}
	capped := label("vecs", nv, "capped")
	cs, zero := g.XMM(), g.XMM()
	g.Load(g.Param("softcap"), cs)
	g.VXORPS(zero, zero, zero)
	g.VUCOMISS(zero, cs)
	g.JA(operand.LabelRef(capped))
	// No softcap.
	g.keyLoop(sp, lds, label("vecs", nv, "max"), func(row reg.GPVirtual) {
		for j := 0; j < nv; j++ {
			t := g.vec()
			g.VMOVUPS(operand.Mem{Base: row, Disp: j * b}, t)
			g.VMAXPS(t, mx[j], mx[j])
		}
	})
	g.JMP(operand.LabelRef(label("vecs", nv, "exp")))
	g.Comment("Pass 1 with softcap: cap each score in place, then the max.")
	g.Label(capped)
	cap, inv := g.vec(), g.vec()
	g.VBROADCASTSS(cs, cap)
	g.VMOVUPS(g.cst("one"), inv)
	g.VDIVPS(cap, inv, inv)
	g.keyLoop(sp, lds, label("vecs", nv, "capmax"), func(row reg.GPVirtual) {
		for j := 0; j < nv; j++ {
			t := g.vec()
			g.VMOVUPS(operand.Mem{Base: row, Disp: j * b}, t)
			g.softcap(t, cap, inv)
			g.VMOVUPS(t, operand.Mem{Base: row, Disp: j * b})
			g.VMAXPS(t, mx[j], mx[j])
		}
	})

	// With 32 registers the exp constants stay in registers (no load per
	// use).
	g.Comment("Pass 2: alpha and m, then the weights and their sums.")
	g.Label(label("vecs", nv, "exp"))
	g.hold(expconst.WeightExpNames...)
	defer g.release()
	// alpha = exp(m - base) and m = mNew first, so the new maxima need no
	// registers during the weights loop (AVX2 has 16: 2 bases, 2 sums and
	// two exps' temporaries fill them).
	base := make([]reg.VecVirtual, nv)
	sum := make([]reg.VecVirtual, nv)
	for j := range base {
		base[j] = g.vec()
		g.VMAXPS(g.cst("negMax"), mx[j], base[j])
		y := g.vec()
		g.VMOVUPS(operand.Mem{Base: mp, Disp: j * b}, y)
		g.VSUBPS(base[j], y, y)
		a := g.weightExps([]reg.VecVirtual{y})[0]
		g.VMOVUPS(a, operand.Mem{Base: ap, Disp: j * b})
		g.VMOVUPS(mx[j], operand.Mem{Base: mp, Disp: j * b})
		sum[j] = g.vec()
		g.zero(sum[j])
	}
	if out == pairedWeights || out == pairedWeightsBF16 {
		g.weightPairs(sp, lds, nv, base, sum, out == pairedWeightsBF16)
	} else {
		g.weights(sp, lds, nv, base, sum, out == roundedWeights)
	}

	g.Comment("l = l·alpha + sum.")
	for j := 0; j < nv; j++ {
		l := g.vec()
		g.VMOVUPS(operand.Mem{Base: lp, Disp: j * b}, l)
		g.VFMADD231PS(operand.Mem{Base: ap, Disp: j * b}, l, sum[j])
		g.VMOVUPS(sum[j], operand.Mem{Base: lp, Disp: j * b})
	}
}

// pairWords returns the memory operand of VPERMW's index vector that
// interleaves a VCVTNE2PS2BF16 result's halves: word 2j from word j,
// word 2j+1 from word 16+j, emitted once.
func (g *gen) pairWords() operand.Mem {
	if g.pairIdx == nil {
		m := g.StaticGlobal("pairWords" + g.isa.suffix)
		g.DataAttributes(attr.RODATA | attr.NOPTR)
		for j := 0; j < 16; j++ {
			g.AddDatum(4*j, operand.U16(uint16(j)))
			g.AddDatum(4*j+2, operand.U16(uint16(16+j)))
		}
		g.pairIdx = &m
	}
	return *g.pairIdx
}

// weights emits Softmax's weights loop: each key's nv vectors of scores
// turned to weights in place (rounded to bfloat16 if rounded), added to
// sum unrounded.
func (g *gen) weights(sp, lds reg.GPVirtual, nv int, base, sum []reg.VecVirtual, rounded bool) {
	b := g.isa.bytes()
	g.keyLoop(sp, lds, label("vecs", nv, "weights"), func(row reg.GPVirtual) {
		for j0 := 0; j0 < nv; j0 += g.isa.expInterleave {
			j1 := min(nv, j0+g.isa.expInterleave)
			var ys []reg.VecVirtual
			for j := j0; j < j1; j++ {
				y := g.vec()
				g.VMOVUPS(operand.Mem{Base: row, Disp: j * b}, y)
				g.VSUBPS(base[j], y, y)
				ys = append(ys, y)
			}
			ps := g.weightExps(ys)
			for j := j0; j < j1; j++ {
				p := ps[j-j0]
				if !rounded {
					g.VMOVUPS(p, operand.Mem{Base: row, Disp: j * b})
					g.VADDPS(p, sum[j], sum[j])
					continue
				}
				g.VADDPS(p, sum[j], sum[j])
				r := g.bf16Bits(p) // the bfloat16's bits back in the upper half: its float32
				g.VPSLLD(operand.U8(16), r, r)
				g.VMOVUPS(r, operand.Mem{Base: row, Disp: j * b})
			}
		}
	})
}

// weightPairs emits SoftmaxPairs' weights loop: keys two at a time, each
// one's nv vectors of scores turned to weights in place and added to sum
// (the first key's, then the second's, as Softmax adds them), and the
// pair's weights rounded to bfloat16 and stored paired at p (the first
// key's in each dword's low half); an odd last key pairs with 0. The exps
// of expInterleave (vector, key) pairs are emitted side by side. With
// native the pairs are VCVTNE2PS2BF16's, their words interleaved by
// VPERMW.
func (g *gen) weightPairs(sp, lds reg.GPVirtual, nv int, base, sum []reg.VecVirtual, native bool) {
	b := g.isa.bytes()
	pp, ldp := g.param("p"), g.stride("ldp")
	var idx, zero reg.VecVirtual
	if native {
		idx, zero = g.vec(), g.vec()
		g.VMOVDQU64(g.pairWords(), idx)
		g.zero(zero)
	}
	c, row := g.GP64(), g.GP64()
	g.Load(g.Param("nk"), c)
	g.MOVQ(sp, row)
	g.SHRQ(operand.U8(1), c)
	odd := label("vecs", nv, "odd")
	g.JZ(operand.LabelRef(odd))
	// step emits the weights of keys at rows (one or two keys' rows) for
	// vectors [j0, j1) and stores their pairs at pp.
	step := func(rows []reg.GPVirtual, j0, j1 int) {
		var ys []reg.VecVirtual
		for j := j0; j < j1; j++ {
			for _, r := range rows {
				y := g.vec()
				g.VMOVUPS(operand.Mem{Base: r, Disp: j * b}, y)
				g.VSUBPS(base[j], y, y)
				ys = append(ys, y)
			}
		}
		ps := g.weightExps(ys)
		for j := j0; j < j1; j++ {
			w := ps[(j-j0)*len(rows):][:len(rows)]
			for k, r := range rows {
				g.VMOVUPS(w[k], operand.Mem{Base: r, Disp: j * b})
				g.VADDPS(w[k], sum[j], sum[j])
			}
			var out reg.VecVirtual
			switch {
			case native: // words 0..15 the first key's, 16..31 the second's (or 0), then interleaved
				hi := zero
				if len(rows) == 2 {
					hi = w[1]
				}
				out = g.vec()
				g.raw(vcvtne2ps2bf16, out, hi, w[0])
				g.VPERMW(out, idx, out)
			default:
				out = g.bf16Bits(w[0])
				if len(rows) == 2 {
					h := g.bf16Bits(w[1])
					g.VPSLLD(operand.U8(16), h, h)
					g.vor(h, out, out)
				}
			}
			g.VMOVUPS(out, operand.Mem{Base: pp, Disp: j * b})
		}
	}
	per := max(1, g.isa.expInterleave/2) // vectors a group, two keys each
	loop := label("vecs", nv, "pairs")
	g.Label(loop)
	next := g.GP64()
	g.LEAQ(operand.Mem{Base: row, Index: lds, Scale: 1}, next)
	for j0 := 0; j0 < nv; j0 += per {
		step([]reg.GPVirtual{row, next}, j0, min(nv, j0+per))
	}
	g.LEAQ(operand.Mem{Base: row, Index: lds, Scale: 2}, row)
	g.ADDQ(ldp, pp)
	g.DECQ(c)
	g.JNZ(operand.LabelRef(loop))
	g.Label(odd)
	n := g.param("nk")
	g.TESTQ(operand.U32(1), n)
	done := label("vecs", nv, "paired")
	g.JZ(operand.LabelRef(done))
	for j0 := 0; j0 < nv; j0 += g.isa.expInterleave {
		step([]reg.GPVirtual{row}, j0, min(nv, j0+g.isa.expInterleave))
	}
	g.Label(done)
}
