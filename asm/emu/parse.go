package emu

import (
	"fmt"
	"strconv"
	"strings"
)

// Program is a parsed .s file: its functions and its DATA symbols.
type Program struct {
	funcs map[string]*function
	data  map[string][]byte
}

// function is one TEXT symbol's instructions and labels.
type function struct {
	name   string
	locals int // the frame's bytes below the arguments ($locals-args)
	code   []instr
	labels map[string]int // label → index of the next instruction
}

// instr is one instruction: its mnemonic (with a .Z or .BCST suffix) and
// operands in the source's (Go's) order.
type instr struct {
	op   string
	args []operand
	line int
	// Split once at parse time for the vector instructions: the mnemonic
	// without its suffix, the suffix's zeroing (.Z) and broadcast (.BCST),
	// and the write mask (1+K's number; 0 for none), taken out of args.
	base       string
	zero, bcst bool
	mask       int
}

// operandKind tells what an operand is.
type operandKind int

const (
	regOperand operandKind = iota
	immOperand
	memOperand
	labelOperand
)

// operand is a register, an immediate, a memory reference or a label.
type operand struct {
	kind  operandKind
	reg   string // register name (regOperand), label (labelOperand)
	imm   int64
	base  string // memory: base register, "" for none
	index string // memory: index register, "" for none
	scale int64
	disp  int64
	sym   string // memory: a (SB) symbol's name, or "FP" for an argument
}

// Parse reads a .s file's text.
func Parse(src string) (*Program, error) {
	p := &Program{funcs: map[string]*function{}, data: map[string][]byte{}}
	var fn *function
	for n, line := range strings.Split(src, "\n") {
		n++
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			continue
		case strings.HasPrefix(line, "TEXT "):
			name := strings.TrimPrefix(strings.Fields(line)[1], "·")
			name = strings.TrimSuffix(strings.TrimSuffix(name, ","), "(SB)")
			fn = &function{name: name, labels: map[string]int{}}
			if i := strings.Index(line, "$"); i >= 0 {
				size, _, _ := strings.Cut(line[i+1:], "-")
				fn.locals, _ = strconv.Atoi(size)
			}
			p.funcs[name] = fn
			continue
		case strings.HasPrefix(line, "DATA "):
			if err := p.addData(line); err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			continue
		case strings.HasPrefix(line, "GLOBL "):
			continue
		case strings.HasSuffix(line, ":") && !strings.ContainsAny(line, " \t"):
			if fn == nil {
				return nil, fmt.Errorf("line %d: label outside a function", n)
			}
			fn.labels[strings.TrimSuffix(line, ":")] = len(fn.code)
			continue
		}
		if fn == nil {
			return nil, fmt.Errorf("line %d: instruction outside a function: %q", n, line)
		}
		in, err := parseInstr(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		in.line = n
		fn.code = append(fn.code, in)
	}
	return p, nil
}

// addData records one DATA line: sym<>+off(SB)/width, $value.
func (p *Program) addData(line string) error {
	f := strings.Fields(strings.TrimPrefix(line, "DATA "))
	if len(f) != 2 {
		return fmt.Errorf("DATA: %q", line)
	}
	ref, val := strings.TrimSuffix(f[0], ","), strings.TrimPrefix(f[1], "$")
	at := strings.Index(ref, "(SB)/")
	plus := strings.LastIndex(ref[:at], "+")
	if at < 0 || plus < 0 {
		return fmt.Errorf("DATA reference %q", ref)
	}
	sym := ref[:plus]
	off, err1 := strconv.Atoi(ref[plus+1 : at])
	width, err2 := strconv.Atoi(ref[at+5:])
	v, err3 := strconv.ParseUint(val, 0, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return fmt.Errorf("DATA %q", line)
	}
	b := p.data[sym]
	for len(b) < off+width {
		b = append(b, 0)
	}
	for i := 0; i < width; i++ {
		b[off+i] = byte(v >> (8 * i))
	}
	p.data[sym] = b
	return nil
}

// parseInstr splits an instruction into its mnemonic and operands.
func parseInstr(line string) (instr, error) {
	op, rest, _ := strings.Cut(line, " ")
	in := instr{op: op}
	rest = strings.TrimSpace(rest)
	if rest == "" || op == "BYTE" { // raw encodings: kept, never run (exec refuses them)
		return in, nil
	}
	for _, a := range splitOperands(rest) {
		o, err := parseOperand(strings.TrimSpace(a))
		if err != nil {
			return in, fmt.Errorf("%s: %w", op, err)
		}
		in.args = append(in.args, o)
	}
	splitMask(&in)
	return in, nil
}

