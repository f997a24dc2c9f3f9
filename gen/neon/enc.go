package neon

import "fmt"

// Encodings of the Advanced SIMD instructions Go's assembler lacks (the
// ones it has are in goasm.go), all on the .4S arrangement (Q = 1, sz = 0)
// or, for BIC, .16B. Field
// layout (Arm ARM, "Advanced SIMD three same" and neighbours): Rd in bits
// 0-4, Rn in 5-9, Rm in 16-20; the base values below hold the opcode bits.
const (
	opFADD   = 0x4e20d400
	opFSUB   = 0x4ea0d400
	opFMUL   = 0x6e20dc00
	opFDIV   = 0x6e20fc00
	opFMAX   = 0x4e20f400
	opFMIN   = 0x4ea0f400
	opFMLS   = 0x4ea0cc00
	opFCMGT  = 0x6ea0e400
	opFCMEQ  = 0x4e20e400
	opBIC    = 0x4e601c00
	opFRINTN = 0x4e218800 // two-register misc: no Rm
	opFCVTZS = 0x4ea1b800
	opFABS   = 0x4ea0f800
	opFNEG   = 0x6ea0f800
	opFMLAe  = 0x4f801000 // FMLA by element: index H:L in bits 11, 21; Rm in 16-20
	opFADDP  = 0x6e20d400 // pairwise: U = 1 beside FADD
	opFMAXP  = 0x6e20f400
	opFCVTL  = 0x0e217800 // "two-register misc", Q = 0: the lower 4 halves; FCVTL2 sets Q
	opSHLL   = 0x2e613800 // size = 01 (halfwords), shift = 16; SHLL2 sets Q
	opFCVTN  = 0x0e216800 // "two-register misc", Q = 0: into the lower 4 halves; FCVTN2 sets Q
	opSCVTF  = 0x4e21d800 // "two-register misc", sz = 0; UCVTF sets U
	opSXTL   = 0x0f00a400 // SSHLL #0, "shift by immediate": immh in bits 19-22, Q, and U for UXTL
	opBFDOT  = 0x6e40fc00 // FEAT_BF16, "three-register extension": Q = 1, size = 01
	opSDOTe  = 0x4f80e000 // FEAT_DotProd, SDOT by element: Q = 1, size = 10, index H:L, Rm M:Rm
	opLD4s   = 0x0de0a000 // LD4 (single structure), post-index by Xm: .S lane (opcode 101, size 00), index Q:S
)

// Encoding is one encoded instruction and its disassembly.
type Encoding struct {
	Word     uint32
	Mnemonic string // as objdump prints it
}

func three(op uint32, name, arr string, d, n, m V) Encoding {
	return Encoding{
		op | uint32(m.check())<<16 | uint32(n.check())<<5 | uint32(d.check()),
		fmt.Sprintf("%s v%d.%s, v%d.%s, v%d.%s", name, d, arr, n, arr, m, arr),
	}
}

func two(op uint32, name string, d, n V) Encoding {
	return Encoding{
		op | uint32(n.check())<<5 | uint32(d.check()),
		fmt.Sprintf("%s v%d.4s, v%d.4s", name, d, n),
	}
}

// EncFADD is Vd = Vn + Vm.
func EncFADD(d, n, m V) Encoding { return three(opFADD, "fadd", "4s", d, n, m) }

// EncFSUB is Vd = Vn - Vm.
func EncFSUB(d, n, m V) Encoding { return three(opFSUB, "fsub", "4s", d, n, m) }

// EncFMUL is Vd = Vn · Vm.
func EncFMUL(d, n, m V) Encoding { return three(opFMUL, "fmul", "4s", d, n, m) }

// EncFDIV is Vd = Vn / Vm.
func EncFDIV(d, n, m V) Encoding { return three(opFDIV, "fdiv", "4s", d, n, m) }

// EncFMAX is Vd = max(Vn, Vm) (NaN if either is NaN).
func EncFMAX(d, n, m V) Encoding { return three(opFMAX, "fmax", "4s", d, n, m) }

// EncFMIN is Vd = min(Vn, Vm) (NaN if either is NaN).
func EncFMIN(d, n, m V) Encoding { return three(opFMIN, "fmin", "4s", d, n, m) }

