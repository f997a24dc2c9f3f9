package fallback

import (
	"math"
	"testing"
)

// weightExpBound is WeightExp32's documented error at d: 2 ulp of e^d plus
// the rounding of y = d·log2e and of log2e itself, a relative |y|·2^-23·ln2.
func weightExpBound(d float32, want float64) float64 {
	f := float32(want)
	ulp := float64(math.Nextafter32(f, float32(math.Inf(1))) - f)
	y := math.Abs(float64(d) * math.Log2E)
	return 2*ulp + want*y*math.Ln2/(1<<23)
}

// TestWeightExp checks WeightExp32 against float64 exp on every 61st
// float32 in [WeightExpMin, 0] and its special inputs.
func TestWeightExp(t *testing.T) {
	worst := 0.0
	for b := uint32(0); ; b += 61 {
		d := -math.Float32frombits(b)
		if d < WeightExpMin {
			break
		}
		got, want := float64(WeightExp32(d)), math.Exp(float64(d))
		if err := math.Abs(got - want); !(err <= weightExpBound(d, want)) {
			t.Fatalf("WeightExp32(%v) = %v, want %v", d, got, want)
		}
		if d > -1 {
			f := float32(want)
			worst = max(worst, math.Abs(got-want)/float64(math.Nextafter32(f, 2)-f))
		}
	}
	t.Logf("worst error for d in (-1, 0]: %.2f ulp", worst)
	for _, c := range []struct{ d, want float32 }{
		{0, 1},
		{float32(math.Inf(-1)), 0},
		{WeightExpMin - 1e-3, 0},
		{-1000, 0},
	} {
		if got := WeightExp32(c.d); got != c.want {
			t.Errorf("WeightExp32(%v) = %v, want %v", c.d, got, c.want)
		}
	}
	if got := WeightExp32(float32(math.NaN())); got == got {
		t.Errorf("WeightExp32(NaN) = %v, want NaN", got)
	}
	if got := WeightExp32(WeightExpMin); got < 0x1p-126 || got > 0x1p-124 {
		t.Errorf("WeightExp32(WeightExpMin) = %v, want a normal about 2^-125", got)
	}
}
