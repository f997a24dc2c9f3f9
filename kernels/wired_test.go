package kernels

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryKernelWired: every function the generators declare in asm
// (asm/*_amd64.go, asm/*_arm64.go) is named by this package's own code
// (not its tests), so a kernel that is generated but never wired into a
// set fails here rather than shipping unused.
func TestEveryKernelWired(t *testing.T) {
	decls, err := filepath.Glob("../asm/*_*.go")
	if err != nil {
		t.Fatal(err)
	}
	fn := regexp.MustCompile(`(?m)^func ([A-Z]\w*)\(`)
	var kernels []string
	for _, f := range decls {
		if strings.HasSuffix(f, "_test.go") || strings.HasPrefix(filepath.Base(f), "params_") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fn.FindAllSubmatch(b, -1) {
			kernels = append(kernels, string(m[1]))
		}
	}
	if len(kernels) < 50 {
		t.Fatalf("found %d kernel declarations in asm: the pattern no longer matches", len(kernels))
	}
	srcs, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var code strings.Builder
	for _, f := range srcs {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		code.Write(b)
	}
	all := code.String()
	for _, k := range kernels {
		if !strings.Contains(all, "asm."+k) {
			t.Errorf("asm.%s is generated but no set wires it (kernels/*.go never names it)", k)
		}
	}
}
