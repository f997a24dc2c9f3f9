package mha

import (
	"fmt"
	"math"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/tile"
)

// Merge combines attention results computed over disjoint key ranges of
// the same queries into the result over their union: part p's output
// outs[p] and LSE lses[p] (Options.OutLSE of its call) give
//
//	M = max_p lses[p];  w_p = e^(lses[p] - M)
//	out = Σ_p w_p·outs[p] / Σ_p w_p;  lse = M + ln Σ_p w_p
//
// per query row, in float64, summed in the order of the parts, so the
// result does not depend on where or when the parts ran. It is the
// building block of ring or sequence-parallel attention: shard the keys
// and values across cores or machines, run each shard with the same
// queries (with Causal, set QueryOffset to the global offset minus the
// shard's first key), then merge. Give Sinks to one shard only: a sink is
// one more key, with a value of zero.
//
// shape describes the queries and outputs: Batch, Heads, QLen, ValueDim
// (0: HeadDim) and Layout; KVLen and KVHeads are ignored (shards differ in
// them). outs[p] and out are [B][QLen][Heads][Dv] (BSHD) or
// [B][Heads][QLen][Dv] (BHSD); lses[p] and lse are [B][Heads][QLen]; lse
// may be nil. A part whose LSE is -Inf (it saw no key) adds nothing; a NaN
// LSE makes the row NaN; a row no part saw is zeros with an LSE of -Inf.
// Its error is within a few float32 ulps of the parts' own: merging is
// exact in float64 and rounds once. out and lse must not overlap the
// parts.
func Merge(out, lse []float32, outs, lses [][]float32, shape Shape) error {
	shape.KVHeads, shape.KVLen = 0, 1
	if shape.HeadDim == 0 && shape.ValueDim > 0 {
		shape.HeadDim = shape.ValueDim // Merge never reads q or k
	}
	s, err := shape.resolve()
	if err != nil {
		return err
	}
	B, H, Lq, Dv := s.Batch, s.Heads, s.QLen, s.ValueDim
	if len(outs) == 0 || len(outs) != len(lses) {
		return fmt.Errorf("%w: Merge needs as many outputs as LSEs, at least one: have %d and %d", ErrBuffer, len(outs), len(lses))
	}
	if err := needLen("out", len(out), B, Lq, H, Dv); err != nil {
		return err
	}
	if lse != nil {
		if err := needLen("lse", len(lse), B, H, Lq); err != nil {
			return err
		}
	}
	n, rows := B*Lq*H*Dv, B*H*Lq
	inputs := make([]span, 0, 2*len(outs))
	for p := range outs {
		name := fmt.Sprintf("outs[%d]", p)
		if err := needLen(name, len(outs[p]), B, Lq, H, Dv); err != nil {
			return err
		}
		lname := fmt.Sprintf("lses[%d]", p)
		if err := needLen(lname, len(lses[p]), B, H, Lq); err != nil {
			return err
		}
		inputs = append(inputs, f32(name, outs[p], n), f32(lname, lses[p], rows))
	}
	if err := noOverlap([]span{f32("out", out, n), f32("lse", lse, rows)}, inputs); err != nil {
		return err
	}
	acc := make([]float64, Dv)
	layout := fallback.Spec{HeadsMajor: s.Layout == BHSD}
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			for i := 0; i < Lq; i++ {
				at := (b*H+h)*Lq + i
				o := layout.Index(b, i, h, H, Lq, Dv)
				l := mergeRow(out[o:o+Dv], acc, outs, lses, at, o)
				if lse != nil {
					lse[at] = l
				}
			}
		}
	}
	return nil
}

// mergeRow merges one row by tile.MergeParts: the parts' LSEs at index at,
// their output rows at offset o, into dst (acc is scratch of its length);
// it returns the merged LSE. A part with an LSE of -Inf adds nothing.
func mergeRow(dst []float32, acc []float64, outs, lses [][]float32, at, o int) float32 {
	shard := func(p int) tile.Part {
		x := lses[p][at]
		if math.IsInf(float64(x), -1) {
			return tile.Part{M: x}
		}
		return tile.Part{M: x, L: 1, O: outs[p][o : o+len(dst)]}
	}
	m, sum, nan := tile.MergeParts(acc, len(lses), shard)
	switch {
	case nan:
		nan := float32(math.NaN())
		fill32(dst, nan)
		return nan
	case math.IsInf(m, -1): // no part saw a key
		clear(dst)
		return float32(m)
	}
	for j, a := range acc {
		dst[j] = float32(a / sum)
	}
	return float32(m + math.Log(sum))
}

// fill32 sets every element of x to v.
func fill32(x []float32, v float32) {
	for i := range x {
		x[i] = v
	}
}
