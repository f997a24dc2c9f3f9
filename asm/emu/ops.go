package emu

import (
	"encoding/binary"
	"fmt"
	"math"
)

// vec is a vector value: 16 lanes of 32 bits, width bytes of them in use.
type vec struct {
	l     [16]uint32
	width int
}

func (v *vec) f(i int) float32       { return math.Float32frombits(v.l[i]) }
func (v *vec) setF(i int, x float32) { v.l[i] = math.Float32bits(x) }
func (v *vec) lanes() int            { return v.width / 4 }

// gpValue reads a general register, an immediate or a 64-bit memory
// operand.
func (m *Machine) gpValue(o operand) (uint64, error) {
	switch o.kind {
	case regOperand:
		i := gpIndex(o.reg)
		if i < 0 {
			return 0, fmt.Errorf("not a general register: %s", o.reg)
		}
		return m.gp[i], nil
	case immOperand:
		return uint64(o.imm), nil
	case memOperand:
		b, err := m.mem(o, 8)
		if err != nil {
			return 0, err
		}
		return binary.LittleEndian.Uint64(b), nil
	}
	return 0, fmt.Errorf("operand kind %d", o.kind)
}

// setGP writes a general register, or 64 bits of memory.
func (m *Machine) setGP(o operand, v uint64) error {
	if o.kind == memOperand {
		b, err := m.mem(o, 8)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(b, v)
		return nil
	}
	i := gpIndex(o.reg)
	if o.kind != regOperand || i < 0 {
		return fmt.Errorf("destination is not a general register")
	}
	m.gp[i] = v
	return nil
}

// address computes a memory operand's address (a DATA symbol's from its
// mapped bytes).
func (m *Machine) address(o operand) (uint64, error) {
	if o.sym != "" && o.sym != "FP" {
		b := m.prog.data[o.sym]
		if b == nil {
			return 0, fmt.Errorf("no symbol %s", o.sym)
		}
		return uint64(uintptrOf(b)) + uint64(o.disp), nil
	}
	a := uint64(o.disp)
	if o.base != "" {
		i := gpIndex(o.base)
		if i < 0 {
			return 0, fmt.Errorf("base %s", o.base)
		}
		a += m.gp[i]
	}
	if o.index != "" {
		i := gpIndex(o.index)
		if i < 0 {
			return 0, fmt.Errorf("index %s", o.index)
		}
		a += m.gp[i] * uint64(o.scale)
	}
	return a, nil
}

// mem returns n bytes of a memory operand (an argument's from the frame).
func (m *Machine) mem(o operand, n int) ([]byte, error) {
	if o.sym == "FP" {
		if o.disp < 0 || int(o.disp)+n > len(m.frame) {
			return nil, fmt.Errorf("argument at %d past the frame's %d bytes", o.disp, len(m.frame))
		}
		return m.frame[o.disp : int(o.disp)+n], nil
	}
	a, err := m.address(o)
	if err != nil {
		return nil, err
	}
	return m.bytesAt(a, n)
}

// flags sets ZF and SF from a result, OF and CF as given.
func (m *Machine) flags(r uint64, of, cf bool) {
	m.zf, m.sf, m.of, m.cf = r == 0, int64(r) < 0, of, cf
}

