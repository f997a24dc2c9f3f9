package mha

import (
	"math"
	"math/rand/v2"
	"testing"
)

// transposed returns the [out][in] copy of m, [in][out].
func transposed(m []float32, in, out int) []float32 {
	t := make([]float32, len(m))
	for r := 0; r < in; r++ {
		for c := 0; c < out; c++ {
			t[c*in+r] = m[r*out+c]
		}
	}
	return t
}

// fused stacks the [in][out] matrices ms (of widths ws) along the output
// dimension.
func fused(in int, ms [][]float32, ws []int) []float32 {
	var f []float32
	for r := 0; r < in; r++ {
		for i, m := range ms {
			f = append(f, m[r*ws[i]:(r+1)*ws[i]]...)
		}
	}
	return f
}

// TestWeightLayouts: [out][in] matrices and a fused QKV matrix, in either
// layout, give a layer bit for bit equal to the one built from separate
// [in][out] matrices.
func TestWeightLayouts(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	cfg := LayerConfig{DModel: 70, Heads: 6, KVHeads: 2, HeadDim: 12, ValueDim: 9}
	for _, e := range engines {
		l, w := testLayer(t, e, rng, cfg, true)
		dm, qw, kw, vw, ow := 70, 72, 24, 18, 54
		const B, L = 2, 11
		x := random(rng, B*L*dm)
		want := make([]float32, B*L*dm)
		if err := l.Forward(want, x, B, L, &Options{Causal: true}); err != nil {
			t.Fatal(err)
		}
		qkv := fused(dm, [][]float32{w.WQ, w.WK, w.WV}, []int{qw, kw, vw})
		bqkv := append(append(append([]float32(nil), w.BQ...), w.BK...), w.BV...)
		for name, lw := range map[string]Weights{
			"out-in": {WQ: transposed(w.WQ, dm, qw), WK: transposed(w.WK, dm, kw), WV: transposed(w.WV, dm, vw),
				WO: transposed(w.WO, ow, dm), BQ: w.BQ, BK: w.BK, BV: w.BV, BO: w.BO, OutIn: true},
			"fused":        {WQKV: qkv, BQKV: bqkv, WO: w.WO, BO: w.BO},
			"fused out-in": {WQKV: transposed(qkv, dm, qw+kw+vw), BQKV: bqkv, WO: transposed(w.WO, ow, dm), BO: w.BO, OutIn: true},
		} {
			l2, err := NewLayer(e, cfg, lw)
			if err != nil {
				t.Fatal(name, err)
			}
			got := make([]float32, len(want))
			if err := l2.Forward(got, x, B, L, &Options{Causal: true}); err != nil {
				t.Fatal(err)
			}
			if i := firstDiff(got, want); i >= 0 {
				t.Fatalf("%s %s: out[%d] = %v, want %v", e.Kernels(), name, i, got[i], want[i])
			}
		}
	}
}

// TestLayerConfigErrors: rotary, QK-norm and weight-form errors.
func TestLayerConfigErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	cfg := LayerConfig{DModel: 16, Heads: 2, HeadDim: 8}
	_, w := testLayer(t, engines[0], rng, cfg, true)
	nan := math.NaN()
	for _, c := range []struct {
		name string
		cfg  func(*LayerConfig)
		w    func(*Weights)
		want error
	}{
		{"odd rotary dims", func(c *LayerConfig) { c.Rotary.Dims = 3 }, nil, ErrOption},
		{"rotary dims > HeadDim", func(c *LayerConfig) { c.Rotary.Dims = 10 }, nil, ErrOption},
		{"negative rotary dims", func(c *LayerConfig) { c.Rotary.Dims = -2 }, nil, ErrOption},
		{"NaN base", func(c *LayerConfig) { c.Rotary = Rotary{Dims: 8, Base: nan} }, nil, ErrOption},
		{"negative base", func(c *LayerConfig) { c.Rotary = Rotary{Dims: 8, Base: -1} }, nil, ErrOption},
		{"infinite scale", func(c *LayerConfig) { c.Rotary = Rotary{Dims: 8, Scale: math.Inf(1)} }, nil, ErrOption},
		{"frequency overflow", func(c *LayerConfig) { c.Rotary = Rotary{Dims: 8, Base: 1e-300, Scale: 1e-300} }, nil, ErrOption},
		{"negative eps", func(c *LayerConfig) { c.NormEps = -1 }, nil, ErrOption},
		{"NaN eps", func(c *LayerConfig) { c.NormEps = float32(nan) }, nil, ErrOption},
		{"QNorm length", nil, func(w *Weights) { w.QNorm = make([]float32, 5) }, ErrBuffer},
		{"KNorm length", nil, func(w *Weights) { w.KNorm = make([]float32, 17) }, ErrBuffer},
		{"WQKV and WQ", nil, func(w *Weights) { w.WQKV = make([]float32, 16*48) }, ErrOption},
		{"short WQKV", nil, func(w *Weights) { *w = Weights{WQKV: make([]float32, 16*47), WO: w.WO} }, ErrBuffer},
		{"short BQKV", nil, func(w *Weights) { *w = Weights{WQKV: make([]float32, 16*48), BQKV: make([]float32, 47), WO: w.WO} }, ErrBuffer},
	} {
		cc, ww := cfg, w
		if c.cfg != nil {
			c.cfg(&cc)
		}
		if c.w != nil {
			c.w(&ww)
		}
		wantErr(t, c.name, noPanic(t, c.name, func() error { _, err := NewLayer(engines[0], cc, ww); return err }), c.want)
	}
}
