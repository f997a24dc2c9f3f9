//go:build !unix

package kernels

import "testing"

// guarded falls back to an ordinary slice where mmap is not available; the
// bounds are then only checked by the kernels' own length checks.
func guarded(t *testing.T, n int, atEnd bool) (s []float32, free func()) {
	return make([]float32, n), func() {}
}