// exec runs one instruction other than a jump or RET.
func (m *Machine) exec(in *instr) error {
	op, a := in.op, in.args
	switch op {
	case "PREFETCHT0", "PREFETCHT1", "PREFETCHT2", "PREFETCHNTA", "VZEROUPPER":
		return nil
	case "MOVQ":
		v, err := m.gpValue(a[0])
		if err != nil {
			return err
		}
		if a[1].kind == memOperand {
			b, err := m.mem(a[1], 8)
			if err != nil {
				return err
			}
			binary.LittleEndian.PutUint64(b, v)
			return nil
		}
		return m.setGP(a[1], v)
	case "CMOVQLT", "CMOVQGE", "CMOVQEQ", "CMOVQNE":
		take := map[string]bool{"CMOVQLT": m.sf != m.of, "CMOVQGE": m.sf == m.of, "CMOVQEQ": m.zf, "CMOVQNE": !m.zf}[op]
		if !take {
			return nil
		}
		v, err := m.gpValue(a[0])
		if err != nil {
			return err
		}
		return m.setGP(a[1], v)
	case "MOVL": // 32 bits; a register destination is zero-extended
		var v uint64
		switch a[0].kind {
		case memOperand:
			b, err := m.mem(a[0], 4)
			if err != nil {
				return err
			}
			v = uint64(binary.LittleEndian.Uint32(b))
		default:
			x, err := m.gpValue(a[0])
			if err != nil {
				return err
			}
			v = x & 0xffffffff
		}
		if a[1].kind == memOperand {
			b, err := m.mem(a[1], 4)
			if err != nil {
				return err
			}
			binary.LittleEndian.PutUint32(b, uint32(v))
			return nil
		}
		return m.setGP(a[1], v)
	case "MOVBLZX":
		b, err := m.mem(a[0], 1)
		if err != nil {
			return err
		}
		return m.setGP(a[1], uint64(b[0]))
	case "LEAQ":
		v, err := m.address(a[0])
		if err != nil {
			return err
		}
		return m.setGP(a[1], v)
	case "ADDQ", "SUBQ", "SHLQ", "SHRQ", "IMULQ", "ANDQ", "XORQ", "CMPQ", "TESTQ":
		x, err := m.gpValue(a[0])
		if err != nil {
			return err
		}
		y, err := m.gpValue(a[1])
		if err != nil {
			return err
		}
		var r uint64
		switch op {
		case "ADDQ":
			r = y + x
			m.flags(r, (int64(x) >= 0) == (int64(y) >= 0) && (int64(r) >= 0) != (int64(y) >= 0), r < y)
		case "SUBQ":
			r = y - x
			m.flags(r, (int64(x) >= 0) != (int64(y) >= 0) && (int64(r) >= 0) != (int64(y) >= 0), y < x)
		case "SHLQ":
			r = y << (x & 63)
			m.flags(r, false, false)
		case "SHRQ":
			r = y >> (x & 63)
			m.flags(r, false, false)
		case "IMULQ":
			r = uint64(int64(y) * int64(x))
		case "ANDQ", "TESTQ":
			r = y & x
			m.flags(r, false, false)
		case "XORQ":
			r = y ^ x
			m.flags(r, false, false)
		case "CMPQ": // Go's order: CMPQ a, b compares a with b
			d := x - y
			m.flags(d, (int64(x) >= 0) != (int64(y) >= 0) && (int64(d) >= 0) != (int64(x) >= 0), x < y)
			return nil
		}
		if op == "TESTQ" {
			return nil
		}
		return m.setGP(a[1], r)
	case "IMUL3Q":
		x, err := m.gpValue(a[1])
		if err != nil {
			return err
		}
		return m.setGP(a[2], uint64(a[0].imm*int64(x)))
	case "DECQ", "INCQ", "NEGQ":
		x, err := m.gpValue(a[0])
		if err != nil {
			return err
		}
		r := x - 1
		switch op {
		case "INCQ":
			r = x + 1
		case "NEGQ":
			r = -x
		}
		m.zf, m.sf = r == 0, int64(r) < 0
		m.of = (op == "DECQ" && x == 1<<63) || (op == "INCQ" && r == 1<<63)
		return m.setGP(a[0], r)
	case "KMOVW":
		var v uint64
		if a[0].kind == memOperand {
			b, err := m.mem(a[0], 2)
			if err != nil {
				return err
			}
			v = uint64(binary.LittleEndian.Uint16(b))
		} else if k, ok := maskRegister(a[0].reg); ok {
			v = m.k[k] & 0xffff
		} else {
			x, err := m.gpValue(a[0])
			if err != nil {
				return err
			}
			v = x & 0xffff
		}
		if k, ok := maskRegister(a[1].reg); ok {
			m.k[k] = v
			return nil
		}
		return m.setGP(a[1], v)
	case "VUCOMISS", "UCOMISS":
		x, err := m.scalar(a[0])
		if err != nil {
			return err
		}
		y, err := m.scalar(a[1])
		if err != nil {
			return err
		}
		// Intel's order is reversed: y compared with x.
		switch {
		case x != x || y != y:
			m.zf, m.cf = true, true
		case y < x:
			m.zf, m.cf = false, true
		case y > x:
			m.zf, m.cf = false, false
		default:
			m.zf, m.cf = true, false
		}
		m.of, m.sf = false, false
		return nil
	case "MOVSS":
		if a[1].kind == memOperand {
			v := m.reg(a[0].reg)
			b, err := m.mem(a[1], 4)
			if err != nil {
				return err
			}
			binary.LittleEndian.PutUint32(b, v.l[0])
			return nil
		}
		var v vec
		v.width = 16
		if a[0].kind == memOperand {
			b, err := m.mem(a[0], 4)
			if err != nil {
				return err
			}
			v.l[0] = binary.LittleEndian.Uint32(b)
		} else {
			v.l[0] = m.reg(a[0].reg).l[0]
		}
		m.setReg(a[1].reg, v)
		return nil
	}
	return m.vector(in)
}

