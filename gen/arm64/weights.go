// Projections through the weight types a layer keeps below float32.
//
// GemmW<F16|BF16>NEON is GemmNEON with each B row loaded as 16-bit floats
// and widened in registers (FCVTL/FCVTL2, or SHLL/SHLL2 #16 for
// bfloat16): the exact values fallback.WidenWeights gives, multiplied in
// Gemm's order, so the result is Gemm's on the widened weights, bit for
// bit, without a float32 copy of the panel.
//
// GemvWI8NEON and GemvWI4NEON are the decode step's projections (a few
// rows of A): the products of each block of 32 rows of B summed unscaled
// and the block's scales applied once (fallback.GemvI8's and GemvI4's
// order), int4's zero points taken off through the block's sum of A,
// Σ a·(u-z) = Σ a·u - z·Σ a. A weight vector costs its share of one load
// and of the widening (SXTL/UXTL from bytes to words, then SCVTF/UCVTF;
// int4's nibbles split by an AND and a shift first) and one FMLA per row.
// Register tiles: int8 3 rows × nv ≤ 4 vectors, accumulators V0..V11 and
// block sums V12..V23, weights V24..V27, A broadcasts V28/V29, scales
// V30/V31; int4 2 rows × nv, accumulators V0..V7, block sums V8..V15,
// zero points and scales V16..V19, the rows' sums of A V20/V21, the
// nibble mask V22, weights V24..V27, A broadcasts V28/V29.
//
// An int4 panel row is 8 bytes for 16 columns (fallback.Int4Byte with
// Half 8): the low nibbles are columns 0..7, the high ones 8..15, so one
// 8-byte load serves a whole panel row.

package main

import (
	"fmt"

	. "github.com/fastattn/fastattn/gen/neon"
)

// The GEMV kernels' general registers beyond GemmNEON's (gC..gCrow).
const (
	gS    R = 20 // the scales
	gSrow R = 21 // the scale row of the block
	gLeft R = 22 // rows of B (k) left
	gN    R = 23 // steps left in the block
	gZ    R = 25 // int4: the zero points
	gZrow R = 13 // int4: the zero-point row of the block
	gLdbS R = 14 // the bytes of a scale row (ldb·4)
	gT    R = 15 // temporary
	gLdbZ R = 17 // int4: the bytes of a zero-point row (ldb)
)

// Register tile heights of the GEMV kernels.
const (
	gemvRowsI8 = 3
	gemvRowsI4 = 2
)

// weights emits the kernels of this file.
func (g *gen) weights() {
	for _, e := range neonElems[1:] {
		g.gemmW(e)
	}
	g.gemvI8()
	g.gemvI4()
	g.widenW(false)
	g.widenW(true)
}

// gemmW emits GemmW<E>NEON.
func (g *gen) gemmW(e neonElem) {
	name := "GemmW" + e.name + "NEON"
	g.Func(name, "(c *float32, ldc int, a *float32, lda int, b *uint16, ldb int, m, k, nv, tail, acc int)", 88,
		name+" is GemmNEON with B of "+map[string]string{"F16": "float16", "BF16": "bfloat16"}[e.name]+" values, widened exactly:",
		"",
		"\tc[i*ldc+j] = (acc != 0 ? c[i*ldc+j] : 0) + Σ_{p<k} a[i*lda+p] · float32(b[p*ldb+j])",
		"",
		"for i < m, j < nv*4, nv in 1..4, whole vectors only (tail must be 4),",
		"strides in elements. Same tile and order as GemmNEON.",
	)
	g.loadArgs(arg{"c", gC}, arg{"ldc", gLdc}, arg{"a", gA}, arg{"lda", gLda}, arg{"b", gB}, arg{"ldb", gLdb}, arg{"m", rRows}, arg{"k", gK}, arg{"nv", rNV}, arg{"acc", gAcc})
	g.toBytes(gLdc, gLda)
	g.Inst("LSL $1, %s, %s", gLdb, gLdb)
	widen := func(d, n V, upper bool) {
		if e.name == "F16" {
			g.Emit(EncFCVTL(d, n, upper))
		} else {
			g.Emit(EncSHLL(d, n, upper))
		}
	}
	g.panelRows("gemmw"+e.name, g.gemmTile(func(nv int) {
		// nv vectors of 16-bit values: V24 (and V25) hold 8 each, widened
		// to V24..V24+nv-1 from the last register down so that no source
		// is overwritten before it is read.
		switch nv {
		case 4:
			g.Inst("VLD1.P (%s)(%s), [V24.H8, V25.H8]", gBrow, gLdb)
		case 3:
			g.Inst("VLD1 (%s), [V24.H8]", gBrow)
			g.Inst("FMOVD 16(%s), %s", gBrow, V(25).F())
			g.Inst("ADD %s, %s, %s", gLdb, gBrow, gBrow)
		case 2:
			g.Inst("VLD1.P (%s)(%s), [V24.H8]", gBrow, gLdb)
		case 1:
			g.Inst("FMOVD (%s), %s", gBrow, V(24).F())
			g.Inst("ADD %s, %s, %s", gLdb, gBrow, gBrow)
		}
		for j := nv - 1; j >= 0; j-- {
			widen(V(24+j), V(24+j/2), j%2 == 1)
		}
	}))
}

