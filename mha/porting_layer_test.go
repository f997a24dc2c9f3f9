package mha

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The layer half of docs/PORTING.md's tests: each model family's attention
// module as its PyTorch / Hugging Face code computes it (nn.Linear weights
// [out][in], the family's norm, rotary and mask conventions), in float64,
// against mha.Layer configured as PORTING.md says.

// peerLayer is one sequence through a family's attention module.
type peerLayer struct {
	dm, H, Hkv, D  int
	wq, wk, wv, wo []float32 // [out][in]; wq holds the fused matrix when neox
	bq, bk, bv, bo []float32
	neox           bool      // wq, bq: GPT-NeoX/BLOOM's fused query_key_value, [H][3][D] rows
	qNorm, kNorm   []float64 // the factor applied to the normalized head (Gemma: 1 + weight)
	eps            float64
	rot            int       // rotated dims, rotate_half on the first rot of each head
	inv            []float64 // inverse frequencies, rot/2
	attnFactor     float64   // multiplies cos and sin (yarn, longrope); 0 means 1
	scale, softcap float64
	visible        func(i, j int) bool
	bias           func(h, i, j int) float64
}

// linear is nn.Linear: x [n][in] times wᵀ (w [out][in]) plus b.
func linear(x []float64, w, b []float32, in, out int) []float64 {
	n := len(x) / in
	y := make([]float64, n*out)
	for r := 0; r < n; r++ {
		for o := 0; o < out; o++ {
			s := 0.0
			if b != nil {
				s = float64(b[o])
			}
			for i := 0; i < in; i++ {
				s += x[r*in+i] * float64(w[o*in+i])
			}
			y[r*out+o] = s
		}
	}
	return y
}

// heads applies RMSNorm and rotate_half rotary to x, [L][heads][D], in
// place, at positions 0..L-1.
func (p peerLayer) heads(x []float64, heads int, norm []float64, rope bool) {
	L := len(x) / (heads * p.D)
	for t := 0; t < L; t++ {
		for h := 0; h < heads; h++ {
			v := x[(t*heads+h)*p.D:][:p.D]
			if norm != nil {
				ss := 0.0
				for _, a := range v {
					ss += a * a
				}
				r := 1 / math.Sqrt(ss/float64(p.D)+p.eps)
				for d := range v {
					v[d] *= r * norm[d]
				}
			}
			if !rope || p.rot == 0 {
				continue
			}
			a := p.attnFactor
			if a == 0 {
				a = 1
			}
			half := p.rot / 2
			for i := 0; i < half; i++ { // emb = cat(freqs, freqs); x·cos + rotate_half(x)·sin
				c, s := math.Cos(float64(t)*p.inv[i])*a, math.Sin(float64(t)*p.inv[i])*a
				x1, x2 := v[i], v[i+half]
				v[i], v[i+half] = x1*c-x2*s, x2*c+x1*s
			}
		}
	}
}

// forward returns the module's output for xq [lq][dm] and xkv [lk][dm]
// (self-attention: the same, with rotary).
func (p peerLayer) forward(xq, xkv []float64, self bool) []float64 {
	lq, lk := len(xq)/p.dm, len(xkv)/p.dm
	var q, k, v []float64
	if p.neox {
		fused := linear(xq, p.wq, p.bq, p.dm, 3*p.H*p.D)
		q, k, v = make([]float64, lq*p.H*p.D), make([]float64, lq*p.H*p.D), make([]float64, lq*p.H*p.D)
		for t := 0; t < lq; t++ {
			for h := 0; h < p.H; h++ {
				row := fused[(t*p.H+h)*3*p.D:]
				at := (t*p.H + h) * p.D
				copy(q[at:at+p.D], row[:p.D])
				copy(k[at:at+p.D], row[p.D:2*p.D])
				copy(v[at:at+p.D], row[2*p.D:3*p.D])
			}
		}
	} else {
		q = linear(xq, p.wq, p.bq, p.dm, p.H*p.D)
		k = linear(xkv, p.wk, p.bk, p.dm, p.Hkv*p.D)
		v = linear(xkv, p.wv, p.bv, p.dm, p.Hkv*p.D)
	}
	p.heads(q, p.H, p.qNorm, self)
	p.heads(k, p.Hkv, p.kNorm, self)
	toBHSD := func(x []float64, L, H int) []float64 { // [L][H][D] → [H][L][D]
		y := make([]float64, len(x))
		for l := 0; l < L; l++ {
			for h := 0; h < H; h++ {
				copy(y[(h*L+l)*p.D:][:p.D], x[(l*H+h)*p.D:][:p.D])
			}
		}
		return y
	}
	at := peerAttn{B: 1, H: p.H, Hkv: p.Hkv, Lq: lq, Lk: lk, D: p.D, scale: p.scale, softcap: p.softcap}
	if p.visible != nil {
		at.visible = func(_, _, i, j int) bool { return p.visible(i, j) }
	}
	if p.bias != nil {
		at.bias = func(_, h, i, j int) float64 { return p.bias(h, i, j) }
	}
	o := at.run(toBHSD(q, lq, p.H), toBHSD(k, lk, p.Hkv), toBHSD(v, lk, p.Hkv))
	cat := make([]float64, lq*p.H*p.D) // [lq][H·D]
	for h := 0; h < p.H; h++ {
		for t := 0; t < lq; t++ {
			copy(cat[(t*p.H+h)*p.D:][:p.D], o[(h*lq+t)*p.D:][:p.D])
		}
	}
	return linear(cat, p.wo, p.bo, p.H*p.D, p.dm)
}

