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
	// the products are an order of magnitude faster than FMAs. A decode
	// step in this mode runs the flash blocks, not the fused decode
	// kernel, and gains nothing (it is bound by memory): 1.3–7× slower.
	// Use the mode for prefill, ComputeF32 for decode steps.
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
)

// String returns "f32" or "bf16".
func (c Compute) String() string {
	switch c {
	case ComputeF32:
		return "f32"
	case ComputeBF16:
		return "bf16"
	}
	return fmt.Sprintf("Compute(%d)", int(c))
}

// valid reports whether c is one of the defined modes.
func (c Compute) valid() bool { return c == ComputeF32 || c == ComputeBF16 }
