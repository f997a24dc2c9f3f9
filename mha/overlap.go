package mha

import (
	"fmt"
	"unsafe"
)

// span is the memory a call uses of one float32 slice: its first n
// elements (n = what the shape needs, not the slice's length, so that
// disjoint parts of one arena do not count as overlapping).
type span struct {
	name string
	x    []float32
	n    int
}

// bounds returns the byte addresses [lo, hi) of the span, or lo = hi for
// an empty one.
func (s span) bounds() (lo, hi uintptr) {
	n := min(s.n, len(s.x))
	if n <= 0 {
		return 0, 0
	}
	lo = uintptr(unsafe.Pointer(unsafe.SliceData(s.x)))
	return lo, lo + uintptr(n)*4
}

// noOverlap returns an error wrapping ErrBuffer if an output span shares
// memory with an input span or another output: the kernels read inputs
// after other items wrote outputs, so any overlap gives wrong results that
// vary from run to run.
func noOverlap(outputs, inputs []span) error {
	for i, o := range outputs {
		for _, in := range inputs {
			if shared(o, in) {
				return fmt.Errorf("%w: %s shares memory with the input %s", ErrBuffer, o.name, in.name)
			}
		}
		for _, other := range outputs[i+1:] {
			if shared(o, other) {
				return fmt.Errorf("%w: %s shares memory with the output %s", ErrBuffer, o.name, other.name)
			}
		}
	}
	return nil
}

// shared reports whether two spans share a byte.
func shared(a, b span) bool {
	alo, ahi := a.bounds()
	blo, bhi := b.bounds()
	return alo < ahi && blo < bhi && alo < bhi && blo < ahi
}