// EncFMLS is Vd -= Vn · Vm.
func EncFMLS(d, n, m V) Encoding { return three(opFMLS, "fmls", "4s", d, n, m) }

// EncFCMGT is Vd = Vn > Vm ? all ones : 0 (0 for NaN).
func EncFCMGT(d, n, m V) Encoding { return three(opFCMGT, "fcmgt", "4s", d, n, m) }

// EncFCMEQ is Vd = Vn == Vm ? all ones : 0.
func EncFCMEQ(d, n, m V) Encoding { return three(opFCMEQ, "fcmeq", "4s", d, n, m) }

// EncBIC is Vd = Vn &^ Vm.
func EncBIC(d, n, m V) Encoding { return three(opBIC, "bic", "16b", d, n, m) }

// EncFRINTN rounds to the nearest integer, ties to even.
func EncFRINTN(d, n V) Encoding { return two(opFRINTN, "frintn", d, n) }

// EncFCVTZS converts to int32, rounding toward zero.
func EncFCVTZS(d, n V) Encoding { return two(opFCVTZS, "fcvtzs", d, n) }

// EncFABS is Vd = |Vn|.
func EncFABS(d, n V) Encoding { return two(opFABS, "fabs", d, n) }

// EncFNEG is Vd = -Vn.
func EncFNEG(d, n V) Encoding { return two(opFNEG, "fneg", d, n) }

// EncFMLAElem is Vd += Vn · Vm.S[index]: multiply by one lane of Vm.
func EncFMLAElem(d, n, m V, index int) Encoding {
	return byElement(opFMLAe, d, n, m, index, fmt.Sprintf("fmla v%d.4s, v%d.4s, v%d.s[%d]", d, n, m, index))
}

// byElement encodes a "vector × element" instruction on 32-bit elements:
// Rm in M:Rm (bits 20, 16-19), the lane index in H:L (bits 11, 21).
func byElement(op uint32, d, n, m V, index int, mnemonic string) Encoding {
	if index < 0 || index > 3 {
		panic(fmt.Sprintf("neon: lane %d out of 0..3", index))
	}
	mm := uint32(m.check())
	return Encoding{
		op | uint32(index&1)<<21 | (mm>>4&1)<<20 | (mm&15)<<16 | uint32(index>>1)<<11 |
			uint32(n.check())<<5 | uint32(d.check()),
		mnemonic,
	}
}

// EncBFDOT is BFDOT Vd.4S, Vn.8H, Vm.8H (FEAT_BF16): each word lane of
// Vd gains the dot product of the lane's two bfloat16 of Vn and of Vm
// (with FPCR.EBF = 0: the two products summed, then added to Vd, each
// sum rounded to odd, denormals flushed to zero).
func EncBFDOT(d, n, m V) Encoding {
	return Encoding{
		opBFDOT | uint32(m.check())<<16 | uint32(n.check())<<5 | uint32(d.check()),
		fmt.Sprintf("bfdot v%d.4s, v%d.8h, v%d.8h", d, n, m),
	}
}

// EncSDOTElem is SDOT Vd.4S, Vn.16B, Vm.4B[index] (FEAT_DotProd): each
// word lane j of Vd gains the dot product of Vn's bytes 4j..4j+3 with
// bytes 4·index..4·index+3 of Vm, all signed, exactly (in int32,
// wrapping).
func EncSDOTElem(d, n, m V, index int) Encoding {
	return byElement(opSDOTe, d, n, m, index, fmt.Sprintf("sdot v%d.4s, v%d.16b, v%d.4b[%d]", d, n, m, index))
}

// EncLD4Lane is LD4 {Vt.S, Vt+1.S, Vt+2.S, Vt+3.S}[index], [Xn], Xm: the
// four words at Xn into lane index of Vt..Vt+3 (word i into Vt+i), then
// Xn += Xm. Go's assembler has the instruction only for whole vectors.
func EncLD4Lane(t V, index int, n, m R) Encoding {
	if index < 0 || index > 3 {
		panic(fmt.Sprintf("neon: lane %d out of 0..3", index))
	}
	t.check()
	(t + 3).check()
	return Encoding{
		opLD4s | uint32(index>>1)<<30 | uint32(m.check())<<16 | uint32(index&1)<<12 | uint32(n.check())<<5 | uint32(t),
		fmt.Sprintf("ld4 {v%d.s-v%d.s}[%d], [x%d], x%d", t, t+3, index, n, m),
	}
}

