package neon

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// every returns each encoder with a spread of registers (low, high, and
// with Rm above 15 so the M bit of FMLA by element is exercised).
func every() []Encoding {
	var out []Encoding
	regs := [][3]V{{0, 1, 2}, {31, 30, 29}, {7, 19, 24}, {16, 3, 17}}
	for _, r := range regs {
		d, n, m := r[0], r[1], r[2]
		out = append(out,
			EncFADD(d, n, m), EncFSUB(d, n, m), EncFMUL(d, n, m), EncFDIV(d, n, m),
			EncFMAX(d, n, m), EncFMIN(d, n, m), EncFMLS(d, n, m),
			EncFCMGT(d, n, m), EncFCMEQ(d, n, m), EncBIC(d, n, m),
			EncFRINTN(d, n), EncFCVTZS(d, n), EncFABS(d, n), EncFNEG(d, n),
			EncFADDP(d, n, m), EncFMAXP(d, n, m), EncBFDOT(d, n, m),
		)
		for _, upper := range []bool{false, true} {
			out = append(out, EncFCVTL(d, n, upper), EncSHLL(d, n, upper), EncFCVTN(d, n, upper), EncSCVTF(d, n, upper))
			for _, unsigned := range []bool{false, true} {
				out = append(out, EncXTL(d, n, unsigned, false, upper), EncXTL(d, n, unsigned, true, upper))
			}
		}
		for i := 0; i < 4; i++ {
			out = append(out, EncFMLAElem(d, n, m, i), EncSDOTElem(d, n, m, i))
			if d <= 28 {
				out = append(out, EncLD4Lane(d, i, R(n%31), R(m%31)))
			}
		}
	}
	return out
}

// TestEncodingsTable checks a few encodings against values from the Arm
// architecture reference's field tables, worked by hand.
func TestEncodingsTable(t *testing.T) {
	for _, c := range []struct {
		got  Encoding
		want uint32
	}{
		{EncFADD(0, 1, 2), 0x4e22d420},         // 0 1 0 01110 0 0 1 Rm=2 110101 Rn=1 Rd=0
		{EncFMUL(3, 4, 5), 0x6e25dc83},         // U=1, opcode 11011
		{EncFMLAElem(0, 1, 2, 3), 0x4fa21820},  // L=1 (bit 21), H=1 (bit 11)
		{EncFMLAElem(0, 1, 17, 0), 0x4f911020}, // M=1 (bit 20) for V17
		{EncFRINTN(2, 3), 0x4e218862},
		{EncFADDP(0, 1, 2), 0x6e22d420},                // U=1 beside FADD
		{EncFCVTL(1, 2, false), 0x0e217841},            // Q=0 sz=0 opcode 10111
		{EncSHLL(1, 2, true), 0x6e613841},              // Q=1 U=1 size=01 opcode 10011
		{EncXTL(0, 1, false, true, false), 0x0f08a420}, // sxtl v0.8h, v1.8b: immh=0001 opcode 10100
		{EncXTL(0, 1, true, false, true), 0x6f10a420},  // uxtl2 v0.4s, v1.8h: Q=1 U=1 immh=0010
		{EncSCVTF(2, 3, false), 0x4e21d862},            // sz=0 opcode 11101
		{EncBFDOT(0, 1, 2), 0x6e42fc20},                // 0 Q=1 1 01110 010 Rm=2 111111 Rn=1 Rd=0
		{EncSDOTElem(0, 1, 2, 3), 0x4fa2e820},          // 0 Q=1 0 01111 10 L=1 M=0 Rm=2 1110 H=1 0 Rn=1 Rd=0
		{EncLD4Lane(20, 1, 3, 4), 0x0de4b074},          // 0 Q=0 0011011 L=1 R=1 Rm=4 101 S=1 00 Rn=3 Rt=20
	} {
		if c.got.Word != c.want {
			t.Errorf("%s: encoded 0x%08x, want 0x%08x", c.got.Mnemonic, c.got.Word, c.want)
		}
	}
}

// TestEncodingsObjdump disassembles every encoding with binutils' aarch64
// objdump (Debian: binutils-aarch64-linux-gnu) and compares the mnemonic.
func TestEncodingsObjdump(t *testing.T) {
	objdump, err := exec.LookPath("aarch64-linux-gnu-objdump")
	if err != nil {
		t.Skip("aarch64-linux-gnu-objdump not installed (apt-get install binutils-aarch64-linux-gnu); encodings checked only against the table")
	}
	encs := every()
	buf := make([]byte, 4*len(encs))
	for i, e := range encs {
		binary.LittleEndian.PutUint32(buf[4*i:], e.Word)
	}
	path := filepath.Join(t.TempDir(), "words.bin")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(objdump, "-D", "-b", "binary", "-m", "aarch64", path).CombinedOutput()
	if err != nil {
		t.Fatalf("objdump: %v\n%s", err, out)
	}
	var got []string
	for _, line := range strings.Split(string(out), "\n") {
		// "   0:	4e22d420 	fadd	v0.4s, v1.4s, v2.4s"
		f := strings.SplitN(line, "\t", 3)
		if len(f) == 3 && strings.HasSuffix(strings.TrimSpace(f[0]), ":") {
			got = append(got, strings.Join(strings.Fields(f[2]), " "))
		}
	}
	if len(got) != len(encs) {
		t.Fatalf("objdump printed %d instructions, want %d:\n%s", len(got), len(encs), out)
	}
	for i, e := range encs {
		want := strings.Join(strings.Fields(strings.Replace(e.Mnemonic, " ", "\t", 1)), " ")
		if got[i] != want {
			t.Errorf("0x%08x: objdump says %q, the emitter %q", e.Word, got[i], want)
		}
	}
}
