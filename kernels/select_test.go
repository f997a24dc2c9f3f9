package kernels

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestSelect(t *testing.T) {
	sets := Available()
	if sets[len(sets)-1].Name != "generic" {
		t.Fatalf("the last available set is %s, want generic", sets[len(sets)-1])
	}
	t.Setenv(EnvISA, "")
	if ks, err := Best(); err != nil || ks != sets[0] {
		t.Fatalf("Best() = %v, %v; want %s", ks, err, sets[0])
	}
	for _, want := range sets {
		t.Setenv(EnvISA, want.Name)
		if ks, err := Best(); err != nil || ks != want {
			t.Fatalf("%s=%s: Best() = %v, %v", EnvISA, want.Name, ks, err)
		}
	}
	t.Setenv(EnvISA, "sse9")
	if _, err := Best(); !errors.Is(err, ErrISA) {
		t.Fatalf("%s=sse9: %v, want ErrISA", EnvISA, err)
	}
	if msg := ErrISA.Error(); !strings.HasPrefix(msg, "kernels: ") {
		t.Fatalf("ErrISA says %q: errors carry their package's prefix", msg)
	}
	for _, name := range known {
		if _, err := Lookup(name); err != nil && !errors.Is(err, ErrISA) {
			t.Fatalf("Lookup(%s): %v", name, err)
		}
	}
}

// TestRequireISA fails when FASTATTN_REQUIRE_ISA names a set that is not
// the one selected, so CI cannot pass on a silent fallback (a broken cpuid
// check, a build without the assembly).
func TestRequireISA(t *testing.T) {
	want := os.Getenv("FASTATTN_REQUIRE_ISA")
	if want == "" {
		t.Skip("FASTATTN_REQUIRE_ISA not set")
	}
	ks, err := Best()
	if err != nil {
		t.Fatal(err)
	}
	if ks.Name != want {
		t.Fatalf("selected kernel set %s, FASTATTN_REQUIRE_ISA wants %s (available: %s)", ks, want, names())
	}
}
