package main

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// qkRegs are the registers a QK panel keeps across key groups.
type qkRegs struct {
	sp, lds    reg.GPVirtual // output row of the current key group; S row stride in bytes
	kp         reg.GPVirtual // first K row of the current key group
	ldk        reg.GPVirtual // K row stride in bytes
	ldk3, ldk5 reg.GPVirtual // 3 and 5 K rows, for the broadcast addressing
	ldq        reg.GPVirtual // Qᵀ row stride in bytes
}

// qk emits QK<ISA>: one panel of nv vectors of query rows against nk keys.
func (g *gen) qk() {
	x := g.x
	g.fn("QK", "func(s *float32, lds int, k *float32, ldk int, qt *float32, ldq int, nk, dk, nv int)",
		"",
		"\tfor c := 0; c < nk; c++ {",
		"\t\tfor r := 0; r < nv*lanes; r++ {",
		"\t\t\ts[c*lds+r] = Σ_{d<dk} k[c*ldk+d] · qt[d*ldq+r]",
		"",
		"with nv in 1..4 (AVX-512) or 1..2 (AVX2), nk >= 0, dk >= 1, strides in",
		"elements. Register tile: 6 keys (one broadcast each, read in place",
		"from K at stride ldk) × nv vectors of Qᵀ; one key at a time for the",
		"last nk%6 keys.",
	)
	var r qkRegs
	r.sp = g.GP64()
	g.Load(g.Param("s"), r.sp)
	r.lds = g.GP64()
	g.Load(g.Param("lds"), r.lds)
	g.SHLQ(operand.U8(2), r.lds)
	r.kp = g.GP64()
	g.Load(g.Param("k"), r.kp)
	r.ldk = g.GP64()
	g.Load(g.Param("ldk"), r.ldk)
	g.SHLQ(operand.U8(2), r.ldk)
	r.ldk3 = g.GP64()
	g.LEAQ(operand.Mem{Base: r.ldk, Index: r.ldk, Scale: 2}, r.ldk3)
	r.ldk5 = g.GP64()
	g.LEAQ(operand.Mem{Base: r.ldk, Index: r.ldk, Scale: 4}, r.ldk5)
	r.ldq = g.GP64()
	g.Load(g.Param("ldq"), r.ldq)
	g.SHLQ(operand.U8(2), r.ldq)
	keys := g.GP64()
	g.Load(g.Param("nk"), keys)
	nv := g.GP64()
	g.Load(g.Param("nv"), nv)
	for v := x.nv; v >= 1; v-- {
		g.CMPQ(nv, operand.Imm(uint64(v)))
		g.JEQ(operand.LabelRef(label("nv", v)))
	}
	g.ret()
	for v := x.nv; v >= 1; v-- {
		g.Label(label("nv", v))
		g.Label(label("nv", v, "groups"))
		g.CMPQ(keys, operand.Imm(uint64(x.mk)))
		g.JLT(operand.LabelRef(label("nv", v, "tail")))
		g.qkBlock(r, x.mk, v, label("nv", v, "mk", x.mk))
		g.SUBQ(operand.Imm(uint64(x.mk)), keys)
		g.JMP(operand.LabelRef(label("nv", v, "groups")))
		g.Label(label("nv", v, "tail"))
		g.TESTQ(keys, keys)
		g.JZ(operand.LabelRef(label("nv", v, "done")))
		g.qkBlock(r, 1, v, label("nv", v, "mk1"))
		g.DECQ(keys)
		g.JMP(operand.LabelRef(label("nv", v, "tail")))
		g.Label(label("nv", v, "done"))
		g.ret()
	}
}

// kRow returns the address of element d of key row i of the group, with kk
// pointing at element d of row 0: rows 0..5 through base + index·scale.
func kRow(r qkRegs, kk reg.GPVirtual, i int) operand.Mem {
	switch i {
	case 0:
		return operand.Mem{Base: kk}
	case 1:
		return operand.Mem{Base: kk, Index: r.ldk, Scale: 1}
	case 2:
		return operand.Mem{Base: kk, Index: r.ldk, Scale: 2}
	case 3:
		return operand.Mem{Base: kk, Index: r.ldk3, Scale: 1}
	case 4:
		return operand.Mem{Base: kk, Index: r.ldk, Scale: 4}
	case 5:
		return operand.Mem{Base: kk, Index: r.ldk5, Scale: 1}
	}
	panic("kRow: at most 6 rows")
}

// qkBlock emits one mk×nv tile: S rows sp..sp+mk-1 from K rows kp.., then
// advances kp and sp by mk rows.
func (g *gen) qkBlock(r qkRegs, mk, nv int, lbl string) {
	b := g.x.bytes()
	acc := make([][]reg.VecVirtual, mk)
	for i := range acc {
		acc[i] = make([]reg.VecVirtual, nv)
		for j := range acc[i] {
			acc[i][j] = g.vec()
			g.zero(acc[i][j])
		}
	}
	qp := g.GP64()
	g.Load(g.Param("qt"), qp)
	kk := g.GP64()
	g.MOVQ(r.kp, kk)
	d := g.GP64()
	g.Load(g.Param("dk"), d)
	g.Label(lbl)
	qv := make([]reg.VecVirtual, nv)
	for j := range qv {
		qv[j] = g.vec()
		g.VMOVUPS(operand.Mem{Base: qp, Disp: j * b}, qv[j])
	}
	for i := 0; i < mk; i++ {
		bc := g.vec()
		g.VBROADCASTSS(kRow(r, kk, i), bc)
		for j := 0; j < nv; j++ {
			g.VFMADD231PS(qv[j], bc, acc[i][j])
		}
	}
	g.ADDQ(r.ldq, qp)
	g.ADDQ(operand.Imm(4), kk)
	g.DECQ(d)
	g.JNZ(operand.LabelRef(lbl))
	// Store the tile row by row; sp ends one row past it.
	for i := 0; i < mk; i++ {
		for j := 0; j < nv; j++ {
			g.VMOVUPS(acc[i][j], operand.Mem{Base: r.sp, Disp: j * b})
		}
		g.ADDQ(r.lds, r.sp)
	}
	if mk == 6 {
		g.LEAQ(operand.Mem{Base: r.kp, Index: r.ldk3, Scale: 2}, r.kp)
	} else {
		for i := 0; i < mk; i++ {
			g.ADDQ(r.ldk, r.kp)
		}
	}
}
