package fallback

import (
	"math"
	"math/big"
	"math/rand"
	"testing"
)

// TestFMA32 holds fma32 to x·y + z rounded once to float32, computed in
// big.Float, on random operands and on ties made on purpose (z such that
// the float64 sum lands halfway between two float32 values).
func TestFMA32(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	exact := func(x, y, z float32) float32 {
		p := new(big.Float).SetPrec(200).Mul(big.NewFloat(float64(x)), big.NewFloat(float64(y)))
		f, _ := p.Add(p, big.NewFloat(float64(z))).Float32()
		return f
	}
	ties := 0
	for i := range 200000 {
		x := float32(rng.NormFloat64()) * float32(math.Ldexp(1, rng.Intn(40)-20))
		y := float32(rng.NormFloat64())
		z := float32(rng.NormFloat64()) * float32(math.Ldexp(1, rng.Intn(40)-20))
		if i%2 == 1 {
			// Products near half a float32 ulp of z, ScoresQ8's shape: an
			// integer sum times a scale product.
			x, y = float32(rng.Intn(1<<20)), float32(rng.Float64())*float32(math.Ldexp(1, -rng.Intn(30)))
			z = float32(rng.NormFloat64())
		}
		got, want := fma32(x, y, z), exact(x, y, z)
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("fma32(%g, %g, %g) = %g, want %g", x, y, z, got, want)
		}
		if float32(math.FMA(float64(x), float64(y), float64(z))) != want {
			ties++
		}
	}
	t.Logf("%d random cases where rounding through float64 alone differs", ties)
	// x·y = 2^-24 - 2^-60 added to 1 + 2^-23: the exact sum lies just below
	// the midpoint 1 + 2^-23 + 2^-24, to which float64 rounds, and which
	// float32 would round to even (1 + 2^-22); the answer is 1 + 2^-23.
	x, y := float32(math.Ldexp(1+math.Ldexp(1, -18), -24)), float32(1-math.Ldexp(1, -18))
	z := float32(1 + math.Ldexp(1, -23))
	if got, want := fma32(x, y, z), exact(x, y, z); got != want || want != z {
		t.Errorf("the double-rounding case: fma32 = %g, exact %g, want %g", got, want, z)
	}
	if float32(math.FMA(float64(x), float64(y), float64(z))) == z {
		t.Errorf("the double-rounding case does not double-round")
	}
	for _, c := range [][3]float32{{0, 0, 0}, {float32(math.Inf(1)), 1, 0}, {math.MaxFloat32, 2, 0}, {1, 1, float32(math.NaN())}} {
		got, want := fma32(c[0], c[1], c[2]), float32(math.FMA(float64(c[0]), float64(c[1]), float64(c[2])))
		if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Errorf("fma32(%v) = %g, want %g", c, got, want)
		}
	}
}