// scalar reads lane 0 of a register or a float32 in memory.
func (m *Machine) scalar(o operand) (float32, error) {
	if o.kind == memOperand {
		b, err := m.mem(o, 4)
		if err != nil {
			return 0, err
		}
		return math.Float32frombits(binary.LittleEndian.Uint32(b)), nil
	}
	v := m.reg(o.reg)
	return v.f(0), nil
}

// reg reads a vector register at its name's width.
func (m *Machine) reg(name string) vec {
	n, w, _ := vecRegister(name)
	var v vec
	v.width = w
	for i := 0; i < w/4; i++ {
		v.l[i] = binary.LittleEndian.Uint32(m.z[n][4*i:])
	}
	return v
}

// setReg writes a vector register at its name's width and clears the
// bits above (as VEX and EVEX writes do).
func (m *Machine) setReg(name string, v vec) {
	n, w, _ := vecRegister(name)
	clear(m.z[n][:])
	for i := 0; i < w/4; i++ {
		binary.LittleEndian.PutUint32(m.z[n][4*i:], v.l[i])
	}
}

// masking is an instruction's write mask: lanes with bit 0 keep the
// destination's value, or become 0 with zeroing.
type masking struct {
	on, zero bool
	bits     uint64
}

func (k masking) active(i int) bool { return !k.on || k.bits>>i&1 != 0 }

// source reads a vector operand of lanes 32-bit lanes: a register, a
// memory vector (masked lanes only, under a mask) or a broadcast scalar.
func (m *Machine) source(o operand, lanes int, k masking, bcst bool) (vec, error) {
	var v vec
	v.width = 4 * lanes
	if o.kind == regOperand {
		r := m.reg(o.reg)
		copy(v.l[:], r.l[:])
		return v, nil
	}
	if bcst {
		b, err := m.mem(o, 4)
		if err != nil {
			return v, err
		}
		for i := 0; i < lanes; i++ {
			v.l[i] = binary.LittleEndian.Uint32(b)
		}
		return v, nil
	}
	if !k.on {
		b, err := m.mem(o, 4*lanes)
		if err != nil {
			return v, err
		}
		for i := 0; i < lanes; i++ {
			v.l[i] = binary.LittleEndian.Uint32(b[4*i:])
		}
		return v, nil
	}
	for i := 0; i < lanes; i++ { // a masked load touches only its lanes
		if !k.active(i) {
			continue
		}
		o1 := o
		o1.disp += int64(4 * i)
		b, err := m.mem(o1, 4)
		if err != nil {
			return v, err
		}
		v.l[i] = binary.LittleEndian.Uint32(b)
	}
	return v, nil
}

// store writes v's lanes to memory, only the mask's (the others are not
// touched, nor checked).
func (m *Machine) store(v vec, dst operand, k masking) error {
	for i := 0; i < v.lanes(); i++ {
		if !k.active(i) {
			continue
		}
		o1 := dst
		o1.disp += int64(4 * i)
		b, err := m.mem(o1, 4)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint32(b, v.l[i])
	}
	return nil
}

// write stores r to a register destination under the mask.
func (m *Machine) write(dst string, r vec, k masking) {
	old := m.reg(dst)
	out := vec{width: old.width}
	for i := 0; i < old.lanes(); i++ {
		switch {
		case k.active(i):
			out.l[i] = r.l[i]
		case k.zero:
			out.l[i] = 0
		default:
			out.l[i] = old.l[i]
		}
	}
	m.setReg(dst, out)
}

