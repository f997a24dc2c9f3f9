// Widen<F16|BF16><ISA>, Narrow<F16|BF16><ISA> and RoundBF16<ISA>: float16/bfloat16 ↔
// float32 over whole vectors, one vector per step (VCVTPH2PS/VCVTPS2PH
// for float16, shifts and integer rounding for bfloat16), and the 16-bit
// K/V loads the decode kernels share.

package main

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// elem is the storage type of the K and V a kernel reads.
type elem int

const (
	f32 elem = iota
	f16
	bf16
	i8 // int8 K/V: its scales come separately (decode's scale scratch)
	i4 // int4 K/V (ggml's q4_0 blocks of 16 bytes), scales as int8's; strides in bytes
)

func (e elem) name() string { return [...]string{"F32", "F16", "BF16", "I8", "I4"}[e] }

// bytes and log are an element's bytes and their log2 (int4: those of
// its storage unit, a byte: its strides are in bytes).
func (e elem) bytes() int { return [...]int{4, 2, 2, 1, 1}[e] }
func (e elem) log() uint8 { return [...]uint8{2, 1, 1, 0, 0}[e] }
func (e elem) goType() string {
	return [...]string{"*float32", "*uint16", "*uint16", "*int8", "*int8"}[e]
}

// quantized reports whether e comes with a scale per block of 32 (int8, int4).
func (e elem) quantized() bool { return e == i8 || e == i4 }

// widen loads one vector of lanes elements of type e from m into dst as
// float32: F16C's VCVTPH2PS for binary16, a zero-extension and a 16-bit
// shift for bfloat16 (its bits are float32's upper half), a sign
// extension and an exact conversion for int8 (its scale not applied).
func (g *gen) widen(e elem, m operand.Op, dst reg.VecVirtual) {
	switch e {
	case f32:
		g.VMOVUPS(m, dst)
	case f16:
		g.VCVTPH2PS(m, dst)
	case bf16:
		g.VPMOVZXWD(m, dst)
		g.VPSLLD(operand.U8(16), dst, dst)
	case i8:
		g.VPMOVSXBD(m, dst)
		g.VCVTDQ2PS(dst, dst)
	}
}

// kvMask is the mask of a row's last vector of K or V (its first tail
// lanes) in the form each storage type's masked load needs: the float32
// lanes (tailRegs; on AVX-512 the same opmask masks 16-bit words and
// bytes) and, on AVX2, an xmm of all-ones dwords covering the tail of a
// 16-bit (tail/2 dwords) or int8 row (tail/4).
type kvMask struct {
	tailRegs
	pairs operand.Mem
}

// loadKV loads vector j of a row of type e at m into dst as float32,
// masked to the row's end when masked. No byte past the row's last
// element is read: AVX-512 loads a 16-bit or int8 tail with VMOVDQU16 or
// VMOVDQU8 (fault suppressed beyond the mask); AVX2 loads it as dwords,
// so an odd 16-bit tail, or an int8 one not a multiple of 4, is the
// caller's to avoid.
func (g *gen) loadKV(e elem, mk kvMask, m operand.Mem, masked bool, dst reg.VecVirtual) {
	switch {
	case !masked:
		g.widen(e, m, dst)
	case e == f32:
		g.loadVec(mk.tailRegs, m, 0, 1, true, dst)
	case g.isa.avx512() && e == i8: // zmm: the xmm form would need AVX512VL
		t := g.ZMM()
		g.VMOVDQU8_Z(m, mk.kmask, t)
		g.widen(e, t.AsX(), dst)
	case g.isa.avx512():
		t := g.ZMM()
		g.VMOVDQU16_Z(m, mk.kmask, t)
		g.widen(e, t.AsY(), dst)
	default:
		t := g.XMM()
		g.VMOVDQU(mk.pairs, t)
		g.VMASKMOVPS(m, t, t)
		g.widen(e, t, dst)
	}
}

