package mha

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

// TestALiBiSlopes checks the standard slopes against the values the ALiBi
// paper's get_slopes (and BLOOM's build_alibi_tensor) produce.
func TestALiBiSlopes(t *testing.T) {
	p := func(e float64) float64 { return math.Exp2(e) }
	want := map[int][]float64{
		1:  {p(-8)},
		2:  {p(-4), p(-8)},
		4:  {0.25, 0.0625, 0.015625, 0.00390625},
		8:  {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625},
		6:  {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125}, // 4 + get_slopes(8)[0::2][:2]
		12: {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625, p(-0.5), p(-1.5), p(-2.5), p(-3.5)},
		// BLOOM-176B has 112 heads: 64 of 2^(-h/8), then 48 of 2^(-(2k+1)/16).
		112: nil,
	}
	for heads, w := range want {
		got, err := ALiBiSlopes(heads, 0)
		if err != nil {
			t.Fatal(err)
		}
		if heads == 112 {
			for h := 0; h < 64; h++ {
				w = append(w, p(-float64(h+1)/8))
			}
			for k := 0; k < 48; k++ {
				w = append(w, p(-float64(2*k+1)/16))
			}
		}
		if len(got) != heads {
			t.Fatalf("%d heads: %d slopes", heads, len(got))
		}
		for h := range got {
			if float64(got[h]) != float64(float32(w[h])) {
				t.Errorf("%d heads: slope %d = %v, want %v", heads, h, got[h], w[h])
			}
		}
	}
	if s, _ := ALiBiSlopes(4, 16); s[0] != 1.0/16 { // MPT's alibi_bias_max
		t.Errorf("maxBias 16: slope 0 = %v, want 1/16", s[0])
	}
	for _, c := range []struct {
		heads int
		bias  float32
	}{{0, 0}, {-3, 0}, {math.MaxInt, 0}, {4, -1}, {4, float32(math.NaN())}, {4, 2000}} {
		if _, err := ALiBiSlopes(c.heads, c.bias); err == nil {
			t.Errorf("ALiBiSlopes(%d, %v): no error", c.heads, c.bias)
		}
	}
}

// TestBidirectionalWindowSkips: a bidirectional window costs the keys it
// keeps, not all of them: the rows see exactly 2·Window-1 keys (fewer at
// the ends) and the result matches the oracle on a long sequence.
func TestBidirectionalWindowLong(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	s := Shape{Batch: 1, Heads: 2, QLen: 700, KVLen: 700, HeadDim: 16}
	checkCase(t, rng, s, Options{Window: 40})
	checkCase(t, rng, s, Options{Window: 40, Causal: true})
	off := 100
	checkCase(t, rng, s, Options{Window: 64, QueryOffset: &off, ALiBi: []float32{0.1, 0.3}})
}

// TestALiBiFar: standard slopes over long distances (most weights far
// below the row's max), prefill and decode, with sinks.
func TestALiBiFar(t *testing.T) {
	t.Parallel() // a sweep against the oracle: runs beside the other sweeps, after the sequential tests
	rng := rand.New(rand.NewPCG(39, 40))
	slopes, _ := ALiBiSlopes(4, 0)
	for _, s := range []Shape{
		{Batch: 1, Heads: 4, KVHeads: 2, QLen: 300, KVLen: 600, HeadDim: 32},
		{Batch: 2, Heads: 4, KVHeads: 1, QLen: 1, KVLen: 1500, HeadDim: 64, Layout: BHSD},
		{Batch: 2, Heads: 4, KVHeads: 4, QLen: 3, KVLen: 900, HeadDim: 16},
	} {
		checkCase(t, rng, s, Options{Causal: true, ALiBi: slopes})
		checkCase(t, rng, s, Options{ALiBi: slopes, Sinks: []float32{-1, 0, 1, 2}})
		checkCase(t, rng, s, Options{Causal: true, ALiBi: []float32{1, 0.5, -0.01, 0}, Softcap: 5})
	}
}