// vector runs a vector instruction.
func (m *Machine) vector(in *instr) error {
	a, base, bcst := in.args, in.base, in.bcst
	k := masking{zero: in.zero}
	if in.mask > 0 {
		k.on, k.bits = true, m.k[in.mask-1]
	}
	dst := a[len(a)-1]
	switch base {
	case "VMOVDQU16", "VMOVDQU8":
		es := 2
		if base == "VMOVDQU8" {
			es = 1
		}
		return m.moveElements(a[0], dst, es, k)
	case "VPERMILPS", "VSHUFPS", "VSHUFF32X4", "VPERM2F128", "VUNPCKLPS", "VUNPCKHPS":
		return m.shuffle(base, a)
	case "VADDSS", "VCVTSI2SSQ", "VMOVSS":
		return m.scalarOp(base, a)
	case "VINSERTF32X4", "VINSERTF128", "VINSERTI128": // Go's order: $lane, the 128 bits, the source, the destination
		x, err := m.source(a[1], 4, masking{}, false)
		if err != nil {
			return err
		}
		r := m.reg(a[2].reg)
		_, w, _ := vecRegister(dst.reg)
		r.width = w
		copy(r.l[4*int(a[0].imm):4*int(a[0].imm)+4], x.l[:4])
		m.setReg(dst.reg, r)
		return nil
	case "VPTERNLOGD": // bit i of the result is bit (d<<2 | y<<1 | x) of the immediate
		_, w, _ := vecRegister(dst.reg)
		x, err := m.source(a[1], w/4, masking{}, false)
		if err != nil {
			return err
		}
		y, d := m.reg(a[2].reg), m.reg(dst.reg)
		var r vec
		for i := 0; i < w/4; i++ {
			for bit := 0; bit < 32; bit++ {
				idx := (d.l[i]>>bit&1)<<2 | (y.l[i]>>bit&1)<<1 | x.l[i]>>bit&1
				r.l[i] |= uint32(a[0].imm>>idx&1) << bit
			}
		}
		m.write(dst.reg, r, k)
		return nil
	case "VUNPCKLPD", "VUNPCKHPD": // per 128-bit lane: the first source's quadword, then the second's
		_, w, _ := vecRegister(dst.reg)
		x, err := m.source(a[0], w/4, masking{}, false)
		if err != nil {
			return err
		}
		y := m.reg(a[1].reg)
		h := 0
		if base == "VUNPCKHPD" {
			h = 2
		}
		var r vec
		for q := 0; q < w/4; q += 4 {
			r.l[q], r.l[q+1] = y.l[q+h], y.l[q+h+1]
			r.l[q+2], r.l[q+3] = x.l[q+h], x.l[q+h+1]
		}
		m.setReg(dst.reg, r)
		return nil
	case "VPERMPS", "VPERMD": // Go's order: the table, the indices, the destination
		_, w, _ := vecRegister(dst.reg)
		lanes := w / 4
		tab, err := m.source(a[0], lanes, masking{}, false)
		if err != nil {
			return err
		}
		idx := m.reg(a[1].reg)
		var r vec
		for i := 0; i < lanes; i++ {
			r.l[i] = tab.l[int(idx.l[i])&(lanes-1)]
		}
		m.write(dst.reg, r, k)
		return nil
	case "VPMOVDW", "VCVTPS2PH": // dwords (or float32s) to words: a register's lanes to half as many bytes
		var src vec
		if base == "VCVTPS2PH" {
			if a[0].imm&3 != 0 {
				return fmt.Errorf("rounding control %d", a[0].imm)
			}
			src = m.reg(a[1].reg)
		} else {
			src = m.reg(a[0].reg)
		}
		out := make([]byte, 2*src.lanes())
		for i := 0; i < src.lanes(); i++ {
			h := uint16(src.l[i])
			if base == "VCVTPS2PH" {
				h = floatToHalf(src.f(i))
			}
			binary.LittleEndian.PutUint16(out[2*i:], h)
		}
		if dst.kind == memOperand {
			b, err := m.mem(dst, len(out))
			if err != nil {
				return err
			}
			copy(b, out)
			return nil
		}
		n, _, _ := vecRegister(dst.reg)
		clear(m.z[n][:])
		copy(m.z[n][:], out)
		return nil
	case "VPACKUSDW": // per 128-bit lane: Intel's first source's dwords, then the second's, to words clamped to 0..65535
		_, w, _ := vecRegister(dst.reg)
		x, err := m.source(a[0], w/4, masking{}, false)
		if err != nil {
			return err
		}
		y := m.reg(a[1].reg)
		sat := func(v uint32) uint32 { return uint32(min(max(int64(int32(v)), 0), 65535)) }
		var r vec
		for q := 0; q < w/4; q += 4 {
			for i := 0; i < 2; i++ {
				r.l[q+i] = sat(y.l[q+2*i]) | sat(y.l[q+2*i+1])<<16
				r.l[q+2+i] = sat(x.l[q+2*i]) | sat(x.l[q+2*i+1])<<16
			}
		}
		m.setReg(dst.reg, r)
		return nil
	case "VPERMQ": // $imm, source, destination: quadword i from quadword imm>>2i&3
		src := m.reg(a[1].reg)
		var r vec
		for i := 0; i < 4; i++ {
			j := int(a[0].imm>>(2*i)) & 3
			r.l[2*i], r.l[2*i+1] = src.l[2*j], src.l[2*j+1]
		}
		m.setReg(dst.reg, r)
		return nil
	case "VEXTRACTF128", "VEXTRACTI128", "VEXTRACTF32X4":
		src := m.reg(a[1].reg)
		var r vec
		copy(r.l[:4], src.l[4*int(a[0].imm):])
		r.width = 16
		if dst.kind == memOperand {
			return m.store(r, dst, masking{})
		}
		m.setReg(dst.reg, r)
		return nil
	case "VMOVUPS", "VMOVDQU32", "VMOVDQU64", "VMOVDQU":
		if dst.kind == memOperand {
			return m.store(m.reg(a[0].reg), dst, k)
		}
		_, w, _ := vecRegister(dst.reg)
		v, err := m.source(a[0], w/4, k, false)
		if err != nil {
			return err
		}
		m.write(dst.reg, v, k)
		return nil
	case "VBROADCASTSS", "VPBROADCASTD":
		var x uint32
		if a[0].kind == memOperand {
			b, err := m.mem(a[0], 4)
			if err != nil {
				return err
			}
			x = binary.LittleEndian.Uint32(b)
		} else if gpIndex(a[0].reg) >= 0 {
			x = uint32(m.gp[gpIndex(a[0].reg)])
		} else {
			x = m.reg(a[0].reg).l[0]
		}
		var v vec
		for i := range v.l {
			v.l[i] = x
		}
		m.write(dst.reg, v, k)
		return nil
	case "VPMOVSXBD", "VPMOVZXBD":
		_, w, _ := vecRegister(dst.reg)
		lanes := w / 4
		var b []byte
		if a[0].kind == memOperand {
			var err error
			if b, err = m.mem(a[0], lanes); err != nil {
				return err
			}
		} else {
			n, _, _ := vecRegister(a[0].reg)
			b = m.z[n][:lanes]
		}
		var v vec
		for i := 0; i < lanes; i++ {
			if base == "VPMOVSXBD" {
				v.l[i] = uint32(int32(int8(b[i])))
			} else {
				v.l[i] = uint32(b[i])
			}
		}
		m.write(dst.reg, v, k)
		return nil
	case "VCVTDQ2PS":
		_, w, _ := vecRegister(dst.reg)
		v, err := m.source(a[0], w/4, masking{}, bcst)
		if err != nil {
			return err
		}
		for i := 0; i < w/4; i++ {
			v.setF(i, float32(int32(v.l[i])))
		}
		m.write(dst.reg, v, k)
		return nil
	case "VPCMPGTD": // Go's order: VPCMPGTD a, b, dst is Intel's b > a, signed
		lanes := 16
		if _, w, ok := vecRegister(a[1].reg); ok {
			lanes = w / 4
		}
		x, err := m.source(a[0], lanes, masking{}, bcst)
		if err != nil {
			return err
		}
		y := m.reg(a[1].reg)
		m.setLanes(dst, lanes, func(i int) bool { return int32(y.l[i]) > int32(x.l[i]) })
		return nil
	case "VPMOVZXWD", "VCVTPH2PS":
		_, w, _ := vecRegister(dst.reg)
		lanes := w / 4
		var words []byte
		if a[0].kind == memOperand {
			if k.on {
				words = make([]byte, 2*lanes)
				for i := 0; i < lanes; i++ {
					if k.active(i) {
						o1 := a[0]
						o1.disp += int64(2 * i)
						b, err := m.mem(o1, 2)
						if err != nil {
							return err
						}
						copy(words[2*i:], b)
					}
				}
			} else {
				b, err := m.mem(a[0], 2*lanes)
				if err != nil {
					return err
				}
				words = b
			}
		} else {
			n, _, _ := vecRegister(a[0].reg)
			words = m.z[n][:2*lanes]
		}
		var v vec
		for i := 0; i < lanes; i++ {
			h := binary.LittleEndian.Uint16(words[2*i:])
			if base == "VPMOVZXWD" {
				v.l[i] = uint32(h)
			} else {
				v.l[i] = math.Float32bits(halfToFloat(h))
			}
		}
		m.write(dst.reg, v, k)
		return nil
	case "VPSLLD", "VPSRLD":
		_, w, _ := vecRegister(dst.reg)
		v, err := m.source(a[1], w/4, masking{}, false)
		if err != nil {
			return err
		}
		for i := range v.l {
			if base == "VPSLLD" {
				v.l[i] <<= uint(a[0].imm)
			} else {
				v.l[i] >>= uint(a[0].imm)
			}
			if a[0].imm > 31 {
				v.l[i] = 0
			}
		}
		m.write(dst.reg, v, k)
		return nil
	case "VRNDSCALEPS":
		if a[0].imm != 0 {
			return fmt.Errorf("rounding control %d", a[0].imm)
		}
		_, w, _ := vecRegister(dst.reg)
		v, err := m.source(a[1], w/4, masking{}, false)
		if err != nil {
			return err
		}
		for i := 0; i < w/4; i++ {
			v.setF(i, float32(math.RoundToEven(float64(v.f(i)))))
		}
		m.write(dst.reg, v, k)
		return nil
	case "VCMPPS":
		return m.compare(a)
	case "VMASKMOVPS", "VPMASKMOVD": // AVX's masked move: the mask vector's sign bits
		mv := m.reg(a[1].reg)
		km := masking{on: true, zero: true}
		for i := 0; i < mv.lanes(); i++ {
			km.bits |= uint64(mv.l[i]>>31) << i
		}
		if dst.kind == memOperand {
			return m.store(m.reg(a[0].reg), dst, km)
		}
		v, err := m.source(a[0], mv.lanes(), km, false)
		if err != nil {
			return err
		}
		m.write(dst.reg, v, km)
		return nil
	case "VBLENDVPS": // Go's order: mask, second source, first source, destination
		mv := m.reg(a[0].reg)
		x, err := m.source(a[1], mv.lanes(), masking{}, false)
		if err != nil {
			return err
		}
		y := m.reg(a[2].reg)
		for i := 0; i < mv.lanes(); i++ {
			if mv.l[i]>>31 == 0 {
				x.l[i] = y.l[i]
			}
		}
		m.setReg(dst.reg, x)
		return nil
	}
	// Two sources: Go's a[0] is Intel's last source, a[1] the first.
	if len(a) != 3 {
		return fmt.Errorf("unknown instruction or form (%d operands)", len(a))
	}
	_, w, ok := vecRegister(dst.reg)
	if !ok {
		return fmt.Errorf("destination %s", dst.reg)
	}
	lanes := w / 4
	x, err := m.source(a[0], lanes, masking{}, bcst)
	if err != nil {
		return err
	}
	y, err := m.source(a[1], lanes, masking{}, false)
	if err != nil {
		return err
	}
	d := m.reg(dst.reg)
	var r vec
	for i := 0; i < lanes; i++ {
		xf, yf, df := x.f(i), y.f(i), d.f(i)
		switch base {
		case "VFMADD231PS":
			r.setF(i, fma32(yf, xf, df))
		case "VFMADD213PS":
			r.setF(i, fma32(yf, df, xf))
		case "VFNMADD231PS":
			r.setF(i, fma32(-yf, xf, df))
		case "VMULPS":
			r.setF(i, yf*xf)
		case "VADDPS":
			r.setF(i, yf+xf)
		case "VSUBPS":
			r.setF(i, yf-xf)
		case "VDIVPS":
			r.setF(i, yf/xf)
		case "VMAXPS": // Intel: the second source unless the first is greater
			r.l[i] = x.l[i]
			if yf > xf {
				r.l[i] = y.l[i]
			}
		case "VMINPS":
			r.l[i] = x.l[i]
			if yf < xf {
				r.l[i] = y.l[i]
			}
		case "VSCALEFPS":
			r.setF(i, scalef(yf, xf))
		case "VBLENDMPS": // the mask picks Intel's second source, else the first
			r.l[i] = y.l[i]
			if k.active(i) {
				r.l[i] = x.l[i]
			}
		case "VPANDD", "VANDPS", "VPAND":
			r.l[i] = y.l[i] & x.l[i]
		case "VPORD", "VORPS", "VPOR":
			r.l[i] = y.l[i] | x.l[i]
		case "VPXORD", "VXORPS", "VPXOR":
			r.l[i] = y.l[i] ^ x.l[i]
		case "VPADDD":
			r.l[i] = y.l[i] + x.l[i]
		case "VPSUBD":
			r.l[i] = y.l[i] - x.l[i]
		case "VHADDPS": // per 128-bit lane: the first source's pairs, then the second's
			q, j := i&^3, i&3
			src := y
			if j >= 2 {
				src = x
			}
			r.setF(i, src.f(q+2*(j&1))+src.f(q+2*(j&1)+1))
		default:
			return fmt.Errorf("unknown instruction")
		}
	}
	if base == "VBLENDMPS" {
		k = masking{}
	}
	m.write(dst.reg, r, k)
	return nil
}

