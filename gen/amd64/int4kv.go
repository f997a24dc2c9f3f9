// DecodeQ8I4<ISA>'s own steps: int4 K/V (ggml's q4_0 blocks) read as
// they are by a one-row decode, K's nibbles multiplied by the quantized
// query on VPDPBUSD, V's turned into float32 in registers.

package main

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// unpackI4 loads one key's next 64 int4 elements at m (two blocks, 32
// bytes; with half, a mask of 16 bytes: one block, loaded masked, the
// rest zero) into w as 64 unsigned bytes: VPMOVZXBW widens each byte to
// a word, a shift by 4 copies its high nibble into the word's upper
// byte, and one VPTERNLOGD keeps (w | w<<4) & 0x0F0F: byte 2j holds
// element j's nibble u, byte 2j+1 element j+16's (0..15), the order
// DecodeQ8I4's q8 rows are in. VPDPBUSD then sums u·q four bytes a
// lane; the caller's qc (-8·Σ q8 of the block) turns Σ u·q into
// Σ (u-8)·q. nib holds 0x0F in every byte.
func (g *gen) unpackI4(m operand.Mem, half reg.OpmaskVirtual, nib, w reg.VecVirtual) {
	if half != nil {
		b := g.vec()
		g.VMOVDQU8_Z(m, half, b)
		g.VPMOVZXBW(b.AsY(), w)
	} else {
		g.VPMOVZXBW(m, w)
	}
	t := g.vec()
	g.VPSLLW(operand.U8(4), w, t)
	// VPTERNLOGD's table over (A = w, B = t, C = nib): (A | B) & C = 0xA8.
	g.VPTERNLOGD(operand.U8(0xa8), nib, t, w)
}

// unpackI4Row adds into acc (zeroed here) the products of one key's next
// 64 int4 elements at m (unpackI4) with the query chunk q, per dword
// lane.
func (g *gen) unpackI4Row(m operand.Mem, half reg.OpmaskVirtual, nib reg.VecVirtual, q operand.Op, acc reg.VecVirtual) {
	w := g.vec()
	g.unpackI4(m, half, nib, w)
	g.zero(acc)
	g.VPDPBUSD(q, w, acc)
}

// chunksI4 emits the loop over an int4 K row's chunks of 32 bytes (64
// elements, two scale blocks): n (a register, counted down) whole ones,
// then, if the row's bytes (krow, 16 a block) leave a block, that block
// as a chunk loaded under half, a mask of its 16 bytes (nil for the
// whole ones).
func (g *gen) chunksI4(name string, n reg.GPVirtual, krow operand.Mem, chunk func(half reg.OpmaskVirtual)) {
	g.Label(name + "_chunk")
	g.TESTQ(n, n)
	g.JZ(operand.LabelRef(name + "_tail"))
	chunk(nil)
	g.DECQ(n)
	g.JMP(operand.LabelRef(name + "_chunk"))
	g.Label(name + "_tail")
	g.TESTQ(operand.U32(16), krow)
	g.JZ(operand.LabelRef(name + "_done"))
	half, bits := g.K(), g.GP32()
	g.MOVL(operand.U32(0xffff), bits)
	g.KMOVW(bits, half)
	chunk(half)
	g.Label(name + "_done")
}

// i4Consts are the constants of int4 V's conversion, held in registers
// through a PV tile.
type i4Consts struct{ nib, magic, magic8 reg.VecVirtual }

func (g *gen) i4Consts() i4Consts {
	c := i4Consts{g.vec(), g.vec(), g.vec()}
	g.VMOVDQU32(g.cst("nibble"), c.nib)
	g.VMOVDQU32(g.cst("twoTo23"), c.magic)
	g.VMOVDQU32(g.cst("twoTo23Plus8"), c.magic8)
	return c
}

// loadI4 loads the nv vectors (T = 16 elements each) of an int4 V row's
// panel at vb as float32: vector 2i holds the low nibbles of the 16
// bytes of block i, vector 2i+1 their high nibbles. VPMOVZXBD widens
// the block's bytes to dwords once; a nibble u or'ed into the bits of
// 2^23 is the float 2^23 + u (u is below the mantissa's 2^23), and
// subtracting 2^23 + 8 leaves u - 8 exactly: one VPTERNLOGD ((x & 15) |
// 2^23) for the low nibbles, a shift and an OR for the high ones, a
// subtraction each, where a conversion would take a mask, an integer
// subtraction and VCVTDQ2PS.
func (g *gen) loadI4(vb reg.GPVirtual, nv int, c i4Consts) []reg.VecVirtual {
	if !g.isa.avx512() {
		panic("loadI4: int4 V on AVX-512 only")
	}
	out := make([]reg.VecVirtual, nv)
	for j := 0; j < nv; j += 2 {
		x := g.vec()
		g.VPMOVZXBD(operand.Mem{Base: vb, Disp: 8 * j}, x)
		if j+1 < nv {
			hi := g.vec()
			g.VPSRLD(operand.U8(4), x, hi)
			g.VPORD(c.magic, hi, hi)
			g.VSUBPS(c.magic8, hi, hi)
			out[j+1] = hi
		}
		// VPTERNLOGD's table over (A = x, B = nib, C = magic): (A & B) | C = 0xEA.
		g.VPTERNLOGD(operand.U8(0xea), c.magic, c.nib, x)
		g.VSUBPS(c.magic8, x, x)
		out[j] = x
	}
	return out
}
