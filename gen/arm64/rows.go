// The loop over the rows of Gemm and PV: groups of the tile height mk,
// then the last rows%mk in tiles of 4, 2 and 1 rows, the rows left counted
// down in rRows.

package main

import (
	"fmt"
	"math/bits"

	. "github.com/fastattn/fastattn/gen/neon"
)

// mk is the rows of the Gemm and PV register tile.
const mk = 6

// panelRows emits the body of a panel kernel (Gemm, PV): for each panel
// (panels), the loop over the rows (rowGroups), each tile of mr rows × nv
// vectors emitted by block under label l.
func (g *gen) panelRows(prefix string, block func(mr, nv int, l string)) {
	g.panels(prefix, func(nv int) {
		g.rowGroups(fmt.Sprintf("%s_vecs%d", prefix, nv), func(mr int, l string) { block(mr, nv, l) })
	})
}

// rowGroups emits the loop over the rows in rRows: groups of mk rows,
// then the last rows%mk in blocks of 4, 2 and 1 (at most one of each),
// each block emitted by block(rows, label) and labelled l_rowsN.
func (g *gen) rowGroups(l string, block func(mr int, lbl string)) { g.rowGroupsOf(l, mk, block) }

// rowGroupsOf is rowGroups with groups of h rows, the last rows%h in
// blocks of the powers of two below h.
func (g *gen) rowGroupsOf(l string, h int, block func(mr int, lbl string)) {
	var tails []int
	for mr := 1; mr < h; mr *= 2 {
		tails = append([]int{mr}, tails...)
	}
	g.Comment(fmt.Sprintf("Groups of %d rows.", h))
	g.Label(l + "_groups")
	g.Inst("CMP $%d, %s", h, rRows)
	g.Inst("BLT %s_tail%d", l, tails[0])
	block(h, fmt.Sprintf("%s_rows%d", l, h))
	g.Inst("SUB $%d, %s, %s", h, rRows, rRows)
	g.Inst("B %s_groups", l)
	for _, mr := range tails {
		g.Comment(fmt.Sprintf("The last rows: %d of them, if rows%%%d has that bit.", mr, h))
		g.Label(fmt.Sprintf("%s_tail%d", l, mr))
		next := fmt.Sprintf("%s_tail%d", l, mr/2)
		if mr == 1 {
			next = l + "_done"
		}
		g.Inst("TBZ $%d, %s, %s", bits.TrailingZeros(uint(mr)), rRows, next) // mr's bit of the rows left
		block(mr, fmt.Sprintf("%s_rows%d", l, mr))
	}
	g.Label(l + "_done")
	g.Inst("RET")
}

// acc is the accumulator of row i, vector j of a Gemm or PV tile:
// V0..V23, row-major.
func acc(i, j int) V { return V(maxNV*i + j) }
