package mha

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

// testLayer builds a layer with random weights (scaled 1/sqrt(fan-in), so
// activations stay O(1)) and, when withBias, random biases.
func testLayer(t *testing.T, e *Engine, rng *rand.Rand, cfg LayerConfig, withBias bool) (*Layer, Weights) {
	t.Helper()
	if cfg.KVHeads == 0 {
		cfg.KVHeads = cfg.Heads
	}
	if cfg.ValueDim == 0 {
		cfg.ValueDim = cfg.HeadDim
	}
	mat := func(in, out int) []float32 {
		w := random(rng, in*out)
		s := float32(1 / math.Sqrt(float64(in)))
		for i := range w {
			w[i] *= s
		}
		return w
	}
	dm, qw, kw, vw, ow := cfg.DModel, cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim, cfg.KVHeads*cfg.ValueDim, cfg.Heads*cfg.ValueDim
	w := Weights{WQ: mat(dm, qw), WK: mat(dm, kw), WV: mat(dm, vw), WO: mat(ow, dm)}
	if withBias {
		w.BQ, w.BK, w.BV, w.BO = random(rng, qw), random(rng, kw), random(rng, vw), random(rng, dm)
	}
	l, err := NewLayer(e, cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	return l, w
}

// toF32 rounds a float64 tensor to float32 (the precision the layer keeps
// its intermediate tensors in).
func toF32(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

// referenceLayer is the plain composition: float64 matmuls and the oracle.
func referenceLayer(cfg LayerConfig, w Weights, xq, xkv []float32, batch, lq, lk int, o *Options) []float64 {
	dm := cfg.DModel
	q := toF32(fallback.Linear(xq, w.WQ, w.BQ, batch*lq, dm, cfg.Heads*cfg.HeadDim))
	k := toF32(fallback.Linear(xkv, w.WK, w.BK, batch*lk, dm, cfg.KVHeads*cfg.HeadDim))
	v := toF32(fallback.Linear(xkv, w.WV, w.BV, batch*lk, dm, cfg.KVHeads*cfg.ValueDim))
	s := Shape{Batch: batch, Heads: cfg.Heads, KVHeads: cfg.KVHeads, QLen: lq, KVLen: lk,
		HeadDim: cfg.HeadDim, ValueDim: cfg.ValueDim}
	attn, _ := fallback.Attention(specOf(s, o), q, k, v)
	return fallback.Linear(toF32(attn), w.WO, w.BO, batch*lq, cfg.Heads*cfg.ValueDim, dm)
}

// The layer's tolerance is looser than attention's: the projections add
// float32 dot products of DModel (up to a few hundred) terms before and
// after, each with relative error ~ sqrt(n)·2^-24 on O(1) values.
const tolLayer = 1e-4

var worstLayer float64

func TestLayerForward(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	cases := []struct {
		cfg      LayerConfig
		b, lq    int
		lk       int // cross-attention when != lq
		opts     Options
		withBias bool
	}{
		{LayerConfig{DModel: 32, Heads: 4, HeadDim: 8}, 2, 13, 13, Options{}, true},
		{LayerConfig{DModel: 48, Heads: 6, KVHeads: 2, HeadDim: 16}, 1, 70, 70, Options{Causal: true}, false},
		{LayerConfig{DModel: 40, Heads: 4, KVHeads: 1, HeadDim: 12, ValueDim: 7}, 2, 9, 9, Options{Causal: true, Window: 4, Softcap: 3}, true},
		{LayerConfig{DModel: 300, Heads: 3, HeadDim: 33}, 1, 65, 65, Options{Causal: true}, true},
		{LayerConfig{DModel: 24, Heads: 2, HeadDim: 5}, 3, 11, 29, Options{}, true}, // cross
	}
	for _, c := range cases {
		for _, e := range engines {
			l, w := testLayer(t, e, rng, c.cfg, c.withBias)
			cfg := l.Config()
			xq := random(rng, c.b*c.lq*cfg.DModel)
			xkv := xq
			if c.lk != c.lq {
				xkv = random(rng, c.b*c.lk*cfg.DModel)
			}
			want := referenceLayer(cfg, w, xq, xkv, c.b, c.lq, c.lk, &c.opts)
			out := make([]float32, len(want))
			var err error
			if c.lk == c.lq {
				err = l.Forward(out, xq, c.b, c.lq, &c.opts)
			} else {
				err = l.ForwardCross(out, xq, xkv, c.b, c.lq, c.lk, &c.opts)
			}
			if err != nil {
				t.Fatal(err)
			}
			compare(t, e.Kernels()+" layer", out, want, tolLayer, &worstLayer)
		}
	}
	t.Logf("worst relative error of the layer: %.3g (tolerance %.0e)", worstLayer, tolLayer)
}

// TestDecode: prefill a prompt, then decode token by token (and in chunks
// of several tokens); the outputs must equal Forward with Causal over the
// whole sequence.
func TestDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, cfg := range []LayerConfig{
		{DModel: 32, Heads: 4, KVHeads: 2, HeadDim: 8},
		{DModel: 36, Heads: 3, HeadDim: 19, ValueDim: 10},
	} {
		slopes, _ := ALiBiSlopes(cfg.Heads, 0)
		sinks := random(rng, cfg.Heads)
		for _, c := range []struct {
			opts Options
			L    int
		}{{Options{}, 37}, {Options{Window: 5, Softcap: 2}, 37}, {Options{ALiBi: slopes, Sinks: sinks}, 37},
			{Options{ALiBi: slopes, Sinks: sinks, Window: 100}, 170}} { // 170: the split decode path
			opts, L := c.opts, c.L
			for _, e := range engines {
				l, _ := testLayer(t, e, rng, cfg, true)
				const B, prompt = 2, 10
				dm := l.Config().DModel
				x := random(rng, B*L*dm)
				full := make([]float32, B*L*dm)
				fo := opts
				fo.Causal = true
				if err := l.Forward(full, x, B, L, &fo); err != nil {
					t.Fatal(err)
				}
				cache, err := l.NewCache(B, L)
				if err != nil {
					t.Fatal(err)
				}
				// Steps: the prompt at once, then 1, 3, 1, 1, ... tokens.
				for pos, step := 0, prompt; pos < L; pos, step = pos+step, 1+(pos%3) {
					step = min(step, L-pos)
					xs := make([]float32, B*step*dm)
					for b := 0; b < B; b++ {
						copy(xs[b*step*dm:(b+1)*step*dm], x[(b*L+pos)*dm:(b*L+pos+step)*dm])
					}
					out := make([]float32, B*step*dm)
					if err := l.Decode(out, xs, cache, step, &opts); err != nil {
						t.Fatal(err)
					}
					for b := 0; b < B; b++ {
						want := make([]float64, step*dm)
						for i := range want {
							want[i] = float64(full[(b*L+pos)*dm+i])
						}
						compare(t, e.Kernels()+" decode", out[b*step*dm:(b+1)*step*dm], want, 1e-5, &worstLayer)
					}
				}
				if got := cache.Lens(nil); got[0] != L || got[1] != L {
					t.Fatalf("cache holds %v tokens, want %d", got, L)
				}
				if err := l.Decode(make([]float32, B*dm), make([]float32, B*dm), cache, 1, nil); !errors.Is(err, ErrCacheFull) {
					t.Fatalf("decode past capacity: %v, want ErrCacheFull", err)
				}
				if cache.Len(0) != L || cache.Len(1) != L {
					t.Fatalf("failed decode changed the cache lengths to %v", cache.Lens(nil))
				}
			}
		}
	}
}
