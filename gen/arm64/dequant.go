// DequantI8NEON and DequantI4NEON: int8 and int4 K/V rows (int4: ggml's
// q4_0 blocks) to float32, whole blocks of 32 elements a step, each
// element float32(q)·scale rounded once (fallback.DequantizeInt8,
// DequantizeInt4KV): the flash path's blocks over a quantized cache.
// Per 16 bytes: SXTL/SXTL2 to halfwords and words, SCVTF, FMUL by the
// block's scale (broadcast); int4 first splits a block's 16 bytes into
// its low nibbles (elements 0..15) and high ones (16..31), less 8.

package main

import . "github.com/fastattn/fastattn/gen/neon"

// dequant emits DequantI8NEON and DequantI4NEON.
func (g *gen) dequant() {
	for _, int4 := range []bool{false, true} {
		name, elem := "DequantI8NEON", "float32(q), q = src[r*lds+i]"
		if int4 {
			name, elem = "DequantI4NEON", "float32(u-8), u the nibble of element i of row r (q4_0 order)"
		}
		g.Func(name, "(dst *float32, ldd int, src *int8, lds int, s *float32, ldsc int, rows, blocks int)", 64,
			name+" is",
			"",
			"\tfor r := 0; r < rows; r++ {",
			"\t\tfor i := 0; i < 32*blocks; i++ {",
			"\t\t\tdst[r*ldd+i] = "+elem+" · s[r*ldsc+i/32]",
			"",
			"strides: ldd and ldsc in floats, lds in bytes. Only whole blocks: a row's tail",
			"of fewer than 32 elements is the caller's.",
		)
		const dst, ldd, src, lds, sc, ldsc, rows, blocks, cnt, d, s, c R = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11
		g.loadArgs(arg{"dst", dst}, arg{"ldd", ldd}, arg{"src", src}, arg{"lds", lds}, arg{"s", sc}, arg{"ldsc", ldsc},
			arg{"rows", rows}, arg{"blocks", blocks})
		g.toBytes(ldd)
		g.toBytes(ldsc)
		g.Inst("CBZ %s, done", rows)
		g.Inst("CBZ %s, done", blocks)
		if int4 {
			g.q4Consts()
		}
		g.Label("row")
		g.Inst("MOVD %s, %s", dst, d)
		g.Inst("MOVD %s, %s", src, s)
		g.Inst("MOVD %s, %s", sc, c)
		g.Inst("MOVD %s, %s", blocks, cnt)
		g.Label("block")
		g.Inst("VLD1R.P 4(%s), [%s]", c, V(24).S4())
		// sixteen widens the 16 int8 values in first to 4 vectors of
		// float32 (first..first+3), scales and stores them.
		sixteen := func(first V) {
			g.Emit(EncXTL(first+2, first, false, true, true))
			g.Emit(EncXTL(first, first, false, true, false))
			g.widenHalves(4, false, first)
			for j := range 4 {
				g.Emit(EncFMUL(first+V(j), first+V(j), 24))
			}
			g.Inst("VST1.P %s, 64(%s)", vlist(first, 4), d)
		}
		if int4 {
			g.q4Block(s, 0, 25, 20)
			sixteen(25)
			sixteen(20)
		} else {
			g.Inst("VLD1.P 16(%s), [%s]", s, V(25).B16())
			g.Inst("VLD1.P 16(%s), [%s]", s, V(20).B16())
			sixteen(25)
			sixteen(20)
		}
		g.Inst("SUBS $1, %s, %s", cnt, cnt)
		g.Inst("BNE block")
		g.Inst("ADD %s, %s, %s", ldd, dst, dst)
		g.Inst("ADD %s, %s, %s", lds, src, src)
		g.Inst("ADD %s, %s, %s", ldsc, sc, sc)
		g.Inst("SUBS $1, %s, %s", rows, rows)
		g.Inst("BNE row")
		g.Label("done")
		g.Inst("RET")
	}
}
