package mha

import "fmt"

// Compute is the arithmetic of attention's two products, q·kᵀ and P·v.
type Compute int

const (
	// ComputeF32 multiplies and sums in float32 (the default): the
	// operands as given (16-bit and int8 K/V widened exactly).
	ComputeF32 Compute = iota
	// ComputeBF16 multiplies bfloat16 operands and sums in float32, as
	// bfloat16 dot-product hardware does (AVX512_BF16's VDPBF16PS, Arm's
	// BFDOT): each query row, times the scale, is rounded to bfloat16
	// (nearest, ties to even), and so are the keys (bfloat16 K/V as
	// stored; float32, float16 and dequantized int8 rounded), the
	// softmax weights that multiply the values, and the values. A
	// product of two bfloat16 values is exact in float32, so only the
	// float32 sums round after it. The softmax is float32: scores,
	// maxima, exponentials and each row's denominator (of the unrounded
	// weights) as in ComputeF32, so masks, windows, softcap, ALiBi,
	// biases, sinks, the LSE and the NaN rules are unchanged.
	//
	// The output differs from the exact result by about 0.3% of its
	// magnitude on data of unit scale (q, k, v ~ N(0, 1): 0.34% at head
	// dims 64 and 128 over 4096 keys, against float32's 1.2e-6;
	// TestComputeBF16Accuracy bounds it at 1%). Every kernel set computes
	// the mode with the same roundings; kernel sets differ only in the
	// order of the float32 sums, as in ComputeF32, and on arm64 in BFDOT's
	// rounding of them (to odd), and on AMX tiles in an undocumented order
	// of each tile step's sums (within the same bounds; bit-identical at
	// any thread count on one CPU). The products run on the fastest
	// engine the CPU has for them: AMX tiles (TDPBF16PS: Intel Xeon 4th
	// generation on, under Linux), else AVX512_BF16's VDPBF16PS where it
	// outruns the FMAs (AMD Zen 4/5), else FEAT_BF16's BFDOT; elsewhere —
	// and on Intel CPUs whose VDPBF16PS runs at half their FMA rate — the
	// float32 kernels take the rounded operands, which costs copies (about
	// the float32 mode's time for a prefill: 0.95–1.3×). On Zen 4 the
	// mode's prefill measured 1.07–1.55× the float32 mode's speed; on AMX
	// the products are an order of magnitude faster than FMAs.
	//
	// The mode applies to problems of more than 16 query rows per KV head
	// (Heads/KVHeads·QLen: prefill, a prompt chunk, a paged cascade's
	// shared part, MLA's absorbed decode of many heads). A decode step's
	// few rows are bound by reading K and V, not by arithmetic: they keep
	// float32's arithmetic and its fused decode kernel, with ComputeF32's
	// bits. So one setting serves a serving step that mixes prompt chunks
	// and decode tokens (TestComputeBF16MixedStep): the chunks gain, the
	// decode tokens lose nothing (a decode step rounded in this mode ran
	// 1.3–7× slower).
	//
	// Denormals: the bfloat16 instructions read a denormal bfloat16
	// operand (magnitude below 2^-126) as zero and flush a denormal
	// partial sum to zero; the float32 kernels keep both. So where the
	// mode runs on an instruction, a query element of 1e-39 times a key
	// of 3e38 adds 0 to its score, not 0.3 (TestComputeBF16Denormals).
	//
	// In a Layer's calls the mode also covers the projections of
	// BFloat16 weights (Weights.Type): each input row is rounded to
	// bfloat16 before it multiplies them, so those products too are
	// bfloat16 by bfloat16 summed in float32. Projections of other weight
	// types keep their arithmetic.
	ComputeBF16
	// ComputeInt8 multiplies q·kᵀ on 8-bit integers, for K stored as
	// Int8 or Int4 (an Int8 or Int4 call, cache or paged cache; int4 rows
	// are widened to int8 first; any other K is ErrOption): each query row, times the scale, is quantized as K's
	// rows are (per block of QuantBlock dims, scale max|x|/127, round to
	// nearest even: llama.cpp's q8_0 rule, which its CPU flash attention
	// applies to the query rows over q8_0 K), and the scores are the
	// products of those quantized rows with K. A decode step's fused
	// kernel (head dims multiples of 4) sums each block's products exactly
	// in int32 and scales the sum by both blocks' scales, on the integer
	// dot products the CPU has: VPDPBUSD (AVX512_VNNI: Intel from Ice
	// Lake, AMD from Zen 4; AVX-VNNI on AVX2-only Intel from Alder Lake),
	// VPMADDUBSW and VPMADDWD on any other AVX2 core, SDOT on Arm cores
	// with the dot-product extension (Neoverse N1 and later, Apple M1 and
	// later); elsewhere, and in prefill, the float32 kernels multiply the
	// values the quantized rows stand for (the same products up to float32
	// rounding). P·V, the softmax and every option are ComputeF32's. A
	// query row holding a NaN or ±Inf is not quantized: it keeps its
	// values, and its output is ComputeF32's NaN.
	//
	// The query's quantization adds an error of the size of K's own: on
	// data of unit scale (q, k, v ~ N(0, 1), head dims 64 and 128, 1024
	// and 4096 keys, a GQA decode step) the output is 0.50–0.59%
	// (relative RMS; largest element 0.58–0.72% of the largest output)
	// away from the float32 mode's on the same int8 K/V; against the
	// exact result on float32 K/V, int8 K/V alone is 0.74–0.82% off and
	// with the mode 0.93–1.0% (TestComputeInt8Accuracy). It makes an int8
	// or int4 decode step faster where dequantizing binds: several query
	// rows per KV head (GQA groups, batched trees, MLA's 16 heads: 1.1–1.8×
	// on Zen 4 with AVX-512), and less so one row per
	// KV head (MHA), whose float32 P·V is then most of the time. Prefill
	// (and MLA's 128 heads) runs the flash blocks on the float32 kernels
	// and gains nothing from the mode.
	ComputeInt8
)

// String returns "f32", "bf16" or "int8".
func (c Compute) String() string {
	switch c {
	case ComputeF32:
		return "f32"
	case ComputeBF16:
		return "bf16"
	case ComputeInt8:
		return "int8"
	}
	return fmt.Sprintf("Compute(%d)", int(c))
}

// valid reports whether c is one of the defined modes.
func (c Compute) valid() bool { return c >= ComputeF32 && c <= ComputeInt8 }