// convert emits the vectorized conversions between float32 and the 16-bit
// storage types, over whole vectors (the caller converts the tail):
//
//	WidenF16, WidenBF16:   dst[r*ldd+i] = float32(src[r*lds+i])        exact, rows of n
//	NarrowF16, NarrowBF16: dst[i] = round-to-nearest-even(src[i])    NaN stays NaN
//
// Widen takes strided rows, so that the flash path widens a K or V block
// (rows a head stride apart) in one call instead of one per row.
func (g *gen) convert() {
	for _, e := range []elem{f16, bf16} {
		g.fn("Widen"+e.name(), "func(dst *float32, ldd int, src *uint16, lds int, rows, n int)",
			"",
			"\tfor r := 0; r < rows; r++ {",
			"\t\tfor i := 0; i < n; i++ {",
			"\t\t\tdst[r*ldd+i] = fallback."+e.name()+"ToF32(src[r*lds+i])",
			"",
			"with n a multiple of the vector width, strides in elements.",
		)
		g.widenRows(func(sp, dp reg.GPVirtual) {
			v := g.vec()
			g.widen(e, operand.Mem{Base: sp}, v)
			g.VMOVUPS(v, operand.Mem{Base: dp})
		})
		g.fn("Narrow"+e.name(), "func(dst *uint16, src *float32, n int)",
			"",
			"\tfor i := 0; i < n; i++ {",
			"\t\tdst[i] = fallback.F32To"+e.name()+"(src[i])",
			"",
			"with n a multiple of the vector width.",
		)
		g.convertLoop(4, 2, func(sp, dp reg.GPVirtual) {
			v := g.vec()
			g.VMOVUPS(operand.Mem{Base: sp}, v)
			if e == f16 {
				g.VCVTPS2PH(operand.U8(0), v, operand.Mem{Base: dp}) // 0: nearest even
				return
			}
			g.narrowBF16(v, operand.Mem{Base: dp})
		})
	}
	g.roundBF16()
}

// roundBF16 emits RoundBF16: float32 values rounded to bfloat16, the bits
// Narrow then Widen give, in one pass and no 16-bit copy (the bfloat16
// mode's weights, query block and K/V copy on the float32 kernels); dst
// may be src.
func (g *gen) roundBF16() {
	g.fn("RoundBF16", "func(dst, src *float32, n int)",
		"",
		"\tfor i := 0; i < n; i++ {",
		"\t\tdst[i] = fallback.BF16ToF32(fallback.F32ToBF16(src[i]))",
		"",
		"with n a multiple of the vector width; dst may be src.",
	)
	g.convertLoop(4, 4, func(sp, dp reg.GPVirtual) {
		v := g.vec()
		g.VMOVUPS(operand.Mem{Base: sp}, v)
		r := g.bf16Bits(v)
		g.VPSLLD(operand.U8(16), r, r) // back to the upper half: the float32 of the bfloat16
		g.VMOVUPS(r, operand.Mem{Base: dp})
	})
}

// widenRows emits Widen's loops: rows (a param) rows of n elements, whole
// vectors, from src at stride lds (16-bit elements) to dst at stride ldd
// (float32), body converting one vector.
func (g *gen) widenRows(body func(sp, dp reg.GPVirtual)) {
	dp, sp, n, rows := g.param("dst"), g.param("src"), g.param("n"), g.param("rows")
	ldd, lds := g.param("ldd"), g.param("lds")
	g.SHLQ(operand.U8(2), ldd)
	g.SHLQ(operand.U8(1), lds)
	g.SHRQ(operand.U8(g.lanesLog()), n)
	g.TESTQ(n, n)
	g.JZ(operand.LabelRef("done"))
	g.TESTQ(rows, rows)
	g.JZ(operand.LabelRef("done"))
	g.Label("row")
	s, d, cnt := g.GP64(), g.GP64(), g.GP64()
	g.MOVQ(sp, s)
	g.MOVQ(dp, d)
	g.MOVQ(n, cnt)
	g.Label("loop")
	body(s, d)
	g.ADDQ(operand.Imm(uint64(2*g.isa.lanes)), s)
	g.ADDQ(operand.Imm(uint64(4*g.isa.lanes)), d)
	g.DECQ(cnt)
	g.JNZ(operand.LabelRef("loop"))
	g.ADDQ(lds, sp)
	g.ADDQ(ldd, dp)
	g.DECQ(rows)
	g.JNZ(operand.LabelRef("row"))
	g.Label("done")
	g.ret()
}

