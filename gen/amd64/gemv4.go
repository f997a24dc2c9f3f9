// GemvWI4<ISA> and WidenWI4<ISA>: projections through int4 weights. A
// packed panel row holds its nibbles interleaved by the vector width
// (fallback.Int4Byte): lanes bytes, zero-extended to dwords by one
// VPMOVZXBD, give two vectors of columns, the low nibbles and (after a
// 4-bit shift) the high ones. AVX-512 turns a nibble into its float32
// value with one VPERMPS from the table 0, 1, ..., 15 (the iota vector:
// VPERMPS reads only an index's low 4 bits, so the low nibble needs no
// mask); AVX2 masks and converts.
//
// GemvWI4 is the decode step's kernel: per block of 32 rows, the products
// with the nibbles u are summed unscaled, and the zero points z are taken
// off once per block through the sum of the block's A values,
// Σ a·(u-z) = Σ a·u - z·Σ a, so a weight vector costs its share of one
// load and extension, a VPERMPS (AVX2: a mask or shift and a conversion)
// and an FMA per row. Register tile: 2 rows × nv vectors of
// accumulators and as many block sums, the 2 rows' sums of A (AVX-512
// 2×4: 8 + 8 + 4 + 1 + 2 = 23 zmm; AVX2 2×2: 4 + 4 + 2 + 1 + 2 = 13 ymm).
//
// WidenWI4 (and WidenWI8 for int8) writes a block of panel rows as
// float32(u-z)·s (float32(q)·s), for Gemm to multiply by: a prefill's
// projection, where each widened block serves every row group of an item
// (widening in registers would repeat it for every group of 6 rows).

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// gemv4Rows is the height of GemvWI4's register tile.
const gemv4Rows = 2

// gemvI4 emits GemvWI4<ISA>.
func (g *gen) gemvI4() {
	x := g.isa
	g.fn("GemvWI4", "func(c *float32, ldc int, a *float32, lda int, b *byte, ldb int, m, k, nv, tail, acc int, s *float32, z *uint8)",
		"",
		"\tfor i := 0; i < m; i++ {",
		"\t\tfor j := 0; j < (nv-1)*lanes+tail; j++ {",
		"\t\t\tc[i*ldc+j] = (acc != 0 ? c[i*ldc+j] : 0)",
		"\t\t\tfor each block q0 = 0, 32, ... < k (p over q0 <= p < min(k, q0+32)):",
		"\t\t\t\tsum  = Σ_p a[i*lda+p] · float32(u(p, j))",
		"\t\t\t\tasum = Σ_p a[i*lda+p]",
		"\t\t\t\tsum  = fma(-float32(z[(q0/32)*ldb+j]), asum, sum)",
		"\t\t\t\tc[i*ldc+j] = fma(sum, s[(q0/32)*ldb+j], c[i*ldc+j])",
		"",
		"u(p, j) the nibble of element j of row p of b (ldb elements, ldb/2",
		fmt.Sprintf("bytes a row, interleaved by %d: fallback.Int4Byte), the sums in order", x.lanes),
		"of p (the first a product or a value, then FMAs or adds).",
		fmt.Sprintf("nv in 1..%d, tail in 1..%d, m >= 0, k >= 1, strides in elements, ldb a", x.nv, x.lanes),
		fmt.Sprintf("multiple of %d. B, s and z are read in whole vectors, nv of them per", 2*x.lanes),
		"row: a packed panel is padded to its width. Nothing past column",
		"(nv-1)*lanes+tail of C is touched.",
		fmt.Sprintf("Register tile: %d rows × nv vectors, accumulators and block sums.", gemv4Rows),
	)
	r := g.gemmParams(i8, gemv4Rows)
	g.SHRQ(operand.U8(1), r.ldb) // bytes
	rows := g.param("m")
	mk := g.isa.mk
	g.isa.mk = gemv4Rows // rowGroups' tile height
	g.panelRows(rows, &r.tailRegs, func(mr, nv int, masked bool, l string) { g.gemv4Block(r, mr, nv, masked, l) })
	g.isa.mk = mk
}

// nibbles loads the pair of weight vectors at m (lanes bytes) and widens
// them, low nibbles into lo and, when hi is not nil, high ones into hi:
// the float32 value of each nibble, or with sub the nibble minus sub's
// lane (an int32 zero point; then masked on both ISAs).
func (g *gen) nibbles(m operand.Mem, lo, hi, subLo, subHi reg.VecVirtual) {
	x := g.vec()
	g.VPMOVZXBD(m, x)
	// one widens the nibbles in the low 4 bits of src's dwords (with mask,
	// under other bits) into dst.
	one := func(src, dst, sub reg.VecVirtual, mask bool) {
		switch {
		case sub == nil && g.isa.avx512():
			g.VPERMPS(g.iota(), src, dst) // iota[u & 15] = float32(u & 15)
			return
		case mask && g.isa.avx512():
			g.VPANDD(g.cst("nibble"), src, dst)
			src = dst
		case mask:
			g.VPAND(g.cst("nibble"), src, dst)
			src = dst
		}
		if sub != nil {
			g.VPSUBD(sub, src, dst)
			src = dst
		}
		g.VCVTDQ2PS(src, dst)
	}
	one(x, lo, subLo, true)
	if hi != nil {
		g.VPSRLD(operand.U8(4), x, x) // a byte's high nibble: nothing above it
		one(x, hi, subHi, false)
	}
}