// compare runs VCMPPS $pred, a, b, dst: Intel's cmp(b, a), into a mask
// register (AVX-512) or a vector of all-ones lanes (AVX).
func (m *Machine) compare(a []operand) error {
	dst := a[len(a)-1]
	lanes := 16
	if _, w, ok := vecRegister(a[2].reg); ok {
		lanes = w / 4
	}
	x, err := m.source(a[1], lanes, masking{}, false)
	if err != nil {
		return err
	}
	y, err := m.source(a[2], lanes, masking{}, false)
	if err != nil {
		return err
	}
	m.setLanes(dst, lanes, func(i int) bool { return predicate(a[0].imm, y.f(i), x.f(i)) })
	return nil
}

// setLanes writes a comparison's result to dst: a mask register's bits,
// or a vector's lanes of all ones (AVX).
func (m *Machine) setLanes(dst operand, lanes int, holds func(i int) bool) {
	var bits uint64
	var r vec
	for i := 0; i < lanes; i++ {
		if holds(i) {
			bits |= 1 << i
			r.l[i] = ^uint32(0)
		}
	}
	if n, ok := maskRegister(dst.reg); ok {
		m.k[n] = bits
		return
	}
	m.setReg(dst.reg, r)
}

// predicate is VCMPPS's comparison imm of p with q (bit 4, signalling,
// changes nothing here).
func predicate(imm int64, p, q float32) bool {
	un := p != p || q != q
	switch imm & 0xf {
	case 0x0:
		return !un && p == q
	case 0x1:
		return !un && p < q
	case 0x2:
		return !un && p <= q
	case 0x3:
		return un
	case 0x4:
		return un || p != q
	case 0x5:
		return un || !(p < q)
	case 0x6:
		return un || !(p <= q)
	case 0x7:
		return !un
	case 0x8:
		return un || p == q
	case 0x9:
		return un || p < q
	case 0xa:
		return un || p <= q
	case 0xb:
		return false
	case 0xc:
		return !un && p != q
	case 0xd:
		return !un && p >= q
	case 0xe:
		return !un && p > q
	}
	return true
}

