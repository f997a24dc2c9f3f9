// The bfloat16 kernels of the AVX-512 set (the bfloat16 compute mode on
// CPUs with AVX512_BF16): GemmBF16, the one product kernel of QK, PV and
// the projections (their bfloat16 weights held in pairs), PairBF16, which rounds float32 rows to bfloat16 and packs them in the
// pairs VDPBF16PS multiplies, and BF16Peak, its throughput loop.
//
// VDPBF16PS multiplies bfloat16 pairs: lane j of the accumulator gains
// a.bf16[2j+1]·b.bf16[2j+1], then a.bf16[2j]·b.bf16[2j], two FMAs rounded
// to nearest even. So both operands of a product hold, in each dword, two
// consecutive terms of the sum: a row of K holds them as stored (d, d+1);
// Qᵀ, the weights P and V, whose sums run down their columns, are packed
// by PairBF16 (dword = row 2p's element in the low half, row 2p+1's in
// the high). Each kernel is also generated as an Emu twin whose
// VDPBF16PS is that definition in AVX-512F (the halves widened by a mask
// and a shift, two VFMADD231PS): the same bits on normal numbers, run by
// the tests on any AVX-512 CPU; only the instruction's bytes are checked
// by objdump alone (evex_test.go).

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// dpbf16 emits acc += a·b over bfloat16 pairs: VDPBF16PS, or with emu its
// definition in AVX-512F (the odd terms first, as the instruction adds
// them).
func (g *gen) dpbf16(acc, a, b reg.VecVirtual, emu bool) {
	if !emu {
		g.raw(vdpbf16ps, acc, a, b)
		return
	}
	ta, tb := g.vec(), g.vec()
	g.VPANDD(g.cst("hiHalves"), a, ta) // the odd terms, as float32
	g.VPANDD(g.cst("hiHalves"), b, tb)
	g.VFMADD231PS(ta, tb, acc)
	g.VPSLLD(operand.U8(16), a, ta) // the even terms
	g.VPSLLD(operand.U8(16), b, tb)
	g.VFMADD231PS(ta, tb, acc)
}

// emuName is the name suffix of a kernel's Emu twin.
func emuName(emu bool) string {
	if emu {
		return "Emu"
	}
	return ""
}

// gemmBF16 emits GemmBF16<ISA> (or its Emu twin).
func (g *gen) gemmBF16(emu bool) {
	x := g.isa
	doc := []string{"",
		"\tfor i := 0; i < m; i++ {",
		"\t\tfor j := 0; j < (nv-1)*lanes+tail; j++ {",
		"\t\t\tc[i*ldc+j] = (acc != 0 ? c[i*ldc+j] : 0) ⊕_{p<k} dot2(a[i*lda+p*lka], b[p*ldb+j])",
		"",
		"where each uint32 holds two bfloat16 (the first term in the low half) and",
		"⊕ adds each pair's two products into the lane as VDPBF16PS does (the high",
		"terms' product, then the low ones', each an FMA). Strides in uint32.",
		fmt.Sprintf("nv in 1..%d, tail in 1..%d, m >= 0, k >= 1. Nothing past column", x.nv, x.lanes),
		"(nv-1)*lanes+tail of C or B is touched. QK is this with C = Sᵀ, A = K's",
		"bfloat16 rows (lda = ldk/2, lka = 1), B = Qᵀ paired; PV with C = O, A = the",
		"weights paired (lda = 1, lka = their row), B = V paired.",
		fmt.Sprintf("Register tile: %d rows of A (one dword broadcast each) × nv vectors.", x.mk),
	}
	if emu {
		doc = append(doc, "This twin computes VDPBF16PS in AVX-512F, for the tests.")
	}
	g.fn("GemmBF16"+emuName(emu), "func(c *float32, ldc int, a *uint32, lda, lka int, b *uint32, ldb int, m, k, nv, tail, acc int)", doc...)
	r := g.gemmParams(f32, x.mk)
	r.acc = g.param("acc")
	lka := g.stride("lka")
	rows := g.param("m")
	g.panelRows(rows, &r.tailRegs, func(mr, nv int, masked bool, l string) { g.gemmBF16Block(r, lka, mr, nv, masked, l, emu) })
}

