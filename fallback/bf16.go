package fallback

import "math"

// The bfloat16 dot products of the bfloat16 compute mode: operands that
// hold two bfloat16 terms in each uint32 (the first in the low half), as
// AVX512_BF16's VDPBF16PS multiplies them.

// PairBF16 rounds rows rows of n float32 elements (at stride lds in src)
// to bfloat16 and packs them in pairs of rows: dst[p*ldd+j] holds row 2p's
// element j in its low half and row 2p+1's in its high half (0 when rows
// is odd and 2p+1 = rows), rounded as F32ToBF16 rounds.
func PairBF16(dst []uint32, ldd int, src []float32, lds int, rows, n int) {
	for p := 0; p < (rows+1)/2; p++ {
		lo := src[2*p*lds:][:n]
		d := dst[p*ldd:][:n]
		if 2*p+1 == rows {
			for j, x := range lo {
				d[j] = uint32(F32ToBF16(x))
			}
			continue
		}
		hi := src[(2*p+1)*lds:][:n]
		for j, x := range lo {
			d[j] = uint32(F32ToBF16(x)) | uint32(F32ToBF16(hi[j]))<<16
		}
	}
}

// GemmBF16 is the bfloat16 pair product, in the order VDPBF16PS sums:
//
//	c[i*ldc+j] = (accumulate ? c[i*ldc+j] : 0) ⊕_{p<k} (a[i*lda+p*lka], b[p*ldb+j])
//
// where each term adds the product of the two high halves, then that of
// the two low halves, each a fused multiply-add rounded to nearest even
// (fmaBF16: denormal inputs read as zero and denormal results flushed,
// NaNs as x86 propagates them), bit for bit what VDPBF16PS returned for
// 192,000 recorded lanes of every class of input on an Intel Xeon
// (kernels/testdata). Strides in uint32.
func GemmBF16(c []float32, ldc int, a []uint32, lda, lka int, b []uint32, ldb int, m, n, k int, accumulate bool) {
	pairSums(c, ldc, m, n, k, accumulate, func(i, p int) uint32 { return a[i*lda+p*lka] },
		func(p, j int) uint32 { return b[p*ldb+j] }, dotNearest)
}

// hiBF16 and loBF16 are the bfloat16 in the high and low half of x, as
// float32.
func hiBF16(x uint32) float32 { return math.Float32frombits(x &^ 0xffff) }
func loBF16(x uint32) float32 { return math.Float32frombits(x << 16) }

// dotNearest adds the pair product of x and y to acc as VDPBF16PS does:
// the high halves' product, then the low halves', each an FMA step.
func dotNearest(acc float32, x, y uint32) float32 {
	return fmaBF16(fmaBF16(acc, hiBF16(x), hiBF16(y)), loBF16(x), loBF16(y))
}

// defaultNaN is x86's NaN for an invalid operation (Inf·0, Inf − Inf).
const defaultNaN = 0xffc00000

// fmaBF16 is one step of VDPBF16PS: acc + x·y rounded once to nearest
// even, with
//   - denormal inputs (acc, x, y) read as zeros of their sign, and a
//     denormal result flushed to a zero of its sign (DAZ and FTZ, whatever
//     MXCSR says);
//   - a NaN input propagated quietened, x first, then y, then acc; an
//     invalid operation (Inf·0, Inf − Inf) x86's default NaN;
//   - the product exact (bfloat16 factors: float64 holds it), the sum
//     rounded to odd in float64 and then to nearest in float32, which is
//     the correctly rounded sum (53 ≥ 24 + 2 bits).
func fmaBF16(acc, x, y float32) float32 {
	acc, x, y = flush(acc), flush(x), flush(y)
	switch {
	case x != x:
		return quietNaN(x)
	case y != y:
		return quietNaN(y)
	case acc != acc:
		return quietNaN(acc)
	}
	fa, p := float64(acc), float64(x)*float64(y)
	if p != p {
		return math.Float32frombits(defaultNaN)
	}
	s := fa + p
	switch {
	case s != s:
		return math.Float32frombits(defaultNaN)
	case math.IsInf(s, 0):
		return float32(s)
	}
	// TwoSum: s + e is the exact sum.
	bv := s - fa
	e := (fa - (s - bv)) + (p - bv)
	if s == 0 && e == 0 {
		if fa == 0 && p == 0 {
			return acc + float32(p) // zeros: IEEE's sign of their sum
		}
		return 0
	}
	if e != 0 && math.Float64bits(s)&1 == 0 { // round to odd: one float64 step toward the exact sum
		if (e > 0) == (s > 0) {
			s = math.Float64frombits(math.Float64bits(s) + 1)
		} else {
			s = math.Float64frombits(math.Float64bits(s) - 1)
		}
	}
	return flush(float32(s))
}

// quietNaN returns the NaN x with its quiet bit set.
func quietNaN(x float32) float32 { return math.Float32frombits(math.Float32bits(x) | 0x400000) }

// pairSums is the loop of the bfloat16 twins: c[i][j] (or 0), then for
// each of the k pairs of terms a(i, p) and b(p, j), dot(acc, a, b).
func pairSums(c []float32, ldc int, m, n, k int, accumulate bool, a func(i, p int) uint32, b func(p, j int) uint32,
	dot func(acc float32, x, y uint32) float32) {
	for i := range m {
		ci := c[i*ldc:][:n]
		for j := range ci {
			var acc float32
			if accumulate {
				acc = ci[j]
			}
			for p := range k {
				acc = dot(acc, a(i, p), b(p, j))
			}
			ci[j] = acc
		}
	}
}
