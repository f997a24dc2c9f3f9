package asm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// generators are the commands of the gen module that write this package's
// files; each writes, per kernel set, <set>_<arch>.s, <set>_<arch>.go and
// params_<set>_<arch>.go.
var generators = []string{"./amd64", "./arm64"}

// hostEnv returns the environment for running the gen module's commands:
// the test's own, with GOOS and GOARCH set to the host's. A test built for
// another architecture (GOARCH=arm64 go test -exec qemu-aarch64) would
// otherwise build the generators for that architecture too, and the host
// could not run them.
func hostEnv(t *testing.T) []string {
	out, err := exec.Command("go", "env", "GOHOSTOS", "GOHOSTARCH").Output()
	if err != nil {
		t.Skipf("no go command to regenerate with: %v", err)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		t.Fatalf("go env GOHOSTOS GOHOSTARCH printed %q", out)
	}
	return append(os.Environ(), "GOOS="+f[0], "GOARCH="+f[1])
}

// checkGenerated names the environment variable that turns on
// TestGeneratedFresh: building avo's generators and regenerating every
// file takes most of a cold `go test ./...`, and a user testing the
// library wants the library checked, so the check is the project's CI's
// (and a developer's after touching gen/), not every run's.
const checkGenerated = "FASTATTN_CHECK_GENERATED"

// TestGeneratedFresh regenerates every generated file into a temporary
// directory and compares it byte for byte with the committed one, so a
// hand edit of a generated file, or a generator change without
// `go generate`, fails here; so does a committed generated file that no
// generator makes any more. It runs with FASTATTN_CHECK_GENERATED=1 (CI
// sets it) and not under -short.
func TestGeneratedFresh(t *testing.T) {
	if os.Getenv(checkGenerated) != "1" {
		t.Skipf("%s=1 regenerates the assembly and compares it (CI does)", checkGenerated)
	}
	if testing.Short() {
		t.Skip("-short: regeneration skipped")
	}
	env := hostEnv(t)
	for _, g := range generators {
		cmd := exec.Command("go", "-C", "../gen", "build", "-o", os.DevNull, g)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s=1, and the gen module does not build here:\n%s", checkGenerated, out)
		}
	}
	dir := t.TempDir()
	for _, g := range generators {
		cmd := exec.Command("go", "-C", "../gen", "run", g, "-out", dir)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("generator %s failed: %v\n%s", g, err, out)
		}
	}
	made, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil || len(made) == 0 {
		t.Fatalf("generator wrote nothing (%v)", err)
	}
	fresh := map[string]bool{}
	for _, path := range made {
		name := filepath.Base(path)
		fresh[name] = true
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
	committed, err := filepath.Glob("*")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range committed {
		b, err := os.ReadFile(name)
		if err == nil && bytes.HasPrefix(b, []byte("// Code generated")) && !fresh[name] {
			t.Errorf("%s says it is generated, but no generator makes it", name)
		}
	}
}