// gemmBF16Block emits one mr×nv tile of GemmBF16: the accumulators from
// C or zero, then per pair of k a row of B and mr dword broadcasts of A
// into VDPBF16PS, then the store; cp and ap end one tile further.
func (g *gen) gemmBF16Block(r gemmRegs, lka reg.GPVirtual, mr, nv int, masked bool, lbl string, emu bool) {
	b := g.isa.bytes()
	acc := g.tile(mr, nv)
	bp := g.param("b")
	aa := g.GP64()
	g.MOVQ(r.ap, aa)
	p := g.param("k")
	g.Comment(fmt.Sprintf("Tile of %d rows × %d vectors: the accumulators start at C, or at 0.", mr, nv))
	g.accStart(r, acc, lbl, func() { g.loadTile(r, acc, masked) })
	g.Comment(fmt.Sprintf("The k loop, a pair of terms a step: a row of B, %d broadcasts of A, %d VDPBF16PS.", mr, mr*nv))
	g.Label(lbl)
	vv := make([]reg.VecVirtual, nv)
	for j := range vv {
		vv[j] = g.vec()
		g.loadVec(r.tailRegs, operand.Mem{Base: bp, Disp: j * b}, j, nv, masked, vv[j])
	}
	for i := range acc {
		bc := g.vec()
		g.VPBROADCASTD(r.a.at(aa, i), bc)
		for j := range vv {
			g.dpbf16(acc[i][j], bc, vv[j], emu)
		}
	}
	g.ADDQ(r.ldb, bp)
	g.ADDQ(lka, aa)
	g.DECQ(p)
	g.JNZ(operand.LabelRef(lbl))
	g.Comment("Store the tile row by row; cp ends one row past it.")
	g.storeTile(r, acc, masked)
}

// pairBF16 emits PairBF16<ISA>: float32 rows rounded to bfloat16 and
// packed in pairs of rows, the operand layout of GemmBF16's B and PV's A.
func (g *gen) pairBF16() {
	x := g.isa
	g.fn("PairBF16", "func(dst *uint32, ldd int, src *float32, lds int, rows, nv, tail int)",
		"",
		"\tfor p := 0; p < (rows+1)/2; p++ {",
		"\t\tfor j := 0; j < (nv-1)*lanes+tail; j++ {",
		"\t\t\tdst[p*ldd+j] = bf16(src[2p*lds+j]) | bf16(src[(2p+1)*lds+j])<<16",
		"",
		"with bf16 fallback.F32ToBF16's rounding (nearest, ties to even; NaN kept",
		"quiet) and, when rows is odd, 0 for the missing last row. Strides in",
		fmt.Sprintf("elements; nv >= 1, tail in 1..%d. Nothing past column (nv-1)*lanes+tail", x.lanes),
		"of a row is read or written.",
	)
	dp, sp := g.param("dst"), g.param("src")
	ldd, lds := g.stride("ldd"), g.stride("lds")
	rows, nv := g.param("rows"), g.param("nv")
	tail := g.param("tail")
	t := g.tailMask(tail)
	b := g.isa.bytes()
	// rowPair packs the row pair at sp (the second row lds further if
	// second, else zeros) into the row at dp, vector by vector, the last
	// one masked.
	lo, hi, d := g.GP64(), g.GP64(), g.GP64()
	j := g.GP64()
	rowPair := func(l string, second bool) {
		g.MOVQ(sp, lo)
		g.MOVQ(dp, d)
		if second {
			g.LEAQ(operand.Mem{Base: sp, Index: lds, Scale: 1}, hi)
		}
		g.MOVQ(nv, j)
		g.Label(label(l, "vec"))
		g.CMPQ(j, operand.Imm(1))
		g.JE(operand.LabelRef(label(l, "last")))
		g.pairVec(lo, hi, d, second, tailRegs{}, false)
		g.ADDQ(operand.Imm(uint64(b)), lo)
		g.ADDQ(operand.Imm(uint64(b)), d)
		if second {
			g.ADDQ(operand.Imm(uint64(b)), hi)
		}
		g.DECQ(j)
		g.JMP(operand.LabelRef(label(l, "vec")))
		g.Label(label(l, "last"))
		g.pairVec(lo, hi, d, second, t, true)
	}
	g.Comment("Whole pairs of rows.")
	g.Label("pair")
	g.CMPQ(rows, operand.Imm(2))
	g.JL(operand.LabelRef("odd"))
	rowPair("pair", true)
	g.LEAQ(operand.Mem{Base: sp, Index: lds, Scale: 2}, sp)
	g.ADDQ(ldd, dp)
	g.SUBQ(operand.Imm(2), rows)
	g.JMP(operand.LabelRef("pair"))
	g.Comment("An odd last row pairs with zeros.")
	g.Label("odd")
	g.TESTQ(rows, rows)
	g.JZ(operand.LabelRef("done"))
	rowPair("odd", false)
	g.Label("done")
	g.ret()
}

