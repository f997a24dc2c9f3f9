package mha_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmePrograms builds and runs every Go program in README.md (each
// ```go block that starts with "package main") against this checkout of
// the module, through `go run -overlay`, so the README cannot drift from
// the API. Skipped with -short and where no go command is installed.
func TestReadmePrograms(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs with the go command")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	programs := goPrograms(string(readme))
	if len(programs) == 0 {
		t.Fatal("README.md has no Go program")
	}
	// The programs run on the host: drop what a cross-compiled or forced
	// test run set for itself.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOARCH=") && !strings.HasPrefix(kv, "GOOS=") && !strings.HasPrefix(kv, "GOFLAGS=") {
			env = append(env, kv)
		}
	}
	for i, src := range programs {
		dir := t.TempDir()
		file := filepath.Join(dir, "main.go")
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		// The program appears inside the module, as if it were a folder
		// of it, without touching the checkout.
		virtual := filepath.Join(root, "readmeprogram", "main.go")
		overlay, err := json.Marshal(map[string]map[string]string{"Replace": {virtual: file}})
		if err != nil {
			t.Fatal(err)
		}
		overlayFile := filepath.Join(dir, "overlay.json")
		if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(goCmd, "run", "-overlay", overlayFile, "./readmeprogram")
		cmd.Dir, cmd.Env = root, env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		outBytes, err := cmd.Output()
		if err != nil {
			t.Errorf("README program %d: %v\n%s\n%s", i+1, err, outBytes, stderr.String())
			continue
		}
		t.Logf("README program %d printed: %s", i+1, bytes.TrimSpace(outBytes))
	}
}

// goPrograms returns the ```go blocks of a Markdown text that are whole
// programs.
func goPrograms(md string) []string {
	var out []string
	for _, block := range strings.Split(md, "```go\n")[1:] {
		src, _, ok := strings.Cut(block, "\n```")
		if ok && strings.HasPrefix(src, "package main") {
			out = append(out, src+"\n")
		}
	}
	return out
}
