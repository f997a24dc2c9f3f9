package asm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedFresh regenerates every assembly file into a temporary
// directory and compares it byte for byte with the committed one, so a
// hand edit of a .s file, or a generator change without `go generate`,
// fails here.
func TestGeneratedFresh(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: regeneration skipped")
	}
	generators := []string{"./amd64", "./arm64"}
	for _, g := range generators {
		if out, err := exec.Command("go", "-C", "../gen", "build", "-o", os.DevNull, g).CombinedOutput(); err != nil {
			t.Skipf("the gen module does not build here, so freshness cannot be checked:\n%s", out)
		}
	}
	dir := t.TempDir()
	for _, g := range generators {
		if out, err := exec.Command("go", "-C", "../gen", "run", g, "-out", dir).CombinedOutput(); err != nil {
			t.Fatalf("generator %s failed: %v\n%s", g, err, out)
		}
	}
	made, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil || len(made) == 0 {
		t.Fatalf("generator wrote nothing (%v)", err)
	}
	committed, _ := filepath.Glob("*_*.s")
	if len(committed) != len(made)/2 {
		t.Errorf("%d .s files committed, the generators make %d", len(committed), len(made)/2)
	}
	for _, path := range made {
		name := filepath.Base(path)
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(name)
		if err != nil {
			t.Errorf("%s is generated but not committed: %v", name, err)
			continue
		}
		if !bytes.Equal(have, want) {
			t.Errorf("%s differs from what gen/ generates: run go generate ./...", name)
		}
	}
}
