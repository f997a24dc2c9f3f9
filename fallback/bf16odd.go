package fallback

import "math"

// Arm's BFDOT (FEAT_BF16, FPCR.EBF = 0) sums a pair differently from
// x86's VDPBF16PS: its two products (exact for bfloat16 operands) are
// added and rounded to odd, then that sum is added to the accumulator and
// rounded to odd; denormal inputs and results are flushed to zero, a NaN
// is the default NaN. Round to odd keeps the last bit set when a result
// is inexact, so a later rounding to nearest sees it was not a tie.

// GemmBF16Odd is GemmBF16 with BFDOT's sums: c[i][j] (or 0) plus, pair by
// pair, oddSum(oddSum(lo·lo, hi·hi)) of a[i*lda+p*lka] and b[p*ldb+j].
func GemmBF16Odd(c []float32, ldc int, a []uint32, lda, lka int, b []uint32, ldb int, m, n, k int, accumulate bool) {
	pairSums(c, ldc, m, n, k, accumulate, func(i, p int) uint32 { return a[i*lda+p*lka] },
		func(p, j int) uint32 { return b[p*ldb+j] }, dotOdd)
}

// dotOdd adds the pair product of x and y to acc as BFDOT does.
func dotOdd(acc float32, x, y uint32) float32 {
	return addOdd(acc, addOdd(mulFlush(loBF16(x), loBF16(y)), mulFlush(hiBF16(x), hiBF16(y))))
}

// flush returns x, or a zero of its sign if x is denormal.
func flush(x float32) float32 {
	if b := math.Float32bits(x); b&0x7f800000 == 0 {
		return math.Float32frombits(b & 0x80000000)
	}
	return x
}

// mulFlush is x·y of bfloat16 values widened (exact unless it leaves the
// float32 range), denormals flushed.
func mulFlush(x, y float32) float32 {
	return flush(float32(float64(flush(x)) * float64(flush(y))))
}

// addOdd is x + y rounded to odd in float32, denormal inputs and results
// flushed to zero, the default NaN for a NaN, ±Inf past the range.
func addOdd(x, y float32) float32 {
	x, y = flush(x), flush(y)
	if x != x || y != y || (math.IsInf(float64(x), 0) && math.IsInf(float64(y), 0) && x != y) {
		return math.Float32frombits(0x7fc00000)
	}
	if math.IsInf(float64(x), 0) {
		return x
	}
	if math.IsInf(float64(y), 0) {
		return y
	}
	// The exact sum is s + e (TwoSum: both float64, e the rounding error
	// of s, exact for float64 inputs).
	fx, fy := float64(x), float64(y)
	s := fx + fy
	bv := s - fx
	e := (fx - (s - bv)) + (fy - bv)
	if s == 0 && e == 0 {
		return x + y // a zero, signed as float32 sums sign it
	}
	if math.Abs(s) > math.MaxFloat32 {
		return float32(math.Copysign(math.Inf(1), s))
	}
	// r: the exact sum truncated toward zero to float32.
	r := float32(s)
	if math.Abs(float64(r)) > math.Abs(s) || (float64(r) == s && e != 0 && (e > 0) != (s > 0)) {
		r = math.Float32frombits(math.Float32bits(r) - 1) // one step toward zero
	}
	if float64(r) != s || e != 0 {
		r = math.Float32frombits(math.Float32bits(r) | 1)
	}
	return flush(r)
}
