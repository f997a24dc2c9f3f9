package mha

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// mlaCase is a small MLA configuration with random checkpoint tensors.
type mlaCase struct {
	cfg MLAConfig
	w   MLAWeights
}

func newMLACase(rng *rand.Rand, qLora int, interleaved, yarn bool) mlaCase {
	cfg := MLAConfig{DModel: 48, Heads: 4, QLoraRank: qLora, KVLoraRank: 32, NopeDim: 16, RopeDim: 8, VHeadDim: 12,
		Rotary: Rotary{Base: 10000, Interleaved: interleaved}, NormEps: 1e-6}
	if yarn { // DeepSeek V3's rule: yarn with mscale and mscale_all_dim
		cfg.Rotary.Scaling = &RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositions: 16, BetaFast: 32, BetaSlow: 1, MScale: 0.707, MScaleAllDim: 1}
	}
	scaled := func(n int, s float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * s)
		}
		return x
	}
	H, dm, lat, rd, nope, vd := cfg.Heads, cfg.DModel, cfg.KVLoraRank, cfg.RopeDim, cfg.NopeDim, cfg.VHeadDim
	norm := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(0.5 + rng.Float64())
		}
		return x
	}
	w := MLAWeights{WKVA: scaled((lat+rd)*dm, 1/math.Sqrt(float64(dm))), KVANorm: norm(lat),
		WKVB: scaled(H*(nope+vd)*lat, 1/math.Sqrt(float64(lat))), WO: scaled(dm*H*vd, 1/math.Sqrt(float64(H*vd)))}
	if qLora > 0 {
		w.WQA, w.QANorm, w.WQB = scaled(qLora*dm, 1/math.Sqrt(float64(dm))), norm(qLora), scaled(H*(nope+rd)*qLora, 1/math.Sqrt(float64(qLora)))
	} else {
		w.WQ = scaled(H*(nope+rd)*dm, 1/math.Sqrt(float64(dm)))
	}
	return mlaCase{cfg, w}
}

// reference is transformers' DeepseekV3Attention on one sequence x,
// [L][DModel], positions 0..L-1, causal, in float64 and in its own
// (non-absorbed) form: q (through q_a_proj, its RMSNorm and q_b_proj, or
// q_proj), the latent (kv_a_proj_with_mqa, RMSNorm) expanded by kv_b_proj
// into each head's k_nope and v, rotary on q's and the shared key's last
// RopeDim values, softmax scale (nope+rope)^-1/2 · m², o_proj.
func (mc mlaCase) reference(t *testing.T, x []float64, L int) []float64 {
	cfg, w := mc.cfg, mc.w
	H, dm, lat, rd, nope, vd := cfg.Heads, cfg.DModel, cfg.KVLoraRank, cfg.RopeDim, cfg.NopeDim, cfg.VHeadDim
	qk := nope + rd
	lin := func(wt []float32, in, out int, v []float64) []float64 { // [out][in] · v
		y := make([]float64, out)
		for o := range y {
			for i := 0; i < in; i++ {
				y[o] += float64(wt[o*in+i]) * v[i]
			}
		}
		return y
	}
	rms := func(v []float64, g []float32) {
		ss := 0.0
		for _, a := range v {
			ss += a * a
		}
		inv := 1 / math.Sqrt(ss/float64(len(v))+float64(cfg.NormEps))
		for i := range v {
			v[i] *= inv * float64(g[i])
		}
	}
	rot := cfg.Rotary
	rot.Dims = rd
	freq, attn, err := rot.Frequencies(L)
	if err != nil {
		t.Fatal(err)
	}
	rotate := func(v []float64, pos int) {
		for i, f := range freq {
			a, b := i, i+rd/2
			if rot.Interleaved {
				a, b = 2*i, 2*i+1
			}
			c, s := attn*math.Cos(float64(pos)*f), attn*math.Sin(float64(pos)*f)
			v[a], v[b] = v[a]*c-v[b]*s, v[b]*c+v[a]*s
		}
	}
	q, knope, vv, kr := make([][]float64, L), make([][]float64, L), make([][]float64, L), make([][]float64, L)
	for i := 0; i < L; i++ {
		xi := x[i*dm : (i+1)*dm]
		if cfg.QLoraRank > 0 {
			qa := lin(w.WQA, dm, cfg.QLoraRank, xi)
			rms(qa, w.QANorm)
			q[i] = lin(w.WQB, cfg.QLoraRank, H*qk, qa)
		} else {
			q[i] = lin(w.WQ, dm, H*qk, xi)
		}
		ckv := lin(w.WKVA, dm, lat+rd, xi)
		c := ckv[:lat]
		rms(c, w.KVANorm)
		kv := lin(w.WKVB, lat, H*(nope+vd), c)
		knope[i], vv[i] = make([]float64, H*nope), make([]float64, H*vd)
		for h := 0; h < H; h++ {
			copy(knope[i][h*nope:], kv[h*(nope+vd):h*(nope+vd)+nope])
			copy(vv[i][h*vd:], kv[h*(nope+vd)+nope:(h+1)*(nope+vd)])
			rotate(q[i][h*qk+nope:(h+1)*qk], i)
		}
		kr[i] = append([]float64(nil), ckv[lat:]...)
		rotate(kr[i], i)
	}
	scale := 1 / math.Sqrt(float64(qk))
	if sc := rot.Scaling; sc != nil && sc.MScaleAllDim != 0 {
		scale *= YarnSoftmaxScale(sc.factor(), sc.MScaleAllDim)
	}
	out := make([]float64, L*dm)
	for i := 0; i < L; i++ {
		heads := make([]float64, H*vd)
		for h := 0; h < H; h++ {
			s := make([]float64, i+1)
			mx := math.Inf(-1)
			for j := 0; j <= i; j++ {
				for d := 0; d < nope; d++ {
					s[j] += q[i][h*qk+d] * knope[j][h*nope+d]
				}
				for d := 0; d < rd; d++ {
					s[j] += q[i][h*qk+nope+d] * kr[j][d]
				}
				s[j] *= scale
				mx = math.Max(mx, s[j])
			}
			sum := 0.0
			for j := range s {
				s[j] = math.Exp(s[j] - mx)
				sum += s[j]
			}
			for j := range s {
				for d := 0; d < vd; d++ {
					heads[h*vd+d] += s[j] / sum * vv[j][h*vd+d]
				}
			}
		}
		copy(out[i*dm:], lin(w.WO, H*vd, dm, heads))
	}
	return out
}

