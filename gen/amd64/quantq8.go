// QuantizeQ8<ISA>: the int8 compute mode's query rows quantized by
// fallback.QuantizeQuery's rule (llama.cpp's q8_0: per block of 32, scale
// = amax/127, q = the quotient rounded to even, clamped to ±127), with the
// blocks' corrections and, on request, the values the row then stands
// for, in two passes over the row's whole blocks:
//
//	pass 1  per block the largest |x| by its bits (VPAND with the sign
//	        mask, VPMAXUD: for non-negative floats the unsigned order of
//	        the bits is the order of the values, and NaN and ±Inf are the
//	        bits at or above 0x7f800000, so the same maximum finds a
//	        non-finite row, which is left as it is); the scale amax/127,
//	        stepped down while 127·scale overflows, as Go's loop does;
//	pass 2  per block x/scale (VDIVPS, correctly rounded as Go's float32
//	        division), rounded to even (VCVTPS2DQ under Go's MXCSR),
//	        clamped, summed for the correction -128·Σq and narrowed to
//	        bytes (AVX-512: VPMOVDB; AVX2: two saturating packs and a
//	        VPERMD back into order); with values, float32(q)·scale over
//	        the row. A block of scale 0 is zeros.
//
// So the bytes, scales and corrections are fallback.QuantizeQuery's bit
// for bit, and the values DequantizeQuery's; the Go code (one division
// and a float64 rounding per element) took a quarter of the int8 mode's
// prefill at head dim 64 on Zen 4.

package main

