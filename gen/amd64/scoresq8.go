// ScoresQ8<ISA>: the int8 compute mode's score tile of a flash block (many
// query rows over one KV head) on integer dot products, AVX512_VNNI's
// VPDPBUSD, where the other paths of that mode multiply the values the
// quantized rows stand for in float32 (QK on a dequantized K block).
//
// Operands, packed by the caller (kernels.Set.PackKeysQ8, fallback.PackQueryQ8):
//
//	K  each key's row as nb blocks of 36 bytes: 32 bytes k+128 (0..255,
//	   VPDPBUSD's unsigned operand; dims past dk hold 128, k = 0) and
//	   the block's float32 scale;
//	Q  the rows' int8 bytes by dword: dword row t (dims 4t..4t+3) holds
//	   row r's 4 bytes in dword r (ldq rows, rows past the item's zero),
//	   then per block b the rows' scales (a vector over the rows) and
//	   their corrections -128·Σq (the +128's undoing, QueryQ8.Corr).
//
// Register tile: 6 keys × 2 vectors of rows (32 rows): 12 int32 sums and
// 12 float32 scores, 2 Q vectors and a broadcast of 32 zmm. Per step of
// 4 dims: 2 Q loads, 6 key dwords broadcast, 12 VPDPBUSD (64 products
// each, where an FMA takes 16). Per block of 32 dims and key: the sums
// start at the rows' corrections; after the block's 8 steps each is
// converted to float32 (exact: |Σ| ≤ 32·128·127 < 2^24) and added to its
// score by an FMA with q scale × k scale.

package main

