package kernels

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrISA is wrapped by every error about choosing a kernel set.
var ErrISA = errors.New("kernels: bad kernel set")

// EnvISA names the environment variable that forces a kernel set.
const EnvISA = "FASTATTN_ISA"

// known lists every set name fastattn has, on any architecture.
var known = []string{"avx512", "avx2", "neon", "generic"}

// available holds the sets this CPU can run, best first; the
// architecture-specific files prepend theirs in init.
var available = []*Set{generic}

// Available returns every kernel set this CPU can run, best first. The last
// one is always generic.
func Available() []*Set {
	return append([]*Set(nil), available...)
}

// Lookup returns the set with the given name, or an error wrapping ErrISA if
// fastattn has no such set or this CPU (or this build) cannot run it.
func Lookup(name string) (*Set, error) {
	for _, ks := range available {
		if ks.Name == name {
			return ks, nil
		}
	}
	for _, n := range known {
		if n == name {
			return nil, fmt.Errorf("%w: %q is not supported by this CPU or build (available: %s)", ErrISA, name, names())
		}
	}
	return nil, fmt.Errorf("%w: unknown set %q (known: %s)", ErrISA, name, strings.Join(known, ", "))
}

// Best returns the set fastattn uses by default: the one FASTATTN_ISA names
// if it is set (an error if that set is unknown or unsupported), otherwise
// the best one this CPU can run.
func Best() (*Set, error) {
	if name := os.Getenv(EnvISA); name != "" {
		ks, err := Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("%s=%s: %w", EnvISA, name, err)
		}
		return ks, nil
	}
	return available[0], nil
}

func names() string {
	s := make([]string, len(available))
	for i, ks := range available {
		s[i] = ks.Name
	}
	return strings.Join(s, ", ")
}