// widenBytes loads nv·4 bytes from (src) and widens them to nv vectors of
// float32 in first..first+nv-1: signed (int8) or unsigned (int4 zero
// points). Bytes 8..15 go through first+2 so that each step widens in
// place or into a register not yet read.
func (g *gen) widenBytes(src R, nv int, unsigned bool, first V) {
	switch nv {
	case 4:
		g.Inst("VLD1 (%s), [%s]", src, first.B16())
	case 3:
		g.Inst("FMOVD (%s), %s", src, first.F())
		g.Inst("FMOVS 8(%s), %s", src, (first + 2).F())
	case 2:
		g.Inst("FMOVD (%s), %s", src, first.F())
	case 1:
		g.Inst("FMOVS (%s), %s", src, first.F())
	}
	if nv == 4 {
		g.Emit(EncXTL(first+2, first, unsigned, true, true))
	}
	g.Emit(EncXTL(first, first, unsigned, true, false))
	if nv == 3 {
		g.Emit(EncXTL(first+2, first+2, unsigned, true, false))
	}
	g.widenHalves(nv, unsigned, first)
}

// widenHalves widens the halfwords of first (columns 0..7) and first+2
// (columns 8..15) to nv vectors of float32 in first..first+nv-1.
func (g *gen) widenHalves(nv int, unsigned bool, first V) {
	if nv == 4 {
		g.Emit(EncXTL(first+3, first+2, unsigned, false, true))
	}
	if nv >= 3 {
		g.Emit(EncXTL(first+2, first+2, unsigned, false, false))
	}
	if nv >= 2 {
		g.Emit(EncXTL(first+1, first, unsigned, false, true))
	}
	g.Emit(EncXTL(first, first, unsigned, false, false))
	for j := 0; j < nv; j++ {
		g.Emit(EncSCVTF(first+V(j), first+V(j), unsigned))
	}
}

// gemvDoc is the doc of a GEMV kernel: value is B's element as a float32,
// off the lines that take zero points off a block's sums (none for int8),
// notes what follows the contract.
func gemvDoc(name, value string, off []string, notes ...string) []string {
	doc := []string{
		name + " is, for i < m, j < nv*4:",
		"",
		"\tc[i*ldc+j] = (acc != 0 ? c[i*ldc+j] : 0)",
		"\tfor each block q0 = 0, 32, ... < k (p over q0 <= p < min(k, q0+32)):",
		"\t\tsum = Σ_p a[i*lda+p] · " + value + "   (the first a product, then FMAs)",
	}
	doc = append(doc, off...)
	doc = append(doc,
		"\t\tc[i*ldc+j] = fma(sum, s[(q0/32)*ldb+j], c[i*ldc+j])",
		"",
		"nv in 1..4 whole vectors (tail must be 4: the caller writes a partial",
		"last vector through a tile of its own), m >= 0, k >= 1, strides in",
		"elements; B, s (and z) are read in whole vectors, nv of them per row.",
	)
	return append(doc, notes...)
}

