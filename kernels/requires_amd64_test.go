//go:build amd64 && !purego

package kernels

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/cpuid/v2"
)

// evexOnly matches the registers only EVEX (AVX-512) instructions encode:
// vector registers 16..31, zmm, opmasks (avo allocates them without a
// word when an AVX2 kernel needs more than 16 vector registers).
var evexOnly = regexp.MustCompile(`\b([XY](1[6-9]|2[0-9]|3[01])|Z[0-9]+|K[1-7])\b`)

// TestRequires reads avo's "// Requires:" line above every function of
// asm/<set>_amd64.s and checks that the set's cpuid requirements cover each
// feature, so a kernel that starts using a new extension (AVX512DQ, F16C…)
// cannot be dispatched on a CPU without it (or that the set calls the
// kernel only where the CPU has it: its optional features, AVX512_BF16); and that the code of a set
// without AVX-512 names no register only AVX-512 encodes.
func TestRequires(t *testing.T) {
	files, err := filepath.Glob("../asm/*_amd64.s")
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated amd64 assembly found (%v)", err)
	}
	sets := map[string]*Set{"avx2": avx2, "avx512": avx512}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), "_amd64.s")
		ks := sets[name]
		if ks == nil {
			t.Errorf("%s: no amd64 set named %q", path, name)
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		funcs := 0
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if r := evexOnly.FindString(sc.Text()); r != "" && !slices.Contains(ks.requires, cpuid.AVX512F) {
				t.Errorf("%s: %q uses %s, an AVX-512 register, in a set without AVX-512", path, sc.Text(), r)
			}
			line, ok := strings.CutPrefix(sc.Text(), "// Requires: ")
			if !ok {
				continue
			}
			funcs++
			for _, feat := range strings.Split(line, ", ") {
				id := cpuid.ParseFeature(feat)
				switch feat {
				case "MMX+": // avo's name for PREFETCHh and the like: SSE has them
					id = cpuid.SSE
				case "AVX512_BF16": // spelled by the EVEX encoder (gen/amd64/evex.go)
					id = cpuid.AVX512BF16
				case "AMX-TILE": // spelled by the tile encoder (gen/amd64/amx.go)
					id = cpuid.AMXTILE
				case "AMX-BF16":
					id = cpuid.AMXBF16
				case "AMX-INT8":
					id = cpuid.AMXINT8
				}
				if id == cpuid.UNKNOWN {
					t.Errorf("%s: feature %q unknown to cpuid", path, feat)
					continue
				}
				if !slices.Contains(ks.requires, id) && !slices.Contains(ks.optional, id) {
					t.Errorf("%s uses %s, which the %s set neither requires nor checks for", path, feat, ks.Name)
				}
			}
		}
		f.Close()
		if funcs == 0 {
			t.Errorf("%s: no // Requires: lines", path)
		}
	}
}