// convertLoop emits the loop over n (a param) elements, whole vectors,
// reading srcBytes and writing dstBytes per element.
func (g *gen) convertLoop(srcBytes, dstBytes int, body func(sp, dp reg.GPVirtual)) {
	dp, sp, n := g.param("dst"), g.param("src"), g.param("n")
	g.SHRQ(operand.U8(g.lanesLog()), n)
	g.TESTQ(n, n)
	g.JZ(operand.LabelRef("done"))
	g.Label("loop")
	body(sp, dp)
	g.ADDQ(operand.Imm(uint64(srcBytes*g.isa.lanes)), sp)
	g.ADDQ(operand.Imm(uint64(dstBytes*g.isa.lanes)), dp)
	g.DECQ(n)
	g.JNZ(operand.LabelRef("loop"))
	g.Label("done")
	g.ret()
}

// lanesLog is log2 of the lanes.
func (g *gen) lanesLog() uint8 {
	if g.isa.avx512() {
		return 4
	}
	return 3
}

// narrowBF16 rounds the float32 lanes of v to bfloat16 (integer
// arithmetic on the bits: b + 0x7fff + bit 16 of b, the upper half; a NaN
// keeps its upper half with the quiet bit set) and stores them to m.
func (g *gen) narrowBF16(v reg.VecVirtual, m operand.Mem) {
	r := g.bf16Bits(v)
	if g.isa.avx512() {
		g.VPMOVDW(r, m)
		return
	}
	// Pack 8 dwords (each < 2^16) to words: VPACKUSDW packs within each
	// 128-bit half, VPERMQ gathers the two halves' low quadwords.
	g.VPACKUSDW(r, r, r)
	g.VPERMQ(operand.U8(0x08), r, r)
	g.VMOVDQU(r.AsX(), m)
}

// bf16Bits returns the float32 lanes of v rounded to bfloat16 (as
// narrowBF16 rounds them), each in the low half of its dword, the upper
// half zero.
func (g *gen) bf16Bits(v reg.VecVirtual) reg.VecVirtual {
	and := func(a operand.Op, b, dst reg.VecVirtual) {
		if g.isa.avx512() {
			g.VPANDD(a, b, dst)
		} else {
			g.VPAND(a, b, dst)
		}
	}
	odd, r, nan := g.vec(), g.vec(), g.vec()
	g.VPSRLD(operand.U8(16), v, nan) // the upper half, for NaN
	and(g.cst("intOne"), nan, odd)   // bit 16: ties go to even
	g.VPADDD(g.cst("round7fff"), v, r)
	g.VPADDD(odd, r, r)
	g.VPSRLD(operand.U8(16), r, r)
	abs := g.vec()
	and(g.cst("absMask"), v, abs)
	isNaN := g.compareInt(abs, g.cst("infBits")) // |b| > 0x7f800000
	g.vor(g.cst("quietBF16"), nan, nan)
	g.blend(isNaN, nan, r, r)
	return r
}

// compareInt returns the lanes where the signed dword a > b.
func (g *gen) compareInt(a reg.VecVirtual, b operand.Mem) laneMask {
	if g.isa.avx512() {
		m := laneMask{k: g.K()}
		g.VPCMPGTD(b, a, m.k)
		return m
	}
	m := laneMask{v: g.vec()}
	g.VPCMPGTD(b, a, m.v)
	return m
}

// vor is a bitwise or of vectors: VPORD on AVX-512 (AVX512F), VPOR on
// AVX2.
func (g *gen) vor(a operand.Op, b, dst reg.VecVirtual) {
	if g.isa.avx512() {
		g.VPORD(a, b, dst)
		return
	}
	g.VPOR(a, b, dst)
}