// fma32 is a·b + c rounded once to float32: the product is exact in
// float64, the float64 sum's own error is found exactly (TwoSum), and
// where that sum lies on a float32 rounding midpoint the error decides
// the direction.
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	s := p + float64(c)
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	bb := s - p
	e := (p - (s - bb)) + (float64(c) - bb)
	const half = 1 << 28 // half a float32 ulp in a float64's mantissa (normal results)
	if e != 0 && math.Float64bits(s)&(1<<29-1) == half {
		if e > 0 {
			s = math.Nextafter(s, math.Inf(1))
		} else {
			s = math.Nextafter(s, math.Inf(-1))
		}
	}
	return float32(s)
}

// scalef is VSCALEFPS's x·2^floor(n) for finite inputs.
func scalef(x, n float32) float32 {
	if x != x || n != n {
		return float32(math.NaN())
	}
	e := math.Floor(float64(n))
	e = max(min(e, 400), -400)
	return float32(math.Ldexp(float64(x), int(e)))
}

// halfToFloat widens an IEEE binary16 to float32.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := int(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: man·2^-24
		f := float32(man) / (1 << 24)
		if sign != 0 {
			f = -f
		}
		return f
	case exp == 31:
		return math.Float32frombits(sign | 0xff<<23 | man<<13)
	}
	return math.Float32frombits(sign | uint32(exp-15+127)<<23 | man<<13)
}

