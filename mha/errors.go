package mha

import (
	"errors"
)

// Sentinel errors. Every error the package returns wraps exactly one of
// them, with detail naming the argument and the values at fault; test with
// errors.Is.
var (
	// ErrShape: a dimension is zero or negative, heads do not divide, a
	// product of dimensions overflows int, or the memory a configuration
	// needs is more than this machine can allocate.
	ErrShape = errors.New("mha: bad shape")
	// ErrBuffer: a slice's length is not the one the shape requires:
	// every buffer is exactly its shape's length, so a longer slice is
	// refused as a shorter one is (a caller's slip in a shape or a
	// layout shows up here, not as a silently unread tail).
	ErrBuffer = errors.New("mha: bad buffer")
	// ErrOption: an option is out of range or conflicts with another.
	ErrOption = errors.New("mha: bad option")
	// ErrCacheFull: a KV cache has no room for the new tokens (a Cache's
	// sequence is at its capacity, a PagedCache's pool has too few blocks).
	ErrCacheFull = errors.New("mha: KV cache full")
	// ErrBusy: a Cache or PagedCache is in use by another call (Decode,
	// Truncate, Reset, Fork... from another goroutine); the call did
	// nothing. A cache takes one call at a time.
	ErrBusy = errors.New("mha: cache in use by another call")
	// ErrClosed: the Engine was closed.
	ErrClosed = errors.New("mha: engine closed")
	// ErrNil: a method was called on a nil or zero-value Engine, Layer,
	// Cache or PagedCache; only NewEngine, NewLayer, NewCache and NewPagedCache
	// (and their variants) make usable ones.
	ErrNil = errors.New("mha: nil or zero value")
	// ErrNonFinite: a value that must be stored finitely is not: a token
	// appended to a Cache whose K or V is NaN or ±Inf, or beyond the
	// cache's 16-bit type's range; an int8 or int4 row to quantize
	// (QuantizeInt8KV, QuantizeInt4KV) or a weight that is NaN or ±Inf.
	// Nothing of that call was written.
	ErrNonFinite = errors.New("mha: value not finite")
	// ErrISA: the kernel set asked for (FASTATTN_ISA or Config.ISA) is
	// unknown or not supported here.
	ErrISA = errors.New("mha: kernel set not available")
)
