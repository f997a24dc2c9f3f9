package kernels

import (
	"os"
	"testing"
)

// longTests reports whether the long sweeps run: FASTATTN_LONG=1 (CI sets
// it) and not -short. Without it the sweeps sample their cases — every
// kernel set, path and tail still, fewer sizes of each — so that the
// README's `go test ./...` checks the library in seconds; -short, for
// emulators, trims further.
func longTests() bool { return os.Getenv("FASTATTN_LONG") == "1" && !testing.Short() }

// boolInt is 1 for true, 0 for false: a term of the sampling patterns.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