// gemvI8 emits GemvWI8NEON.
func (g *gen) gemvI8() {
	g.Func("GemvWI8NEON", "(c *float32, ldc int, a *float32, lda int, b *int8, ldb int, m, k, nv, tail, acc int, s *float32)", 96,
		gemvDoc("GemvWI8NEON", "float32(b[p*ldb+j])", nil)...)
	g.gemvArgs(false)
	g.panels("gemvi8", func(nv int) {
		g.rowGroupsOf(fmt.Sprintf("gemvi8_vecs%d", nv), gemvRowsI8, func(mr int, l string) {
			g.gemvTile(mr, nv, l, func(i, j int) V { return V(4*i + j) }, func(i, j int) V { return V(12 + 4*i + j) },
				func(first bool) {
					g.widenBytes(gBrow, nv, false, 24)
					g.Inst("ADD %s, %s, %s", gLdb, gBrow, gBrow)
				}, nil, nil)
		})
	})
}

// gemvI4 emits GemvWI4NEON.
func (g *gen) gemvI4() {
	g.Func("GemvWI4NEON", "(c *float32, ldc int, a *float32, lda int, b *byte, ldb int, m, k, nv, tail, acc int, s *float32, z *uint8)", 104,
		gemvDoc("GemvWI4NEON", "float32(u(p, j))",
			[]string{"\t\tsum = fma(-float32(z[(q0/32)*ldb+j]), Σ_p a[i*lda+p], sum)   (the sum of a in order of p)"},
			"u(p, j) is the nibble of element j of row p of b, ldb/2 bytes a row,",
			"interleaved by 8 (fallback.Int4Byte): columns 0..7 of a group of 16 in",
			"the low nibbles of its 8 bytes, 8..15 in the high ones. ldb is a",
			"multiple of 16; the 8 bytes of a group are read whole whatever nv.")...)
	g.gemvArgs(true)
	g.Inst("VMOVI $15, %s", V(22).B16())
	asum := func(i int) V { return V(20 + i) }
	g.panels("gemvi4", func(nv int) {
		g.rowGroupsOf(fmt.Sprintf("gemvi4_vecs%d", nv), gemvRowsI4, func(mr int, l string) {
			g.gemvTile(mr, nv, l, func(i, j int) V { return V(4*i + j) }, func(i, j int) V { return V(8 + 4*i + j) },
				func(first bool) { g.nibbles(gBrow, gLdb, nv, 22) },
				func(i int, bc V, first bool) { // the row's sum of A
					if first {
						g.VMOV(asum(i), bc)
					} else {
						g.Emit(EncFADD(asum(i), asum(i), bc))
					}
				},
				func(part func(i, j int) V) { // the zero points off the block sums
					g.widenBytes(gZrow, nv, true, 16)
					for j := 0; j < nv; j++ {
						for i := 0; i < mr; i++ {
							g.Emit(EncFMLS(part(i, j), V(16+j), asum(i)))
						}
					}
				})
		})
	})
}

// nibbles loads the 8 bytes of an int4 row of 16 columns from (src),
// advances src by step, and widens the first nv vectors of columns to
// float32 in V24..: the low nibbles (the AND with mask, 15 in each byte)
// are columns 0..7, the high ones (a shift by 4) 8..15.
func (g *gen) nibbles(src, step R, nv int, mask V) {
	g.Inst("FMOVD (%s), %s", src, V(26).F())
	g.Inst("ADD %s, %s, %s", step, src, src)
	g.Inst("VAND %s, %s, %s", mask.B16(), V(26).B16(), V(24).B16())
	g.Emit(EncXTL(24, 24, true, true, false))
	if nv >= 3 {
		g.Inst("VUSHR $4, %s, %s", V(26).B16(), V(26).B16())
		g.Emit(EncXTL(26, 26, true, true, false))
	}
	g.widenHalves(nv, true, 24)
}

