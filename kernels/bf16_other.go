//go:build !amd64 || purego

package kernels

// EmulatedBF16 returns nil: only the avx512 set has bfloat16 kernels to
// emulate (see the amd64 build).
func EmulatedBF16() *Set { return nil }
