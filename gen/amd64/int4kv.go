// DecodeQ8I4<ISA>'s own steps: int4 K/V (ggml's q4_0 blocks) read as
// they are by the int8 mode's decode (AVX-512: 1..16 rows; AVX2: one),
// K's nibbles multiplied by the quantized query on the set's dot step
// (VPDPBUSD, or VPMADDUBSW and VPMADDWD), V's turned into float32 in
// registers.

package main

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// unpackI4 loads one key's next int4 elements at m into w as unsigned
// bytes, 2·lanes of them: AVX-512 64 (two blocks, 32 bytes; with half,
// a mask of 16 bytes: one block, loaded masked, the rest zero), AVX2 32
// (one block, 16 bytes). VPMOVZXBW widens each byte to a word, a shift
// by 4 copies its high nibble into the word's upper byte, and (w |
// w<<4) & 0x0F0F (one VPTERNLOGD on AVX-512) leaves in byte 2j element
// j's nibble u and in byte 2j+1 element j+16's (0..15), the order
// DecodeQ8I4's q8 rows are in. A dot product of them by q8 sums u·q;
// the caller's qc (-8·Σ q8 of the block) turns that into Σ (u-8)·q. nib
// holds 0x0F in every byte.
func (g *gen) unpackI4(m operand.Mem, half reg.OpmaskVirtual, nib, w reg.VecVirtual) {
	t := g.vec()
	switch {
	case half != nil:
		b := g.vec()
		g.VMOVDQU8_Z(m, half, b)
		g.VPMOVZXBW(b.AsY(), w)
	default:
		g.VPMOVZXBW(m, w)
	}
	g.VPSLLW(operand.U8(4), w, t)
	if g.isa.avx512() {
		// VPTERNLOGD's table over (A = w, B = t, C = nib): (A | B) & C = 0xA8.
		g.VPTERNLOGD(operand.U8(0xa8), nib, t, w)
		return
	}
	g.VPOR(t, w, w)
	g.VPAND(nib, w, w)
}

// unpackI4Row sets acc to the dword sums of the products of one key's
// next int4 elements at m (unpackI4) with the query chunk q, in the
// form's dot step: VPDPBUSD (AVX-VNNI's VEX one, or its EVEX twin) into
// acc cleared from zr (zeroFrom), or VPMADDUBSW of the unsigned nibbles
// by q and VPMADDWD by ones (a pair is at most 2·15·127: no saturation).
func (g *gen) unpackI4Row(form q8Form, m operand.Mem, half reg.OpmaskVirtual, nib, ones, zr, q, acc reg.VecVirtual) {
	w := g.vec()
	g.unpackI4(m, half, nib, w)
	switch {
	case g.isa.avx512():
		g.zeroFrom(zr, acc)
		g.VPDPBUSD(q, w, acc)
	case form == q8Sign:
		g.VPMADDUBSW(q, w, w)
		g.VPMADDWD(ones, w, acc)
	case form == q8Dot:
		g.zeroFrom(zr, acc)
		g.raw(vpdpbusdVEX, acc, w, q)
	default:
		g.zeroFrom(zr, acc)
		g.raw(vpdpbusdEVEX256, acc, w, q)
	}
}

// loadConst loads the constant vector name into v.
func (g *gen) loadConst(name string, v reg.VecVirtual) {
	if g.isa.avx512() {
		g.VMOVDQU32(g.cst(name), v)
		return
	}
	g.VMOVDQU(g.cst(name), v)
}

// chunksI4 emits the loop over an int4 K row's chunks of lanes·2
// elements (AVX-512: 32 bytes, two scale blocks; AVX2: 16, one): n (a
// register, counted down) whole ones, then on AVX-512, if the row's
// bytes (krow, 16 a block) leave a block, that block as a chunk loaded
// under half, a mask of its 16 bytes (nil for the whole ones).
func (g *gen) chunksI4(name string, n reg.GPVirtual, krow operand.Mem, chunk func(half reg.OpmaskVirtual)) {
	g.Label(name + "_chunk")
	g.TESTQ(n, n)
	g.JZ(operand.LabelRef(name + "_tail"))
	chunk(nil)
	g.DECQ(n)
	g.JMP(operand.LabelRef(name + "_chunk"))
	g.Label(name + "_tail")
	if !g.isa.avx512() { // AVX2's chunks are single blocks
		return
	}
	g.TESTQ(operand.U32(16), krow)
	g.JZ(operand.LabelRef(name + "_done"))
	half, bits := g.K(), g.GP32()
	g.MOVL(operand.U32(0xffff), bits)
	g.KMOVW(bits, half)
	chunk(half)
	g.Label(name + "_done")
}

// i4Consts are the constants of int4's conversion to float32: held in
// registers through a PV tile or a score loop, or (AVX2's several-row
// score loop, whose accumulators and query vectors take the registers)
// read from memory by each instruction.
type i4Consts struct{ nib, magic, magic8 operand.Op }

var i4ConstNames = [3]string{"nibble", "twoTo23", "twoTo23Plus8"}

// i4Consts loads the constants into registers.
func (g *gen) i4Consts() i4Consts {
	var v [3]reg.VecVirtual
	for i, name := range i4ConstNames {
		v[i] = g.vec()
		g.loadConst(name, v[i])
	}
	return i4Consts{v[0], v[1], v[2]}
}

// i4ConstsInMemory are the constants as memory operands.
func (g *gen) i4ConstsInMemory() i4Consts {
	return i4Consts{g.cst(i4ConstNames[0]), g.cst(i4ConstNames[1]), g.cst(i4ConstNames[2])}
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

// i4Vectors returns vector j (0..n-1) of the int4 row at base as float32:
// on AVX-512 all n made here two at a time (loadI4), on AVX2 each where
// it is asked for (loadI4Vec).
func (g *gen) i4Vectors(base reg.GPVirtual, n int, c i4Consts) func(j int) reg.VecVirtual {
	if g.isa.avx512() {
		vs := g.loadI4(base, n, c)
		return func(j int) reg.VecVirtual { return vs[j] }
	}
	return func(j int) reg.VecVirtual { return g.loadI4Vec(operand.Mem{Base: base}, j, c) }
}

// loadI4Vec loads vector j of an int4 row's panel at vb as float32, one
// vector at a time (row: the row's address), as loadI4 does two at a time: a block of 32 elements
// is 32/T vectors of T, the low nibbles of its 16 bytes then their high
// nibbles, so vector j is of block j/(32/T) the low (or high, past the
// first 16/T) nibbles of T bytes (AVX2: bytes 0..7 or 8..15; AVX-512:
// all 16). Each vector loads its bytes (one register for all, where
// loadI4's pairs would take 8 of AVX2's 16).
func (g *gen) loadI4Vec(row operand.Mem, j int, c i4Consts) reg.VecVirtual {
	T := g.isa.lanes
	perBlock, perHalf := 32/T, 16/T
	v := j % perBlock
	x := g.vec()
	m := row
	m.Disp += 16*(j/perBlock) + T*(v%perHalf)
	g.VPMOVZXBD(m, x)
	if v >= perHalf {
		g.VPSRLD(operand.U8(4), x, x)
	} else if g.isa.avx512() {
		g.VPANDD(c.nib, x, x)
	} else {
		g.VPAND(c.nib, x, x)
	}
	if g.isa.avx512() {
		g.VPORD(c.magic, x, x)
	} else {
		g.VPOR(c.magic, x, x)
	}
	g.VSUBPS(c.magic8, x, x)
	return x
}