// scaled returns n random weights of a Linear with in inputs.
func scaled(rng *rand.Rand, n, in int) []float32 {
	x := random(rng, n)
	for i := range x {
		x[i] *= float32(1 / math.Sqrt(float64(in)))
	}
	return x
}

// neoxToStacked reorders GPT-NeoX's (and BLOOM's, Falcon's) fused
// query_key_value rows, [H][3][D] of [out][in] rows, into Q|K|V stacked
// for Weights.WQKV (with OutIn); with in = 1 it reorders the bias.
func neoxToStacked(w []float32, H, D, in int) []float32 {
	out := make([]float32, len(w))
	for h := 0; h < H; h++ {
		for part := 0; part < 3; part++ { // q, k, v
			src := ((h*3 + part) * D) * in
			dst := (part*H*D + h*D) * in
			copy(out[dst:dst+D*in], w[src:src+D*in])
		}
	}
	return out
}

// TestPortLayers: families of Hugging Face transformers (and PyTorch's
// nn.MultiheadAttention) against mha.Layer, every kernel set.
func TestPortLayers(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 6))
	const dm, H, Hkv, D, L = 64, 4, 2, 16, 7
	x := random(rng, L*dm)
	causal := func(i, j int) bool { return j <= i }
	ones := func(n int, w []float32, plus float64) []float64 {
		y := make([]float64, n)
		for i := range y {
			y[i] = float64(w[i]) + plus
		}
		return y
	}
	wq, wk, wv, wo := scaled(rng, H*D*dm, dm), scaled(rng, Hkv*D*dm, dm), scaled(rng, Hkv*D*dm, dm), scaled(rng, dm*H*D, H*D)
	bq, bk, bv, bo := random(rng, H*D), random(rng, Hkv*D), random(rng, Hkv*D), random(rng, dm)
	normQ, normK := random(rng, D), random(rng, D)
	llama3 := Rotary{Dims: D, Base: 500000, Scaling: &RopeScaling{Type: "llama3", Factor: 8,
		LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}}
	inv := func(r Rotary) ([]float64, float64) { return hfRope(r, L) }
	base := peerLayer{dm: dm, H: H, Hkv: Hkv, D: D, wq: wq, wk: wk, wv: wv, wo: wo, scale: 1 / math.Sqrt(D),
		visible: causal, rot: D}
	gqa := LayerConfig{DModel: dm, Heads: H, KVHeads: Hkv, HeadDim: D}
	type family struct {
		name string
		cfg  LayerConfig
		w    Weights
		opts Options
		peer peerLayer
	}
	var fams []family
	{ // Llama 3.1: rope_theta 500000, rope_scaling llama3; no biases.
		p := base
		p.inv, p.attnFactor = inv(llama3)
		c := gqa
		c.Rotary = llama3
		fams = append(fams, family{"Llama 3.1", c, Weights{OutIn: true, WQ: wq, WK: wk, WV: wv, WO: wo}, Options{Causal: true}, p})
	}
	{ // Qwen2.5: q/k/v biases, rope_theta 1e6.
		p := base
		p.bq, p.bk, p.bv = bq, bk, bv
		r := Rotary{Dims: D, Base: 1e6}
		p.inv, p.attnFactor = inv(r)
		c := gqa
		c.Rotary = r
		fams = append(fams, family{"Qwen2.5", c, Weights{OutIn: true, WQ: wq, WK: wk, WV: wv, WO: wo, BQ: bq, BK: bk, BV: bv},
			Options{Causal: true}, p})
	}
	{ // Qwen3: q_norm, k_norm (RMSNorm per head, weight as is), eps 1e-6.
		p := base
		p.qNorm, p.kNorm, p.eps = ones(D, normQ, 0), ones(D, normK, 0), 1e-6
		r := Rotary{Dims: D, Base: 1e6}
		p.inv, p.attnFactor = inv(r)
		c := gqa
		c.Rotary, c.NormEps = r, 1e-6
		fams = append(fams, family{"Qwen3", c, Weights{OutIn: true, WQ: wq, WK: wk, WV: wv, WO: wo,
			QNorm: normQ, KNorm: normK}, Options{Causal: true}, p})
	}
	{ // Gemma 2/3: scaling query_pre_attn_scalar^-0.5, attn_logit_softcapping,
		// sliding_window (W keys including the query's own), and Gemma's
		// RMSNorm multiplies by 1 + weight: QNorm = 1 + q_norm.weight.
		const W, scalar, capping = 3, 256.0, 50.0
		p := base
		p.scale, p.softcap = 1/math.Sqrt(scalar), capping
		p.visible = func(i, j int) bool { return j <= i && j > i-W }
		p.qNorm, p.kNorm, p.eps = ones(D, normQ, 1), ones(D, normK, 1), 1e-6
		r := Rotary{Dims: D, Base: 10000}
		p.inv, p.attnFactor = inv(r)
		qn, kn := make([]float32, D), make([]float32, D)
		for i := range qn {
			qn[i], kn[i] = 1+normQ[i], 1+normK[i]
		}
		c := gqa
		c.Rotary, c.NormEps = r, 1e-6
		fams = append(fams, family{"Gemma", c, Weights{OutIn: true, WQ: wq, WK: wk, WV: wv, WO: wo, QNorm: qn, KNorm: kn},
			Options{Causal: true, Window: W, Softcap: capping, Scale: float32(1 / math.Sqrt(scalar))}, p})
	}
	{ // Mistral v0.1: sliding_window.
		const W = 4
		p := base
		p.visible = func(i, j int) bool { return j <= i && j > i-W }
		r := Rotary{Dims: D, Base: 10000}
		p.inv, p.attnFactor = inv(r)
		c := gqa
		c.Rotary = r
		fams = append(fams, family{"Mistral", c, Weights{OutIn: true, WQ: wq, WK: wk, WV: wv, WO: wo},
			Options{Causal: true, Window: W}, p})
	}
	// GPT-NeoX and BLOOM: one fused query_key_value, heads interleaved.
	fused, fusedB := scaled(rng, 3*H*D*dm, dm), random(rng, 3*H*D)
	mha := LayerConfig{DModel: dm, Heads: H, HeadDim: D}
	{ // GPT-NeoX / Pythia: rotary_pct 0.25 (partial, rotate_half), biases.
		p := peerLayer{dm: dm, H: H, Hkv: H, D: D, wq: fused, bq: fusedB, neox: true, wo: wo, bo: bo,
			scale: 1 / math.Sqrt(D), visible: causal, rot: D / 4}
		r := Rotary{Dims: D / 4, Base: 10000}
		p.inv, p.attnFactor = inv(r)
		c := mha
		c.Rotary = r
		fams = append(fams, family{"GPT-NeoX", c, Weights{OutIn: true, WQKV: neoxToStacked(fused, H, D, dm),
			BQKV: neoxToStacked(fusedB, H, D, 1), WO: wo, BO: bo}, Options{Causal: true}, p})
	}
	{ // BLOOM: ALiBi (alibi = slope·j, added before the causal mask), no rotary.
		slopes, err := ALiBiSlopes(H, 0)
		if err != nil {
			t.Fatal(err)
		}
		p := peerLayer{dm: dm, H: H, Hkv: H, D: D, wq: fused, bq: fusedB, neox: true, wo: wo, bo: bo,
			scale: 1 / math.Sqrt(D), visible: causal,
			bias: func(h, i, j int) float64 { return float64(slopes[h]) * float64(j) }}
		fams = append(fams, family{"BLOOM", mha, Weights{OutIn: true, WQKV: neoxToStacked(fused, H, D, dm),
			BQKV: neoxToStacked(fusedB, H, D, 1), WO: wo, BO: bo}, Options{Causal: true, ALiBi: slopes}, p})
	}
	for _, e := range engines {
		for _, f := range fams {
			l, err := NewLayer(e, f.cfg, f.w)
			if err != nil {
				t.Fatal(f.name, err)
			}
			out := make([]float32, len(x))
			if err := l.Forward(out, x, 1, L, &f.opts); err != nil {
				t.Fatal(f.name, err)
			}
			near(t, e.Kernels()+" "+f.name+" Forward", out, f.peer.forward(widen64(x), widen64(x), true), 1e-5)
			// Token by token through a cache: the same outputs.
			cache, err := l.NewCache(1, L)
			if err != nil {
				t.Fatal(err)
			}
			step := make([]float32, len(x))
			dopts := Options{ALiBi: f.opts.ALiBi, Window: f.opts.Window, Softcap: f.opts.Softcap, Scale: f.opts.Scale}
			for i := 0; i < L; i++ {
				if err := l.Decode(step[i*dm:(i+1)*dm], x[i*dm:(i+1)*dm], cache, 1, &dopts); err != nil {
					t.Fatal(f.name, err)
				}
			}
			near(t, e.Kernels()+" "+f.name+" Decode", step, f.peer.forward(widen64(x), widen64(x), true), 1e-5)
		}
	}
}

