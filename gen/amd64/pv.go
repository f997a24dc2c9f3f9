package main

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// pvRegs are the registers a PV panel keeps across row groups.
type pvRegs struct {
	op, ldo reg.GPVirtual // o row of the current row group; o row stride in bytes
	pp, ldp reg.GPVirtual // p column of the current row group; p row stride in bytes
	ldv     reg.GPVirtual // v row stride in bytes
	alpha   reg.GPVirtual // alpha of the current row group, or 0
	kmask   reg.OpmaskVirtual
	ymask   reg.VecVirtual // AVX2 tail mask
}

// pv emits PV<ISA>: nv vectors of o columns (the last one tail lanes wide)
// for rows rows.
func (g *gen) pv() {
	x := g.x
	g.fn("PV", "func(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, alpha *float32, rows, nk, nv, tail int)",
		"",
		"\tfor r := 0; r < rows; r++ {",
		"\t\tfor j := 0; j < (nv-1)*lanes+tail; j++ {",
		"\t\t\to[r*ldo+j] = alpha[r]·o[r*ldo+j] + Σ_{c<nk} p[c*ldp+r] · v[c*ldv+j]",
		"",
		"with alpha == nil meaning 1, nv in 1..4 (AVX-512) or 1..2 (AVX2), tail in",
		"1..lanes, rows >= 0, nk >= 0, strides in elements. The last vector's",
		"loads and stores are masked: nothing past column (nv-1)*lanes+tail is",
		"read or written. Register tile: 6 rows (broadcasts of consecutive P",
		"entries) × nv vectors of a V row read in place at stride ldv; one row",
		"at a time for the last rows%6.",
	)
	var r pvRegs
	r.op = g.GP64()
	g.Load(g.Param("o"), r.op)
	r.ldo = g.GP64()
	g.Load(g.Param("ldo"), r.ldo)
	g.SHLQ(operand.U8(2), r.ldo)
	r.pp = g.GP64()
	g.Load(g.Param("p"), r.pp)
	r.ldp = g.GP64()
	g.Load(g.Param("ldp"), r.ldp)
	g.SHLQ(operand.U8(2), r.ldp)
	r.ldv = g.GP64()
	g.Load(g.Param("ldv"), r.ldv)
	g.SHLQ(operand.U8(2), r.ldv)
	r.alpha = g.GP64()
	g.Load(g.Param("alpha"), r.alpha)
	rows := g.GP64()
	g.Load(g.Param("rows"), rows)
	tail := g.GP64()
	g.Load(g.Param("tail"), tail)
	if x.avx512() {
		// kmask = (1 << tail) - 1, from the table of 16-bit masks.
		r.kmask = g.K()
		g.KMOVW(operand.Mem{Base: g.maskTableBase(), Index: tail, Scale: 2}, r.kmask)
	} else {
		// ymask = the 8 table entries from (8 - tail): the first tail lanes set.
		m := g.GP64()
		g.MOVQ(operand.U32(8), m)
		g.SUBQ(tail, m)
		r.ymask = g.vec()
		g.VMOVDQU(operand.Mem{Base: g.maskTableBase(), Index: m, Scale: 4}, r.ymask)
	}
	// Dispatch on nv, and on whether the last vector is whole (plain loads
	// and stores, which are faster than masked ones even with a full mask).
	nv := g.GP64()
	g.Load(g.Param("nv"), nv)
	g.CMPQ(tail, operand.Imm(uint64(x.lanes)))
	g.JNE(operand.LabelRef("masked"))
	for _, masked := range []bool{false, true} {
		if masked {
			g.Label("masked")
		}
		for v := x.nv; v >= 1; v-- {
			g.CMPQ(nv, operand.Imm(uint64(v)))
			g.JEQ(operand.LabelRef(label("nv", v, "m", masked)))
		}
		g.ret()
	}
	for _, masked := range []bool{false, true} {
		for v := x.nv; v >= 1; v-- {
			l := label("nv", v, "m", masked)
			g.Label(l)
			g.Label(l + "groups")
			g.CMPQ(rows, operand.Imm(uint64(x.mk)))
			g.JLT(operand.LabelRef(l + "tail"))
			g.pvBlock(r, x.mk, v, masked, l+"mr6")
			g.SUBQ(operand.Imm(uint64(x.mk)), rows)
			g.JMP(operand.LabelRef(l + "groups"))
			g.Label(l + "tail")
			g.TESTQ(rows, rows)
			g.JZ(operand.LabelRef(l + "done"))
			g.pvBlock(r, 1, v, masked, l+"mr1")
			g.DECQ(rows)
			g.JMP(operand.LabelRef(l + "tail"))
			g.Label(l + "done")
			g.ret()
		}
	}
}

