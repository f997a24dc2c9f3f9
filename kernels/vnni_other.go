//go:build !amd64 || purego

package kernels

// EmulatedVNNI returns nil: only the avx2 set has an AVX-VNNI kernel to
// emulate (see the amd64 build).
func EmulatedVNNI() *Set { return nil }
