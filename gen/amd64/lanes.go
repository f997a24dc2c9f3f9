// Per-lane conditions: an opmask on AVX-512, a vector of all-ones or
// all-zeros lanes on AVX2; compare makes one, blend uses one.

package main

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// laneMask is a per-lane condition: an opmask on AVX-512, a vector of
// all-ones or all-zeros lanes on AVX2.
type laneMask struct {
	k reg.OpmaskVirtual
	v reg.VecVirtual
}

// compare returns the lanes where the predicate pred (a VCMPPS immediate)
// holds of b and a, in that order.
func (g *gen) compare(pred uint8, a operand.Op, b reg.VecVirtual) laneMask {
	if g.isa.avx512() {
		m := laneMask{k: g.K()}
		g.VCMPPS(operand.U8(pred), a, b, m.k)
		return m
	}
	m := laneMask{v: g.vec()}
	g.VCMPPS(operand.U8(pred), a, b, m.v)
	return m
}

// blend sets dst = m ? set : clear, lane by lane.
func (g *gen) blend(m laneMask, set, clear, dst reg.VecVirtual) {
	if g.isa.avx512() {
		g.VBLENDMPS(set, clear, m.k, dst)
		return
	}
	g.VBLENDVPS(m.v, set, clear, dst)
}
