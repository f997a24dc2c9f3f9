package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/fastattn/fastattn/mha"
)

// A variant runs a row with one of the attention semantics on top of its
// mask, to price it against the plain row of the same run:
//
//	alibi     ALiBi slopes (mha.ALiBiSlopes)
//	sinks     one sink logit per head
//	kvlens    the last quarter of the keys padded away by KVLens
//	mask      the same padding as a [B][1][1][Lk] bool mask
//	bias      the same padding as a [B][1][1][Lk] -Inf float bias
//	          (with Causal, QueryOffset aligns the queries to the kept
//	          keys, as KVLens does, so the three compute the same pairs)
//	window=N  a local window of N (both ways on full rows, a sliding
//	          window on causal ones)
//
// FLOPs count the (query, key) pairs the row actually computes, so a
// padded or windowed row's GFLOP/s is over the keys it visits.
type variant struct {
	name   string
	window int
}

// parseVariants reads -variants: comma-separated names; "plain" (or "")
// is the row without a variant.
func parseVariants(s string) ([]variant, error) {
	var vs []variant
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "plain" || f == "":
			vs = append(vs, variant{})
		case f == "alibi" || f == "sinks" || f == "kvlens" || f == "mask" || f == "bias":
			vs = append(vs, variant{name: f})
		case strings.HasPrefix(f, "window="):
			n, err := strconv.Atoi(strings.TrimPrefix(f, "window="))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("-variants: %q: the window must be a positive integer", f)
			}
			vs = append(vs, variant{name: "window", window: n})
		default:
			return nil, fmt.Errorf("-variants: %q is not plain, alibi, sinks, kvlens, mask, bias or window=N", f)
		}
	}
	return vs, nil
}

// String is the variant as the table shows it after the mask: "" for
// plain.
func (v variant) String() string {
	if v.name == "window" {
		return fmt.Sprintf("+window=%d", v.window)
	}
	if v.name == "" {
		return ""
	}
	return "+" + v.name
}

// padded reports whether the variant pads keys away.
func (v variant) padded() bool { return v.name == "kvlens" || v.name == "mask" || v.name == "bias" }

// keep is the keys a padded row keeps: three quarters.
func (c Case) keep() int { return c.Lk - c.Lk/4 }

// options returns the call's options for the case and its variant.
func (c Case) options(threads int) (*mha.Options, error) {
	o := &mha.Options{Causal: c.Causal, Threads: threads, Compute: c.Compute}
	if c.Causal && (c.Variant.name == "mask" || c.Variant.name == "bias") {
		off := c.keep() - c.Lq // the queries end at the last kept key, where KVLens puts them
		o.QueryOffset = &off
	}
	switch c.Variant.name {
	case "alibi":
		s, err := mha.ALiBiSlopes(c.H, 0)
		if err != nil {
			return nil, err
		}
		o.ALiBi = s
	case "sinks":
		o.Sinks = make([]float32, c.H)
		for h := range o.Sinks {
			o.Sinks[h] = float32(h%5) - 2
		}
	case "kvlens":
		o.KVLens = make([]int, c.B)
		for b := range o.KVLens {
			o.KVLens[b] = c.keep()
		}
	case "mask":
		o.Mask, o.MaskBatch, o.MaskQLen = make([]bool, c.B*c.Lk), c.B, 1
		for i := range o.Mask {
			o.Mask[i] = i%c.Lk < c.keep()
		}
	case "bias":
		o.Bias, o.BiasBatch, o.BiasQLen = make([]float32, c.B*c.Lk), c.B, 1
		for i := range o.Bias {
			if i%c.Lk >= c.keep() {
				o.Bias[i] = float32(math.Inf(-1))
			}
		}
	case "window":
		o.Window = c.Variant.window
	}
	return o, nil
}

// visible returns the keys [lo, hi) query row i sees (bottom-right
// offset, padding and window as the variant says).
func (c Case) visible(i int) (lo, hi int) {
	lk := c.Lk
	if c.Variant.padded() {
		lk = c.keep()
	}
	at := i + lk - c.Lq // the query's key position
	lo, hi = 0, lk
	if c.Causal {
		hi = min(hi, at+1)
	}
	if w := c.Variant.window; w > 0 {
		lo = max(lo, at-w+1)
		if !c.Causal {
			hi = min(hi, at+w)
		}
	}
	return lo, max(lo, hi)
}