// pairVec packs one vector of a pair of rows (lo's and, if second, hi's;
// else zeros): lo's rounded bits in each dword's low half, hi's in its
// high half, stored at d, loads and store masked to t's lanes if masked.
func (g *gen) pairVec(lo, hi, d reg.GPVirtual, second bool, t tailRegs, masked bool) {
	load := func(base reg.GPVirtual) reg.VecVirtual {
		v := g.vec()
		if masked {
			g.VMOVUPS_Z(operand.Mem{Base: base}, t.kmask, v)
		} else {
			g.VMOVUPS(operand.Mem{Base: base}, v)
		}
		return v
	}
	out := g.bf16Bits(load(lo))
	if second {
		h := g.bf16Bits(load(hi))
		g.VPSLLD(operand.U8(16), h, h)
		g.VPORD(h, out, out)
	}
	if masked {
		g.VMOVDQU32(out, t.kmask, operand.Mem{Base: d})
	} else {
		g.VMOVDQU32(out, operand.Mem{Base: d})
	}
}

// accStart emits the start of a tile whose first k step does not
// multiply: the accumulators at 0, or (acc set) loaded by load; both then
// go on at label lbl, the k loop.
func (g *gen) accStart(r gemmRegs, acc [][]reg.VecVirtual, lbl string, load func()) {
	g.TESTQ(r.acc, r.acc)
	g.JNZ(operand.LabelRef(label(lbl, "load")))
	for i := range acc {
		for j := range acc[i] {
			g.zero(acc[i][j])
		}
	}
	g.JMP(operand.LabelRef(lbl))
	g.Label(label(lbl, "load"))
	load()
}

// bf16PeakChains is the number of independent VDPBF16PS chains of
// BF16Peak, as FMAPeak's.
const bf16PeakChains = peakChains

// bf16Chains is BF16PeakChains of set x: 0 where it has no bfloat16
// kernels (AVX2).
func bf16Chains(x isa) int {
	if x.avx512() {
		return bf16PeakChains
	}
	return 0
}

// bf16Peak emits BF16Peak<ISA>: iters rounds of independent register-only
// VDPBF16PS, the bfloat16 dot-product throughput with no memory traffic.
func (g *gen) bf16Peak() {
	g.fn("BF16Peak", "func(iters int)",
		"",
		"\tfor i := 0; i < iters; i++ {",
		fmt.Sprintf("\t\tfor c := 0; c < %d; c++ { acc[c] += a·b }   (one VDPBF16PS each)", bf16PeakChains),
		"",
		fmt.Sprintf("so one call computes iters·%d·lanes·4 floating-point operations (two", bf16PeakChains),
		"products and two sums a lane). It needs AVX512_BF16.",
	)
	g.peakLoop(bf16PeakChains, func(acc, a, b reg.VecVirtual) { g.dpbf16(acc, a, b, false) })
}
