package mha

// Int4 is 4 bits an element. As K/V storage (NewCacheOf, PagedConfig.Type,
// AttentionInt4) it holds ggml's q4_0 blocks (Int4KVTensor, QuantizeInt4KV:
// symmetric, a scale per block of 32 elements of a row, u-8). As weights
// (Weights.Type), per output and block of
// QuantBlock inputs, a float32 scale s and a zero point z (0..15), an
// element's value float32(u-z)·s for its nibble u. A checkpoint's blocks
// are given as Int4Weight; a float32 matrix given to an Int4 layer is
// quantized per block, asymmetric (float64 arithmetic):
//
//	lo, hi = min(0, min x), max(0, max x)
//	scale  = float32((hi - lo) / 15)           (0 for a block of zeros)
//	z      = round-to-nearest-even(-lo / scale), in [0, 15]
//	u      = round-to-nearest-even(x / scale) + z, clamped to [0, 15]
//
// so the block's range spans the 16 levels and zero is exact.
const Int4 DType = 4

// Int4Weight is a weight matrix stored as 4-bit blocks, as ONNX Runtime's
// MatMulNBits (bits 4, block_size 32) holds it:
//
//   - Data holds the nibbles, two to a byte, element e in byte e/2, the
//     low nibble when e is even. With Weights.OutIn each output's row of
//     in elements is padded to whole blocks (⌈in/32⌉·16 bytes a row:
//     MatMulNBits' B, [out][⌈in/32⌉][16]); in the [in][out] orientation
//     element (i, o) is e = i·out + o.
//   - Scales holds a float32 per output and block, laid out as
//     Int8KVTensor's: [⌈in/32⌉][out], or [out][⌈in/32⌉] with OutIn.
//   - Zeros holds the zero points as nibbles packed as Data's, in the
//     order of Scales: [out][⌈⌈in/32⌉/2⌉] bytes with OutIn (MatMulNBits'
//     zero_points), ⌈⌈in/32⌉·out/2⌉ bytes otherwise. Nil means 8 for every
//     block (MatMulNBits' default, symmetric: GGUF q4_0's blocks too once
//     their nibbles are put in element order).
type Int4Weight struct {
	Data   []byte
	Scales []float32
	Zeros  []byte
}