// maxRel is the largest |got - want| over the largest |want|.
func maxRel(got []float32, want []float64) float64 {
	d, m := 0.0, 0.0
	for i, w := range want {
		e := math.Abs(float64(got[i]) - w)
		if math.IsNaN(e) {
			return math.Inf(1) // a NaN fails every bound
		}
		d, m = math.Max(d, e), math.Max(m, math.Abs(w))
	}
	return d / m
}

// TestMLALayer checks NewMLALayer's absorbed layer against transformers'
// DeepseekV3Attention written out in float64 (non-absorbed): Forward
// (causal) and decoding through a cache of every storage type in chunks
// (a 5-token prompt, then token by token), with and without q_lora, both
// rotary pairings, with and without DeepSeek V3's yarn (mscale_all_dim:
// the softmax scale's m²), on every kernel set. The cache holds
// KVLoraRank+RopeDim values per token and no V.
func TestMLALayer(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 61))
	const L = 19
	for _, e := range engines {
		for _, qLora := range []int{0, 24} {
			for _, il := range []bool{false, true} {
				for _, yarn := range []bool{false, true} {
					mc := newMLACase(rng, qLora, il, yarn)
					name := fmt.Sprintf("%s q_lora=%d interleaved=%v yarn=%v", e.Kernels(), qLora, il, yarn)
					l, err := NewMLALayer(e, mc.cfg, mc.w)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					dm := mc.cfg.DModel
					x := random(rng, L*dm)
					x64 := make([]float64, len(x))
					for i, v := range x {
						x64[i] = float64(v)
					}
					want := mc.reference(t, x64, L)
					out := make([]float32, L*dm)
					if err := l.Forward(out, x, 1, L, &Options{Causal: true}); err != nil {
						t.Fatalf("%s: Forward: %v", name, err)
					}
					r := maxRel(out, want)
					if r > 2e-5 {
						t.Errorf("%s: Forward is %.2g (relative) from the float64 reference", name, r)
					}
					t.Logf("%s: Forward %.2g", name, r)
					for _, typ := range []DType{Float32, BFloat16, Int8, Int4} {
						// Int4: steps of |max|/8 a block (0.07–0.13 measured).
						tol := map[DType]float64{Float32: 2e-5, BFloat16: 1e-2, Int8: 3e-2, Int4: 0.25}[typ]
						cache, err := l.NewCacheOf(1, L, typ)
						if err != nil {
							t.Fatal(err)
						}
						if len(cache.V) != 0 || len(cache.V16) != 0 || len(cache.V8) != 0 || len(cache.V4) != 0 {
							t.Fatalf("%s: a cache with V inside K holds V", name)
						}
						got := make([]float32, L*dm)
						for at, n := 0, 5; at < L; at, n = at+n, 1 {
							if err := l.Decode(got[at*dm:(at+n)*dm], x[at*dm:(at+n)*dm], cache, n, nil); err != nil {
								t.Fatalf("%s %v: Decode at %d: %v", name, typ, at, err)
							}
						}
						r := maxRel(got, want)
						if r > tol {
							t.Errorf("%s: decoding through a %v cache is %.2g (relative) from the reference", name, typ, r)
						}
						t.Logf("%s: %v cache %.2g", name, typ, r)
					}
				}
			}
		}
	}
}

