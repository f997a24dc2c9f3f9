package tile

import "math"

// Part is one query row's attention over a range of keys, not yet
// normalized: the largest score M, the sum L of e^(s−M) over the range's
// keys, and O = Σ e^(s−M)·v. A finished result (output o, log-sum-exp λ)
// is the part {M: λ, L: 1, O: o}. A nil O adds nothing.
type Part struct {
	M, L float32
	O    []float32
}

// MergeParts is the one merge of partial results over disjoint key
// ranges (the split decode's chunks and mha.Merge's shards): it combines
// parts 0..n-1 of one query row, in that order, into acc (float64, the
// row's length):
//
//	m = max_c M_c over the parts with L_c > 0;  w_c = e^(M_c − m)
//	l = Σ_c w_c·L_c;  acc = Σ_c w_c·O_c
//
// A part with L_c = 0 saw no key: its weight is 0, so it adds only the
// NaN of a value its keys' -Inf scores hid (0·NaN), as the flash loop's
// rescale does. nan reports a part with a NaN M or L: the row is NaN and
// acc is not computed. When no part has L > 0, m is -Inf, l is 0 and acc
// is zeros (or NaN where a part's O is). The caller normalizes
// (acc/l, or with a sink) and writes the LSE m + ln l.
func MergeParts(acc []float64, n int, part func(c int) Part) (m, l float64, nan bool) {
	m = math.Inf(-1)
	for c := 0; c < n; c++ {
		pc := part(c)
		switch {
		case pc.M != pc.M || pc.L != pc.L:
			return m, 0, true
		case pc.L > 0:
			m = math.Max(m, float64(pc.M))
		}
	}
	clear(acc)
	for c := 0; c < n; c++ {
		pc := part(c)
		w := 0.0
		if pc.L > 0 {
			w = 1 // M_c = m, +Inf included
			if x := float64(pc.M); x != m {
				w = math.Exp(x - m)
			}
		}
		l += w * float64(pc.L)
		for j, x := range pc.O {
			acc[j] += w * float64(x)
		}
	}
	return m, l, false
}