// TestPaddingMask: a key-padding mask [B][1][1][Lk], as bool and as a
// -Inf float bias, gives the KVLens result (long masked runs are skipped,
// short ones masked in their blocks), prefill and decode, with and
// without the fused decode kernel's runs.
func TestPaddingMask(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	for _, s := range []Shape{
		{Batch: 3, Heads: 4, KVHeads: 2, QLen: 70, KVLen: 300, HeadDim: 32},
		{Batch: 3, Heads: 8, KVHeads: 2, QLen: 1, KVLen: 700, HeadDim: 64, Layout: BHSD},
		{Batch: 3, Heads: 4, KVHeads: 4, QLen: 2, KVLen: 1100, HeadDim: 48, ValueDim: 40},
	} {
		lens := []int{s.KVLen, s.KVLen / 3, 5}
		mask := make([]bool, s.Batch*s.KVLen)
		bias := make([]float32, s.Batch*s.KVLen)
		for b, n := range lens {
			for j := 0; j < s.KVLen; j++ {
				// A gap of 7 keys (masked in blocks) and one of 100
				// (skipped) inside the kept keys, then padding.
				keep := j < n && !(j >= 10 && j < 17) && !(j >= 120 && j < 220)
				mask[b*s.KVLen+j] = keep
				if !keep {
					bias[b*s.KVLen+j] = float32(math.Inf(-1))
				}
			}
		}
		checkCase(t, rng, s, Options{Mask: mask[:s.KVLen], MaskQLen: 1}) // sequence 0's mask for every sequence
		checkCase(t, rng, s, Options{Bias: bias, BiasBatch: s.Batch, BiasQLen: 1, Causal: true})
		checkCase(t, rng, s, Options{Mask: mask, MaskBatch: s.Batch, MaskQLen: 1, Sinks: random(rng, s.Heads)})
		// A per-key bias that is 0 on most keys: clean runs and biased runs.
		for j := range bias {
			if bias[j] == 0 && j%50 < 10 {
				bias[j] = 0.5
			}
		}
		checkCase(t, rng, s, Options{Bias: bias, BiasBatch: s.Batch, BiasQLen: 1})
	}
}

// TestSinkLimits: a sink far above every score leaves ~zeros and an LSE
// of the sink; far below, the plain result.
func TestSinkLimits(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	s := Shape{Batch: 1, Heads: 2, QLen: 3, KVLen: 200, HeadDim: 8}
	for _, sink := range []float32{1e30, -1e30, math.MaxFloat32, -math.MaxFloat32, 0} {
		checkCase(t, rng, s, Options{Sinks: []float32{sink, -sink}, Causal: true})
	}
}

// TestMerge splits calls into key shards, runs them separately and
// checks that Merge gives the single call's result, for every option a
// shard can carry, on every kernel set.
func TestMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 38))
	for _, layout := range []Layout{BSHD, BHSD} {
		s := Shape{Batch: 2, Heads: 4, KVHeads: 2, QLen: 9, KVLen: 200, HeadDim: 16, ValueDim: 12, Layout: layout}
		q, k, v, _ := inputs(rng, s)
		slopes, _ := ALiBiSlopes(4, 0)
		sinks := random(rng, 4)
		for _, o := range []Options{{}, {Causal: true}, {Causal: true, ALiBi: slopes, Sinks: sinks}, {Window: 30, Sinks: sinks}} {
			for _, e := range engines {
				checkMerge(t, e, s, o, q, k, v, []int{0, 37, 38, 150, 200})
			}
		}
	}
}