// widenW emits WidenWI8NEON (int4 false) or WidenWI4NEON: per block of
// 32 rows the scales (V16..) and int4's zero points (V20.., as float32;
// the nibble mask in V28)
// are loaded once; each row is widened into V24.., int4's zero points
// subtracted (exact: small integers), multiplied by the scales and
// stored.
func (g *gen) widenW(int4 bool) {
	name, sig, value, size := "WidenWI8NEON", "(dst *float32, ldd int, b *int8, ldb int, k, nv int, s *float32)", "float32(b[p*ldb+j])", 56
	if int4 {
		name, sig, value, size = "WidenWI4NEON", "(dst *float32, ldd int, b *byte, ldb int, k, nv int, s *float32, z *uint8)", "float32(int(u(p, j)) - int(z[(p/32)*ldb+j]))", 64
	}
	doc := []string{name + " is", "",
		"\tfor p := 0; p < k; p++ {",
		"\t\tfor j := 0; j < nv*4; j++ {",
		"\t\t\tdst[p*ldd+j] = " + value + " · s[(p/32)*ldb+j]",
		"",
		"the product rounded: the weights fallback.WidenWeights gives, for Gemm",
		"to multiply by. nv in 1..4, k >= 1, strides in elements; whole vectors",
		"of b, s (and z) are read and of dst written.",
	}
	if int4 {
		doc = append(doc, "u(p, j) as GemvWI4NEON reads it: ldb a multiple of 16, the 8 bytes of",
			"a group of 16 columns read whole whatever nv.")
	}
	g.Func(name, sig, size, doc...)
	const dst, ldd, b, ldb, k, s, z, row, left, n, ldbs, zrow, srow, drow R = 0, 1, 2, 3, 4, 5, 7, 9, 10, 11, 12, 13, 14, 15
	g.loadArgs(arg{"dst", dst}, arg{"ldd", ldd}, arg{"b", b}, arg{"ldb", ldb}, arg{"k", k}, arg{"nv", rNV}, arg{"s", s})
	g.toBytes(ldd)
	g.Inst("LSL $2, %s, %s", ldb, ldbs)
	if int4 {
		g.loadArgs(arg{"z", z})
		g.Inst("LSR $1, %s, %s", ldb, row) // bytes of a nibble row; ldb stays the zero points'
		g.Inst("VMOVI $15, %s", V(28).B16())
	}
	prefix := "widenwi8"
	if int4 {
		prefix = "widenwi4"
	}
	g.panels(prefix, func(nv int) {
		l := fmt.Sprintf("%s_vecs%d", prefix, nv)
		g.Inst("MOVD %s, %s", b, drow) // drow walks B here; dst's rows advance in dst
		g.Inst("MOVD %s, %s", s, srow)
		if int4 {
			g.Inst("MOVD %s, %s", z, zrow)
		}
		g.Inst("MOVD %s, %s", k, left)
		g.Label(l + "_block")
		g.Comment("A block: its scales (and zero points), then n = min(32, rows left) rows.")
		g.Inst("VLD1 (%s), %s", srow, vlist(16, nv))
		g.Inst("ADD %s, %s, %s", ldbs, srow, srow)
		if int4 {
			g.widenBytes(zrow, nv, true, 20)
			g.Inst("ADD %s, %s, %s", ldb, zrow, zrow)
		}
		g.Inst("MOVD $32, %s", n)
		g.Inst("CMP $32, %s", left)
		g.Inst("CSEL LT, %s, %s, %s", left, n, n)
		g.Inst("SUB %s, %s, %s", n, left, left)
		g.Label(l + "_row")
		if int4 {
			g.nibbles(drow, row, nv, 28)
			for j := 0; j < nv; j++ {
				g.Emit(EncFSUB(V(24+j), V(24+j), V(20+j)))
			}
		} else {
			g.widenBytes(drow, nv, false, 24)
			g.Inst("ADD %s, %s, %s", ldb, drow, drow)
		}
		for j := 0; j < nv; j++ {
			g.Emit(EncFMUL(V(24+j), V(24+j), V(16+j)))
		}
		g.Inst("VST1 %s, (%s)", vlist(24, nv), dst)
		g.Inst("ADD %s, %s, %s", ldd, dst, dst)
		g.Inst("SUBS $1, %s, %s", n, n)
		g.Inst("BNE %s_row", l)
		g.Inst("CBNZ %s, %s_block", left, l)
		g.Inst("RET")
	})
}