// TestPortNNMultiheadAttention: torch.nn.MultiheadAttention(E, H,
// batch_first=True): in_proj_weight and in_proj_bias are WQKV and BQKV
// (Q|K|V stacked, [out][in]), out_proj is WO, BO; key_padding_mask is
// true = ignore, so Mask is its negation, [B][1][1][L]; a bool attn_mask
// is true = masked too (its upper triangle: Causal).
func TestPortNNMultiheadAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 7))
	const E, H, B, L = 24, 4, 2, 6
	D := E / H
	inW, inB := scaled(rng, 3*E*E, E), random(rng, 3*E)
	outW, outB := scaled(rng, E*E, E), random(rng, E)
	x := random(rng, B*L*E)
	ignore := [B][L]bool{{false, false, false, false, false, false}, {false, false, true, false, true, true}}
	keep := make([]bool, B*L)
	for b := range ignore {
		for j, ig := range ignore[b] {
			keep[b*L+j] = !ig
		}
	}
	for _, e := range engines {
		l, err := NewLayer(e, LayerConfig{DModel: E, Heads: H, HeadDim: D},
			Weights{OutIn: true, WQKV: inW, BQKV: inB, WO: outW, BO: outB})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float32, len(x))
		opts := Options{Causal: true, Mask: keep, MaskBatch: B, MaskQLen: 1}
		if err := l.Forward(out, x, B, L, &opts); err != nil {
			t.Fatal(err)
		}
		for b := 0; b < B; b++ {
			p := peerLayer{dm: E, H: H, Hkv: H, D: D, wq: inW[:E*E], wk: inW[E*E : 2*E*E], wv: inW[2*E*E:],
				bq: inB[:E], bk: inB[E : 2*E], bv: inB[2*E:], wo: outW, bo: outB, scale: 1 / math.Sqrt(float64(D)),
				visible: func(i, j int) bool { return j <= i && !ignore[b][j] }}
			xb := widen64(x[b*L*E : (b+1)*L*E])
			near(t, e.Kernels()+" nn.MultiheadAttention", out[b*L*E:(b+1)*L*E], p.forward(xb, xb, false), 1e-5)
		}
	}
}

