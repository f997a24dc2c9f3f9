// A typed EVEX encoder for the AVX512_BF16 instruction the kernels use
// and neither avo nor Go's assembler knows, VDPBF16PS. A kernel emits it
// as a placeholder instruction on avo registers (virtual ones too, with
// its inputs and outputs declared, so liveness and allocation treat it
// like any other); after avo has allocated the registers, rawPass
// replaces each placeholder by its bytes (BYTE directives), with a
// comment that spells the instruction. TestEVEXObjdump checks every
// encoding the tests can reach against binutils' disassembler.

package main

import (
	"fmt"
	"strings"

	"github.com/mmcloughlin/avo/ir"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// evexOp is one EVEX-encoded instruction of the form
// OP zmm(dst), zmm(src1), zmm(src2) (Intel operand order), 512 bits, no
// mask, register operands only.
type evexOp struct {
	name   string // Go-style mnemonic
	pp     byte   // implied prefix: 1 = 66, 2 = F3, 3 = F2
	mmm    byte   // opcode map: 1 = 0F, 2 = 0F38, 3 = 0F3A
	w      byte   // EVEX.W
	opcode byte
	isa    string // the cpuid feature avo's Requires line names
}

// vdpbf16ps is VDPBF16PS zmm1, zmm2, zmm3 (EVEX.512.F3.0F38.W0 52 /r):
// for each float32 lane j, zmm1[j] += zmm2.bf16[2j+1]·zmm3.bf16[2j+1],
// then += zmm2.bf16[2j]·zmm3.bf16[2j], each an FMA rounded to nearest
// even, denormal inputs read as 0 and denormal results flushed to 0.
var vdpbf16ps = evexOp{name: "VDPBF16PS", pp: 2, mmm: 2, w: 0, opcode: 0x52, isa: "AVX512_BF16"}

// encode returns the instruction's bytes for registers dst, src1, src2
// (numbers 0..31).
func (op evexOp) encode(dst, src1, src2 int) []byte {
	for _, r := range []int{dst, src1, src2} {
		if r < 0 || r > 31 {
			panic(fmt.Sprintf("%s: register %d out of range", op.name, r))
		}
	}
	inv := func(bit int) byte { return byte(bit&1) ^ 1 }
	// P0: R̄ X̄ B̄ R̄' 0 m m m. ModRM.reg = dst (R, R' its bits 3 and 4);
	// ModRM.rm = src2 (B its bit 3; X its bit 4, for a register operand).
	p0 := inv(dst>>3)<<7 | inv(src2>>4)<<6 | inv(src2>>3)<<5 | inv(dst>>4)<<4 | op.mmm
	// P1: W v̄v̄v̄v̄ 1 p p. vvvv = src1's bits 0..3, inverted.
	p1 := op.w<<7 | byte(^src1&15)<<3 | 1<<2 | op.pp
	// P2: z L'L b V̄' a a a. 512 bits (L'L = 10), no broadcast, no mask;
	// V' = src1's bit 4, inverted.
	p2 := byte(2)<<5 | inv(src1>>4)<<3
	modrm := byte(0xc0) | byte(dst&7)<<3 | byte(src2&7)
	return []byte{0x62, p0, p1, p2, op.opcode, modrm}
}

// raw emits op as a placeholder on avo registers: zmm dst, src1, src2 in
// Intel order (dst += src1·src2 for VDPBF16PS), which rawPass encodes
// once they are allocated.
func (g *gen) raw(op evexOp, dst, src1, src2 reg.VecVirtual) {
	g.Instruction(&ir.Instruction{
		Opcode:   op.name,
		Operands: []operand.Op{src2, src1, dst}, // Go's order
		Inputs:   []operand.Op{src2, src1, dst},
		Outputs:  []operand.Op{dst},
		ISA:      []string{op.isa},
	})
}

// rawOps are the placeholders rawPass encodes, by mnemonic.
var rawOps = map[string]evexOp{vdpbf16ps.name: vdpbf16ps}

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
				if !ok || p == nil || p.Kind() != reg.KindVector || p.Size() != 64 {
					return fmt.Errorf("%s: %s: operand %d is %v, not an allocated zmm register", fn.Name, op.name, k, o)
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