// splitMask fills a vector instruction's base, suffix flags and write
// mask: a K register just before the destination (VCMPPS's K there is
// its destination's neighbour, a source, and stays).
func splitMask(in *instr) {
	base, suffix, _ := strings.Cut(in.op, ".")
	in.base, in.zero, in.bcst = base, suffix == "Z", suffix == "BCST"
	a := in.args
	if base == "VCMPPS" || len(a) < 3 || a[len(a)-2].kind != regOperand {
		return
	}
	if n, ok := maskRegister(a[len(a)-2].reg); ok {
		in.mask = n + 1
		in.args = append(a[:len(a)-2:len(a)-2], a[len(a)-1])
	}
}

// splitOperands splits at the commas outside parentheses.
func splitOperands(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// parseOperand parses $imm, a register, a label or a memory reference:
// disp(base)(index*scale), sym<>+off(SB), name+off(FP).
func parseOperand(s string) (operand, error) {
	if strings.HasPrefix(s, "$") {
		v, err := strconv.ParseInt(s[1:], 0, 64)
		if err != nil {
			u, err2 := strconv.ParseUint(s[1:], 0, 64)
			if err2 != nil {
				return operand{}, fmt.Errorf("immediate %q", s)
			}
			v = int64(u)
		}
		return operand{kind: immOperand, imm: v}, nil
	}
	if !strings.Contains(s, "(") {
		if isRegister(s) {
			return operand{kind: regOperand, reg: s}, nil
		}
		return operand{kind: labelOperand, reg: s}, nil
	}
	o := operand{kind: memOperand, scale: 1}
	open := strings.Index(s, "(")
	head, tail := s[:open], s[open:]
	switch {
	case strings.HasSuffix(tail, "(SB)"), strings.HasSuffix(tail, "(FP)"):
		o.sym = "FP"
		if strings.HasSuffix(tail, "(SB)") {
			o.sym = head
		}
		if plus := strings.LastIndexAny(head, "+-"); plus > 0 {
			d, err := strconv.ParseInt(head[plus:], 0, 64)
			if err != nil {
				return o, fmt.Errorf("offset in %q", s)
			}
			o.disp = d
			if o.sym != "FP" {
				o.sym = head[:plus]
			}
		}
		return o, nil
	}
	if head != "" {
		d, err := strconv.ParseInt(head, 0, 64)
		if err != nil {
			return o, fmt.Errorf("displacement in %q", s)
		}
		o.disp = d
	}
	for _, part := range strings.SplitAfter(tail, ")") {
		if part == "" {
			continue
		}
		inner := strings.TrimSuffix(strings.TrimPrefix(part, "("), ")")
		if r, sc, ok := strings.Cut(inner, "*"); ok {
			v, err := strconv.ParseInt(sc, 10, 64)
			if err != nil {
				return o, fmt.Errorf("scale in %q", s)
			}
			o.index, o.scale = r, v
			continue
		}
		if o.base == "" {
			o.base = inner
		} else {
			o.index = inner
		}
	}
	return o, nil
}

// gpNames are the general registers, in encoding order.
var gpNames = []string{"AX", "CX", "DX", "BX", "SP", "BP", "SI", "DI", "R8", "R9", "R10", "R11", "R12", "R13", "R14", "R15"}

// isRegister reports whether s names a general, vector or mask register.
func isRegister(s string) bool {
	if gpIndex(s) >= 0 {
		return true
	}
	_, _, ok := vecRegister(s)
	if ok {
		return true
	}
	_, ok = maskRegister(s)
	return ok
}

// gpIndex returns the index of a general register, -1 if s is none.
func gpIndex(s string) int {
	for i, n := range gpNames {
		if n == s {
			return i
		}
	}
	return -1
}

// vecRegister returns X/Y/Z register s's number and width in bytes.
func vecRegister(s string) (n, width int, ok bool) {
	if len(s) < 2 {
		return 0, 0, false
	}
	switch s[0] {
	case 'X':
		width = 16
	case 'Y':
		width = 32
	case 'Z':
		width = 64
	default:
		return 0, 0, false
	}
	v, err := strconv.Atoi(s[1:])
	if err != nil || v < 0 || v > 31 {
		return 0, 0, false
	}
	return v, width, true
}

// maskRegister returns mask register s's number.
func maskRegister(s string) (int, bool) {
	if len(s) != 2 || s[0] != 'K' || s[1] < '0' || s[1] > '7' {
		return 0, false
	}
	return int(s[1] - '0'), true
}
