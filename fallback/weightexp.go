package fallback

import "math"

// The exp of the softmax's weights, e^d for d = x - base <= 0 (the
// weights and alpha of every set's Softmax and fused Decode kernels),
// cheaper than Exp32:
//
//	y = d·log2(e)                  one rounding
//	n = round(y), r = y - n        nearest even; r in [-1/2, 1/2], exact
//	2^r ≈ 1 + r·Q(r)               Q of degree 5, minimax for 2^r's relative error
//	e^d = 2^r·2^n                  n added to the exponent bits of 2^r
//
// The vector code rounds with an add of 1.5·2^23 (whose ulp is 1) and
// takes n's bits from that sum, so the steps are one multiply, three adds,
// six FMAs and two integer operations: on cores whose multiplies share
// two pipes with the QK and PV products (Zen 4) it gives those pipes 7
// operations where Exp32 gives them 10 and a rounding and a scaling
// instruction.
//
// Its error beside e^d: the polynomial's 1.4·10⁻⁸ (float32
// coefficients), the last FMA's rounding, and the rounding of y and of
// log2(e) in float32, a relative error of up to |y|·2⁻²³·ln2 in the
// result: about 1 ulp where the weight is within a factor 2 of the row's
// largest (|y| <= 1), up to 30 ulp on weights 2⁻²⁴ of it, whose share of
// the row's sum is below float32's resolution. The tests allow 2 ulp plus
// that term. Below WeightExpMin the result is exactly 0 (it would be below
// 2⁻¹²⁵: such a weight adds nothing a float32 sum of the row's weights,
// the largest of which is 1, could hold), so exp(-Inf) = 0; NaN stays
// NaN. Inputs above 0 are not taken (the kernels subtract the maximum).
const (
	// WeightExpMin is 125·ln(1/2): below it WeightExp32 returns 0, so
	// 2^n·2^r stays a normal float32.
	WeightExpMin = -86.64339973
	// WeightRound is 1.5·2^23: y + WeightRound rounds y to an integer n,
	// held in the sum's low mantissa bits (for |y| < 2^22). The generators
	// take this value.
	WeightRound = 1.5 * (1 << 23)
)

// Exp2Poly are Q's coefficients c6..c1, highest degree first (2^r ≈ 1 +
// r·(c1 + r·(c2 + … + r·c6)) on [-1/2, 1/2], a Remez fit of the relative
// error: 3.9·10⁻⁹, 1.4·10⁻⁸ with the coefficients rounded to float32). The
// generators take these values.
var Exp2Poly = [6]float32{1.5469732170e-04, 1.3410000829e-03, 9.6180308610e-03, 5.5502973497e-02, 2.4022650719e-01, 6.9314724207e-01}

// WeightExp32 returns e^d for d <= 0 as the Softmax kernels compute it
// (see WeightExpMin).
func WeightExp32(d float32) float32 {
	if d != d {
		return d // NaN
	}
	if d < WeightExpMin {
		return 0
	}
	y := d * Log2e
	t := y + WeightRound
	n := t - WeightRound
	r := y - n
	q := Exp2Poly[0]
	for _, c := range Exp2Poly[1:] {
		q = q*r + c
	}
	p := q*r + 1
	return math.Float32frombits(math.Float32bits(p) + math.Float32bits(t)<<23)
}