// maskTableBase loads the address of the tail-mask table into a register.
func (g *gen) maskTableBase() reg.GPVirtual {
	t := g.GP64()
	g.LEAQ(g.maskTable(), t)
	return t
}

// loadVec loads vector j of nv from m, masking the last one if masked.
func (g *gen) loadVec(r pvRegs, m operand.Mem, j, nv int, masked bool, dst reg.VecVirtual) {
	switch {
	case j < nv-1 || !masked:
		g.VMOVUPS(m, dst)
	case g.x.avx512():
		g.VMOVUPS_Z(m, r.kmask, dst)
	default:
		g.VMASKMOVPS(m, r.ymask, dst)
	}
}

// storeVec stores vector j of nv to m, masking the last one if masked.
func (g *gen) storeVec(r pvRegs, src reg.VecVirtual, m operand.Mem, j, nv int, masked bool) {
	switch {
	case j < nv-1 || !masked:
		g.VMOVUPS(src, m)
	case g.x.avx512():
		g.VMOVUPS(src, r.kmask, m)
	default:
		g.VMASKMOVPS(src, r.ymask, m)
	}
}

// pvBlock emits one mr×nv tile: o rows op..op+mr-1, rescaled by alpha and
// plus P·V, then advances op, pp and alpha by mr rows.
func (g *gen) pvBlock(r pvRegs, mr, nv int, masked bool, lbl string) {
	b := g.x.bytes()
	acc := make([][]reg.VecVirtual, mr)
	t := g.GP64()
	g.MOVQ(r.op, t)
	for i := range acc {
		acc[i] = make([]reg.VecVirtual, nv)
		for j := range acc[i] {
			acc[i][j] = g.vec()
			g.loadVec(r, operand.Mem{Base: t, Disp: j * b}, j, nv, masked, acc[i][j])
		}
		if i < mr-1 {
			g.ADDQ(r.ldo, t)
		}
	}
	// The online-softmax rescale: o[r] *= alpha[r].
	g.TESTQ(r.alpha, r.alpha)
	g.JZ(operand.LabelRef(lbl + "noscale"))
	for i := 0; i < mr; i++ {
		a := g.vec()
		g.VBROADCASTSS(operand.Mem{Base: r.alpha, Disp: 4 * i}, a)
		for j := 0; j < nv; j++ {
			g.VMULPS(a, acc[i][j], acc[i][j])
		}
	}
	g.ADDQ(operand.Imm(uint64(4*mr)), r.alpha)
	g.Label(lbl + "noscale")
	c := g.GP64()
	g.Load(g.Param("nk"), c)
	g.TESTQ(c, c)
	g.JZ(operand.LabelRef(lbl + "store"))
	vp := g.GP64()
	g.Load(g.Param("v"), vp)
	pk := g.GP64()
	g.MOVQ(r.pp, pk)
	g.Label(lbl)
	vv := make([]reg.VecVirtual, nv)
	for j := range vv {
		vv[j] = g.vec()
		g.loadVec(r, operand.Mem{Base: vp, Disp: j * b}, j, nv, masked, vv[j])
	}
	for i := 0; i < mr; i++ {
		bc := g.vec()
		g.VBROADCASTSS(operand.Mem{Base: pk, Disp: 4 * i}, bc)
		for j := 0; j < nv; j++ {
			g.VFMADD231PS(vv[j], bc, acc[i][j])
		}
	}
	g.ADDQ(r.ldv, vp)
	g.ADDQ(r.ldp, pk)
	g.DECQ(c)
	g.JNZ(operand.LabelRef(lbl))
	g.Label(lbl + "store")
	for i := 0; i < mr; i++ {
		for j := 0; j < nv; j++ {
			g.storeVec(r, acc[i][j], operand.Mem{Base: r.op, Disp: j * b}, j, nv, masked)
		}
		g.ADDQ(r.ldo, r.op)
	}
	g.ADDQ(operand.Imm(uint64(4*mr)), r.pp)
}