import (
	"github.com/fastattn/fastattn/fallback"
	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// quantizeQ8 emits QuantizeQ8<ISA>.
func (g *gen) quantizeQ8() {
	x := g.isa
	vpb := fallback.Int8Block / x.lanes // vectors of a block
	g.fn("QuantizeQ8", "func(q *int8, s *float32, c *int32, src *float32, nb, values int) int",
		"",
		"\tif src[:32*nb] has a NaN or ±Inf: return 0 (q, c and src unwritten; s may be)",
		"\tfor b := 0; b < nb; b++ {",
		"\t\ts[b] = amax(src[32b:32b+32])/127 (stepped down while 127·s[b] overflows)",
		"\t\tq[32b+i] = clamp(roundEven(src[32b+i]/s[b]), -127, 127)   (0 where s[b] = 0)",
		"\t\tc[b] = -128·Σ_i q[32b+i]",
		"\t\tif values != 0 { src[32b+i] = float32(q[32b+i])·s[b] }",
		"\t}",
		"\treturn 1",
		"",
		"fallback.QuantizeQuery's bytes, scales and corrections of one row of",
		"nb >= 1 whole blocks (a partial last block is the caller's, padded",
		"with zeros), and with values DequantizeQuery's values, in place.")
	qp, sp, cp, xp := g.param("q"), g.param("s"), g.param("c"), g.param("src")
	n := g.param("nb")
	abs := g.vec()
	g.movInts(g.cst("absMask"), abs)
	g.Comment("Pass 1: each block's largest |x| by its bits, and its scale.")
	xb, sb, blocks := g.GP64(), g.GP64(), g.GP64()
	g.MOVQ(xp, xb)
	g.MOVQ(sp, sb)
	g.MOVQ(n, blocks)
	g.Label("amax")
	var m reg.VecVirtual // the block's largest bits so far
	for v := 0; v < vpb; v++ {
		t := g.vec()
		if x.avx512() {
			g.VPANDD(operand.Mem{Base: xb, Disp: v * x.bytes()}, abs, t)
		} else {
			g.VPAND(operand.Mem{Base: xb, Disp: v * x.bytes()}, abs, t)
		}
		if v == 0 {
			m = t
		} else {
			g.VPMAXUD(t, m, m)
		}
	}
	bits := g.horizontal(m, g.VPMAXUD)
	g.CMPL(bits, operand.U32(0x7f800000))
	g.JAE(operand.LabelRef("nonfinite"))
	scale, t := g.XMM(), g.XMM()
	g.VMOVD(bits, scale)
	g.VDIVSS(g.cst("f127"), scale, scale)
	g.Label("overflow")
	g.VMULSS(g.cst("f127"), scale, t)
	g.VMOVD(t, bits)
	g.CMPL(bits, operand.U32(0x7f800000))
	g.JNE(operand.LabelRef("scaled"))
	g.VMOVD(scale, bits) // 127·scale overflowed: the next float32 toward 0
	g.DECL(bits)
	g.VMOVD(bits, scale)
	g.JMP(operand.LabelRef("overflow"))
	g.Label("scaled")
	g.VMOVSS(scale, operand.Mem{Base: sb})
	g.ADDQ(operand.U32(4*fallback.Int8Block), xb)
	g.ADDQ(operand.U32(4), sb)
	g.DECQ(blocks)
	g.JNZ(operand.LabelRef("amax"))

	g.Comment("Pass 2: each block's bytes, correction and (values) values.")
	g.Label("block")
	sv := g.vec()
	g.VBROADCASTSS(operand.Mem{Base: sp}, sv)
	g.CMPL(operand.Mem{Base: sp}, operand.U32(0))
	g.JE(operand.LabelRef("zeros"))
	ints := make([]reg.VecVirtual, vpb)
	var sum reg.VecVirtual
	for v := range ints {
		f := g.vec()
		g.VMOVUPS(operand.Mem{Base: xp, Disp: v * x.bytes()}, f)
		g.VDIVPS(sv, f, f)
		ints[v] = g.vec()
		g.VCVTPS2DQ(f, ints[v])
		g.VPMINSD(g.cst("int127"), ints[v], ints[v])
		g.VPMAXSD(g.cst("intMinus127"), ints[v], ints[v])
		if v == 0 {
			sum = g.vec()
			g.movInts(ints[v], sum)
		} else {
			g.VPADDD(ints[v], sum, sum)
		}
	}
	g.narrowBytes(ints, operand.Mem{Base: qp})
	cs := g.horizontal(sum, g.VPADDD)
	g.IMUL3L(operand.I32(-128), cs, cs)
	g.MOVL(cs, operand.Mem{Base: cp})
	g.CMPQ(g.arg("values"), operand.U32(0))
	g.JE(operand.LabelRef("next"))
	for v, i := range ints {
		f := g.vec()
		g.VCVTDQ2PS(i, f)
		g.VMULPS(sv, f, f)
		g.VMOVUPS(f, operand.Mem{Base: xp, Disp: v * x.bytes()})
	}
	g.JMP(operand.LabelRef("next"))
	g.Label("zeros")
	z := g.vec()
	g.zero(z)
	g.VMOVDQU(z.AsY(), operand.Mem{Base: qp})
	g.MOVL(operand.U32(0), operand.Mem{Base: cp})
	g.CMPQ(g.arg("values"), operand.U32(0))
	g.JE(operand.LabelRef("next"))
	for v := 0; v < vpb; v++ {
		g.VMOVUPS(z, operand.Mem{Base: xp, Disp: v * x.bytes()})
	}
	g.Label("next")
	g.ADDQ(operand.U32(4*fallback.Int8Block), xp)
	g.ADDQ(operand.U32(fallback.Int8Block), qp)
	g.ADDQ(operand.U32(4), sp)
	g.ADDQ(operand.U32(4), cp)
	g.DECQ(n)
	g.JNZ(operand.LabelRef("block"))
	one := g.GP64()
	g.MOVQ(operand.U32(1), one)
	g.Store(one, g.ReturnIndex(0))
	g.ret()
	g.Label("nonfinite")
	zero := g.GP64()
	g.XORQ(zero, zero)
	g.Store(zero, g.ReturnIndex(0))
	g.ret()
}

// horizontal folds the lanes of the int32 vector v by op (VPMAXUD,
// VPADDD) into one, returned in a 32-bit register; v is overwritten.
func (g *gen) horizontal(v reg.VecVirtual, op func(ops ...operand.Op)) reg.GPVirtual {
	if g.isa.avx512() {
		hi := g.YMM()
		g.VEXTRACTI64X4(operand.U8(1), v, hi)
		op(hi, v.AsY(), hi)
		v = hi
	}
	lo := g.XMM()
	g.VEXTRACTI128(operand.U8(1), v, lo)
	op(lo, v.AsX(), lo)
	t := g.XMM()
	g.VPSHUFD(operand.U8(0x4e), lo, t) // swap the 64-bit halves
	op(t, lo, lo)
	g.VPSHUFD(operand.U8(0xb1), lo, t) // swap the dwords of each half
	op(t, lo, lo)
	r := g.GP32()
	g.VMOVD(lo, r)
	return r
}

// narrowBytes stores the 32 clamped int32 of a block (ints, 2 or 4
// vectors) as bytes at m, in order.
func (g *gen) narrowBytes(ints []reg.VecVirtual, m operand.Mem) {
	if g.isa.avx512() {
		for v, i := range ints {
			g.VPMOVDB(i, m.Offset(16*v))
		}
		return
	}
	// Packs work within 128-bit lanes: after them dword d of the result
	// holds ints[d%4]'s elements 4(d/4)..+3, so VPERMD by 0, 4, 1, 5, 2,
	// 6, 3, 7 puts them back in order.
	w01, w23 := g.YMM(), g.YMM()
	g.VPACKSSDW(ints[1], ints[0], w01)
	g.VPACKSSDW(ints[3], ints[2], w23)
	g.VPACKSSWB(w23, w01, w01)
	idx := g.YMM()
	g.VMOVDQU(g.packOrder(), idx)
	g.VPERMD(w01, idx, w01)
	g.VMOVDQU(w01, m)
}

// movInts copies an integer vector (or loads one): VMOVDQU32 on AVX-512.
func (g *gen) movInts(src operand.Op, dst reg.VecVirtual) {
	if g.isa.avx512() {
		g.VMOVDQU32(src, dst)
		return
	}
	g.VMOVDQU(src, dst)
}

// packOrder emits, once per set, the dwords 0, 4, 1, 5, 2, 6, 3, 7:
// narrowBytes' VPERMD index.
func (g *gen) packOrder() operand.Mem {
	if g.packIdx == nil {
		m := g.StaticGlobal("packOrder" + g.isa.suffix)
		g.DataAttributes(attr.RODATA | attr.NOPTR)
		for i, d := range []uint32{0, 4, 1, 5, 2, 6, 3, 7} {
			g.AddDatum(4*i, operand.U32(d))
		}
		g.packIdx = &m
	}
	return *g.packIdx
}
