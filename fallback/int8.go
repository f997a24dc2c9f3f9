package fallback

import "math"

// Int8Block is the number of consecutive elements of one K or V row that
// share a scale in int8 storage (llama.cpp's q8_0 block). A row of d
// elements has Int8Blocks(d) scales: ⌈d/32⌉, the last block holding the
// d mod 32 elements left, if any, under a scale of their own.
const Int8Block = 32

// Int8Blocks is the number of scales of a row of d int8 elements.
func Int8Blocks(d int) int { return (d + Int8Block - 1) / Int8Block }

// QuantizeInt8 quantizes one row src into q (len(src) values) and scales
// (Int8Blocks(len(src)) values), symmetric, per block of Int8Block
// elements:
//
//	amax  = max |x| over the block
//	scale = amax / 127                       (float32; 0 for a zero block)
//	q     = round-to-nearest-even(x / scale)  (float32 division), in [-127, 127]
//
// so the block's largest magnitude maps to ±127 and a value dequantizes
// to float32(q)·scale (DequantizeInt8). Where 127·scale would round past
// MaxFloat32 (amax within half an ulp of it), scale is lowered by an ulp
// at a time until it does not: ±127 then dequantizes to a finite value
// within an ulp of amax. src must be finite: callers check
// it with NonFinite first (a NaN or ±Inf cannot be quantized).
func QuantizeInt8(q []int8, scales []float32, src []float32) {
	for b := 0; b*Int8Block < len(src); b++ {
		blk := src[b*Int8Block : min(len(src), (b+1)*Int8Block)]
		amax := float32(0)
		for _, x := range blk {
			amax = max(amax, float32(math.Abs(float64(x))))
		}
		scale := amax / 127
		for float32(127)*scale > math.MaxFloat32 { // amax near MaxFloat32: 127·scale must dequantize finitely
			scale = math.Nextafter32(scale, 0)
		}
		scales[b] = scale
		out := q[b*Int8Block:][:len(blk)]
		if scale == 0 { // all zeros (or below the smallest scale)
			clear(out)
			continue
		}
		for i, x := range blk {
			v := math.RoundToEven(float64(x / scale))
			out[i] = int8(max(-127, min(127, v)))
		}
	}
}

// NonFinite returns the index of the first NaN or ±Inf in x (exponent
// bits all ones), or -1 if every element is finite.
func NonFinite(x []float32) int {
	for i, v := range x {
		if math.Float32bits(v)&0x7f800000 == 0x7f800000 {
			return i
		}
	}
	return -1
}

// DequantizeInt8 writes the float32 values of one int8 row q with its
// scales to dst[:len(q)]: dst[i] = float32(q[i])·scales[i/Int8Block],
// rounded once (the value every kernel multiplies by).
func DequantizeInt8(dst []float32, q []int8, scales []float32) {
	for i, x := range q {
		dst[i] = float32(x) * scales[i/Int8Block]
	}
}
