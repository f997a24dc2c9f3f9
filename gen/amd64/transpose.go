// TransposeScale<ISA>: the packing of a Q block into scaled Qᵀ, in 8×8
// blocks: 8 row loads, unpack, shuffle and 128-bit permute to columns, 8
// multiplies, 8 column stores (ymm code on both sets); Transpose32<ISA>,
// the same without the multiplies, for 4-byte elements of any bits.

package main

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// transpose emits TransposeScale<ISA>, the packing of the Q block into Qᵀ,
// 8×8 blocks at a time in ymm registers (both sets; AVX2 instructions);
// without scaled, Transpose32<ISA>: the same shuffles without the
// multiply, an exact transpose of 4-byte elements (bfloat16 pairs, whose
// bits as float32 may be a signalling NaN that a multiply would quiet).
func (g *gen) transpose(scaled bool) {
	if scaled {
		g.fn("TransposeScale", "func(dst *float32, ldd int, src *float32, lds int, nr, nc int, scale float32)",
			"",
			"\tfor r := 0; r < nr; r++ {",
			"\t\tfor c := 0; c < nc; c++ {",
			"\t\t\tdst[c*ldd+r] = scale · src[r*lds+c]",
			"",
			"with nr and nc multiples of 8 (the caller does the edges), strides in",
			"elements. Each 8×8 block: 8 row loads, unpack, shuffle and 128-bit",
			"permute to columns, 8 multiplies, 8 column stores.",
		)
	} else {
		g.fn("Transpose32", "func(dst *uint32, ldd int, src *uint32, lds int, nr, nc int)",
			"",
			"\tfor r := 0; r < nr; r++ {",
			"\t\tfor c := 0; c < nc; c++ {",
			"\t\t\tdst[c*ldd+r] = src[r*lds+c]",
			"",
			"bit for bit, with nr and nc multiples of 8 (the caller does the edges),",
			"strides in elements: TransposeScale's shuffles, no multiply.",
		)
	}
	ldd, lds := g.GP64(), g.GP64()
	g.Load(g.Param("ldd"), ldd)
	g.SHLQ(operand.U8(2), ldd)
	g.Load(g.Param("lds"), lds)
	g.SHLQ(operand.U8(2), lds)
	var sc reg.VecVirtual
	if scaled {
		sx := g.XMM()
		sc = g.YMM()
		g.Load(g.Param("scale"), sx)
		g.VBROADCASTSS(sx, sc)
	}
	rows := g.param("nr")
	dstRow, srcRow := g.GP64(), g.GP64() // block row r0: dst + 4·r0, src + r0·lds
	g.Load(g.Param("dst"), dstRow)
	g.Load(g.Param("src"), srcRow)
	g.Label("rows")
	g.CMPQ(rows, operand.Imm(8))
	g.JLT(operand.LabelRef("done"))
	cols := g.param("nc")
	s, d := g.GP64(), g.GP64()
	g.MOVQ(srcRow, s)
	g.MOVQ(dstRow, d)
	g.Label("cols")
	g.CMPQ(cols, operand.Imm(8))
	g.JLT(operand.LabelRef("nextrows"))
	// Load 8 rows of 8.
	r := make([]reg.VecVirtual, 8)
	p := g.GP64()
	g.MOVQ(s, p)
	for i := range r {
		r[i] = g.YMM()
		g.VMOVUPS(operand.Mem{Base: p}, r[i])
		if i < 7 {
			g.ADDQ(lds, p)
		}
	}
	// t: pairs of rows interleaved; u: quadruples; o: columns.
	t := make([]reg.VecVirtual, 8)
	for i := 0; i < 8; i += 2 {
		t[i], t[i+1] = g.YMM(), g.YMM()
		g.VUNPCKLPS(r[i+1], r[i], t[i])
		g.VUNPCKHPS(r[i+1], r[i], t[i+1])
	}
	u := make([]reg.VecVirtual, 8)
	for _, q := range [][2]int{{0, 2}, {4, 6}} { // row quadruples 0-3 and 4-7
		a, b := q[0], q[1]
		u[a], u[a+1], u[a+2], u[a+3] = g.YMM(), g.YMM(), g.YMM(), g.YMM()
		g.VSHUFPS(operand.U8(0x44), t[b], t[a], u[a])
		g.VSHUFPS(operand.U8(0xEE), t[b], t[a], u[a+1])
		g.VSHUFPS(operand.U8(0x44), t[b+1], t[a+1], u[a+2])
		g.VSHUFPS(operand.U8(0xEE), t[b+1], t[a+1], u[a+3])
	}
	g.MOVQ(d, p)
	for c := 0; c < 8; c++ {
		o := g.YMM()
		imm := uint8(0x20) // low halves: columns 0-3
		if c >= 4 {
			imm = 0x31 // high halves: columns 4-7
		}
		g.VPERM2F128(operand.U8(imm), u[4+c%4], u[c%4], o)
		if scaled {
			g.VMULPS(sc, o, o)
		}
		g.VMOVUPS(o, operand.Mem{Base: p})
		if c < 7 {
			g.ADDQ(ldd, p)
		}
	}
	g.ADDQ(operand.Imm(32), s)
	g.LEAQ(operand.Mem{Base: d, Index: ldd, Scale: 8}, d)
	g.SUBQ(operand.Imm(8), cols)
	g.JMP(operand.LabelRef("cols"))
	g.Label("nextrows")
	g.ADDQ(operand.Imm(32), dstRow)
	g.LEAQ(operand.Mem{Base: srcRow, Index: lds, Scale: 8}, srcRow)
	g.SUBQ(operand.Imm(8), rows)
	g.JMP(operand.LabelRef("rows"))
	g.Label("done")
	g.ret()
}
