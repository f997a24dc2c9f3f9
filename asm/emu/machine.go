package emu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// ErrAccess is wrapped by the error of a run that touched a byte outside
// the mapped regions.
var ErrAccess = errors.New("emu: access outside the mapped memory")

// region is a block of Go memory the interpreted code may touch.
type region struct {
	addr uintptr
	p    unsafe.Pointer
	n    int
}

// Machine is the state of one interpreted call: general, vector and
// mask registers, flags, and the mapped memory.
type Machine struct {
	prog    *Program
	gp      [16]uint64
	z       [32][64]byte
	k       [8]uint64
	zf, sf  bool
	of, cf  bool
	regions []region
	frame   []byte
	// Steps counts the instructions run; a run stops with an error past
	// Limit (0: 1<<30).
	Steps, Limit int
}

// NewMachine returns a machine for p's functions, with p's DATA symbols
// mapped.
func NewMachine(p *Program) *Machine {
	m := &Machine{prog: p}
	for _, b := range p.data {
		m.Map(unsafe.Pointer(&b[0]), len(b))
	}
	return m
}

// Map lets the code touch the n bytes at p.
func (m *Machine) Map(p unsafe.Pointer, n int) {
	if n > 0 {
		m.regions = append(m.regions, region{addr: uintptr(p), p: p, n: n})
	}
}

// MapSlice maps the elements of s.
func MapSlice[T any](m *Machine, s []T) {
	if len(s) > 0 {
		var z T
		m.Map(unsafe.Pointer(&s[0]), len(s)*int(unsafe.Sizeof(z)))
	}
}

// bytesAt returns the n mapped bytes at addr.
func (m *Machine) bytesAt(addr uint64, n int) ([]byte, error) {
	for _, r := range m.regions {
		if uint64(r.addr) <= addr && addr+uint64(n) <= uint64(r.addr)+uint64(r.n) {
			return unsafe.Slice((*byte)(unsafe.Add(r.p, int(addr-uint64(r.addr)))), n), nil
		}
	}
	return nil, fmt.Errorf("%w: %d bytes at %#x", ErrAccess, n, addr)
}

// Arg is one argument of a call: a pointer, an integer or a float32.
type Arg struct {
	ptr  unsafe.Pointer
	i    int64
	f    float32
	kind int // 0 integer, 1 pointer, 2 float32
}

// Ptr, Int and F32 make arguments.
func Ptr(p unsafe.Pointer) Arg { return Arg{ptr: p, kind: 1} }

// Int is an integer argument.
func Int(i int) Arg { return Arg{i: int64(i)} }

// F32 is a float32 argument.
func F32(f float32) Arg { return Arg{f: f, kind: 2} }

// Call runs function name with args laid out as Go's ABI0 frame lays
// them (each aligned to its size) and returns an error for an unknown
// instruction, an access outside the mapped memory or a runaway loop.
func (m *Machine) Call(name string, args ...Arg) error {
	fn := m.prog.funcs[name]
	if fn == nil {
		return fmt.Errorf("emu: no function %s", name)
	}
	m.frame = m.frame[:0]
	for _, a := range args {
		switch a.kind {
		case 2:
			for len(m.frame)%4 != 0 {
				m.frame = append(m.frame, 0)
			}
			m.frame = binary.LittleEndian.AppendUint32(m.frame, math.Float32bits(a.f))
		default:
			for len(m.frame)%8 != 0 {
				m.frame = append(m.frame, 0)
			}
			v := uint64(a.i)
			if a.kind == 1 {
				v = uint64(uintptr(a.ptr))
			}
			m.frame = binary.LittleEndian.AppendUint64(m.frame, v)
		}
	}
	// The function's locals: SP points at a mapped block of their size
	// (and a little more, for anything that writes below SP).
	stack := make([]byte, fn.locals+64)
	m.Map(unsafe.Pointer(&stack[0]), len(stack))
	m.gp[gpIndex("SP")] = uint64(uintptr(unsafe.Pointer(&stack[32])))
	defer func() { m.regions = m.regions[:len(m.regions)-1] }()
	limit := m.Limit
	if limit <= 0 {
		limit = 1 << 30
	}
	for pc := 0; ; {
		if pc >= len(fn.code) {
			return fmt.Errorf("emu: %s ran past its end", name)
		}
		if m.Steps++; m.Steps > limit {
			return fmt.Errorf("emu: %s: more than %d steps", name, limit)
		}
		in := &fn.code[pc]
		pc++
		if in.op == "RET" {
			return nil
		}
		if to, jump, err := m.branch(fn, in, pc); err != nil {
			return fmt.Errorf("emu: %s line %d: %w", name, in.line, err)
		} else if jump {
			pc = to
			continue
		}
		if err := m.exec(in); err != nil {
			return fmt.Errorf("emu: %s line %d: %s: %w", name, in.line, in.op, err)
		}
	}
}

// branch runs a jump: the next instruction's index (next if not taken)
// and true; false for an instruction that is no jump.
func (m *Machine) branch(fn *function, in *instr, next int) (int, bool, error) {
	var take bool
	switch in.op {
	case "JMP":
		take = true
	case "JZ", "JEQ", "JE":
		take = m.zf
	case "JNZ", "JNE":
		take = !m.zf
	case "JLT", "JL":
		take = m.sf != m.of
	case "JGE":
		take = m.sf == m.of
	case "JLE":
		take = m.zf || m.sf != m.of
	case "JGT", "JG":
		take = !m.zf && m.sf == m.of
	case "JA", "JHI":
		take = !m.cf && !m.zf
	case "JAE", "JCC":
		take = !m.cf
	case "JB", "JCS", "JLO":
		take = m.cf
	default:
		return 0, false, nil
	}
	if !take {
		return next, true, nil
	}
	to, ok := fn.labels[in.args[0].reg]
	if !ok {
		return 0, false, fmt.Errorf("no label %s", in.args[0].reg)
	}
	return to, true, nil
}

// uintptrOf returns the address of b's first byte.
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