import (
	"fmt"

	"github.com/fastattn/fastattn/fallback"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// scoresQ8NV is the most row vectors of a ScoresQ8 panel: 2·6 sums and
// 2·6 scores beside 2 Q vectors and a broadcast fill 27 of 32 zmm (4 would
// need 48 for the sums and scores alone).
const scoresQ8NV = 2

// The packed key rows' layout is fallback's (fallback.PackKeysQ8): blocks
// of q8BlockBytes, the scale q8ScaleAt bytes in; a step takes 4 dims.
const (
	q8BlockBytes = fallback.KeyQ8BlockBytes
	q8ScaleAt    = fallback.Int8Block
	q8Steps      = fallback.Int8Block / 4
)

// scoresQ8Regs are the registers ScoresQ8's key groups share.
type scoresQ8Regs struct {
	sp   reg.GPVirtual // the score row of the current key group
	lds  reg.GPVirtual // score row stride, bytes
	kp   reg.GPVirtual // the packed K row of the current key group
	k    rowStride     // the packed K rows' stride
	ldq4 reg.GPVirtual // Q's dword row stride, and a block's scale row, bytes
}

// scoresQ8 emits ScoresQ8<ISA> (AVX-512 only: VPDPBUSD on zmm).
func (g *gen) scoresQ8() {
	x := g.isa
	g.fn("ScoresQ8", "func(s *float32, lds int, k *uint8, ldk int, q *int8, qs *float32, qc *int32, ldq, nk, nv, nb int)",
		"",
		"\tfor c := 0; c < nk; c++ {",
		"\t\tfor r := 0; r < nv*lanes; r++ {",
		"\t\t\ts[c*lds+r] = Σ_{b<nb} float32(Σ_{d<32} (k8(c, b, d)+128)·q8(r, 32b+d) + qc[b*ldq+r]) · (qs[b*ldq+r]·ks(c, b))",
		"",
		"the block terms added in order b = 0, 1, … by FMAs, the sums exact in",
		"int32; k8(c, b, d)+128 is byte 36b+d of packed K row c (4·ldk bytes",
		"apart: ldk in dwords), ks(c, b) the float32 at byte 36b+32; q8(r, 4t+i)",
		"is byte 4·(t·ldq+r)+i of q. nv in 1..2 vectors of rows, nb >= 1",
		"blocks, lds and ldq in elements. Register tile: 6 keys × nv row vectors; the last",
		fmt.Sprintf("nk%%6 keys in tiles of 4, 2 and 1. (AVX512_VNNI: the %s set's", x.name),
		"kernel runs where cpuid reports it.)",
	)
	var r scoresQ8Regs
	r.sp = g.param("s")
	r.lds = g.stride("lds")
	r.kp = g.param("k")
	r.k = g.strided("ldk", x.mk)
	r.ldq4 = g.stride("ldq")
	keys := g.param("nk")
	nv := g.GP64()
	g.Load(g.Param("nv"), nv)
	for v := scoresQ8NV; v >= 1; v-- {
		g.CMPQ(nv, operand.Imm(uint64(v)))
		g.JEQ(operand.LabelRef(label("vecs", v)))
	}
	g.ret()
	for v := scoresQ8NV; v >= 1; v-- {
		l := label("vecs", v)
		g.Comment(fmt.Sprintf("Panel of %d vectors of rows.", v))
		g.Label(l)
		g.rowGroups(keys, l, func(mr int, lbl string) { g.scoresQ8Tile(r, mr, v, lbl) })
		g.ret()
	}
}

// scoresQ8Tile emits the tile of mr keys × nv row vectors: every block of
// the keys' rows, then the scores' store; sp and kp move on by mr rows.
func (g *gen) scoresQ8Tile(r scoresQ8Regs, mr, nv int, lbl string) {
	b := g.isa.bytes()
	out := g.tile(mr, nv) // float32 scores
	sum := g.tile(mr, nv) // int32 sums of the current block
	for i := range out {
		for j := range out[i] {
			g.zero(out[i][j])
		}
	}
	kb := g.GP64() // the current block of the group's first key row
	g.MOVQ(r.kp, kb)
	qp, qs := g.param("q"), g.param("qs") // Q's dword rows; the block's scales
	qc := g.param("qc")                   // the block's corrections
	blocks := g.param("nb")
	g.Comment(fmt.Sprintf("Block loop: the %d×%d sums start at the rows' corrections.", mr, nv))
	g.Label(label(lbl, "block"))
	for i := range sum {
		for j := range sum[i] {
			g.VMOVDQU32(operand.Mem{Base: qc, Disp: j * b}, sum[i][j])
		}
	}
	g.Comment(fmt.Sprintf("%d steps of 4 dims: the rows' dwords, each key's dword broadcast into a VPDPBUSD with each.", q8Steps))
	for t := 0; t < q8Steps; t++ {
		qv := make([]reg.VecVirtual, nv)
		for j := range qv {
			qv[j] = g.vec()
			g.VMOVDQU32(operand.Mem{Base: qp, Disp: j * b}, qv[j])
		}
		for i := range sum {
			kd := g.vec()
			g.VPBROADCASTD(r.k.at(kb, i).Offset(4*t), kd)
			for j := range qv {
				g.VPDPBUSD(qv[j], kd, sum[i][j])
			}
		}
		g.ADDQ(r.ldq4, qp)
	}
	g.Comment("The block's sums to float32, times q scale × k scale, into the scores.")
	for i := range sum {
		ksc := g.vec()
		g.VBROADCASTSS(r.k.at(kb, i).Offset(q8ScaleAt), ksc)
		for j := range sum[i] {
			w := g.vec()
			g.VMULPS(operand.Mem{Base: qs, Disp: j * b}, ksc, w)
			g.VCVTDQ2PS(sum[i][j], sum[i][j])
			g.VFMADD231PS(sum[i][j], w, out[i][j])
		}
	}
	g.ADDQ(operand.Imm(q8BlockBytes), kb)
	g.ADDQ(r.ldq4, qs)
	g.ADDQ(r.ldq4, qc)
	g.DECQ(blocks)
	g.JNZ(operand.LabelRef(label(lbl, "block")))
	g.Comment("Store the scores key by key; sp ends one row past them.")
	for i := range out {
		for j := range out[i] {
			g.VMOVUPS(out[i][j], operand.Mem{Base: r.sp, Disp: j * b})
		}
		g.ADDQ(r.lds, r.sp)
	}
	g.advance(r.kp, r.k, mr)
}

// packKeysQ8 emits PackKeysQ8<ISA>: int8 K rows into ScoresQ8's packed
// rows, the whole blocks' bytes (a 32-byte load, XOR with the sign bits,
// store) and every block's scale; a partial last block's bytes are the
// caller's (kernels.Set.PackKeysQ8).
func (g *gen) packKeysQ8() {
	g.fn("PackKeysQ8", "func(dst *uint8, ldd int, src *int8, lds int, s *float32, ldss int, nk, nw, nb int)",
		"",
		"\tfor c := 0; c < nk; c++ {",
		"\t\tfor b := 0; b < nb; b++ {",
		"\t\t\tif b < nw { dst[c*ldd+36b+i] = uint8(src[c*lds+32b+i]) ^ 0x80   for i < 32 }",
		"\t\t\tdst[c*ldd+36b+32 : +4] = s[c*ldss+b]   (its 4 bytes)",
		"",
		"with nw <= nb whole blocks, ldd and lds in bytes, ldss in elements.")
	dp, ldd := g.param("dst"), g.param("ldd")
	sp, lds := g.param("src"), g.param("lds")
	cs, ldss := g.param("s"), g.stride("ldss")
	keys := g.param("nk")
	flip := g.YMM()
	g.VMOVDQU(g.cst("byteSigns").Offset(0), flip)
	g.TESTQ(keys, keys)
	g.JZ(operand.LabelRef("done"))
	g.Label("key")
	d, s, c := g.GP64(), g.GP64(), g.GP64()
	g.MOVQ(dp, d)
	g.MOVQ(sp, s)
	g.MOVQ(cs, c)
	n := g.param("nw")
	g.TESTQ(n, n)
	g.JZ(operand.LabelRef("scales"))
	g.Label("bytes")
	y := g.YMM()
	g.VPXOR(operand.Mem{Base: s}, flip, y)
	g.VMOVDQU(y, operand.Mem{Base: d})
	g.ADDQ(operand.Imm(q8ScaleAt), s)
	g.ADDQ(operand.Imm(q8BlockBytes), d)
	g.DECQ(n)
	g.JNZ(operand.LabelRef("bytes"))
	g.Label("scales")
	g.MOVQ(dp, d)
	m := g.param("nb")
	g.Label("scale")
	x := g.GP32()
	g.MOVL(operand.Mem{Base: c}, x)
	g.MOVL(x, operand.Mem{Base: d, Disp: q8ScaleAt})
	g.ADDQ(operand.Imm(4), c)
	g.ADDQ(operand.Imm(q8BlockBytes), d)
	g.DECQ(m)
	g.JNZ(operand.LabelRef("scale"))
	g.ADDQ(ldd, dp)
	g.ADDQ(lds, sp)
	g.ADDQ(ldss, cs)
	g.DECQ(keys)
	g.JNZ(operand.LabelRef("key"))
	g.Label("done")
	g.ret()
}
