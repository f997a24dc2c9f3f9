package mha

import "fmt"

// maxCoord bounds dimensions, QueryOffset and Window so that index
// arithmetic on them (i + off ± Window) cannot overflow int.
const maxCoord = MaxPosition

// MaxThreads is the most worker goroutines an Engine may have.
const MaxThreads = 4096

// product multiplies dims and reports false if the product overflows int or
// exceeds maxCoord (no slice can be that long).
func product(dims ...int) (int, bool) {
	p := 1
	for _, d := range dims {
		if d < 0 || (d != 0 && p > maxCoord/d) {
			return 0, false
		}
		p *= d
	}
	return p, true
}

// overflow is the error for a tensor whose size overflows int. It copies
// dims so that callers' dims literals do not escape to the heap.
func overflow(name string, dims []int) error {
	return fmt.Errorf("%w: %s size %v overflows int", ErrShape, name, append([]int(nil), dims...))
}

// needLen checks that a slice named name holds exactly the product of
// dims: a shorter one would be read past its end, and a longer one means
// the caller counted rows differently from the shape (a plausible answer
// from the wrong rows), so both are ErrBuffer.
func needLen(name string, have int, dims ...int) error {
	n, ok := product(dims...)
	if !ok {
		return overflow(name, dims)
	}
	if have != n {
		return fmt.Errorf("%w: %s has %d elements, the shape needs %d", ErrBuffer, name, have, n)
	}
	return nil
}

// needNibbles checks that a slice of bytes named name holds exactly the
// product of dims 4-bit values, two to a byte (an odd count's last byte
// half used).
func needNibbles(name string, bytes int, dims ...int) error {
	n, ok := product(dims...)
	if !ok {
		return overflow(name, dims)
	}
	if bytes != n/2+n%2 {
		return fmt.Errorf("%w: %s has %d bytes, the shape needs %d nibbles (%d bytes)", ErrBuffer, name, bytes, n, n/2+n%2)
	}
	return nil
}

// maxAllocBytes is what one Go allocation may take on any platform the
// module builds for (the runtime panics above 2^47 or so on 64-bit
// systems, at the address space on 32-bit ones).
const maxAllocBytes = uint64(1) << 46

// memoryLimit is the most bytes fastattn asks the runtime for in one
// call: the machine's memory (RAM and swap, where the OS says), at most
// maxAllocBytes. Asking for more is not a recoverable error in Go (the
// runtime stops the process), so sizes derived from caller dimensions are
// checked against it first.
var memoryLimit = func() uint64 {
	if m := systemMemory(); m > 0 && m < maxAllocBytes {
		return m
	}
	return maxAllocBytes
}()

// checkAlloc returns an error wrapping ErrShape if floats float32 values
// (a sum of sizes already checked against int overflow) are more than can
// be allocated.
func checkAlloc(what string, floats uint64) error {
	if floats > memoryLimit/4 {
		return fmt.Errorf("%w: %s needs %d bytes, more than this machine can allocate (%d)", ErrShape, what, 4*floats, memoryLimit)
	}
	return nil
}

// allocFloats is checkAlloc of the product of dims, with the int overflow
// check; it returns the product.
func allocFloats(what string, dims ...int) (int, error) {
	n, ok := product(dims...)
	if !ok {
		return 0, overflow(what, dims)
	}
	return n, checkAlloc(what, uint64(n))
}

// MaxScale is the largest Options.Scale accepted. A larger scale belongs
// to no model, and with it Scale·q overflows float32 for |q| ≥ 5e33.
const MaxScale = 65536

// MinSoftcap is the smallest nonzero Options.Softcap accepted, the
// smallest normal float32 (2^-126): the kernels divide by multiplying with
// 1/Softcap, which is finite from there up to MaxFloat32.
const MinSoftcap = 0x1p-126

// MaxSlope is the largest ALiBi slope magnitude accepted. Standard slopes
// are at most 1; the bound keeps slope·distance finite in float32 at any
// distance an int can index.
const MaxSlope = 65536
