package fallback

import "math"

// KVType is the storage type of K and V: float32, or one of the 16-bit
// floats every CPU runtime keeps its KV cache in. Arithmetic is float32
// whatever the storage: 16-bit values are widened exactly on load.
type KVType uint8

const (
	// KVFloat32 is IEEE binary32.
	KVFloat32 KVType = iota
	// KVFloat16 is IEEE binary16: 10 mantissa bits, 5 exponent bits
	// (largest finite 65504).
	KVFloat16
	// KVBFloat16 is bfloat16: float32's upper 16 bits (7 mantissa bits,
	// float32's range).
	KVBFloat16
	// KVInt8 is symmetric int8 in blocks of Int8Block elements of a row,
	// one float32 scale per block (QuantizeInt8).
	KVInt8
	// KVInt4 is 4 bits an element. As weights: unsigned nibbles u with a
	// float32 scale s and a zero point z per column and block of
	// Int8Block rows, the value float32(u-z)·s (QuantizeInt4). As K/V:
	// ggml's q4_0 blocks, a scale d per block of Int8Block elements of a
	// row and the value (u-8)·d (int4kv.go, QuantizeInt4KV).
	KVInt4
)

// String returns "f32", "f16", "bf16", "int8" or "int4".
func (t KVType) String() string {
	switch t {
	case KVFloat32:
		return "f32"
	case KVFloat16:
		return "f16"
	case KVBFloat16:
		return "bf16"
	case KVInt8:
		return "int8"
	case KVInt4:
		return "int4"
	}
	return "KVType(?)"
}

// Bytes returns the size of one element (int8: its scale not counted;
// int4, two elements to a byte: 0).
func (t KVType) Bytes() int {
	switch t {
	case KVFloat32:
		return 4
	case KVInt8:
		return 1
	case KVInt4:
		return 0
	}
	return 2
}

// F16ToF32 widens an IEEE binary16 value exactly: subnormals become
// normal float32 values, ±Inf stay, a NaN keeps its sign and payload with
// the quiet bit set (as F16C's VCVTPH2PS does).
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f && mant != 0:
		return math.Float32frombits(sign | 0x7fc00000 | mant<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000)
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: mant·2^-24
		return math.Float32frombits(sign | math.Float32bits(float32(mant)*0x1p-24))
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// F32ToF16 rounds a float32 to the nearest IEEE binary16, ties to even
// (VCVTPS2PH with rounding control 0): above 65519.99… it is ±Inf,
// below 2^-25 ±0, subnormal in between; a NaN stays NaN with its sign,
// the quiet bit set and the top 9 payload bits kept.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // the binary16 biased exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e >= 1 { // normal: round the 13 dropped bits; a carry may reach Inf
		h := uint32(e)<<10 | mant>>13
		return sign | uint16(roundShift(h, mant&0x1fff, 13))
	}
	// Subnormal (or zero): the 24-bit significand shifted right by 14-e.
	shift := uint(14 - e)
	if shift > 25 {
		return sign
	}
	sig := mant | 0x800000
	if exp == 0 {
		sig = mant // a float32 subnormal: far below binary16's range
	}
	return sign | uint16(roundShift(sig>>shift, sig&(1<<shift-1), shift))
}

// roundShift rounds q (bits already shifted out: rem, of width shift) to
// nearest, ties to even.
func roundShift(q, rem uint32, shift uint) uint32 {
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && q&1 == 1) {
		q++
	}
	return q
}

// BF16ToF32 widens a bfloat16 exactly: its 16 bits become float32's upper
// half.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds a float32 to the nearest bfloat16, ties to even (a
// finite value past the largest bfloat16 becomes ±Inf); a NaN stays NaN
// with its sign and the quiet bit set.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// RoundBF16 writes src rounded to bfloat16 to dst[:len(src)]:
// BF16ToF32(F32ToBF16(v)) for each element; dst may be src.
func RoundBF16(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = BF16ToF32(F32ToBF16(v))
	}
}

// Widen writes the float32 values of src, elements of type t (KVFloat16
// or KVBFloat16), to dst[:len(src)].
func Widen(dst []float32, src []uint16, t KVType) {
	dst = dst[:len(src)]
	if t == KVBFloat16 {
		for i, h := range src {
			dst[i] = BF16ToF32(h)
		}
		return
	}
	for i, h := range src {
		dst[i] = F16ToF32(h)
	}
}

// Narrow rounds src to elements of type t (KVFloat16 or KVBFloat16) in
// dst[:len(src)], to nearest, ties to even.
func Narrow(dst []uint16, src []float32, t KVType) {
	dst = dst[:len(src)]
	if t == KVBFloat16 {
		for i, f := range src {
			dst[i] = F32ToBF16(f)
		}
		return
	}
	for i, f := range src {
		dst[i] = F32ToF16(f)
	}
}

// KVRows is a strided run of K or V rows of any storage: F32 when Type
// is KVFloat32, I8 with its scales S when KVInt8 (KVInt4: I8 carries the
// rows' bytes, Int4RowBytes of a row, Ld and Len in bytes), else U16. Row
// c starts at element c·Ld, its scales (Int8Blocks of its width) at c·LdS.
type KVRows struct {
	F32  []float32
	U16  []uint16
	I8   []int8
	S    []float32
	Type KVType
	Ld   int
	LdS  int
}

// Len returns the number of elements the rows' slice holds.
func (r KVRows) Len() int {
	switch r.Type {
	case KVFloat32:
		return len(r.F32)
	case KVInt8, KVInt4:
		return len(r.I8)
	}
	return len(r.U16)
}

// From returns the rows from row c on.
func (r KVRows) From(c int) KVRows {
	switch r.Type {
	case KVFloat32:
		r.F32 = r.F32[c*r.Ld:]
	case KVInt8, KVInt4:
		r.I8, r.S = r.I8[c*r.Ld:], r.S[c*r.LdS:]
	default:
		r.U16 = r.U16[c*r.Ld:]
	}
	return r
}

// Row returns the first n elements of row c as float32: a view of F32, or
// the widened or dequantized values written to buf.
func (r KVRows) Row(c, n int, buf []float32) []float32 {
	switch r.Type {
	case KVFloat32:
		return r.F32[c*r.Ld : c*r.Ld+n]
	case KVInt8:
		DequantizeInt8(buf[:n], r.I8[c*r.Ld:c*r.Ld+n], r.S[c*r.LdS:])
		return buf[:n]
	case KVInt4:
		DequantizeInt4KV(buf[:n], Int4Bytes(r.I8[c*r.Ld:c*r.Ld+Int4RowBytes(n)]), r.S[c*r.LdS:])
		return buf[:n]
	}
	Widen(buf[:n], r.U16[c*r.Ld:c*r.Ld+n], r.Type)
	return buf[:n]
}