// checkMerge runs the call whole and as shards at the cut points, merges
// the shards and compares.
func checkMerge(t *testing.T, e *Engine, s Shape, o Options, q, k, v []float32, cuts []int) {
	t.Helper()
	rs, _ := s.resolve()
	wantOut := make([]float32, rs.Batch*rs.QLen*rs.Heads*rs.ValueDim)
	wantLSE := make([]float32, rs.Batch*rs.Heads*rs.QLen)
	whole := o
	whole.OutLSE = wantLSE
	if err := e.Attention(wantOut, q, k, v, s, &whole); err != nil {
		t.Fatal(err)
	}
	var outs, lses [][]float32
	for c := 0; c+1 < len(cuts); c++ {
		a, b := cuts[c], cuts[c+1]
		sh := rs
		sh.KVLen = b - a
		ks, vs := keyShard(rs, k, rs.HeadDim, a, b), keyShard(rs, v, rs.ValueDim, a, b)
		so := o
		off := rs.KVLen - rs.QLen - a // the global bottom-right offset, from the shard's first key
		so.QueryOffset = &off
		if c > 0 {
			so.Sinks = nil // a sink belongs to one shard
		}
		out := make([]float32, len(wantOut))
		so.OutLSE = make([]float32, len(wantLSE))
		if b > a {
			if err := e.Attention(out, q, ks, vs, sh, &so); err != nil {
				t.Fatal(err)
			}
		} else {
			fill32(so.OutLSE, float32(math.Inf(-1))) // an empty shard saw nothing
		}
		outs, lses = append(outs, out), append(lses, so.OutLSE)
	}
	out := make([]float32, len(wantOut))
	lse := make([]float32, len(wantLSE))
	if err := Merge(out, lse, outs, lses, s); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if d := math.Abs(float64(out[i] - wantOut[i])); !(d <= 2e-6*(1+math.Abs(float64(wantOut[i])))) {
			t.Fatalf("%s %+v: out[%d] = %v, single call %v", e.Kernels(), o, i, out[i], wantOut[i])
		}
	}
	for i := range lse {
		if d := math.Abs(float64(lse[i] - wantLSE[i])); !(d <= 2e-6*(1+math.Abs(float64(wantLSE[i])))) {
			t.Fatalf("%s %+v: lse[%d] = %v, single call %v", e.Kernels(), o, i, lse[i], wantLSE[i])
		}
	}
}

// keyShard copies keys [a, b) of a K or V tensor of shape s (row width
// dim) into a tensor of b-a keys.
func keyShard(s Shape, x []float32, dim, a, b int) []float32 {
	n := b - a
	out := make([]float32, s.Batch*n*s.KVHeads*dim)
	sp := specOf(s, nil)
	for bb := 0; bb < s.Batch; bb++ {
		for g := 0; g < s.KVHeads; g++ {
			for j := a; j < b; j++ {
				src := x[sp.Index(bb, j, g, s.KVHeads, s.KVLen, dim):][:dim]
				dst := (&fallback.Spec{HeadsMajor: s.Layout == BHSD}).Index(bb, j-a, g, s.KVHeads, n, dim)
				copy(out[dst:dst+dim], src)
			}
		}
	}
	return out
}

// TestMergeRows checks Merge's row rules: -Inf parts add nothing, a NaN
// LSE makes the row NaN, a row no part saw is zeros with LSE -Inf, and
// bad arguments are errors.
func TestMergeRows(t *testing.T) {
	s := Shape{Batch: 1, Heads: 1, QLen: 3, KVLen: 1, HeadDim: 2}
	inf, nan := float32(math.Inf(-1)), float32(math.NaN())
	outs := [][]float32{{1, 2, 3, 4, 5, 6}, {7, 8, 0, 0, 9, 10}}
	lses := [][]float32{{0, inf, nan}, {0, inf, 1}}
	out, lse := make([]float32, 6), make([]float32, 3)
	if err := Merge(out, lse, outs, lses, s); err != nil {
		t.Fatal(err)
	}
	if out[0] != 4 || out[1] != 5 || math.Abs(float64(lse[0])-math.Ln2) > 1e-7 {
		t.Errorf("row 0: %v, lse %v; want [4 5], ln 2", out[:2], lse[0])
	}
	if out[2] != 0 || out[3] != 0 || lse[1] != inf {
		t.Errorf("row 1: %v, lse %v; want zeros, -Inf", out[2:4], lse[1])
	}
	if out[4] == out[4] || lse[2] == lse[2] {
		t.Errorf("row 2: %v, lse %v; want NaN", out[4:], lse[2])
	}
	for name, err := range map[string]error{
		"no parts":   Merge(out, lse, nil, nil, s),
		"count":      Merge(out, lse, outs, lses[:1], s),
		"short part": Merge(out, lse, [][]float32{outs[0][:5], outs[1]}, lses, s),
		"short lse":  Merge(out, lse, outs, [][]float32{lses[0], lses[1][:2]}, s),
		"short out":  Merge(out[:5], lse, outs, lses, s),
		"overlap":    Merge(outs[0], lse, outs, lses, s),
	} {
		if !errors.Is(err, ErrBuffer) {
			t.Errorf("%s: %v, want ErrBuffer", name, err)
		}
	}
	if err := Merge(out, nil, outs, lses, Shape{Batch: 0, Heads: 1, QLen: 3, HeadDim: 2}); !errors.Is(err, ErrShape) {
		t.Errorf("zero batch: %v, want ErrShape", err)
	}
}
