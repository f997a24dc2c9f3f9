// PrefetchLinesNEON: PRFM PLDL2KEEP on every cache line of a block of
// rows (see the amd64 generator's PrefetchLines: the next item's query
// rows and this item's output rows brought into L2 ahead of their use).

package main

import (
	. "github.com/fastattn/fastattn/gen/neon"
)

// prefetchLines emits PrefetchLinesNEON.
func (g *gen) prefetchLines() {
	g.Func("PrefetchLinesNEON", "(p *float32, ld int, rows, n int)", 32,
		"PrefetchLinesNEON is",
		"",
		"\tfor r := 0; r < rows; r++ {",
		"\t\tPRFM PLDL2KEEP each 64-byte line holding one of p[r*ld : r*ld+n]",
		"",
		"with rows >= 0, n >= 1 when rows > 0, ld in elements. Every address it",
		"names lies inside a row (the row's start and each 64 bytes on, and its",
		"last element), and a prefetch neither faults nor changes memory.",
	)
	const p, ld, rows, n, off, at R = 0, 1, 2, 3, 4, 5
	g.loadArgs(arg{"p", p}, arg{"ld", ld}, arg{"rows", rows}, arg{"n", n})
	g.toBytes(ld, n)
	g.Inst("CBZ %s, done", rows)
	g.Label("row")
	g.Inst("MOVD ZR, %s", off)
	g.Label("line")
	g.Inst("ADD %s, %s, %s", off, p, at) // Go's PRFM takes no register offset
	g.Inst("PRFM (%s), PLDL2KEEP", at)
	g.Inst("ADD $64, %s, %s", off, off)
	g.Inst("CMP %s, %s", n, off)
	g.Inst("BLT line")
	g.Inst("ADD %s, %s, %s", n, p, at)
	g.Inst("SUB $4, %s, %s", at, at) // nor a negative one
	g.Inst("PRFM (%s), PLDL2KEEP", at)
	g.Inst("ADD %s, %s, %s", ld, p, p)
	g.Inst("SUBS $1, %s, %s", rows, rows)
	g.Inst("BNE row")
	g.Label("done")
	g.Inst("RET")
}
