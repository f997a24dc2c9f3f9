package mha

import (
	"fmt"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// DType is the storage type of K and V: Attention takes float32,
// Attention16 16-bit floats, AttentionInt8 int8 with scales,
// AttentionInt4 4-bit q4_0 blocks, and a Cache made by NewCacheOf any of
// them. The arithmetic is float32 whatever the storage (16-bit values are
// widened exactly, int8 and int4 ones dequantized to float32(q)·scale),
// so a 16-bit, int8 or int4 K/V gives the float32 result of its rounded
// values, with a half, 0.28 or 0.16 of the bytes to read (scales included,
// head dim 128): what a memory-bound decode step is limited by.
type DType int

const (
	// Float32 is IEEE binary32.
	Float32 DType = 0
	// Float16 is IEEE binary16 (largest finite 65504; 11 significant bits).
	Float16 DType = 1
	// BFloat16 is bfloat16: float32's upper 16 bits (float32's range, 8
	// significant bits).
	BFloat16 DType = 2
	// Int8 is symmetric int8 with one float32 scale per block of
	// QuantBlock consecutive elements of a (token, head) row: see
	// QuantizeInt8KV for the rule and Int8KVTensor for the layout.
	Int8 DType = 3
)

// String returns "f32", "f16", "bf16", "int8" or "int4".
func (t DType) String() string { return fallback.KVType(t).String() }

// is16 reports whether t is a 16-bit type.
func (t DType) is16() bool { return t == Float16 || t == BFloat16 }

// quantized reports whether t is stored with a scale per block (Int8, Int4).
func (t DType) quantized() bool { return fallback.KVType(t).Quantized() }

// kvTypeOK reports whether t is a K/V storage type.
func (t DType) kvTypeOK() bool { return t == Float32 || t.is16() || t.quantized() }

// width is the length a K or V row of dim elements takes in t's storage:
// dim elements, or Int4RowBytes(dim) bytes for Int4.
func (t DType) width(dim int) int { return fallback.StoredWidth(fallback.KVType(t), dim) }

// convertSet checks a conversion helper's arguments and returns the
// kernel set it runs on: the best this CPU runs (FASTATTN_ISA applies).
func convertSet(name string, t DType, dst, src int) (*kernels.Set, error) {
	if !t.is16() {
		return nil, fmt.Errorf("%w: %s: %v is not Float16 or BFloat16", ErrOption, name, t)
	}
	if dst != src {
		return nil, fmt.Errorf("%w: %s: dst has %d elements, src %d: they must be equal", ErrBuffer, name, dst, src)
	}
	ks, err := kernels.Best()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrISA, err)
	}
	return ks, nil
}

// Narrow16 rounds src to 16-bit floats of type t (Float16 or BFloat16) in
// dst, to nearest, ties to even, vectorized: float16 overflows to ±Inf
// above 65519.99 and goes subnormal below 2^-14; a NaN stays NaN (sign
// kept, quiet bit set). len(dst) must equal len(src) (ErrBuffer), and t
// be a 16-bit type (ErrOption).
func Narrow16(dst []uint16, src []float32, t DType) error {
	ks, err := convertSet("Narrow16", t, len(dst), len(src))
	if err != nil {
		return err
	}
	ks.Narrow(dst, src, fallback.KVType(t))
	return nil
}

// Widen16 writes the float32 values of src, 16-bit floats of type t
// (Float16 or BFloat16), to dst, exactly, vectorized. A float16 NaN keeps
// its sign and payload with the quiet bit set (as F16C's VCVTPH2PS); a
// bfloat16 becomes the upper half of the float32 and every other bit 0 (a
// plain shift, as PyTorch widens it), so a NaN keeps all its bits: a
// signalling bfloat16 NaN stays signalling (0x7f81 → 0x7f810000).
// len(dst) must equal len(src) (ErrBuffer), and t be a 16-bit type
// (ErrOption).
func Widen16(dst []float32, src []uint16, t DType) error {
	ks, err := convertSet("Widen16", t, len(dst), len(src))
	if err != nil {
		return err
	}
	ks.Widen(dst, src, fallback.KVType(t))
	return nil
}