// gemvArgs loads the GEMV kernels' arguments; ldb is kept in bytes of B
// (int4: half the elements) and gLdbS in bytes of a scale row.
func (g *gen) gemvArgs(int4 bool) {
	g.loadArgs(arg{"c", gC}, arg{"ldc", gLdc}, arg{"a", gA}, arg{"lda", gLda}, arg{"b", gB}, arg{"ldb", gLdb},
		arg{"m", rRows}, arg{"k", gK}, arg{"nv", rNV}, arg{"acc", gAcc}, arg{"s", gS})
	if int4 {
		g.loadArgs(arg{"z", gZ})
	}
	g.toBytes(gLdc, gLda)
	g.Inst("LSL $2, %s, %s", gLdb, gLdbS)
	if int4 {
		g.Inst("MOVD %s, %s", gLdb, gLdbZ)
		g.Inst("LSR $1, %s, %s", gLdb, gLdb)
	}
}

// gemvTile emits one mr×nv tile of a GEMV kernel: the accumulators acc
// start at C (or 0); per block, each step's weights come from loadW into
// V24.., each A row's broadcast (alternating V28/V29) feeds the block sums
// part (and onA, int4's sum of A), and at the block's end offBlock (int4's
// zero points, nil for int8) and the scales fold the sums into acc. C and
// A advance by mr rows.
func (g *gen) gemvTile(mr, nv int, l string, acc, part func(i, j int) V, loadW func(first bool),
	onA func(i int, bc V, first bool), offBlock func(part func(i, j int) V)) {
	g.tileStart(mr, nv, l, acc)
	g.Inst("MOVD %s, %s", gB, gBrow)
	g.Inst("MOVD %s, %s", gS, gSrow)
	if offBlock != nil {
		g.Inst("MOVD %s, %s", gZ, gZrow)
	}
	g.Inst("MOVD %s, %s", gK, gLeft)
	step := func(first bool) {
		loadW(first)
		for i := 0; i < mr; i++ {
			bc := V(28 + i%2)
			g.Inst("VLD1R.P 4(%s), [%s]", gArow0+R(i), bc.S4())
			if onA != nil {
				onA(i, bc, first)
			}
			for j := 0; j < nv; j++ {
				if first {
					g.Emit(EncFMUL(part(i, j), bc, V(24+j)))
				} else {
					g.VFMLA(part(i, j), bc, V(24+j))
				}
			}
		}
	}
	g.Comment("A block: n = min(32, rows of k left) steps of B rows summed unscaled.")
	g.Label(l + "_blocks")
	g.Inst("MOVD $32, %s", gN)
	g.Inst("CMP $32, %s", gLeft)
	g.Inst("CSEL LT, %s, %s, %s", gLeft, gN, gN)
	g.Inst("SUB %s, %s, %s", gN, gLeft, gLeft)
	step(true)
	g.Inst("SUBS $1, %s, %s", gN, gN)
	g.Inst("BEQ %s_scale", l)
	g.Label(l + "_steps")
	step(false)
	g.Inst("SUBS $1, %s, %s", gN, gN)
	g.Inst("BNE %s_steps", l)
	g.Comment("The block's sums times its scales, into the accumulators; the next scale row.")
	g.Label(l + "_scale")
	if offBlock != nil {
		offBlock(part)
	}
	scale := V(30)
	if offBlock != nil {
		scale = 16 // free again after the zero points
	}
	for j0 := 0; j0 < nv; j0 += 2 {
		n := min(2, nv-j0)
		if j0 == 0 {
			g.Inst("VLD1 (%s), %s", gSrow, vlist(scale, n))
		} else {
			g.Inst("ADD $%d, %s, %s", 4*4*j0, gSrow, gT)
			g.Inst("VLD1 (%s), %s", gT, vlist(scale, n))
		}
		for j := j0; j < j0+n; j++ {
			for i := 0; i < mr; i++ {
				g.VFMLA(acc(i, j), part(i, j), scale+V(j-j0))
			}
		}
	}
	g.Inst("ADD %s, %s, %s", gLdbS, gSrow, gSrow)
	if offBlock != nil {
		g.Inst("ADD %s, %s, %s", gLdbZ, gZrow, gZrow)
	}
	g.Inst("CBNZ %s, %s_blocks", gLeft, l)
	g.tileEnd(mr, nv, acc)
}
