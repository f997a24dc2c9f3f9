package fallback

import (
	"math"
	"unsafe"
)

// Int4 K/V rows (KVInt4 as a K or V type) hold ggml's q4_0 blocks as
// they are: per block of Int8Block elements of a row, Int4Block bytes of
// unsigned nibbles and one float32 scale d (q4_0 keeps d as float16: it
// widens exactly). Byte j of a block holds element j in its low nibble and
// element j+16 in its high one, and a nibble u stands for (u-8)·d. A row
// of dim elements takes Int4RowBytes(dim) bytes, its last block padded
// with nibbles of 8 (the value 0) when dim is not a multiple of 32.
// Splitting a block's 16 bytes by nibble gives its 32 elements in order
// (the low nibbles, then the high ones), so a kernel widens a block to
// int8 with a mask, a shift and a subtraction.

// Int4Block is the bytes of one int4 K/V block of Int8Block elements.
const Int4Block = Int8Block / 2

// Int4RowBytes is the bytes of an int4 K/V row of dim elements.
func Int4RowBytes(dim int) int { return Int4Block * Int8Blocks(dim) }

// StoredWidth is the length one row of dim elements of type t takes in its
// storage slice: dim elements, or Int4RowBytes(dim) bytes for int4.
func StoredWidth(t KVType, dim int) int {
	if t == KVInt4 {
		return Int4RowBytes(dim)
	}
	return dim
}

// Quantized reports whether t is stored with a scale per block (int8, int4).
func (t KVType) Quantized() bool { return t == KVInt8 || t == KVInt4 }

// QuantizeInt4KV quantizes one row src into q (Int4RowBytes(len(src))
// bytes) and scales (Int8Blocks(len(src)) values), per block of Int8Block
// elements, symmetric as ggml's q4_0:
//
//	m = the element of largest magnitude (the first, on a tie)
//	d = m / -8                                   (float32; 0 for a zero block)
//	u = round-to-nearest-even(x / d) + 8, clamped to [0, 15]   (float32 division)
//
// so m itself maps to u = 0, the value -8·d = m exactly, every other
// value to within d/2 (the top level, 7·d, clamps what lies above it),
// and every dequantized value is finite and at most |m| in magnitude.
// ggml computes u as int(x·(1/d) + 8.5): the two differ only where x/d
// falls on (or within a rounding of) a half. src must be finite.
func QuantizeInt4KV(q []byte, scales []float32, src []float32) {
	for b := 0; b*Int8Block < len(src); b++ {
		blk := src[b*Int8Block : min(len(src), (b+1)*Int8Block)]
		m := float32(0)
		for _, x := range blk {
			if math.Abs(float64(x)) > math.Abs(float64(m)) {
				m = x
			}
		}
		d := m / -8
		if m == 0 {
			d = 0 // not -0
		}
		scales[b] = d
		out := q[b*Int4Block : (b+1)*Int4Block]
		for j := range out {
			out[j] = nibble4(blk, j, d) | nibble4(blk, j+16, d)<<4
		}
	}
}

// nibble4 is the nibble of element i of a block quantized with scale d:
// 8 (the value 0) past the block's end or for a zero scale.
func nibble4(blk []float32, i int, d float32) byte {
	if i >= len(blk) || d == 0 {
		return 8
	}
	v := math.RoundToEven(float64(blk[i]/d)) + 8
	return byte(max(0, min(15, v)))
}

// Int4KVAt returns element i of an int4 K/V row as an int8: u-8, in -8..7.
func Int4KVAt(row []byte, i int) int8 {
	b := row[i/Int8Block*Int4Block+i%Int4Block]
	if i%Int8Block >= Int4Block {
		b >>= 4
	}
	return int8(b&15) - 8
}

// DequantizeInt4KV writes the float32 values of the first len(dst)
// elements of an int4 K/V row q with its scales to dst: dst[i] =
// float32(u-8)·scales[i/Int8Block], rounded once (the value every kernel
// multiplies by).
func DequantizeInt4KV(dst []float32, q []byte, scales []float32) {
	for i := range dst {
		dst[i] = float32(Int4KVAt(q, i)) * scales[i/Int8Block]
	}
}

// WidenInt4KV writes the int8 values u-8 of the first blocks blocks of an
// int4 K/V row src to dst (Int8Block per block): the row as int8 storage
// under the same scales, which dequantizes to the same values.
func WidenInt4KV(dst []int8, src []byte, blocks int) {
	for b := range blocks {
		in, out := src[b*Int4Block:(b+1)*Int4Block], dst[b*Int8Block:(b+1)*Int8Block]
		for j, x := range in {
			out[j] = int8(x&15) - 8
			out[j+Int4Block] = int8(x>>4) - 8
		}
	}
}

// Int4Bytes views int4 K/V storage carried in an []int8 (the int8
// plumbing's slices: Problem.K8, KVRows.I8) as its bytes: the same memory.
func Int4Bytes(x []int8) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x))
}

// Int4Carried is the reverse of Int4Bytes: bytes of int4 K/V storage
// viewed as an []int8, the same memory.
func Int4Carried(x []byte) []int8 {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*int8)(unsafe.Pointer(&x[0])), len(x))
}