// gemv4Block emits one mr×nv tile of GemvWI4: the accumulators start at C
// (or zero), then each block of up to 32 rows of B is summed into the
// block sums (and A's values into asum), the zero points taken off and
// the sums added to the accumulators times the block's scales; cp and ap
// advance by mr rows. A one-row tile sums two blocks at a time
// (blockPairs) while 64 rows are left.
func (g *gen) gemv4Block(r gemmRegs, mr, nv int, masked bool, lbl string) {
	b := g.isa.bytes()
	acc := g.tile(mr, nv)
	bp, sp, zp := g.param("b"), g.param("s"), g.param("z")
	aa := g.GP64()
	g.MOVQ(r.ap, aa)
	p := g.param("k")
	pair, far := g.pairs(r, mr)
	g.startTile(r, acc, masked, lbl, pair)
	// sums emits one step of block blk (0, or 1: the pair's second): its
	// row's nv vectors from nv/2 loads, then per tile row a broadcast of a
	// into the row's asum (the first step) or added to it, and its
	// products into the block sums part.
	sums := func(blk int, part [][]reg.VecVirtual, asum []reg.VecVirtual, first bool) {
		vv := make([]reg.VecVirtual, nv)
		for j := 0; j < nv; j += 2 {
			vv[j] = g.vec()
			var hi reg.VecVirtual
			if j+1 < nv {
				vv[j+1] = g.vec()
				hi = vv[j+1]
			}
			g.nibbles(pairMem(operand.Mem{Base: bp, Disp: j / 2 * g.isa.lanes}, blk, far, 1), vv[j], hi, nil, nil)
		}
		for i := range part {
			bc := asum[i]
			if !first {
				bc = g.vec()
			}
			g.VBROADCASTSS(pairA(r.a.at(aa, i), blk), bc)
			if !first {
				g.VADDPS(bc, asum[i], asum[i])
			}
			for j := range vv {
				if first {
					g.VMULPS(vv[j], bc, part[i][j])
				} else {
					g.VFMADD231PS(vv[j], bc, part[i][j])
				}
			}
		}
	}
	next := func() {
		g.ADDQ(r.ldb, bp)
		g.ADDQ(operand.Imm(4), aa)
	}
	// fold takes block blk's zero points off its sums (sum -= z·asum) and
	// adds the sums times its scales to the accumulators.
	fold := func(blk int, part [][]reg.VecVirtual, asum []reg.VecVirtual) {
		for j := 0; j < nv; j++ {
			zf := g.vec()
			g.VPMOVZXBD(pairMem(operand.Mem{Base: zp, Disp: j * g.isa.lanes}, blk, r.ldb, 2), zf)
			g.VCVTDQ2PS(zf, zf)
			for i := 0; i < mr; i++ {
				g.VFNMADD231PS(zf, asum[i], part[i][j])
				g.VFMADD231PS(pairMem(operand.Mem{Base: sp, Disp: j * b}, blk, r.ldb, 8), part[i][j], acc[i][j])
			}
		}
	}
	vecs := func() []reg.VecVirtual {
		v := make([]reg.VecVirtual, mr)
		for i := range v {
			v[i] = g.vec()
		}
		return v
	}
	if pair {
		part0, part1, asum0, asum1 := g.tile(mr, nv), g.tile(mr, nv), vecs(), vecs()
		g.blockPairs(p, lbl, func(first bool) {
			sums(0, part0, asum0, first)
			sums(1, part1, asum1, first)
			next()
		}, func() {
			fold(0, part0, asum0)
			fold(1, part1, asum1)
			g.LEAQ(operand.Mem{Base: sp, Index: r.ldb, Scale: 8}, sp) // ldb/2 bytes of nibbles = ldb scales, twice
			g.LEAQ(operand.Mem{Base: sp, Index: r.ldb, Scale: 8}, sp)
			g.LEAQ(operand.Mem{Base: zp, Index: r.ldb, Scale: 4}, zp) // two rows of zero points
			g.ADDQ(far, bp)                                           // past the second block's rows
			g.ADDQ(operand.Imm(32*4), aa)
		})
	}
	part, asum := g.tile(mr, nv), vecs()
	g.blockSteps(p, func(first bool) { sums(0, part, asum, first); next() }, lbl)
	g.Comment("The block's zero points off (sum -= z·asum), its sums times its scales into",
		"the accumulators; the next rows of scales and zero points.")
	g.Label(label(lbl, "scale"))
	fold(0, part, asum)
	g.LEAQ(operand.Mem{Base: sp, Index: r.ldb, Scale: 8}, sp) // ldb/2 bytes of nibbles = ldb scales
	g.LEAQ(operand.Mem{Base: zp, Index: r.ldb, Scale: 2}, zp)
	g.TESTQ(p, p)
	g.JNZ(operand.LabelRef(label(lbl, "blocks")))
	g.Comment("Store the tile row by row; cp ends one row past it.")
	g.Label(label(lbl, "store"))
	g.storeTile(r, acc, masked)
}

