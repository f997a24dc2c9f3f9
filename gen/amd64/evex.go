// A typed encoder for the instructions the kernels use and neither avo
// nor Go's assembler knows: VDPBF16PS and VCVTNE2PS2BF16 (AVX512_BF16,
// EVEX) and AVX-VNNI's
// VPDPBUSD (VEX: Go's assembler knows only its EVEX forms); and, for the
// Emu twin of the AVX-VNNI kernel, VPDPBUSD's EVEX ymm form. A kernel
// emits one as a placeholder instruction on avo registers (virtual ones
// too, with its inputs and outputs declared, so liveness and allocation
// treat it like any other); after avo has allocated the registers,
// rawPass replaces each placeholder by its bytes (BYTE directives), with
// a comment that spells the instruction. TestEVEXObjdump checks every
// encoding the tests can reach against binutils' disassembler.

package main

import (
	"fmt"
	"strings"

	"github.com/mmcloughlin/avo/ir"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// evexOp is one VEX- or EVEX-encoded instruction of the form
// OP vec(dst), vec(src1), vec(src2) (Intel operand order), no mask,
// register operands only.
type evexOp struct {
	name   string // Go-style mnemonic
	form   string // the placeholder's suffix, which tells same-named forms apart
	vex    bool   // VEX (registers 0..15) rather than EVEX (0..31)
	bits   int    // vector width: 256 or 512
	pp     byte   // implied prefix: 1 = 66, 2 = F3, 3 = F2
	mmm    byte   // opcode map: 1 = 0F, 2 = 0F38, 3 = 0F3A
	w      byte   // (E)VEX.W
	opcode byte
	isa    []string // the cpuid features avo's Requires line names
	// writes: dst is only written (not also read, as VDPBF16PS's
	// accumulator is), for the register allocator's liveness.
	writes bool
}

// key is the placeholder's opcode: the mnemonic and the form.
func (op evexOp) key() string { return op.name + op.form }

// vdpbf16ps is VDPBF16PS zmm1, zmm2, zmm3 (EVEX.512.F3.0F38.W0 52 /r):
// for each float32 lane j, zmm1[j] += zmm2.bf16[2j+1]·zmm3.bf16[2j+1],
// then += zmm2.bf16[2j]·zmm3.bf16[2j], each an FMA rounded to nearest
// even, denormal inputs read as 0 and denormal results flushed to 0.
var vdpbf16ps = evexOp{name: "VDPBF16PS", bits: 512, pp: 2, mmm: 2, w: 0, opcode: 0x52, isa: []string{"AVX512_BF16"}}

// vcvtne2ps2bf16 is VCVTNE2PS2BF16 zmm1, zmm2, zmm3 (EVEX.512.F2.0F38.W0
// 72 /r): zmm3's 16 float32 lanes rounded to bfloat16 in zmm1's words
// 0..15, zmm2's in words 16..31; nearest even, NaNs quieted, denormal
// inputs read as 0 and results flushed to 0 (fallback.F32ToBF16 on every
// other input).
var vcvtne2ps2bf16 = evexOp{name: "VCVTNE2PS2BF16", bits: 512, pp: 3, mmm: 2, w: 0, opcode: 0x72, isa: []string{"AVX512_BF16"}, writes: true}

// vpdpbusdVEX is AVX-VNNI's VPDPBUSD ymm1, ymm2, ymm3 (VEX.256.66.0F38.W0
// 50 /r): for each int32 lane j, ymm1[j] += Σ_{i<4} ymm2.u8[4j+i] ·
// ymm3.s8[4j+i], wrapping, no saturation.
var vpdpbusdVEX = evexOp{name: "VPDPBUSD", form: "_VEX", vex: true, bits: 256, pp: 1, mmm: 2, w: 0, opcode: 0x50, isa: []string{"AVXVNNI"}}

// vpdpbusdEVEX256 is the same instruction in its EVEX form (EVEX.256.66.0F38.W0
// 50 /r, AVX512_VNNI with AVX512VL): the Emu twin's, on AVX-512 CPUs.
var vpdpbusdEVEX256 = evexOp{name: "VPDPBUSD", form: "_EVEX256", bits: 256, pp: 1, mmm: 2, w: 0, opcode: 0x50, isa: []string{"AVX512VNNI", "AVX512VL"}}

// encode returns the instruction's bytes for registers dst, src1, src2
// (numbers 0..31).
func (op evexOp) encode(dst, src1, src2 int) []byte {
	top := 31
	if op.vex {
		top = 15
	}
	for _, r := range []int{dst, src1, src2} {
		if r < 0 || r > top {
			panic(fmt.Sprintf("%s%s: register %d out of range", op.name, op.form, r))
		}
	}
	inv := func(bit int) byte { return byte(bit&1) ^ 1 }
	modrm := byte(0xc0) | byte(dst&7)<<3 | byte(src2&7)
	l := byte(0) // VEX.L / EVEX.L'L: 0 = 128, 1 = 256, 2 = 512 bits
	switch op.bits {
	case 256:
		l = 1
	case 512:
		l = 2
	}
	if op.vex {
		// Three-byte VEX: C4, R̄ X̄ B̄ m-mmmm (R = dst's bit 3, B =
		// src2's), then W v̄v̄v̄v̄ L pp (vvvv = src1, inverted).
		b1 := inv(dst>>3)<<7 | 1<<6 | inv(src2>>3)<<5 | op.mmm
		b2 := op.w<<7 | byte(^src1&15)<<3 | l<<2 | op.pp
		return []byte{0xc4, b1, b2, op.opcode, modrm}
	}
	// P0: R̄ X̄ B̄ R̄' 0 m m m. ModRM.reg = dst (R, R' its bits 3 and 4);
	// ModRM.rm = src2 (B its bit 3; X its bit 4, for a register operand).
	p0 := inv(dst>>3)<<7 | inv(src2>>4)<<6 | inv(src2>>3)<<5 | inv(dst>>4)<<4 | op.mmm
	// P1: W v̄v̄v̄v̄ 1 p p. vvvv = src1's bits 0..3, inverted.
	p1 := op.w<<7 | byte(^src1&15)<<3 | 1<<2 | op.pp
	// P2: z L'L b V̄' a a a. No broadcast, no mask; V' = src1's bit 4,
	// inverted.
	p2 := l<<5 | inv(src1>>4)<<3
	return []byte{0x62, p0, p1, p2, op.opcode, modrm}
}

// raw emits op as a placeholder on avo registers: dst, src1, src2 in
// Intel order (dst += src1·src2 for VDPBF16PS and VPDPBUSD), which
// rawPass encodes once they are allocated.
func (g *gen) raw(op evexOp, dst, src1, src2 reg.VecVirtual) {
	in := []operand.Op{src2, src1, dst}
	if op.writes {
		in = in[:2]
	}
	g.Instruction(&ir.Instruction{
		Opcode:   op.key(),
		Operands: []operand.Op{src2, src1, dst}, // Go's order
		Inputs:   in,
		Outputs:  []operand.Op{dst},
		ISA:      op.isa,
	})
}

// rawOps are the placeholders rawPass encodes, by mnemonic.
var rawOps = map[string]evexOp{}

func init() {
	for _, op := range []evexOp{vdpbf16ps, vcvtne2ps2bf16, vpdpbusdVEX, vpdpbusdEVEX256} {
		rawOps[op.key()] = op
	}
}

// rawPass replaces every placeholder of f (after register allocation)
// by BYTE directives of its encoding, commented with the instruction.
func rawPass(f *ir.File) error {
	for _, fn := range f.Functions() {
		for _, n := range fn.Nodes {
			i, ok := n.(*ir.Instruction)
			if !ok {
				continue
			}
			op, ok := rawOps[i.Opcode]
			if !ok {
				continue
			}
			var num [3]int
			var names [3]string
			for k, o := range i.Operands {
				r, ok := o.(reg.Register)
				p := reg.ToPhysical(r)
				if !ok || p == nil || p.Kind() != reg.KindVector || 8*int(p.Size()) != op.bits {
					return fmt.Errorf("%s: %s: operand %d is %v, not an allocated %d-bit register", fn.Name, op.name, k, o, op.bits)
				}
				num[k], names[k] = int(p.PhysicalIndex()), p.Asm()
			}
			b := op.encode(num[2], num[1], num[0])
			words := make([]string, len(b))
			for k, x := range b {
				words[k] = fmt.Sprintf("BYTE $0x%02x", x)
			}
			i.Opcode = fmt.Sprintf("%s // %s %s, %s, %s", strings.Join(words, "; "), op.name, names[0], names[1], names[2])
			i.Operands = nil
		}
	}
	return nil
}