// moveElements runs VMOVDQU16/8: a move of es-byte elements under a mask
// with a bit per element; only the mask's elements are read or written.
func (m *Machine) moveElements(src, dst operand, es int, k masking) error {
	if dst.kind == memOperand {
		n, w, _ := vecRegister(src.reg)
		for i := 0; i < w/es; i++ {
			if !k.active(i) {
				continue
			}
			o1 := dst
			o1.disp += int64(es * i)
			b, err := m.mem(o1, es)
			if err != nil {
				return err
			}
			copy(b, m.z[n][es*i:es*(i+1)])
		}
		return nil
	}
	n, w, _ := vecRegister(dst.reg)
	var out [64]byte
	copy(out[:], m.z[n][:])
	for i := 0; i < w/es; i++ {
		switch {
		case k.active(i):
			var b []byte
			var err error
			if src.kind == memOperand {
				o1 := src
				o1.disp += int64(es * i)
				b, err = m.mem(o1, es)
				if err != nil {
					return err
				}
			} else {
				sn, _, _ := vecRegister(src.reg)
				b = m.z[sn][es*i : es*(i+1)]
			}
			copy(out[es*i:], b)
		case k.zero:
			clear(out[es*i : es*(i+1)])
		}
	}
	clear(m.z[n][:])
	copy(m.z[n][:w], out[:w])
	return nil
}

