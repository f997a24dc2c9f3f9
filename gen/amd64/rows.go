// Rows of an operand read in place at a run-time stride (row i of a group
// addressed as base + index·scale, 3·ld and 5·ld in registers), and the
// loop over rows in groups of the tile height with 4-, 2- and 1-row
// tails, which Gemm and PV share.

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// rowStride addresses the rows of an operand read in place at a runtime
// stride: row i (0..5) of a group is base + i·ld, formed as
// base + index·scale with ld, 3·ld or 5·ld in a register.
type rowStride struct {
	ld, ld3, ld5 reg.GPVirtual // bytes
	rows         int           // how many rows at returns
}

// strided loads the stride argument name and prepares the addressing of up
// to rows rows (3·ld from 4 rows on, 5·ld from 6 on).
func (g *gen) strided(name string, rows int) rowStride {
	s := rowStride{ld: g.stride(name), rows: rows}
	if rows > 3 {
		s.ld3 = g.GP64()
		g.LEAQ(operand.Mem{Base: s.ld, Index: s.ld, Scale: 2}, s.ld3)
	}
	if rows > 5 {
		s.ld5 = g.GP64()
		g.LEAQ(operand.Mem{Base: s.ld, Index: s.ld, Scale: 4}, s.ld5)
	}
	return s
}

// at returns the address of row i of the group whose row 0 is at base.
func (s rowStride) at(base reg.GPVirtual, i int) operand.Mem {
	if i >= s.rows {
		panic(fmt.Sprintf("rowStride: row %d of %d", i, s.rows))
	}
	switch i {
	case 0:
		return operand.Mem{Base: base}
	case 1, 2, 4:
		return operand.Mem{Base: base, Index: s.ld, Scale: uint8(i)}
	case 3:
		return operand.Mem{Base: base, Index: s.ld3, Scale: 1}
	case 5:
		return operand.Mem{Base: base, Index: s.ld5, Scale: 1}
	}
	panic(fmt.Sprintf("rowStride: row %d out of 0..5", i))
}

// advance moves base on by n rows (1, 2, 3, 4 or 6).
func (g *gen) advance(base reg.GPVirtual, s rowStride, n int) {
	switch n {
	case 1:
		g.ADDQ(s.ld, base)
	case 2, 4:
		g.LEAQ(operand.Mem{Base: base, Index: s.ld, Scale: uint8(n)}, base)
	case 3:
		g.LEAQ(operand.Mem{Base: base, Index: s.ld, Scale: 2}, base)
		g.ADDQ(s.ld, base)
	case 6:
		g.LEAQ(operand.Mem{Base: base, Index: s.ld3, Scale: 2}, base)
	default:
		panic(fmt.Sprintf("advance: %d rows", n))
	}
}

// panelRows emits the body of a panel kernel (Gemm, PV): for each panel
// (panels), the loop over the rows (rowGroups), each tile of mr rows × nv
// vectors emitted by block under label l.
func (g *gen) panelRows(rows reg.GPVirtual, t *tailRegs, block func(mr, nv int, masked bool, l string)) {
	g.panels(t, func(nv int, masked bool, l string) {
		g.rowGroups(rows, l, func(mr int, lbl string) { block(mr, nv, masked, lbl) })
	})
}

// tile allocates the accumulators of an mr×nv register tile.
func (g *gen) tile(mr, nv int) [][]reg.VecVirtual {
	acc := make([][]reg.VecVirtual, mr)
	for i := range acc {
		acc[i] = make([]reg.VecVirtual, nv)
		for j := range acc[i] {
			acc[i][j] = g.vec()
		}
	}
	return acc
}

// rowGroups emits a loop over `rows` rows in groups of the tile height
// (block(mk, label)), then the last rows%mk in blocks of the powers of two
// below mk (at most one of each: 4, 2, 1 for mk = 6), so a tail runs on
// tiles as tall as it allows.
func (g *gen) rowGroups(rows reg.GPVirtual, l string, block func(mr int, lbl string)) {
	mk := g.isa.mk
	var tails []int
	for mr := 4; mr >= 1; mr /= 2 {
		if mr < mk {
			tails = append(tails, mr)
		}
	}
	g.Comment(fmt.Sprintf("Groups of %d rows.", mk))
	g.Label(label(l, "groups"))
	g.CMPQ(rows, operand.Imm(uint64(mk)))
	g.JLT(operand.LabelRef(label(l, "tail", tails[0])))
	block(mk, label(l, "rows", mk))
	g.SUBQ(operand.Imm(uint64(mk)), rows)
	g.JMP(operand.LabelRef(label(l, "groups")))
	for i, mr := range tails {
		g.Comment(fmt.Sprintf("The last rows: %d of them, if rows%%%d has that bit.", mr, mk))
		g.Label(label(l, "tail", mr))
		g.TESTQ(operand.U32(mr), rows)
		next := label(l, "done")
		if i+1 < len(tails) {
			next = label(l, "tail", tails[i+1])
		}
		g.JZ(operand.LabelRef(next))
		block(mr, label(l, "rows", mr))
	}
	g.Label(label(l, "done"))
}
