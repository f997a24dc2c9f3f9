package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"testing"
)

// gpNames are the 64-bit registers by number, as objdump spells them.
var gpNames = []string{"rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi",
	"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"}

// TestAMXTable checks encodings worked out by hand from the SDM (VEX3 =
// C4, R̄X̄B̄ 00010, W v̄v̄v̄v̄ L pp; opcode; ModRM; SIB).
func TestAMXTable(t *testing.T) {
	for _, c := range []struct {
		got, want []byte
	}{
		{tileloadd.encodeMem(4, 6, 0), []byte{0xc4, 0xe2, 0x7b, 0x4b, 0x24, 0x06}},
		{tileloadd.encodeMem(6, 8, 1), []byte{0xc4, 0xc2, 0x7b, 0x4b, 0x34, 0x08}},
		{tileloadd.encodeMem(1, 5, 9), []byte{0xc4, 0xa2, 0x7b, 0x4b, 0x4c, 0x0d, 0x00}}, // rbp: disp8 0; r9 index: X̄ = 0
		{tilestored.encodeMem(0, 7, 6), []byte{0xc4, 0xe2, 0x7a, 0x4b, 0x04, 0x37}},
		{tdpbf16ps.encodeRegs(0, 4, 6), []byte{0xc4, 0xe2, 0x4a, 0x5c, 0xc4}},
		{tdpbusd.encodeRegs(0, 2, 4), []byte{0xc4, 0xe2, 0x59, 0x5e, 0xc2}}, // pp 66
		{tilezero.encodeRegs(3, 0, 0), []byte{0xc4, 0xe2, 0x7b, 0x49, 0xd8}},
		{ldtilecfg.encodeCfg(0), []byte{0xc4, 0xe2, 0x78, 0x49, 0x00}},
		{ldtilecfg.encodeCfg(12), []byte{0xc4, 0xc2, 0x78, 0x49, 0x04, 0x24}},
	} {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("% x, want % x", c.got, c.want)
		}
	}
}

// TestAMXObjdump disassembles every tile instruction the kernels emit on
// every register class (tiles 0-7; bases and indexes low and high, RSP,
// RBP, R12 and R13, which take a SIB byte or a disp8) with binutils'
// objdump and compares it with the instruction meant.
func TestAMXObjdump(t *testing.T) {
	objdump, err := exec.LookPath("objdump")
	if err != nil {
		t.Skip("objdump not installed (apt-get install binutils); encodings checked only against TestAMXTable")
	}
	var code []byte
	var want []string
	add := func(b []byte, text string) {
		code = append(code, b...)
		want = append(want, text)
	}
	mem := func(base, index int) string {
		disp := ""
		if base&7 == 5 {
			disp = "+0x0"
		}
		return fmt.Sprintf("[%s+%s*1%s]", gpNames[base], gpNames[index], disp)
	}
	for tmm := 0; tmm < 8; tmm++ {
		for base := 0; base < 16; base++ {
			for _, index := range []int{0, 3, 5, 7, 8, 12, 13, 15} {
				add(tileloadd.encodeMem(tmm, base, index), fmt.Sprintf("tileloadd tmm%d,%s", tmm, mem(base, index)))
				add(tilestored.encodeMem(tmm, base, index), fmt.Sprintf("tilestored %s,tmm%d", mem(base, index), tmm))
			}
		}
		add(tilezero.encodeRegs(tmm, 0, 0), fmt.Sprintf("tilezero tmm%d", tmm))
		for a := 0; a < 8; a++ {
			for b := 0; b < 8; b++ {
				if a == tmm || b == tmm || a == b {
					continue // #UD: encodeRegs refuses it
				}
				add(tdpbf16ps.encodeRegs(tmm, a, b), fmt.Sprintf("tdpbf16ps tmm%d,tmm%d,tmm%d", tmm, a, b))
				add(tdpbusd.encodeRegs(tmm, a, b), fmt.Sprintf("tdpbusd tmm%d,tmm%d,tmm%d", tmm, a, b))
			}
		}
	}
	for base := 0; base < 16; base++ {
		at := "[" + gpNames[base] + "]"
		if base&7 == 5 {
			at = "[" + gpNames[base] + "+0x0]"
		}
		add(ldtilecfg.encodeCfg(base), "ldtilecfg "+at)
	}
	add([]byte{0xc4, 0xe2, 0x78, 0x49, 0xc0}, "tilerelease")
	got := disassemble(t, objdump, code, len(want))
	bad := 0
	for i := range want {
		if got[i] != want[i] {
			if bad++; bad <= 20 {
				t.Errorf("objdump says %q, want %q", got[i], want[i])
			}
		}
	}
}