// widenW emits WidenWI8<ISA> (int4 false) or WidenWI4<ISA>.
func (g *gen) widenW(int4 bool) {
	x := g.isa
	name, sig, value := "WidenWI8", "func(dst *float32, ldd int, b *int8, ldb int, k, nv int, s *float32)", "float32(b[p*ldb+j])"
	read := "whole vectors of b and s are read"
	if int4 {
		name, sig, value = "WidenWI4", "func(dst *float32, ldd int, b *byte, ldb int, k, nv int, s *float32, z *uint8)", "float32(int(u(p, j)) - int(z[(p/32)*ldb+j]))"
		read = fmt.Sprintf("ldb a multiple of %d: whole vectors of b, s and z are read", 2*x.lanes)
	}
	g.fn(name, sig,
		"",
		"\tfor p := 0; p < k; p++ {",
		"\t\tfor j := 0; j < nv*lanes; j++ {",
		"\t\t\tdst[p*ldd+j] = "+value+" · s[(p/32)*ldb+j]",
		"",
		"the product rounded (u(p, j) the nibble of element j of row p of b, as",
		"GemvWI4 reads it): the weights fallback.WidenWeights gives, for Gemm to",
		fmt.Sprintf("multiply by. nv in 1..%d, k >= 1, strides in elements; %s", x.nv, read),
		"and of dst written.",
	)
	b := x.bytes()
	dp, ldd, bp, ldb := g.param("dst"), g.stride("ldd"), g.param("b"), g.param("ldb")
	sp, p := g.param("s"), g.param("k")
	var zp reg.GPVirtual
	if int4 {
		zp = g.param("z")
		g.SHRQ(operand.U8(1), ldb) // bytes
	}
	nvr := g.param("nv")
	for v := x.nv; v >= 1; v-- {
		g.CMPQ(nvr, operand.Imm(uint64(v)))
		g.JEQ(operand.LabelRef(label("vecs", v)))
	}
	g.ret()
	for nv := x.nv; nv >= 1; nv-- {
		l := label("vecs", nv)
		g.Comment(fmt.Sprintf("%d vectors a row.", nv))
		g.Label(l)
		left := g.GP64()
		var zv []reg.VecVirtual
		g.Label(label(l, "block"))
		if int4 {
			g.Comment("A block's zero points, as int32 lanes.")
			zv = make([]reg.VecVirtual, nv)
			for j := range zv {
				zv[j] = g.vec()
				g.VPMOVZXBD(operand.Mem{Base: zp, Disp: j * x.lanes}, zv[j])
			}
		}
		g.MOVQ(operand.U32(32), left)
		g.Label(label(l, "row"))
		// store scales vector j, widened, and writes it to dst.
		store := func(j int, v reg.VecVirtual) {
			g.VMULPS(operand.Mem{Base: sp, Disp: j * b}, v, v)
			g.VMOVUPS(v, operand.Mem{Base: dp, Disp: j * b})
		}
		for j := 0; j < nv; j++ {
			switch {
			case !int4:
				v := g.vec()
				g.widen(i8, operand.Mem{Base: bp, Disp: j * x.lanes}, v)
				store(j, v)
			case j%2 == 0:
				lo := g.vec()
				var hi, zhi reg.VecVirtual
				if j+1 < nv {
					hi, zhi = g.vec(), zv[j+1]
				}
				g.nibbles(operand.Mem{Base: bp, Disp: j / 2 * x.lanes}, lo, hi, zv[j], zhi)
				store(j, lo)
				if hi != nil {
					store(j+1, hi)
				}
			}
		}
		g.ADDQ(ldb, bp)
		g.ADDQ(ldd, dp)
		g.DECQ(p)
		g.JZ(operand.LabelRef(label(l, "done")))
		g.DECQ(left)
		g.JNZ(operand.LabelRef(label(l, "row")))
		if int4 {
			g.LEAQ(operand.Mem{Base: sp, Index: ldb, Scale: 8}, sp) // ldb/2 bytes of nibbles = ldb scales
			g.LEAQ(operand.Mem{Base: zp, Index: ldb, Scale: 2}, zp)
		} else {
			g.LEAQ(operand.Mem{Base: sp, Index: ldb, Scale: 4}, sp) // ldb bytes of int8 = ldb scales
		}
		g.JMP(operand.LabelRef(label(l, "block")))
		g.Label(label(l, "done"))
		g.ret()
	}
}
