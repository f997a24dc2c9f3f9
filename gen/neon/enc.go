package neon

import "fmt"

// Encodings of the Advanced SIMD instructions Go's assembler lacks, all on
// the .4S arrangement (Q = 1, sz = 0) or, for the bitwise ones, .16B. Field
// layout (Arm ARM, "Advanced SIMD three same" and neighbours): Rd in bits
// 0-4, Rn in 5-9, Rm in 16-20; the base values below hold the opcode bits.
const (
	opFADD   = 0x4e20d400
	opFSUB   = 0x4ea0d400
	opFMUL   = 0x6e20dc00
	opFDIV   = 0x6e20fc00
	opFMAX   = 0x4e20f400
	opFMIN   = 0x4ea0f400
	opFMLA   = 0x4e20cc00
	opFMLS   = 0x4ea0cc00
	opFCMGE  = 0x6e20e400
	opFCMGT  = 0x6ea0e400
	opFCMEQ  = 0x4e20e400
	opADD    = 0x4ea08400 // integer, .4S
	opAND    = 0x4e201c00 // .16B
	opBIC    = 0x4e601c00
	opORR    = 0x4ea01c00
	opEOR    = 0x6e201c00
	opBSL    = 0x6e601c00
	opFRINTN = 0x4e218800 // two-register misc: no Rm
	opFCVTZS = 0x4ea1b800
	opSCVTF  = 0x4e21d800
	opFABS   = 0x4ea0f800
	opFNEG   = 0x6ea0f800
	opSHL    = 0x4f005400 // shift by immediate: immh:immb = 32 + shift in bits 16-22
	opFMLAe  = 0x4f801000 // FMLA by element: index H:L in bits 11, 21; Rm in 16-20
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

// EncFMLA is Vd += Vn · Vm.
func EncFMLA(d, n, m V) Encoding { return three(opFMLA, "fmla", "4s", d, n, m) }

// EncFMLS is Vd -= Vn · Vm.
func EncFMLS(d, n, m V) Encoding { return three(opFMLS, "fmls", "4s", d, n, m) }

// EncFCMGE is Vd = Vn >= Vm ? all ones : 0 (0 for NaN).
func EncFCMGE(d, n, m V) Encoding { return three(opFCMGE, "fcmge", "4s", d, n, m) }

// EncFCMGT is Vd = Vn > Vm ? all ones : 0 (0 for NaN).
func EncFCMGT(d, n, m V) Encoding { return three(opFCMGT, "fcmgt", "4s", d, n, m) }

// EncFCMEQ is Vd = Vn == Vm ? all ones : 0.
func EncFCMEQ(d, n, m V) Encoding { return three(opFCMEQ, "fcmeq", "4s", d, n, m) }

// EncADD is the integer Vd = Vn + Vm, lane by lane.
func EncADD(d, n, m V) Encoding { return three(opADD, "add", "4s", d, n, m) }

// EncAND is Vd = Vn & Vm.
func EncAND(d, n, m V) Encoding { return three(opAND, "and", "16b", d, n, m) }

// EncBIC is Vd = Vn &^ Vm.
func EncBIC(d, n, m V) Encoding { return three(opBIC, "bic", "16b", d, n, m) }

// EncORR is Vd = Vn | Vm (objdump shows "mov" when Vn == Vm).
func EncORR(d, n, m V) Encoding {
	e := three(opORR, "orr", "16b", d, n, m)
	if n == m {
		e.Mnemonic = fmt.Sprintf("mov v%d.16b, v%d.16b", d, n)
	}
	return e
}

// EncEOR is Vd = Vn ^ Vm.
func EncEOR(d, n, m V) Encoding { return three(opEOR, "eor", "16b", d, n, m) }

// EncBSL is Vd = Vd-bits ? Vn : Vm (bitwise select by the old Vd).
func EncBSL(d, n, m V) Encoding { return three(opBSL, "bsl", "16b", d, n, m) }

// EncFRINTN rounds to the nearest integer, ties to even.
func EncFRINTN(d, n V) Encoding { return two(opFRINTN, "frintn", d, n) }

// EncFCVTZS converts to int32, rounding toward zero.
func EncFCVTZS(d, n V) Encoding { return two(opFCVTZS, "fcvtzs", d, n) }

// EncSCVTF converts int32 to float32.
func EncSCVTF(d, n V) Encoding { return two(opSCVTF, "scvtf", d, n) }

// EncFABS is Vd = |Vn|.
func EncFABS(d, n V) Encoding { return two(opFABS, "fabs", d, n) }

// EncFNEG is Vd = -Vn.
func EncFNEG(d, n V) Encoding { return two(opFNEG, "fneg", d, n) }

// EncSHL shifts each 32-bit lane left by shift (0..31).
func EncSHL(d, n V, shift int) Encoding {
	if shift < 0 || shift > 31 {
		panic(fmt.Sprintf("neon: SHL shift %d out of 0..31", shift))
	}
	return Encoding{
		opSHL | uint32(32+shift)<<16 | uint32(n.check())<<5 | uint32(d.check()),
		fmt.Sprintf("shl v%d.4s, v%d.4s, #%d", d, n, shift),
	}
}

// EncFMLAElem is Vd += Vn · Vm.S[index]: multiply by one lane of Vm.
func EncFMLAElem(d, n, m V, index int) Encoding {
	if index < 0 || index > 3 {
		panic(fmt.Sprintf("neon: lane %d out of 0..3", index))
	}
	mm := uint32(m.check())
	return Encoding{
		opFMLAe | uint32(index&1)<<21 | (mm>>4&1)<<20 | (mm&15)<<16 | uint32(index>>1)<<11 |
			uint32(n.check())<<5 | uint32(d.check()),
		fmt.Sprintf("fmla v%d.4s, v%d.4s, v%d.s[%d]", d, n, m, index),
	}
}

// Emit writes an encoded instruction.
func (e *Emitter) Emit(enc Encoding) { e.Word(enc.Word, enc.Mnemonic) }
