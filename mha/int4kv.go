package mha

import (
	"context"
	"fmt"

	"github.com/fastattn/fastattn/fallback"
)

// Int4BlockBytes is the bytes of one block of Int4 K/V storage: QuantBlock
// elements, two to a byte (ggml's q4_0 block without its scale).
const Int4BlockBytes = 16

// Int4RowBytes is the bytes of one K or V row of d Int4 elements: Int4BlockBytes
// per block of QuantBlock elements, the last block padded with nibbles of 8
// (the value 0) when d is not a multiple of 32.
func Int4RowBytes(d int) int { return fallback.Int4RowBytes(d) }

// Int4KVTensor is a K or V tensor stored as Int4 (4 bits an element):
// ggml's q4_0 blocks as they are, the nibbles in Data and the scales in
// Scales. Per row (one token of one KV head) of d elements and per block of
// QuantBlock elements, Data holds Int4BlockBytes bytes, byte j with element j of
// the block in its low nibble and element j+16 in its high one, and
// Scales one float32 d; a nibble u stands for float32(u-8)·d. Rows are laid
// out as the Shape says (BSHD or BHSD), Int4RowBytes(dim) bytes a row in
// Data and QuantBlocks(dim) scales a row in Scales. A GGUF q4_0 tensor's
// blocks (a float16 d, then 16 bytes) become one by copying the 16 bytes
// and widening d (Widen16). QuantizeInt4KV makes one from float32 values.
//
// Accuracy: q4_0 keeps 16 levels a block, so expect about 13% error. On
// N(0, 1) data (a decode row per head over 4096 keys, head dims 64 and
// 128) the output's root-mean-square error relative to the output's was
// 12.5–12.9% against the float64 result on the float32 K/V, the same
// against float32 K/V through the library, in both the float32 and the
// int8 mode (TestInt4KVAccuracy); int8 K/V (Int8KVTensor) gives about 1%.
type Int4KVTensor struct {
	Data   []byte
	Scales []float32
}

// QuantizeInt4KV quantizes src, rows of dim elements (any layout: each
// row is one token of one head), into dst: Int4RowBytes(dim) bytes and
// QuantBlocks(dim) scales per row, row after row. Per block of QuantBlock
// elements of a row, symmetric as ggml's q4_0:
//
//	m = the element of largest magnitude (the first, on a tie)
//	d = m / -8                          (float32; 0 for a block of zeros)
//	u = round-to-nearest-even(x / d) + 8, clamped to [0, 15]
//
// so that m is exact (u = 0), every other value within d/2 of its own
// (|m|/16) but for those above 7·d, which clamp to it, and every
// dequantized value finite. ggml rounds x/d half up (int(x/d + 8.5)):
// the two differ only on a tie. len(src) must be a multiple of dim
// (ErrShape) and dst hold exactly its bytes and scales (ErrBuffer). A NaN
// or ±Inf in src is ErrNonFinite naming its row and element, and dst is
// then not written at all.
func QuantizeInt4KV(dst Int4KVTensor, src []float32, dim int) error {
	rows, err := int4Rows("QuantizeInt4KV", len(src), dim, len(dst.Data), len(dst.Scales))
	if err != nil {
		return err
	}
	for r := range rows { // every row checked before any is written
		if i := fallback.NonFinite(src[r*dim : (r+1)*dim]); i >= 0 {
			return fmt.Errorf("%w: QuantizeInt4KV: row %d element %d is %v", ErrNonFinite, r, i, src[r*dim+i])
		}
	}
	nb, w := QuantBlocks(dim), Int4RowBytes(dim)
	for r := range rows {
		fallback.QuantizeInt4KV(dst.Data[r*w:(r+1)*w], dst.Scales[r*nb:(r+1)*nb], src[r*dim:(r+1)*dim])
	}
	return nil
}

// DequantizeInt4KV writes the float32 values of src, rows of dim Int4
// elements with their scales, to dst: dst[i] = float32(u-8)·d, the value
// attention computes with. len(dst) must be a multiple of dim (ErrShape)
// and src hold exactly its bytes and scales (ErrBuffer).
func DequantizeInt4KV(dst []float32, src Int4KVTensor, dim int) error {
	rows, err := int4Rows("DequantizeInt4KV", len(dst), dim, len(src.Data), len(src.Scales))
	if err != nil {
		return err
	}
	nb, w := QuantBlocks(dim), Int4RowBytes(dim)
	for r := range rows {
		fallback.DequantizeInt4KV(dst[r*dim:(r+1)*dim], src.Data[r*w:(r+1)*w], src.Scales[r*nb:(r+1)*nb])
	}
	return nil
}

// int4Rows checks a conversion of n float32 values, rows of dim, against
// an Int4 K/V tensor of data bytes and scales scales, and returns the rows.
func int4Rows(name string, n, dim, data, scales int) (int, error) {
	if dim < 1 || n%dim != 0 {
		return 0, fmt.Errorf("%w: %s: %d values are not rows of dim = %d", ErrShape, name, n, dim)
	}
	rows := n / dim
	if data != rows*Int4RowBytes(dim) || scales != rows*QuantBlocks(dim) {
		return 0, fmt.Errorf("%w: %s: %d rows of %d need %d bytes and %d scales, the tensor has %d and %d",
			ErrBuffer, name, rows, dim, rows*Int4RowBytes(dim), rows*QuantBlocks(dim), data, scales)
	}
	return rows, nil
}

// AttentionInt4 is Attention with K and V stored as Int4 (Int4KVTensor:
// ggml's q4_0 blocks; QuantizeInt4KV makes them): 0.16 of float32's bytes
// to read at HeadDim 128, scales included. The result is Attention's on
// the dequantized K and V (DequantizeInt4KV): a decode step widens each
// run of keys to int8 in cache and runs the int8 kernels on it, a
// prefill dequantizes each block to float32. Every option holds,
// ComputeInt8 too. Missing bytes or scales are ErrBuffer.
func (e *Engine) AttentionInt4(out, q []float32, k, v Int4KVTensor, shape Shape, opts *Options) error {
	return e.AttentionInt4Context(context.Background(), out, q, k, v, shape, opts)
}

// AttentionInt4Context is AttentionInt4 that stops when ctx is done, as
// AttentionContext.
func (e *Engine) AttentionInt4Context(ctx context.Context, out, q []float32, k, v Int4KVTensor, shape Shape, opts *Options) error {
	if err := e.usable(); err != nil {
		return err
	}
	return e.run(ctx, out, q, kvData{t: Int4, k8: fallback.Int4Carried(k.Data), v8: fallback.Int4Carried(v.Data),
		ks: k.Scales, vs: v.Scales}, shape, opts)
}

// AttentionInt4 is Engine.AttentionInt4 on the Default engine: K and V as
// ggml's q4_0 blocks (Int4KVTensor), the result Attention's on their
// dequantized values.
func AttentionInt4(out, q []float32, k, v Int4KVTensor, shape Shape, opts *Options) error {
	e, err := Default()
	if err != nil {
		return err
	}
	return e.AttentionInt4(out, q, k, v, shape, opts)
}
