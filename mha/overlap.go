package mha

import (
	"fmt"
	"unsafe"
)

// span is the memory a call uses of one slice: its first n elements (n =
// what the shape needs, not the slice's length, so that disjoint parts of
// one arena do not count as overlapping).
type span struct {
	name  string
	start unsafe.Pointer
	bytes int
}

// f32 is the span of the first n elements of x.
func f32(name string, x []float32, n int) span {
	return span{name, unsafe.Pointer(unsafe.SliceData(x)), 4 * max(min(n, len(x)), 0)}
}

// u16 is the span of the first n elements of x.
func u16(name string, x []uint16, n int) span {
	return span{name, unsafe.Pointer(unsafe.SliceData(x)), 2 * max(min(n, len(x)), 0)}
}

// i8 is the span of the first n elements of x.
func i8(name string, x []int8, n int) span {
	return span{name, unsafe.Pointer(unsafe.SliceData(x)), max(min(n, len(x)), 0)}
}

// bools is the span of the first n elements of x.
func bools(name string, x []bool, n int) span {
	return span{name, unsafe.Pointer(unsafe.SliceData(x)), max(min(n, len(x)), 0)}
}

// ints is the span of the first n elements of x.
func ints(name string, x []int, n int) span {
	return span{name, unsafe.Pointer(unsafe.SliceData(x)), int(unsafe.Sizeof(int(0))) * max(min(n, len(x)), 0)}
}

// optionInputs returns the spans of the inputs an Options holds (the
// whole slices: their lengths are checked to be exactly what the shape
// needs), for the entry points whose outputs the attention call itself
// does not see (a layer's out and cache).
func optionInputs(o *Options) [5]span {
	if o == nil {
		return [5]span{}
	}
	return [5]span{f32("Bias", o.Bias, len(o.Bias)), bools("Mask", o.Mask, len(o.Mask)),
		f32("ALiBi", o.ALiBi, len(o.ALiBi)), f32("Sinks", o.Sinks, len(o.Sinks)), ints("KVLens", o.KVLens, len(o.KVLens))}
}

// bounds returns the byte addresses [lo, hi) of the span, or lo = hi for
// an empty one.
func (s span) bounds() (lo, hi uintptr) {
	if s.bytes <= 0 || s.start == nil {
		return 0, 0
	}
	lo = uintptr(s.start)
	return lo, lo + uintptr(s.bytes)
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
