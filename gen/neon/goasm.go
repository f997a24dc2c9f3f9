package neon

import "fmt"

// The vector instructions Go's arm64 assembler has, with typed operands,
// written in its syntax: sources first, the destination last (VADD Vm,
// Vn, Vd is Vd = Vn + Vm). What it lacks is in enc.go.

// VADD is Vd = Vn + Vm, integer lanes (.4S).
func (e *Emitter) VADD(d, n, m V) { e.Inst("VADD %s, %s, %s", m.S4(), n.S4(), d.S4()) }

// VEOR is Vd = Vn ^ Vm.
func (e *Emitter) VEOR(d, n, m V) { e.Inst("VEOR %s, %s, %s", m.B16(), n.B16(), d.B16()) }

// VMOV copies Vn to Vd (VORR Vn, Vn, Vd: objdump prints it as mov).
func (e *Emitter) VMOV(d, n V) { e.Inst("VORR %s, %s, %s", n.B16(), n.B16(), d.B16()) }

// VBSL is a bitwise select by the old Vd: Vd = Vd-bits ? Vn : Vm.
func (e *Emitter) VBSL(d, n, m V) { e.Inst("VBSL %s, %s, %s", m.B16(), n.B16(), d.B16()) }

// VSHL shifts each 32-bit lane of Vn left by shift (0..31) into Vd.
func (e *Emitter) VSHL(d, n V, shift int) {
	if shift < 0 || shift > 31 {
		panic(fmt.Sprintf("neon: VSHL shift %d out of 0..31", shift))
	}
	e.Inst("VSHL $%d, %s, %s", shift, n.S4(), d.S4())
}

// VFMLA is Vd += Vn · Vm (.4S).
func (e *Emitter) VFMLA(d, n, m V) { e.Inst("VFMLA %s, %s, %s", m.S4(), n.S4(), d.S4()) }
