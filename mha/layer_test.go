package mha

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

// testLayer builds a layer with random weights (scaled 1/sqrt(fan-in), so
// activations stay O(1)) and, when withBias, random biases.
func testLayer(t testing.TB, e *Engine, rng *rand.Rand, cfg LayerConfig, withBias bool) (*Layer, Weights) {
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
		{LayerConfig{DModel: 256, Heads: 4, HeadDim: 64}, 2, 19, 19, Options{}, true}, // every projection on packed A (N >= 256, 38 rows)
		{LayerConfig{DModel: 24, Heads: 2, HeadDim: 5}, 3, 11, 29, Options{}, true},   // cross
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

// rmsNorm64 is HF transformers' RMSNorm (Qwen3RMSNorm, OLMo2RMSNorm) in
// float64: x·rsqrt(mean(x²) + eps)·w, over groups of len(w) values.
func rmsNorm64(x []float64, w []float32, eps float64) {
	for g := 0; g+len(w) <= len(x); g += len(w) {
		v := x[g : g+len(w)]
		ms := 0.0
		for _, e := range v {
			ms += e * e
		}
		r := 1 / math.Sqrt(ms/float64(len(v))+eps)
		for i := range v {
			v[i] = v[i] * r * float64(w[i])
		}
	}
}

// rope64 is HF transformers' apply_rotary_pos_emb on one head vector x at
// position pos of a forward pass over seqLen positions, in float64:
// inv_freq and the attention factor A from hfRope, freqs = pos·inv_freq;
// rotate_half (emb = cat(freqs, freqs), (x·cos + cat(-x2, x1)·sin)·A) or,
// interleaved, GPT-J's rotate_every_two, on the first dims values.
func rope64(x []float64, r Rotary, pos, seqLen int) {
	d := r.Dims
	inv, attn := hfRope(r, seqLen)
	freqs := make([]float64, d/2)
	for i := range freqs {
		freqs[i] = float64(pos) * inv[i]
	}
	emb := make([]float64, d)     // the angle of each rotated dimension
	rotated := make([]float64, d) // rotate_half(x) or rotate_every_two(x)
	for i := 0; i < d; i++ {
		if r.Interleaved {
			emb[i] = freqs[i/2]
			if i%2 == 0 {
				rotated[i] = -x[i+1]
			} else {
				rotated[i] = x[i-1]
			}
		} else {
			emb[i] = freqs[i%(d/2)]
			if i < d/2 {
				rotated[i] = -x[i+d/2]
			} else {
				rotated[i] = x[i-d/2]
			}
		}
	}
	for i := 0; i < d; i++ {
		x[i] = x[i]*attn*math.Cos(emb[i]) + rotated[i]*attn*math.Sin(emb[i])
	}
}

// referenceSelf is Forward's float64 reference with QK-norm and rotary at
// positions 0..L-1 (HF transformers' order: project, norm, rotate).
func referenceSelf(cfg LayerConfig, w Weights, x []float32, batch, L int, o *Options) []float64 {
	return referenceSelfLens(cfg, w, x, batch, L, o, func(int) int { return L })
}

// referenceSelfLens is referenceSelf with the token at position p rotated
// for a sequence of lenOf(p) tokens (rope scaling that depends on the
// length: a token decoded at step p sees length p+1).
func referenceSelfLens(cfg LayerConfig, w Weights, x []float32, batch, L int, o *Options, lenOf func(int) int) []float64 {
	dm, H, Hkv, D := cfg.DModel, cfg.Heads, cfg.KVHeads, cfg.HeadDim
	eps := float64(cfg.NormEps)
	if eps == 0 {
		eps = 1e-6
	}
	q := fallback.Linear(x, w.WQ, w.BQ, batch*L, dm, H*D)
	k := fallback.Linear(x, w.WK, w.BK, batch*L, dm, Hkv*D)
	for r := 0; r < batch*L; r++ {
		for _, t := range []struct {
			x     []float64
			heads int
			norm  []float32
		}{{q[r*H*D : (r+1)*H*D], H, w.QNorm}, {k[r*Hkv*D : (r+1)*Hkv*D], Hkv, w.KNorm}} {
			if t.norm != nil {
				rmsNorm64(t.x, t.norm, eps)
			}
			if cfg.Rotary.Dims > 0 {
				for h := 0; h < t.heads; h++ {
					rope64(t.x[h*D:(h+1)*D], cfg.Rotary, r%L, lenOf(r%L))
				}
			}
		}
	}
	v := toF32(fallback.Linear(x, w.WV, w.BV, batch*L, dm, Hkv*cfg.ValueDim))
	s := Shape{Batch: batch, Heads: H, KVHeads: Hkv, QLen: L, KVLen: L, HeadDim: D, ValueDim: cfg.ValueDim}
	attn, _ := fallback.Attention(specOf(s, o), toF32(q), toF32(k), v)
	return fallback.Linear(toF32(attn), w.WO, w.BO, batch*L, H*cfg.ValueDim, dm)
}

// TestRotaryQKNorm: Forward with rotary embeddings (both pair layouts,
// partial dims, θ, linear scaling) and QK-norm (per head and over all
// heads) against the float64 reference, on every set.
func TestRotaryQKNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	norm := func(n int) []float32 { // weights around 1, as trained ones are
		w := random(rng, n)
		for i := range w {
			w[i] = 1 + w[i]/2
		}
		return w
	}
	for _, c := range []struct {
		name         string
		cfg          LayerConfig
		qNorm, kNorm bool
		whole        bool // norm over all heads (OLMo 2)
		L            int
		opts         Options
	}{
		{"llama", LayerConfig{DModel: 48, Heads: 4, KVHeads: 2, HeadDim: 12, Rotary: Rotary{Dims: 12}}, false, false, false, 40, Options{Causal: true}},
		{"gptj partial", LayerConfig{DModel: 32, Heads: 2, HeadDim: 16, Rotary: Rotary{Dims: 8, Interleaved: true, Base: 500000, Scaling: &RopeScaling{Type: "linear", Factor: 4}}}, false, false, false, 70, Options{Causal: true}},
		{"neox partial", LayerConfig{DModel: 40, Heads: 4, HeadDim: 10, ValueDim: 6, Rotary: Rotary{Dims: 4, Base: 10000}}, false, false, false, 33, Options{}},
		{"qwen3", LayerConfig{DModel: 64, Heads: 8, KVHeads: 2, HeadDim: 16, Rotary: Rotary{Dims: 16, Base: 1000000}, NormEps: 1e-6}, true, true, false, 150, Options{Causal: true}},
		{"olmo2", LayerConfig{DModel: 32, Heads: 4, HeadDim: 8, Rotary: Rotary{Dims: 8}, NormEps: 1e-5}, true, true, true, 20, Options{Causal: true, Window: 7}},
		{"qnorm only", LayerConfig{DModel: 24, Heads: 3, HeadDim: 8}, true, false, false, 9, Options{}},
	} {
		for _, e := range engines {
			l, w := testLayer(t, e, rng, c.cfg, true)
			cfg := l.Config()
			if c.qNorm {
				w.QNorm = norm(cfg.HeadDim * map[bool]int{false: 1, true: cfg.Heads}[c.whole])
			}
			if c.kNorm {
				w.KNorm = norm(cfg.HeadDim * map[bool]int{false: 1, true: cfg.KVHeads}[c.whole])
			}
			l, err := NewLayer(e, cfg, w)
			if err != nil {
				t.Fatal(err)
			}
			const B = 2
			x := random(rng, B*c.L*cfg.DModel)
			want := referenceSelf(cfg, w, x, B, c.L, &c.opts)
			out := make([]float32, len(want))
			if err := l.Forward(out, x, B, c.L, &c.opts); err != nil {
				t.Fatal(err)
			}
			compare(t, e.Kernels()+" "+c.name, out, want, tolLayer, &worstLayer)
		}
	}
}

