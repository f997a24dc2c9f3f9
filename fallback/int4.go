package fallback

import "math"

// Packed int4 rows. A row of ld 4-bit elements takes ld/2 bytes. Its
// elements are interleaved in groups of 2·half (half is a kernel set's
// vector width in lanes): element j of a row is in byte
// j/(2·half)·half + j%half, in the low nibble when j%(2·half) < half,
// else in the high one. A kernel then turns half bytes into two vectors of
// columns: the low nibbles (a mask) and the high ones (a shift), each in
// column order.

// Int4Byte returns the byte of a packed int4 row holding element j, and
// whether it is the byte's high nibble.
func Int4Byte(j, half int) (int, bool) {
	return j/(2*half)*half + j%half, j%(2*half) >= half
}

// Int4At returns element j (0..15) of the packed int4 row.
func Int4At(row []byte, j, half int) uint8 {
	b, high := Int4Byte(j, half)
	if high {
		return row[b] >> 4
	}
	return row[b] & 15
}

// SetInt4 stores u (0..15) as element j of the packed int4 row.
func SetInt4(row []byte, j, half int, u uint8) {
	b, high := Int4Byte(j, half)
	if high {
		row[b] = row[b]&15 | u<<4
	} else {
		row[b] = row[b]&0xf0 | u&15
	}
}

// QuantizeInt4 quantizes one block of at most Int8Block values of a
// weight column src into u (len(src) values 0..15), asymmetric, with its
// scale and zero point:
//
//	lo, hi = min(0, min x), max(0, max x)
//	scale  = float32((hi - lo) / 15)           (0 for a zero block)
//	z      = round-to-nearest-even(-lo / scale), in [0, 15]
//	u      = round-to-nearest-even(x / scale) + z, clamped to [0, 15]
//
// (float64 divisions), so the block's range maps onto the 16 levels with
// 0 exactly representable, and a value dequantizes to float32(u-z)·scale.
// src must be finite.
func QuantizeInt4(u []uint8, src []float32) (scale float32, z uint8) {
	lo, hi := 0.0, 0.0
	for _, x := range src {
		lo, hi = min(lo, float64(x)), max(hi, float64(x))
	}
	scale = float32((hi - lo) / 15)
	if scale == 0 {
		clear(u[:len(src)])
		return 0, 0
	}
	s := float64(scale)
	zf := max(0, min(15, math.RoundToEven(-lo/s)))
	for i, x := range src {
		u[i] = uint8(max(0, min(15, math.RoundToEven(float64(x)/s)+zf)))
	}
	return scale, uint8(zf)
}

// GemvI4 is the projection of a few rows through int4 weights (w.Type
// KVInt4), in the order of the GemvWI4 kernels: per block of 32 rows, the
// products with the nibbles u are summed unscaled, the zero point taken
// off through the block's sum of a, and the scale applied once:
//
//	c[i][j] = accumulate ? c[i][j] : 0
//	for each block q0 = 0, 32, ... < k:
//	    sum     = a[i][q0]·float32(u[q0][j]) + ...  (FMAs, in order of p)
//	    asum    = a[i][q0] + a[i][q0+1] + ...       (adds, in order of p)
//	    sum     = fma(-float32(z[q0/32][j]), asum, sum)
//	    c[i][j] = fma(sum, scale[q0/32][j], c[i][j])
//
// Its rows hold at least n elements at stride w.Ld.
func GemvI4(c []float32, ldc int, a []float32, lda int, w WeightRows, m, n, k int, accumulate bool) {
	gemvBlocks(c, ldc, a, lda, w, m, n, k, accumulate)
}

// widenInt4 writes k rows of n elements of the int4 rows w as
// float32(u-z)·s to dst at stride ldd.
func widenInt4(dst []float32, ldd int, w WeightRows, k, n int) {
	for p := 0; p < k; p++ {
		d, row := dst[p*ldd:p*ldd+n], w.I4[p*w.Ld/2:]
		blk := p / Int8Block * w.Ld
		for j := range d {
			d[j] = float32(int(Int4At(row, j, w.Half))-int(w.Z[blk+j])) * w.S[blk+j]
		}
	}
}