// TestPortWhisperCross: Whisper's decoder cross-attention: q_proj and
// v_proj have biases, k_proj none, out_proj a bias; the encoder states
// are projected once (NewCrossKV) and every decoder step attends to all
// of them, no mask, no rotary.
func TestPortWhisperCross(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 8))
	const dm, H, D, Lenc, Ldec = 32, 4, 8, 9, 3
	wq, wk, wv, wo := scaled(rng, dm*dm, dm), scaled(rng, dm*dm, dm), scaled(rng, dm*dm, dm), scaled(rng, dm*dm, dm)
	bq, bv, bo := random(rng, dm), random(rng, dm), random(rng, dm)
	enc, dec := random(rng, Lenc*dm), random(rng, Ldec*dm)
	for _, e := range engines {
		l, err := NewLayer(e, LayerConfig{DModel: dm, Heads: H, HeadDim: D},
			Weights{OutIn: true, WQ: wq, WK: wk, WV: wv, WO: wo, BQ: bq, BV: bv, BO: bo})
		if err != nil {
			t.Fatal(err)
		}
		kv, err := l.NewCrossKV(enc, 1, Lenc)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float32, len(dec))
		if err := l.Cross(out, dec, kv, Ldec, nil); err != nil {
			t.Fatal(err)
		}
		p := peerLayer{dm: dm, H: H, Hkv: H, D: D, wq: wq, wk: wk, wv: wv, wo: wo, bq: bq, bv: bv, bo: bo,
			scale: 1 / math.Sqrt(D)}
		near(t, e.Kernels()+" Whisper cross-attention", out, p.forward(widen64(dec), widen64(enc), false), 1e-5)
	}
}
