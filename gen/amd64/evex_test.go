package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEVEXTable checks encodings worked out by hand from the SDM's
// EVEX layout (62, P0 = R̄X̄B̄R̄'0mmm, P1 = Wv̄v̄v̄v̄1pp, P2 = zL'LbV̄'aaa,
// opcode, ModRM).
func TestEVEXTable(t *testing.T) {
	for _, c := range []struct {
		dst, src1, src2 int
		want            []byte
	}{
		{0, 1, 2, []byte{0x62, 0xf2, 0x76, 0x48, 0x52, 0xc2}},
		// dst 31: R̄ = R̄' = 0; src1 16: vvvv = 0 → 1111, V̄' = 0; src2 8: B̄ = 0, X̄ = 1.
		{31, 16, 8, []byte{0x62, 0x42, 0x7e, 0x40, 0x52, 0xf8}},
		// src2 17: X̄ = 0 (its bit 4), B̄ = 1.
		{3, 4, 17, []byte{0x62, 0xb2, 0x5e, 0x48, 0x52, 0xd9}},
	} {
		if got := vdpbf16ps.encode(c.dst, c.src1, c.src2); !bytes.Equal(got, c.want) {
			t.Errorf("VDPBF16PS zmm%d, zmm%d, zmm%d = % x, want % x", c.dst, c.src1, c.src2, got, c.want)
		}
	}
	// VEX (C4, R̄X̄B̄mmmmm, Wv̄v̄v̄v̄Lpp, opcode, ModRM) and EVEX.256 VPDPBUSD.
	for _, c := range []struct {
		op              evexOp
		dst, src1, src2 int
		want            []byte
	}{
		{vpdpbusdVEX, 0, 1, 2, []byte{0xc4, 0xe2, 0x75, 0x50, 0xc2}},
		// dst 4: R̄ = 1; src1 8: vvvv = 1000 → 0111; src2 9: B̄ = 0.
		{vpdpbusdVEX, 4, 8, 9, []byte{0xc4, 0xc2, 0x3d, 0x50, 0xe1}},
		{vpdpbusdVEX, 15, 15, 15, []byte{0xc4, 0x42, 0x05, 0x50, 0xff}},
		{vpdpbusdEVEX256, 0, 1, 2, []byte{0x62, 0xf2, 0x75, 0x28, 0x50, 0xc2}},
	} {
		if got := c.op.encode(c.dst, c.src1, c.src2); !bytes.Equal(got, c.want) {
			t.Errorf("%s%s ymm%d, ymm%d, ymm%d = % x, want % x", c.op.name, c.op.form, c.dst, c.src1, c.src2, got, c.want)
		}
	}
}

// TestEVEXObjdump disassembles VDPBF16PS and both forms of VPDPBUSD on
// every register number's encoding class (0, 7: low; 8, 15: R/B/vvvv
// bit 3; and for EVEX 16, 23: R'/X/V' bit 4; 24, 31: both) in each
// operand with binutils' objdump (Debian:
// binutils) and compares it with the instruction meant.
func TestEVEXObjdump(t *testing.T) {
	objdump, err := exec.LookPath("objdump")
	if err != nil {
		t.Skip("objdump not installed (apt-get install binutils); encodings checked only against TestEVEXTable")
	}
	for _, c := range []struct {
		op   evexOp
		text string // objdump's mnemonic
		reg  string
	}{{vdpbf16ps, "vdpbf16ps", "zmm"}, {vcvtne2ps2bf16, "vcvtne2ps2bf16", "zmm"}, {vpdpbusdVEX, "{vex} vpdpbusd", "ymm"}, {vpdpbusdEVEX256, "vpdpbusd", "ymm"}} {
		regs := []int{0, 1, 7, 8, 15, 16, 23, 24, 31}
		if c.op.vex {
			regs = regs[:5]
		}
		var code []byte
		var want []string
		var at []int // each instruction's first byte
		for _, d := range regs {
			for _, a := range regs {
				for _, b := range regs {
					at = append(at, len(code))
					code = append(code, c.op.encode(d, a, b)...)
					want = append(want, fmt.Sprintf("%s %s%d,%s%d,%s%d", c.text, c.reg, d, c.reg, a, c.reg, b))
				}
			}
		}
		at = append(at, len(code))
		got := disassemble(t, objdump, code, len(want))
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("% x: objdump says %q, want %q", code[at[i]:at[i+1]], got[i], want[i])
			}
		}
	}
}

// disassemble runs binutils' objdump on code (x86-64, Intel syntax) and
// returns its instructions' text, spaces collapsed; it fails the test
// unless there are want of them.
func disassemble(t *testing.T, objdump string, code []byte, want int) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "code.bin")
	if err := os.WriteFile(path, code, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(objdump, "-D", "-b", "binary", "-m", "i386:x86-64", "-M", "intel", path).CombinedOutput()
	if err != nil {
		t.Fatalf("objdump: %v\n%s", err, out)
	}
	var got []string
	for _, line := range strings.Split(string(out), "\n") {
		// "   0:	62 f2 76 48 52 c2    	vdpbf16ps zmm0,zmm1,zmm2"
		f := strings.SplitN(line, "\t", 3)
		if len(f) == 3 && strings.HasSuffix(strings.TrimSpace(f[0]), ":") {
			got = append(got, strings.Join(strings.Fields(f[2]), " "))
		}
	}
	if len(got) != want {
		t.Fatalf("objdump printed %d instructions, want %d:\n%s", len(got), want, out)
	}
	return got
}