// mlaWithCache returns an MLA layer with q_lora, interleaved rotary and
// yarn on the first engine, a bfloat16 cache of batch sequences of
// capacity tokens, and the layer's DModel.
func mlaWithCache(t *testing.T, rng *rand.Rand, batch, capacity int) (*Layer, *Cache, int) {
	t.Helper()
	mc := newMLACase(rng, 24, true, true)
	l, err := NewMLALayer(engines[0], mc.cfg, mc.w)
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.NewCacheOf(batch, capacity, BFloat16)
	if err != nil {
		t.Fatal(err)
	}
	return l, c, mc.cfg.DModel
}

// TestMLAFork: an MLA cache's sequence forked by CopyTo then decoded gives,
// bit for bit, what decoding the prefix itself gives; Keep and DecodeTree
// run on it.
// TestMLAYarnFactorZero: yarn's Factor 0 means MaxPositions /
// OriginalMaxPositions for the rotary and for the default softmax scale
// alike, so the layer is bit for bit the one with that Factor written out.
func TestMLAYarnFactorZero(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 10))
	mc := newMLACase(rng, 0, false, true)
	zero := mc
	sc := *mc.cfg.Rotary.Scaling
	sc.Factor, sc.MaxPositions = 0, 4*sc.OriginalMaxPositions // Factor 4 resolved
	zero.cfg.Rotary.Scaling = &sc
	const L = 7
	x := random(rng, L*mc.cfg.DModel)
	var outs [2][]float32
	for i, c := range []mlaCase{mc, zero} {
		l, err := NewMLALayer(engines[0], c.cfg, c.w)
		if err != nil {
			t.Fatal(err)
		}
		outs[i] = make([]float32, len(x))
		if err := l.Forward(outs[i], x, 1, L, &Options{Causal: true}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range outs[0] {
		if outs[0][i] != outs[1][i] {
			t.Fatalf("yarn Factor 0 (MaxPositions/OriginalMaxPositions = 4) differs from Factor 4 at %d: %v, %v", i, outs[1][i], outs[0][i])
		}
	}
}

func TestMLAFork(t *testing.T) {
	rng := rand.New(rand.NewPCG(62, 62))
	l, cache, dm := mlaWithCache(t, rng, 2, 16)
	prompt, next := random(rng, 6*dm), random(rng, dm)
	y := make([]float32, 6*dm)
	if err := l.DecodeSeqs(nil, y, prompt, cache, []int{6, 0}, nil); err != nil {
		t.Fatal(err)
	}
	if err := cache.CopyTo(cache, 1, 0, 6); err != nil {
		t.Fatal(err)
	}
	two := make([]float32, 2*dm)
	if err := l.DecodeSeqs(nil, two, append(append([]float32(nil), next...), next...), cache, []int{1, 1}, nil); err != nil {
		t.Fatal(err)
	}
	if i := firstDiff(two[:dm], two[dm:]); i >= 0 {
		t.Fatalf("forked sequence differs at %d: %v, %v", i, two[dm+i], two[i])
	}
	// A tree of two siblings after the 7 tokens, then keep the second.
	tree := Tree{Parents: []int{-1, -1}}
	out := make([]float32, 2*dm)
	if err := l.DecodeTree(nil, out, random(rng, 2*dm), cache, []int{2, 0}, tree, nil); err != nil {
		t.Fatal(err)
	}
	if err := cache.Keep(0, 7, []int{8}); err != nil {
		t.Fatal(err)
	}
	if cache.Len(0) != 8 {
		t.Fatalf("after Keep the sequence holds %d tokens, want 8", cache.Len(0))
	}
}

// TestValueInKeyLayer: a layer with ValueInKey (no rotary, no norm)
// computes, bit for bit, a layer whose value projection is the first
// ValueDim columns of each key head's projection.
func TestValueInKeyLayer(t *testing.T) {
	rng := rand.New(rand.NewPCG(63, 63))
	const dm, H, Hkv, dk, dv, L = 24, 4, 2, 12, 8, 9
	for _, e := range engines {
		wk, bk := random(rng, dm*Hkv*dk), random(rng, Hkv*dk)
		wv, bv := make([]float32, dm*Hkv*dv), make([]float32, Hkv*dv)
		for i := 0; i < dm; i++ {
			for g := 0; g < Hkv; g++ {
				copy(wv[(i*Hkv+g)*dv:][:dv], wk[(i*Hkv+g)*dk:][:dv])
			}
		}
		for g := 0; g < Hkv; g++ {
			copy(bv[g*dv:][:dv], bk[g*dk:][:dv])
		}
		w := Weights{WQ: random(rng, dm*H*dk), WK: wk, BK: bk, WO: random(rng, H*dv*dm)}
		cfg := LayerConfig{DModel: dm, Heads: H, KVHeads: Hkv, HeadDim: dk, ValueDim: dv}
		plain := w
		plain.WV, plain.BV = wv, bv
		lp, err := NewLayer(e, cfg, plain)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ValueInKey = true
		li, err := NewLayer(e, cfg, w)
		if err != nil {
			t.Fatal(err)
		}
		x := random(rng, L*dm)
		a, b := make([]float32, L*dm), make([]float32, L*dm)
		if err := lp.Forward(a, x, 1, L, &Options{Causal: true}); err != nil {
			t.Fatal(err)
		}
		if err := li.Forward(b, x, 1, L, &Options{Causal: true}); err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(b, a); i >= 0 {
			t.Fatalf("%s: ValueInKey Forward differs at %d: %v, %v", e.Kernels(), i, b[i], a[i])
		}
		if _, err := NewLayer(e, cfg, plain); !errors.Is(err, ErrOption) {
			t.Fatalf("ValueInKey with WV: %v, want ErrOption", err)
		}
	}
}

// TestMLAErrors: bad configurations and tensors name the problem.
func TestMLAErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(64, 64))
	e := engines[0]
	good := newMLACase(rng, 24, true, false)
	for _, c := range []struct {
		name string
		edit func(*mlaCase)
		want error
		says string
	}{
		{"no KVANorm", func(m *mlaCase) { m.w.KVANorm = nil }, ErrBuffer, "KVANorm"},
		{"short WKVB", func(m *mlaCase) { m.w.WKVB = m.w.WKVB[:10] }, ErrBuffer, "WKVB"},
		{"NaN in WO", func(m *mlaCase) { m.w.WO = append([]float32(nil), m.w.WO...); m.w.WO[7] = float32(math.NaN()) }, ErrNonFinite, "WO[7]"},
		{"WQ with q_lora", func(m *mlaCase) { m.w.WQ = make([]float32, 10) }, ErrOption, "WQ"},
		{"odd RopeDim", func(m *mlaCase) { m.cfg.RopeDim = 7 }, ErrShape, "RopeDim"},
		{"Rotary.Dims", func(m *mlaCase) { m.cfg.Rotary.Dims = 4 }, ErrOption, "Dims"},
		{"no heads", func(m *mlaCase) { m.cfg.Heads = 0 }, ErrShape, "Heads"},
	} {
		m := good
		c.edit(&m)
		_, err := NewMLALayer(e, m.cfg, m.w)
		if !errors.Is(err, c.want) || !contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %v naming %q", c.name, err, c.want, c.says)
		}
	}
	l, err := NewMLALayer(e, good.cfg, good.w)
	if err != nil {
		t.Fatal(err)
	}
	dm := good.cfg.DModel
	if err := l.ForwardCross(make([]float32, dm), random(rng, dm), random(rng, dm), 1, 1, 1, nil); !errors.Is(err, ErrOption) {
		t.Errorf("ForwardCross on an MLA layer: %v, want ErrOption", err)
	}
	if _, err := l.NewCrossKV(random(rng, dm), 1, 1); !errors.Is(err, ErrOption) {
		t.Errorf("NewCrossKV on an MLA layer: %v, want ErrOption", err)
	}
}

// TestMLANoAllocs: an MLA layer's decode step (low-rank queries, the
// latent's norm, its own softmax scale) and Forward allocate nothing in
// steady state.
func TestMLANoAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(65, 65))
	l, c, dm := mlaWithCache(t, rng, 1, 64)
	x, y := random(rng, 8*dm), make([]float32, 8*dm)
	step := func() {
		if err := l.Decode(y[:dm], x[:dm], c, 1, nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Truncate(0, 0); err != nil {
			t.Fatal(err)
		}
		if err := l.Forward(y, x, 1, 8, &Options{Causal: true}); err != nil {
			t.Fatal(err)
		}
	}
	if n, where := stepAllocs(t, 20, step); n != 0 {
		t.Errorf("20 MLA steps allocated %d objects in the library: %s", n, where)
	}
}
