//go:build !unix

package kernels

import "testing"

// guarded falls back to an ordinary slice where mmap is not available; the
// bounds are then only checked by the kernels' own length checks.
func guarded(t *testing.T, n int, atEnd bool) (s []float32, free func()) {
	return make([]float32, n), func() {}
}

// guarded16 is guarded for n uint16 values.
func guarded16(t *testing.T, n int, atEnd bool) (s []uint16, free func()) {
	return make([]uint16, n), func() {}
}

// guarded32 is guarded for n uint32 values.
func guarded32(t *testing.T, n int, atEnd bool) (s []uint32, free func()) {
	return make([]uint32, n), func() {}
}

// guarded8 is guarded for n int8 values.
func guarded8(t *testing.T, n int, atEnd bool) (s []int8, free func()) {
	return make([]int8, n), func() {}
}

// guardedBytes is guarded for n bytes.
func guardedBytes(t *testing.T, n int, atEnd bool) (s []byte, free func()) {
	return make([]byte, n), func() {}
}