// shuffle runs the lane permutations, each with Intel's operand order
// reversed in Go's: within 128-bit lanes VPERMILPS, VSHUFPS, VUNPCKLPS
// and VUNPCKHPS; across them VSHUFF32X4 and VPERM2F128.
func (m *Machine) shuffle(op string, a []operand) error {
	dst := a[len(a)-1]
	_, w, ok := vecRegister(dst.reg)
	if !ok {
		return fmt.Errorf("destination %s", dst.reg)
	}
	lanes := w / 4
	var imm int64
	if a[0].kind == immOperand {
		imm, a = a[0].imm, a[1:]
	}
	x, err := m.source(a[0], lanes, masking{}, false) // Intel's last source
	if err != nil {
		return err
	}
	y := x
	if len(a) == 3 {
		y = m.reg(a[1].reg) // Intel's first source
	}
	var r vec
	for i := 0; i < lanes; i++ {
		q, j := i&^3, i&3 // the 128-bit lane's first element, the element in it
		switch op {
		case "VPERMILPS":
			r.l[i] = x.l[q+int(imm>>(2*j))&3]
		case "VSHUFPS":
			if j < 2 {
				r.l[i] = y.l[q+int(imm>>(2*j))&3]
			} else {
				r.l[i] = x.l[q+int(imm>>(2*j))&3]
			}
		case "VUNPCKLPS", "VUNPCKHPS":
			h := 0
			if op == "VUNPCKHPS" {
				h = 2
			}
			if j&1 == 0 {
				r.l[i] = y.l[q+h+j/2]
			} else {
				r.l[i] = x.l[q+h+j/2]
			}
		case "VSHUFF32X4":
			lane := i / 4
			pick := int(imm>>(2*lane)) & 3
			if lanes == 8 {
				pick = int(imm>>lane) & 1
			}
			if lane < lanes/8 || (lanes == 8 && lane == 0) {
				r.l[i] = y.l[4*pick+j]
			} else {
				r.l[i] = x.l[4*pick+j]
			}
		case "VPERM2F128":
			ctl := imm >> (4 * (i / 4)) & 0xf
			if ctl&8 != 0 {
				r.l[i] = 0
				continue
			}
			srcs := [2]vec{y, x}
			r.l[i] = srcs[ctl>>1&1].l[4*int(ctl&1)+j]
		}
	}
	m.setReg(dst.reg, r)
	return nil
}

// scalarOp runs the scalar forms: VADDSS a, b, dst (b's upper lanes
// kept), VCVTSI2SSQ r, b, dst, and VMOVSS's load, store and merge.
func (m *Machine) scalarOp(op string, a []operand) error {
	dst := a[len(a)-1]
	switch {
	case op == "VMOVSS" && dst.kind == memOperand:
		b, err := m.mem(dst, 4)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint32(b, m.reg(a[0].reg).l[0])
		return nil
	case op == "VMOVSS" && len(a) == 2:
		var v vec
		x, err := m.scalar(a[0])
		if err != nil {
			return err
		}
		v.setF(0, x)
		m.setReg(dst.reg, v)
		return nil
	}
	r := m.reg(a[1].reg)
	r.width = 16
	for i := 4; i < 16; i++ {
		r.l[i] = 0
	}
	switch op {
	case "VMOVSS":
		r.l[0] = m.reg(a[0].reg).l[0]
	case "VADDSS":
		x, err := m.scalar(a[0])
		if err != nil {
			return err
		}
		r.setF(0, r.f(0)+x)
	case "VCVTSI2SSQ":
		v, err := m.gpValue(a[0])
		if err != nil {
			return err
		}
		r.setF(0, float32(int64(v)))
	}
	m.setReg(dst.reg, r)
	return nil
}

// floatToHalf is VCVTPS2PH's conversion with rounding to nearest even:
// overflow to infinity, underflow to binary16's subnormals, NaN kept
// quiet with its payload's top bits.
func floatToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	round := func(q, rem uint32, shift uint) uint32 {
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && q&1 == 1) {
			q++
		}
		return q
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e >= 1 {
		return sign | uint16(round(uint32(e)<<10|mant>>13, mant&0x1fff, 13))
	}
	shift := uint(14 - e)
	if shift > 25 {
		return sign
	}
	sig := mant | 0x800000
	if exp == 0 {
		sig = mant
	}
	return sign | uint16(round(sig>>shift, sig&(1<<shift-1), shift))
}
