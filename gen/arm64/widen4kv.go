// WidenI4KVNEON: int4 K/V rows (ggml's q4_0 blocks) to int8, a block a
// step: its 16 bytes loaded, the low nibbles masked (elements 0..15), the
// high ones shifted down (16..31), 8 subtracted from both, 32 bytes
// stored. No prefetch: ahead is accepted and ignored.

package main

import . "github.com/fastattn/fastattn/gen/neon"

// widenI4KV emits WidenI4KVNEON.
func (g *gen) widenI4KV() {
	const name = "WidenI4KVNEON"
	g.Func(name, "(dst *int8, ldd int, src *int8, lds int, rows, blocks, ahead int)", 56,
		name+" is",
		"",
		"\tfor r := 0; r < rows; r++ {",
		"\t\tfallback.WidenInt4KV(dst[r*ldd:], src[r*lds:], blocks)",
		"",
		"strides in bytes: each block of 16 bytes becomes 32 int8 values u-8, the low",
		"nibbles then the high ones. No byte past a row's blocks is read or written;",
		"ahead (the amd64 kernels' prefetch distance) is ignored.",
	)
	const dst, ldd, src, lds, rows, blocks, cnt, d, s R = 0, 1, 2, 3, 4, 5, 6, 7, 9
	g.loadArgs(arg{"dst", dst}, arg{"ldd", ldd}, arg{"src", src}, arg{"lds", lds}, arg{"rows", rows}, arg{"blocks", blocks})
	g.Inst("CBZ %s, done", rows)
	g.Inst("CBZ %s, done", blocks)
	g.q4Consts()
	g.Label("row")
	g.Inst("MOVD %s, %s", dst, d)
	g.Inst("MOVD %s, %s", src, s)
	g.Inst("MOVD %s, %s", blocks, cnt)
	g.Label("loop")
	g.q4Block(s, 0, 1, 2)
	g.Inst("VST1.P [%s, %s], 32(%s)", V(1).B16(), V(2).B16(), d)
	g.Inst("SUBS $1, %s, %s", cnt, cnt)
	g.Inst("BNE loop")
	g.Inst("ADD %s, %s, %s", ldd, dst, dst)
	g.Inst("ADD %s, %s, %s", lds, src, src)
	g.Inst("SUBS $1, %s, %s", rows, rows)
	g.Inst("BNE row")
	g.Label("done")
	g.Inst("RET")
}

// q4Consts loads the constants q4Block uses: 15 in every byte of V16,
// 8 in every byte of V17.
func (g *gen) q4Consts() {
	g.Inst("VMOVI $15, %s", V(16).B16())
	g.Inst("VMOVI $8, %s", V(17).B16())
}

// q4Block loads one q4_0 block (16 bytes) from src, post-incremented, into
// in, and splits it into int8 values u-8: the low nibbles (elements
// 0..15) into lo, the high ones (16..31) into hi (q4Consts first).
func (g *gen) q4Block(src R, in, lo, hi V) {
	g.Inst("VLD1.P 16(%s), [%s]", src, in.B16())
	g.Inst("VAND %s, %s, %s", V(16).B16(), in.B16(), lo.B16())
	g.Inst("VUSHR $4, %s, %s", in.B16(), hi.B16())
	g.Inst("VSUB %s, %s, %s", V(17).B16(), lo.B16(), lo.B16())
	g.Inst("VSUB %s, %s, %s", V(17).B16(), hi.B16(), hi.B16())
}
