package mha

import (
	"fmt"
	"math"
	"math/bits"
)

// ALiBiSlopes returns the standard ALiBi slopes of heads query heads (for
// Options.ALiBi), the rule of the ALiBi paper, BLOOM, MPT and llama.cpp:
// with n the largest power of two <= heads and maxBias (0 means 8, the
// paper's value), head h < n gets 2^(-maxBias·(h+1)/n) and the others
// interleave the slopes of 2n heads, 2^(-maxBias·(2(h-n)+1)/(2n)). For 8
// heads that is 1/2, 1/4, ..., 1/256.
func ALiBiSlopes(heads int, maxBias float32) ([]float32, error) {
	if heads < 1 {
		return nil, fmt.Errorf("%w: ALiBiSlopes of %d heads, must be >= 1", ErrShape, heads)
	}
	if _, err := allocFloats("ALiBiSlopes", heads); err != nil {
		return nil, err
	}
	bias := float64(maxBias)
	switch {
	case bias == 0:
		bias = 8
	case !(bias > 0 && bias <= 1024): // NaN fails too
		return nil, fmt.Errorf("%w: ALiBiSlopes maxBias = %v, must be 0 (8) or in (0, 1024]", ErrOption, maxBias)
	}
	n := 1 << (bits.Len(uint(heads)) - 1) // the largest power of two <= heads
	s := make([]float32, heads)
	for h := range s {
		if h < n {
			s[h] = float32(math.Exp2(-bias * float64(h+1) / float64(n)))
		} else {
			s[h] = float32(math.Exp2(-bias * float64(2*(h-n)+1) / float64(2*n)))
		}
	}
	return s, nil
}
