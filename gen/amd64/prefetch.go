// PrefetchLines<ISA>: PREFETCHT1 on every cache line of a block of rows,
// so that rows the flash loop will read or write tens of microseconds
// later (the next item's query rows, this item's output rows) are in L2
// by then instead of costing a miss per line.

package main

import (
	"github.com/mmcloughlin/avo/operand"
)

// prefetchLines emits PrefetchLines<ISA>.
func (g *gen) prefetchLines() {
	g.fn("PrefetchLines", "func(p *float32, ld int, rows, n int)",
		"",
		"\tfor r := 0; r < rows; r++ {",
		"\t\tPREFETCHT1 each 64-byte line holding one of p[r*ld : r*ld+n]",
		"",
		"with rows >= 0, n >= 1 when rows > 0, ld in elements. Every address it",
		"names lies inside a row (the row's start and each 64 bytes on, and its",
		"last element), and a prefetch neither faults nor changes memory.",
	)
	p, ld, rows, n := g.param("p"), g.stride("ld"), g.param("rows"), g.stride("n")
	g.TESTQ(rows, rows)
	g.JZ(operand.LabelRef("done"))
	g.eachLine(p, ld, n, rows, "row", true, func(m operand.Mem) { g.PREFETCHT1(m) })
	g.Label("done")
	g.RET()
}
