package fallback

import "math"

// The float32 exp used by every kernel set (the assembly computes the same
// steps in vector registers):
//
//	x = n·ln2 + r, n = round(x·log2(e)), |r| <= ln2/2 (Cody–Waite: ln2 split
//	in a part with few significant bits, so n·ln2Hi is exact, and the rest)
//	exp(r) ≈ 1 + r + r²·P(r), P of degree 5 (Cephes expf minimax), evaluated
//	in split form as 1 + (r + r²·((p0·r+p1)·r⁴ + (p2·r+p3)·r² + (p4·r+p5))),
//	so the vector code's chain of dependent FMAs is 4 long, not 7 (the
//	NEON set keeps the Horner form ((((((p0·r+p1)·r+p2)·r+p3)·r+p4)·r+p5)·r+1)·r+1,
//	which fits its fixed exp registers; the two differ by rounding only)
//	exp(x) = exp(r)·2^n, 2^n built by writing n+127 into the exponent bits.
//
// Inputs are clamped to [ExpMin, ExpMax] so 2^n never overflows the
// exponent; below ExpMin (where the true result is subnormal) the result is
// exactly 0, so exp(-Inf) = 0; above ExpMax it saturates at
// exp(ExpMax) ≈ 2.4e38 (attention only takes exp of values <= 0). Measured
// error: at most 0.99 ulp on normal results (every 97th float32; the tests
// check a grid over the whole float32 range and allow 2).
const (
	// ExpMin is ln(2^-126): the smallest input with a normal result.
	ExpMin = -87.33654475
	// ExpMax is just below ln(MaxFloat32).
	ExpMax = 88.37626

	// Log2e is log2(e).
	Log2e = 1.44269504088896341
	// Ln2Hi + Ln2Lo is ln 2; Ln2Hi has few significant bits, so n·Ln2Hi is
	// exact for the n that occur.
	Ln2Hi = 0.693359375
	Ln2Lo = -2.12194440e-4
)

// ExpPoly are p0..p5 of the polynomial, highest degree first. The
// generators of the assembly take these values, so every set computes the
// same polynomial.
var ExpPoly = [6]float32{1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1}

// Exp32 returns e^x with the algorithm of the kernels (see the constants).
func Exp32(x float32) float32 {
	if x != x {
		return x // NaN
	}
	if x < ExpMin {
		return 0
	}
	if x > ExpMax {
		x = ExpMax
	}
	n := float32(math.RoundToEven(float64(x * Log2e)))
	r := x - n*Ln2Hi
	r -= n * Ln2Lo
	r2 := r * r
	c := ExpPoly
	p := (c[0]*r+c[1])*r2 + (c[2]*r + c[3])
	p = p*r2 + (c[4]*r + c[5])
	p = 1 + (p*r2 + r)
	return p * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// tanh, for softcap, in two forms that meet at TanhSmall:
//
//	|x| <  TanhSmall: tanh(x) = x + x·z·P(z), z = x², P of degree 4 (Cephes
//	                  tanhf), Horner form — no cancellation for small x
//	|x| >= TanhSmall: tanh(|x|) = (1 - e)/(1 + e), e = exp(-2|x|) <= 0.29,
//	                  then x's sign
//
// Measured error over the whole float32 range: at most 0.8 ulp below
// TanhSmall and 1.6 ulp above (the tests allow 4). tanh(±Inf) = ±1 and NaN
// stays NaN.
const TanhSmall = 0.625

// TanhPoly are the coefficients of P, highest degree first; the generators
// take these values.
var TanhPoly = [5]float32{-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1}

// Tanh32 returns tanh(x) as the kernels compute it (see TanhSmall).
func Tanh32(x float32) float32 {
	ax := x
	if ax < 0 {
		ax = -ax
	}
	var t float32
	if ax < TanhSmall {
		z := ax * ax
		p := TanhPoly[0]
		for _, c := range TanhPoly[1:] {
			p = p*z + c
		}
		t = ax*z*p + ax
	} else {
		e := Exp32(-2 * ax)
		t = (1 - e) / (1 + e)
	}
	if x < 0 {
		return -t
	}
	return t
}

// Softcap32 returns c·tanh(s/c), keeping -Inf (a masked score) at -Inf.
func Softcap32(s, c float32) float32 {
	if math.IsInf(float64(s), -1) {
		return s
	}
	return c * Tanh32(s/c)
}