// TestCacheLayout checks the documented layout of a Cache,
// [Batch][KVHeads][Cap][dim]: after a ragged prefill, K and V at (b, g,
// pos) are the projections of token pos of sequence b for KV head g (no
// rotary embedding), and the positions past a sequence's length are
// untouched.
func TestCacheLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	cfg := LayerConfig{DModel: 12, Heads: 4, KVHeads: 2, HeadDim: 4, ValueDim: 8}
	for _, e := range engines {
		l, w := testLayer(t, e, rng, cfg, true)
		const capa = 9
		c, err := l.NewCache(2, capa)
		if err != nil {
			t.Fatal(err)
		}
		counts := []int{5, 3}
		x := random(rng, 8*cfg.DModel)
		if err := l.DecodeSeqs(context.Background(), make([]float32, len(x)), x, c, counts, nil); err != nil {
			t.Fatal(err)
		}
		for b, row := 0, 0; b < 2; b++ {
			for pos := 0; pos < capa; pos++ {
				for g := 0; g < cfg.KVHeads; g++ {
					for _, kv := range []struct {
						name    string
						cache   []float32
						w, bias []float32
						dim     int
					}{{"K", c.K, w.WK, w.BK, cfg.HeadDim}, {"V", c.V, w.WV, w.BV, cfg.ValueDim}} {
						width := cfg.KVHeads * kv.dim
						got := kv.cache[((b*cfg.KVHeads+g)*capa+pos)*kv.dim:][:kv.dim]
						for j := range got {
							want := 0.0
							if pos < counts[b] {
								want = float64(kv.bias[g*kv.dim+j])
								for i := 0; i < cfg.DModel; i++ {
									want += float64(x[(row+pos)*cfg.DModel+i]) * float64(kv.w[i*width+g*kv.dim+j])
								}
							}
							if !(math.Abs(float64(got[j])-want) <= 1e-5) { // a NaN fails too
								t.Fatalf("%s: %s[b=%d][g=%d][pos=%d][%d] = %v, want %v", e.Kernels(), kv.name, b, g, pos, j, got[j], want)
							}
						}
					}
				}
			}
			row += counts[b]
		}
	}
}
