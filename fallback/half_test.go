package fallback

import (
	"math"
	"math/rand/v2"
	"testing"
)

// f16Value is the value of a binary16 pattern by the definition:
// (-1)^s · 2^(e-15) · 1.m, or 2^-14 · 0.m for e = 0.
func f16Value(h uint16) float64 {
	s, e, m := h>>15, int(h>>10)&0x1f, float64(h&0x3ff)
	v := math.Ldexp(1+m/1024, e-15)
	if e == 0 {
		v = math.Ldexp(m/1024, -14)
	}
	if e == 0x1f {
		v = math.Inf(1)
		if m != 0 {
			v = math.NaN()
		}
	}
	if s == 1 {
		v = -v
	}
	return v
}

// TestScalarConversions checks the scalar conversions against the
// definitions: F16ToF32 and BF16ToF32 on every pattern; F32ToF16 and
// F32ToBF16 give the nearest value (ties to the even pattern) for random
// and edge float32 values.
func TestScalarConversions(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		want, got := f16Value(h), float64(F16ToF32(h))
		if math.IsNaN(want) != math.IsNaN(got) || (!math.IsNaN(want) && want != got) {
			t.Fatalf("F16ToF32(%#04x) = %v, want %v", h, got, want)
		}
		if b := math.Float32bits(BF16ToF32(h)); b != uint32(h)<<16 {
			t.Fatalf("BF16ToF32(%#04x) = %#08x", h, b)
		}
	}
	rng := rand.New(rand.NewPCG(3, 3))
	xs := []float32{0.5 * 0x1p-24, 1.5 * 0x1p-24, 2.5 * 0x1p-24, 65519.996, 65520, 0x1p-14 * (1 - 0x1p-12),
		math.MaxFloat32, math.SmallestNonzeroFloat32, 1 + 0x1p-8, 1 + 3*0x1p-8}
	for i := 0; i < 200000; i++ {
		xs = append(xs, math.Float32frombits(rng.Uint32()), float32(rng.NormFloat64()), float32(rng.NormFloat64()*1e-5))
	}
	for _, x := range xs {
		if x != x {
			continue
		}
		nearestCheck(t, "F32ToF16", x, F32ToF16(x), f16Value)
		nearestCheck(t, "F32ToBF16", x, F32ToBF16(x), func(h uint16) float64 { return float64(BF16ToF32(h)) })
	}
}

// nearestCheck fails unless h is the pattern nearest to x among h and its
// neighbours of the same sign (ties: the even one), overflowing to Inf past
// the largest finite value plus half an ulp.
func nearestCheck(t *testing.T, name string, x float32, h uint16, value func(uint16) float64) {
	t.Helper()
	xv, got := float64(x), value(h)
	if math.Signbit(got) != math.Signbit(xv) {
		t.Fatalf("%s(%v) = %#04x: sign", name, x, h)
	}
	if math.IsInf(got, 0) {
		below := value(h - 1) // the largest finite
		if math.Abs(xv)-math.Abs(below) < (math.Abs(below)-math.Abs(value(h-2)))/2 {
			t.Fatalf("%s(%v) = Inf, the finite %v is nearer", name, x, below)
		}
		return
	}
	for _, n := range []uint16{h - 1, h + 1} {
		if n&0x7fff == 0x7fff || (h&0x7fff == 0 && n == h-1) {
			continue
		}
		nv := value(n)
		if math.IsNaN(nv) || math.IsInf(nv, 0) {
			continue
		}
		d, dn := math.Abs(xv-got), math.Abs(xv-nv)
		if dn < d || (dn == d && h&1 == 1) {
			t.Fatalf("%s(%v) = %#04x (%v), but %#04x (%v) is nearer or the even tie", name, x, h, got, n, nv)
		}
	}
}