// EncFADDP is the pairwise sum: Vd = [n0+n1, n2+n3, m0+m1, m2+m3].
func EncFADDP(d, n, m V) Encoding { return three(opFADDP, "faddp", "4s", d, n, m) }

// EncFMAXP is the pairwise max (NaN if either is NaN), in FADDP's order.
func EncFMAXP(d, n, m V) Encoding { return three(opFMAXP, "fmaxp", "4s", d, n, m) }

// widening is a "two-register misc" widening of 4 halfwords of Vn (its
// lower half, or with upper its upper half) to 4 words of Vd.
func widening(op uint32, name string, upper bool, d, n V, suffix string) Encoding {
	arr := "4h"
	if upper {
		op |= 1 << 30
		name += "2"
		arr = "8h"
	}
	return Encoding{op | uint32(n.check())<<5 | uint32(d.check()),
		fmt.Sprintf("%s v%d.4s, v%d.%s%s", name, d, n, arr, suffix)}
}

// EncFCVTL widens 4 float16 (the lower half of Vn; with upper, FCVTL2,
// the upper half) to float32, exactly.
func EncFCVTL(d, n V, upper bool) Encoding { return widening(opFCVTL, "fcvtl", upper, d, n, "") }

// EncSHLL shifts 4 halfwords (the lower half of Vn; with upper, SHLL2,
// the upper half) left by 16 into words: bfloat16 to float32, exactly.
func EncSHLL(d, n V, upper bool) Encoding { return widening(opSHLL, "shll", upper, d, n, ", #16") }

// EncFCVTN rounds 4 float32 of Vn to float16 (to nearest even, under the
// default FPCR) into the lower half of Vd, zeroing the upper; with upper,
// FCVTN2, into the upper half, keeping the lower.
func EncFCVTN(d, n V, upper bool) Encoding {
	op, name, arr := uint32(opFCVTN), "fcvtn", "4h"
	if upper {
		op, name, arr = op|1<<30, "fcvtn2", "8h"
	}
	return Encoding{op | uint32(n.check())<<5 | uint32(d.check()),
		fmt.Sprintf("%s v%d.%s, v%d.4s", name, d, arr, n)}
}

// EncSCVTF converts 4 signed int32 lanes to float32 (exact below 2^24);
// with unsigned, UCVTF, 4 unsigned ones.
func EncSCVTF(d, n V, unsigned bool) Encoding {
	op, name := uint32(opSCVTF), "scvtf"
	if unsigned {
		op, name = op|1<<29, "ucvtf"
	}
	return two(op, name, d, n)
}

// EncXTL sign-extends (unsigned: zero-extends, UXTL) the lower half of
// Vn's lanes to twice their width in Vd: 8 bytes to 8 halfwords with
// bytes, else 4 halfwords to 4 words; with upper (SXTL2, UXTL2) the upper
// half of Vn.
func EncXTL(d, n V, unsigned, bytes, upper bool) Encoding {
	op, name := uint32(opSXTL), "sxtl"
	if unsigned {
		op, name = op|1<<29, "uxtl"
	}
	from, to := "4h", "4s"
	op |= 2 << 19 // immh 0010: halfwords
	if bytes {
		op ^= 3 << 19 // immh 0001: bytes
		from, to = "8b", "8h"
	}
	if upper {
		op |= 1 << 30
		name += "2"
		from = map[string]string{"4h": "8h", "8b": "16b"}[from]
	}
	return Encoding{op | uint32(n.check())<<5 | uint32(d.check()),
		fmt.Sprintf("%s v%d.%s, v%d.%s", name, d, to, n, from)}
}

// Emit writes an encoded instruction.
func (e *Emitter) Emit(enc Encoding) { e.Word(enc.Word, enc.Mnemonic) }
