package fallback

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestAddOdd checks addOdd against an exact sum rounded to odd by
// math/big (toward zero at float32's precision, the last bit set when
// inexact), on random pairs across magnitudes (near cancellation, far
// apart, one tiny), signed zeros and the flushing of denormals.
func TestAddOdd(t *testing.T) {
	rng := rand.New(rand.NewPCG(0xadd, 0))
	want := func(x, y float32) float32 {
		x, y = flush(x), flush(y)
		s := new(big.Float).SetPrec(200).SetFloat64(float64(x))
		s.Add(s, new(big.Float).SetPrec(200).SetFloat64(float64(y)))
		z := new(big.Float).SetPrec(24).SetMode(big.ToZero).Set(s)
		r, _ := z.Float32()
		if z.Acc() != big.Exact {
			r = math.Float32frombits(math.Float32bits(r) | 1)
		}
		if s.Sign() == 0 {
			return x + y
		}
		return flush(r)
	}
	random := func() float32 {
		return float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(80)-40)))
	}
	cases := [][2]float32{{1, 1e-30}, {1, -1e-30}, {-1, 1e-30}, {1, float32(math.Copysign(0, -1))},
		{float32(math.Copysign(0, -1)), float32(math.Copysign(0, -1))}, {1e-39, 1}, {3, -3}, {1 << 24, 1}, {1 << 24, -1}}
	for range 200000 {
		x := random()
		y := random()
		if rng.IntN(4) == 0 {
			y = -x * (1 + float32(rng.NormFloat64())*1e-6) // near cancellation
		}
		cases = append(cases, [2]float32{x, y})
	}
	for _, c := range cases {
		got, w := addOdd(c[0], c[1]), want(c[0], c[1])
		if math.Float32bits(got) != math.Float32bits(w) {
			t.Fatalf("addOdd(%g, %g) = %g (%#x), want %g (%#x)", c[0], c[1], got, math.Float32bits(got), w, math.Float32bits(w))
		}
	}
}
