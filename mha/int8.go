package mha

import (
	"context"
	"fmt"

	"github.com/fastattn/fastattn/fallback"
)

// QuantBlock is the number of consecutive elements of one K or V row (one
// token of one KV head) that share a scale in Int8 storage: llama.cpp's
// q8_0 block. A row of d elements has QuantBlocks(d) = ⌈d/32⌉ scales; when
// d is not a multiple of 32 the last block holds the d mod 32 elements
// left, under a scale of its own.
const QuantBlock = 32

// QuantBlocks is the number of scales of a row of d int8 elements.
func QuantBlocks(d int) int { return fallback.Int8Blocks(d) }

// Int8KVTensor is a K or V tensor stored as int8: Data holds the elements
// in the tensor's layout (BSHD [B][S][H][d] or BHSD [B][H][S][d], as the
// Shape says), and Scales the QuantBlocks(d) scales of each row in the same
// layout with d replaced by QuantBlocks(d) ([B][S][H][⌈d/32⌉] or
// [B][H][S][⌈d/32⌉]). Element i of a row is float32(Data[i]) times its
// block's scale. QuantizeInt8KV makes one from float32 values.
type Int8KVTensor struct {
	Data   []int8
	Scales []float32
}

// Int8Weight is a weight matrix stored as int8 with a float32 scale per
// output and block of QuantBlock inputs (Weights.Type Int8): Data shaped as
// the float32 matrix, Scales as the matrix with its input dimension
// replaced by QuantBlocks of it, [⌈in/32⌉][out], or [out][⌈in/32⌉] with
// Weights.OutIn (a q8_0 row's scales in order). Element (i, o) is
// float32(Data) times the scale of block i/32 of output o.
type Int8Weight struct {
	Data   []int8
	Scales []float32
}

// QuantizeInt8KV quantizes src, rows of dim elements (any layout: each row
// is one token of one head), into dst: dst.Data[i] for src[i], and
// QuantBlocks(dim) scales per row in dst.Scales, row after row. Per block
// of QuantBlock elements of a row, symmetric:
//
//	scale = max|x| / 127   (float32; 0 for a block of zeros)
//	q     = round-to-nearest-even(x / scale), in [-127, 127]
//
// so that |x - float32(q)·scale| <= scale/2 (plus float32 rounding), and
// every dequantized value is finite (a block whose max|x| is within half an
// ulp of MaxFloat32 takes a scale an ulp or two below max|x|/127). len(src)
// must be a multiple of dim (ErrShape), dst hold exactly as many elements
// and their scales (ErrBuffer). A NaN or ±Inf in src is ErrNonFinite naming
// its row and element, and dst is then not written at all.
func QuantizeInt8KV(dst Int8KVTensor, src []float32, dim int) error {
	rows, err := int8Rows("QuantizeInt8KV", len(src), dim, len(dst.Data), len(dst.Scales))
	if err != nil {
		return err
	}
	for r := range rows { // every row checked before any is written
		if i := fallback.NonFinite(src[r*dim : (r+1)*dim]); i >= 0 {
			return fmt.Errorf("%w: QuantizeInt8KV: row %d element %d is %v", ErrNonFinite, r, i, src[r*dim+i])
		}
	}
	nb := QuantBlocks(dim)
	for r := range rows {
		fallback.QuantizeInt8(dst.Data[r*dim:(r+1)*dim], dst.Scales[r*nb:(r+1)*nb], src[r*dim:(r+1)*dim])
	}
	return nil
}

// DequantizeInt8KV writes the float32 values of src, rows of dim int8
// elements with their scales, to dst: dst[i] = float32(q)·scale, the value
// attention computes with. len(dst) must be a multiple of dim (ErrShape)
// and src hold exactly as many elements and their scales (ErrBuffer).
func DequantizeInt8KV(dst []float32, src Int8KVTensor, dim int) error {
	rows, err := int8Rows("DequantizeInt8KV", len(dst), dim, len(src.Data), len(src.Scales))
	if err != nil {
		return err
	}
	nb := QuantBlocks(dim)
	for r := range rows {
		fallback.DequantizeInt8(dst[r*dim:(r+1)*dim], src.Data[r*dim:(r+1)*dim], src.Scales[r*nb:(r+1)*nb])
	}
	return nil
}

// int8Rows checks a conversion of n float32 values, rows of dim, against
// an int8 tensor of data elements and scales scales, and returns the rows.
func int8Rows(name string, n, dim, data, scales int) (int, error) {
	if dim < 1 || n%dim != 0 {
		return 0, fmt.Errorf("%w: %s: %d values are not rows of dim = %d", ErrShape, name, n, dim)
	}
	rows := n / dim
	if data != n || scales != rows*QuantBlocks(dim) {
		return 0, fmt.Errorf("%w: %s: %d rows of %d need %d elements and %d scales, the tensor has %d and %d",
			ErrBuffer, name, rows, dim, n, rows*QuantBlocks(dim), data, scales)
	}
	return rows, nil
}

// AttentionInt8 is Attention with K and V stored as int8 with scales
// (Int8KVTensor; QuantizeInt8KV makes them): about 0.28 of float32's bytes to
// read, dequantized in registers, float32 arithmetic. The result is
// Attention's on the dequantized K and V (DequantizeInt8KV). Every option
// holds. Missing elements or scales are ErrBuffer.
func (e *Engine) AttentionInt8(out, q []float32, k, v Int8KVTensor, shape Shape, opts *Options) error {
	return e.AttentionInt8Context(context.Background(), out, q, k, v, shape, opts)
}

// AttentionInt8Context is AttentionInt8 that stops when ctx is done, as
// AttentionContext.
func (e *Engine) AttentionInt8Context(ctx context.Context, out, q []float32, k, v Int8KVTensor, shape Shape, opts *Options) error {
	if err := e.usable(); err != nil {
		return err
	}
	return e.run(ctx, out, q, kvData{t: Int8, k8: k.Data, v8: v.Data, ks: k.Scales, vs: v.Scales}, shape, opts)
}

// AttentionInt8 is Attention with K and V stored as int8 with a float32
// scale per block of 32 elements of a row (QuantizeInt8KV makes them), on
// the Default engine: each element stands for float32(q)·scale, so the
// result is Attention's on the dequantized K and V, dequantized in
// registers (Engine.AttentionInt8).
func AttentionInt8(out, q []float32, k, v Int8KVTensor, shape Shape, opts *Options) error {
	e, err := Default()
	if err != nil {
		return err
	}
	return e.AttentionInt8(out, q, k, v, shape, opts)
}
