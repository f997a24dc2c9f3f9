// PV<ISA>, the flash loop's O = alpha·O + P·V. Register tile: mk = 6
// rows × nv vectors of a V row (read in place at stride ldv), P entries
// broadcast by row: the same 6×4 (AVX-512) and 6×2 (AVX2) blocking as
// Gemm.

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// pvRegs are the registers a PV panel keeps across row groups.
type pvRegs struct {
	op, ldo  reg.GPVirtual // o row of the current row group; o row stride in bytes
	pp, ldp  reg.GPVirtual // p column of the current row group; p row stride in bytes
	ldv      reg.GPVirtual // v row stride in bytes
	alpha    reg.GPVirtual // alpha of the current row group, or 0
	tailRegs               // the last vector's mask
}

// pv emits PV<ISA>: nv vectors of o columns (the last one tail lanes wide)
// for rows rows.
func (g *gen) pv() {
	x := g.isa
	g.fn("PV", "func(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, alpha *float32, rows, nk, nv, tail int)",
		"",
		"\tfor r := 0; r < rows; r++ {",
		"\t\tfor j := 0; j < (nv-1)*lanes+tail; j++ {",
		"\t\t\to[r*ldo+j] = alpha[r]·o[r*ldo+j] + Σ_{c<nk} p[c*ldp+r] · v[c*ldv+j]",
		"",
		fmt.Sprintf("with alpha == nil meaning 1, nv in 1..%d, tail in 1..%d, rows >= 0,", x.nv, x.lanes),
		"nk >= 0, strides in elements. Nothing past column (nv-1)*lanes+tail",
		fmt.Sprintf("of o or v is touched (masked last vector). Register tile: %d rows", x.mk),
		"(broadcasts of consecutive P entries) × nv vectors of a V row read in",
		fmt.Sprintf("place at stride ldv; the last rows%%%d in shorter tiles.", x.mk),
	)
	var r pvRegs
	r.op = g.param("o")
	r.ldo = g.stride("ldo")
	r.pp = g.param("p")
	r.ldp = g.stride("ldp")
	r.ldv = g.stride("ldv")
	r.alpha = g.param("alpha")
	rows := g.param("rows")
	g.panelRows(rows, &r.tailRegs, func(mr, nv int, masked bool, l string) { g.pvBlock(r, mr, nv, masked, l) })
}

// pvBlock emits one mr×nv tile: o rows op..op+mr-1, rescaled by alpha and
// plus P·V, then advances op, pp and alpha by mr rows.
func (g *gen) pvBlock(r pvRegs, mr, nv int, masked bool, lbl string) {
	b := g.isa.bytes()
	acc := make([][]reg.VecVirtual, mr)
	t := g.GP64()
	g.MOVQ(r.op, t)
	for i := range acc {
		acc[i] = make([]reg.VecVirtual, nv)
		for j := range acc[i] {
			acc[i][j] = g.vec()
			g.loadVec(r.tailRegs, operand.Mem{Base: t, Disp: j * b}, j, nv, masked, acc[i][j])
		}
		if i < mr-1 {
			g.ADDQ(r.ldo, t)
		}
	}
	g.Comment(fmt.Sprintf("Tile of %d rows × %d vectors of o, rescaled by alpha (if any).", mr, nv))
	g.TESTQ(r.alpha, r.alpha)
	g.JZ(operand.LabelRef(label(lbl, "noscale")))
	for i := 0; i < mr; i++ {
		a := g.vec()
		g.VBROADCASTSS(operand.Mem{Base: r.alpha, Disp: 4 * i}, a)
		for j := 0; j < nv; j++ {
			g.VMULPS(a, acc[i][j], acc[i][j])
		}
	}
	g.ADDQ(operand.Imm(uint64(4*mr)), r.alpha)
	g.Label(label(lbl, "noscale"))
	c := g.param("nk")
	g.TESTQ(c, c)
	g.JZ(operand.LabelRef(label(lbl, "store")))
	vp := g.param("v")
	pk := g.GP64()
	g.MOVQ(r.pp, pk)
	load := func(j int, dst reg.VecVirtual) {
		g.loadVec(r.tailRegs, operand.Mem{Base: vp, Disp: j * g.isa.bytes()}, j, nv, masked, dst)
	}
	key := func() { // one key: a row of V, mr broadcasts of P, mr·nv FMAs
		g.broadcastStep(load, nv, func(i int) operand.Mem { return operand.Mem{Base: pk, Disp: 4 * i} }, acc, false)
		g.ADDQ(r.ldv, vp)
		g.ADDQ(r.ldp, pk)
	}
	g.Comment(fmt.Sprintf("%d keys a pass: %d rows of V, %d broadcasts of P, %d FMAs.", gemmUnroll, gemmUnroll, gemmUnroll*mr, gemmUnroll*mr*nv))
	g.unrolled4(c, lbl, func(int) { key() }, func() {})
	g.Comment("The last keys, one a pass.")
	g.Label(lbl)
	key()
	g.DECQ(c)
	g.JNZ(operand.LabelRef(lbl))
	g.Comment("Store the tile.")
	g.Label(label(lbl, "store"))
	for i := 0; i < mr; i++ {
		for j := 0; j < nv; j++ {
			g.storeVec(r.tailRegs, acc[i][j], operand.Mem{Base: r.op, Disp: j * b}, j, nv, masked)
		}
		g.ADDQ(r.ldo, r.op)
	}
	g.ADDQ(operand.Imm(uint64(4*mr)), r.pp)
}
