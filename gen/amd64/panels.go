// The column panels of Gemm and PV: the dispatch on the vectors of a
// panel (1..nv) and on whether its last vector is masked, the tail mask
// (a K register on AVX-512, a vector in memory on AVX2), and the masked
// loads and stores of the last vector.

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// tailRegs hold the mask of a panel's last vector: its first `tail` lanes.
type tailRegs struct {
	kmask reg.OpmaskVirtual // AVX-512
	ymask operand.Mem       // AVX2: the mask vector in the table, loaded where used
}

// panels emits the prologue shared by the panel kernels: it reads the
// params nv and tail, builds the tail mask, and dispatches to body(nv,
// masked) for every nv, masked only when the last vector is not whole
// (plain loads and stores are faster than masked ones even with a full
// mask). Each body ends the function.
func (g *gen) panels(t *tailRegs, body func(nv int, masked bool, l string)) {
	x := g.isa
	tail := g.GP64()
	g.Load(g.Param("tail"), tail)
	*t = g.tailMask(tail)
	nv := g.GP64()
	g.Load(g.Param("nv"), nv)
	g.CMPQ(tail, operand.Imm(uint64(x.lanes)))
	g.JNE(operand.LabelRef("tail_masked"))
	for _, masked := range []bool{false, true} {
		if masked {
			g.Label("tail_masked")
		}
		for v := x.nv; v >= 1; v-- {
			g.CMPQ(nv, operand.Imm(uint64(v)))
			g.JEQ(operand.LabelRef(label("vecs", v, maskWord(masked))))
		}
		g.ret()
	}
	for _, masked := range []bool{false, true} {
		for v := x.nv; v >= 1; v-- {
			l := label("vecs", v, maskWord(masked))
			g.Comment(fmt.Sprintf("Panel of %d vectors, the last one %s.", v, maskWord(masked)))
			g.Label(l)
			body(v, masked, l)
			g.ret()
		}
	}
}

// tailMask builds the mask of a last vector of tail lanes (1..lanes).
func (g *gen) tailMask(tail reg.GPVirtual) tailRegs {
	var t tailRegs
	if g.isa.avx512() {
		// kmask = (1 << tail) - 1, from the table of 16-bit masks.
		t.kmask = g.K()
		g.KMOVW(operand.Mem{Base: g.maskTableBase(), Index: tail, Scale: 2}, t.kmask)
	} else {
		// ymask = the 8 table entries from (8 - tail): the first tail lanes
		// set. It stays in memory: all 16 registers go to the tile.
		m := g.GP64()
		g.MOVQ(operand.U32(8), m)
		g.SUBQ(tail, m)
		base := g.maskTableBase()
		g.LEAQ(operand.Mem{Base: base, Index: m, Scale: 4}, base)
		t.ymask = operand.Mem{Base: base}
	}
	return t
}

// maskTableBase loads the address of the tail-mask table into a register.
func (g *gen) maskTableBase() reg.GPVirtual {
	t := g.GP64()
	g.LEAQ(g.maskTable(), t)
	return t
}

// loadVec loads vector j of nv from m, masking the last one if masked.
func (g *gen) loadVec(t tailRegs, m operand.Mem, j, nv int, masked bool, dst reg.VecVirtual) {
	switch {
	case j < nv-1 || !masked:
		g.VMOVUPS(m, dst)
	case g.isa.avx512():
		g.VMOVUPS_Z(m, t.kmask, dst)
	default:
		g.VMOVDQU(t.ymask, dst) // the mask, then the masked load over it
		g.VMASKMOVPS(m, dst, dst)
	}
}

// storeVec stores vector j of nv to m, masking the last one if masked.
func (g *gen) storeVec(t tailRegs, src reg.VecVirtual, m operand.Mem, j, nv int, masked bool) {
	switch {
	case j < nv-1 || !masked:
		g.VMOVUPS(src, m)
	case g.isa.avx512():
		g.VMOVUPS(src, t.kmask, m)
	default:
		mask := g.vec()
		g.VMOVDQU(t.ymask, mask)
		g.VMASKMOVPS(src, mask, m)
	}
}
