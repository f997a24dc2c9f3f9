package mha

import (
	"math"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

// TestPublicConstants checks that the exported constants, written as
// values so that go doc shows them, equal the internal ones they stand for.
func TestPublicConstants(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"Float32", int(Float32), int(fallback.KVFloat32)},
		{"Float16", int(Float16), int(fallback.KVFloat16)},
		{"BFloat16", int(BFloat16), int(fallback.KVBFloat16)},
		{"Int8", int(Int8), int(fallback.KVInt8)},
		{"Int4", int(Int4), int(fallback.KVInt4)},
		{"QuantBlock", QuantBlock, fallback.Int8Block},
		{"Int4BlockBytes", Int4BlockBytes, fallback.Int4Block},
		{"MaxPosition", MaxPosition, math.MaxInt / 4},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, the internal value is %d", c.name, c.got, c.want)
		}
	}
	for _, d := range []DType{Float32, Float16, BFloat16, Int8, Int4} {
		if d.String() != fallback.KVType(d).String() {
			t.Errorf("%d: String %q, internal %q", d, d.String(), fallback.KVType(d).String())
		}
	}
}
