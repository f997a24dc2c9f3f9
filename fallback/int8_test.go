package fallback

import (
	"math"
	"testing"
)

// TestNonFinite: the first NaN or ±Inf is found, and every finite value
// (the largest, subnormals, -0) passes.
func TestNonFinite(t *testing.T) {
	finite := []float32{0, float32(math.Copysign(0, -1)), math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 1}
	if i := NonFinite(finite); i != -1 {
		t.Errorf("NonFinite of finite values = %d, want -1", i)
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		x := append(append([]float32(nil), finite...), bad, bad)
		if i := NonFinite(x); i != len(finite) {
			t.Errorf("NonFinite with %v at %d = %d", bad, len(finite), i)
		}
	}
}
