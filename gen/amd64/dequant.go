// DequantI8<ISA> and DequantI4<ISA>: int8 and int4 K/V rows (int4:
// ggml's q4_0 blocks) to float32, whole blocks of 32 elements a step,
// each element float32(q)·scale rounded once (fallback.DequantizeInt8,
// fallback.DequantizeInt4KV): the flash path's K and V blocks over a
// quantized cache. int8: a sign extension and a conversion per vector;
// int4: a zero extension of the block's bytes, the low nibbles masked (its
// first 16 elements) or shifted down (the last 16), 8 subtracted.

package main

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

func (g *gen) dequant() {
	for _, int4 := range []bool{false, true} {
		name, src, elem := "DequantI8", "src[r*lds+i]", "float32(q)"
		if int4 {
			name, src, elem = "DequantI4", "the nibble u of element i of row r (q4_0 order)", "float32(u-8)"
		}
		g.fn(name, "func(dst *float32, ldd int, src *int8, lds int, s *float32, ldsc int, rows, blocks int)",
			"",
			"\tfor r := 0; r < rows; r++ {",
			"\t\tfor i := 0; i < 32*blocks; i++ {",
			"\t\t\tdst[r*ldd+i] = "+elem+" · s[r*ldsc+i/32]   (q = "+src+")",
			"",
			"strides: ldd and ldsc in floats, lds in bytes. Only whole blocks: a row's tail",
			"of fewer than 32 elements is the caller's.",
		)
		dp, sp, scp, rows, blocks := g.param("dst"), g.param("src"), g.param("s"), g.param("rows"), g.param("blocks")
		ldd, lds, ldsc := g.param("ldd"), g.param("lds"), g.param("ldsc")
		g.SHLQ(operand.U8(2), ldd)
		g.SHLQ(operand.U8(2), ldsc)
		g.TESTQ(rows, rows)
		g.JZ(operand.LabelRef("done"))
		g.TESTQ(blocks, blocks)
		g.JZ(operand.LabelRef("done"))
		var nib, eight reg.VecVirtual
		if int4 {
			nib, eight = g.vec(), g.vec()
			g.VMOVUPS(g.cst("nibble"), nib)
			g.VMOVUPS(g.cst("intEight"), eight)
		}
		g.Label("row")
		s, d, sc, cnt := g.GP64(), g.GP64(), g.GP64(), g.GP64()
		g.MOVQ(sp, s)
		g.MOVQ(dp, d)
		g.MOVQ(scp, sc)
		g.MOVQ(blocks, cnt)
		g.Label("block")
		T := g.isa.lanes
		scale := g.vec()
		g.VBROADCASTSS(operand.Mem{Base: sc}, scale)
		for v := range 32 / T {
			x := g.vec()
			if int4 {
				// Vector v: bytes (v mod 16/T)·T on, low nibbles in the
				// first half of the block, high ones in the second.
				per := 16 / T
				g.VPMOVZXBD(operand.Mem{Base: s, Disp: (v % per) * T}, x)
				switch {
				case v < per && g.isa.avx512():
					g.VPANDD(nib, x, x)
				case v < per:
					g.VPAND(nib, x, x)
				default:
					g.VPSRLD(operand.U8(4), x, x)
				}
				g.VPSUBD(eight, x, x)
			} else {
				g.VPMOVSXBD(operand.Mem{Base: s, Disp: v * T}, x)
			}
			g.VCVTDQ2PS(x, x)
			g.VMULPS(scale, x, x)
			g.VMOVUPS(x, operand.Mem{Base: d, Disp: 4 * v * T})
		}
		if int4 {
			g.ADDQ(operand.Imm(16), s)
		} else {
			g.ADDQ(operand.Imm(32), s)
		}
		g.ADDQ(operand.Imm(4*32), d)
		g.ADDQ(operand.Imm(4), sc)
		g.DECQ(cnt)
		g.JNZ(operand.LabelRef("block"))
		g.ADDQ(lds, sp)
		g.ADDQ(ldd, dp)
		g.ADDQ(ldsc, scp)
		g.DECQ(rows)
		g.JNZ(operand.LabelRef("row"))
		g.Label("done")
		g.ret()
	}
}
