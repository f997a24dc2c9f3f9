// WidenI4KV<ISA>: int4 K/V rows (ggml's q4_0 blocks) to int8, for the
// decode kernels (kernels/int4kv.go). A block's 16 bytes hold its
// elements 0..15 in their low nibbles and 16..31 in their high ones, so a
// mask gives the first half in order, a shift and the mask the second,
// and subtracting 8 the int8 values: two blocks (32 bytes) a step in ymm
// registers, halves interleaved per block by VPERM2I128, then one block
// in xmm if the row has an odd count. VEX code on both sets (the
// AVX-512 set's too: a ymm step already stores 64 bytes a cycle or two).

package main

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

func (g *gen) widenI4KV() {
	g.fn("WidenI4KV", "func(dst *int8, ldd int, src *int8, lds int, rows, blocks, ahead int)",
		"",
		"\tfor r := 0; r < rows; r++ {",
		"\t\tfallback.WidenInt4KV(dst[r*ldd:], src[r*lds:], blocks)",
		"",
		"strides in bytes: each block of 16 bytes becomes 32 int8 values u-8, the low",
		"nibbles then the high ones. No byte past a row's blocks is read or written.",
		"ahead > 0: each row's lines ahead bytes on are prefetched (PREFETCHT0), so the",
		"next chunk's rows come in while the decode kernel computes on this one.",
	)
	dp, sp, rows, blocks := g.param("dst"), g.param("src"), g.param("rows"), g.param("blocks")
	ldd, lds, ahead := g.param("ldd"), g.param("lds"), g.param("ahead")
	g.TESTQ(rows, rows)
	g.JZ(operand.LabelRef("done"))
	g.TESTQ(blocks, blocks)
	g.JZ(operand.LabelRef("done"))
	nib, eight := g.YMM(), g.YMM()
	g.VMOVDQU(g.cst("nibbles"), nib)
	g.VMOVDQU(g.cst("eights"), eight)
	g.Label("row")
	s, d, cnt := g.GP64(), g.GP64(), g.GP64()
	g.MOVQ(sp, s)
	g.MOVQ(dp, d)
	g.MOVQ(blocks, cnt)
	// The row's lines ahead: one prefetch per 64 bytes of its blocks (4
	// blocks), from its first byte.
	g.TESTQ(ahead, ahead)
	g.JZ(operand.LabelRef("pair0"))
	{
		p, n := g.GP64(), g.GP64()
		g.LEAQ(operand.Mem{Base: s, Index: ahead, Scale: 1}, p)
		g.MOVQ(blocks, n)
		g.Label("ahead")
		g.PREFETCHT0(operand.Mem{Base: p})
		g.ADDQ(operand.Imm(64), p)
		g.SUBQ(operand.Imm(4), n)
		g.JG(operand.LabelRef("ahead"))
	}
	g.Label("pair0")
	// halves splits the bytes of x into the int8 values of their low and
	// high nibbles.
	halves := func(x, lo, hi reg.VecVirtual, nib, eight reg.Register) {
		g.VPSRLW(operand.U8(4), x, hi)
		g.VPAND(nib, x, lo)
		g.VPAND(nib, hi, hi)
		g.VPSUBB(eight, lo, lo)
		g.VPSUBB(eight, hi, hi)
	}
	g.CMPQ(cnt, operand.Imm(2))
	g.JB(operand.LabelRef("one"))
	g.Label("pair")
	{
		x, lo, hi, o := g.YMM(), g.YMM(), g.YMM(), g.YMM()
		g.VMOVDQU(operand.Mem{Base: s}, x)
		halves(x, lo, hi, nib, eight)
		// Block 0: its low halves (lane 0 of lo), then its high (lane 0
		// of hi); block 1 likewise from lanes 1.
		g.VPERM2I128(operand.U8(0x20), hi, lo, o)
		g.VMOVDQU(o, operand.Mem{Base: d})
		g.VPERM2I128(operand.U8(0x31), hi, lo, o)
		g.VMOVDQU(o, operand.Mem{Base: d, Disp: 32})
	}
	g.ADDQ(operand.Imm(32), s)
	g.ADDQ(operand.Imm(64), d)
	g.SUBQ(operand.Imm(2), cnt)
	g.CMPQ(cnt, operand.Imm(2))
	g.JAE(operand.LabelRef("pair"))
	g.Label("one")
	g.TESTQ(cnt, cnt)
	g.JZ(operand.LabelRef("next"))
	{
		x, lo, hi := g.XMM(), g.XMM(), g.XMM()
		g.VMOVDQU(operand.Mem{Base: s}, x)
		halves(x, lo, hi, nib.AsX(), eight.AsX())
		g.VMOVDQU(lo, operand.Mem{Base: d})
		g.VMOVDQU(hi, operand.Mem{Base: d, Disp: 16})
	}
	g.Label("next")
	g.ADDQ(lds, sp)
	g.ADDQ(ldd, dp)
	g.DECQ(rows)
	g.JNZ(operand.LabelRef("row"))
	g.Label("done")
	g.ret()
}
