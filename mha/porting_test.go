package mha

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The tests of docs/PORTING.md: each peer's semantics written out the way
// its own reference code reads (float64, scores → softcap → additive mask
// → softmax → PV, with the peer's own causal alignment, window rule, mask
// polarity and weight layout), against fastattn called as PORTING.md says.
// They are independent of fallback's oracle on purpose: a mapping is right
// only if it reproduces the peer, not fastattn's own reading of it.

// peerAttn is one attention call as a peer states it, on BHSD float64
// tensors: q [B][H][Lq][D], k and v [B][Hkv][Lk][D]; query head h reads
// KV head h/(H/Hkv) (the repeat_interleave every peer uses).
type peerAttn struct {
	B, H, Hkv, Lq, Lk, D int
	scale, softcap       float64
	visible              func(b, h, i, j int) bool    // nil: every key
	bias                 func(b, h, i, j int) float64 // nil: 0
	sink                 []float64                    // per head, nil: none
}

// run returns the output [B][H][Lq][D]. A row that sees no key is
// left zero (peers differ there; the tests avoid such rows).
func (p peerAttn) run(q, k, v []float64) []float64 {
	out := make([]float64, p.B*p.H*p.Lq*p.D)
	s := make([]float64, p.Lk)
	for b := 0; b < p.B; b++ {
		for h := 0; h < p.H; h++ {
			g := h / (p.H / p.Hkv)
			for i := 0; i < p.Lq; i++ {
				qi := q[((b*p.H+h)*p.Lq+i)*p.D:][:p.D]
				m := math.Inf(-1)
				for j := range s {
					kj := k[((b*p.Hkv+g)*p.Lk+j)*p.D:][:p.D]
					x := 0.0
					for d := range qi {
						x += qi[d] * kj[d]
					}
					x *= p.scale
					if p.softcap > 0 {
						x = p.softcap * math.Tanh(x/p.softcap)
					}
					if p.bias != nil {
						x += p.bias(b, h, i, j)
					}
					if p.visible != nil && !p.visible(b, h, i, j) {
						x = math.Inf(-1)
					}
					s[j] = x
					m = math.Max(m, x)
				}
				if p.sink != nil {
					m = math.Max(m, p.sink[h])
				}
				if math.IsInf(m, -1) {
					continue
				}
				sum := 0.0
				if p.sink != nil {
					sum = math.Exp(p.sink[h] - m)
				}
				for j := range s {
					s[j] = math.Exp(s[j] - m)
					sum += s[j]
				}
				o := out[((b*p.H+h)*p.Lq+i)*p.D:][:p.D]
				for j := range s {
					vj := v[((b*p.Hkv+g)*p.Lk+j)*p.D:][:p.D]
					for d := range o {
						o[d] += s[j] / sum * vj[d]
					}
				}
			}
		}
	}
	return out
}

// bhsd returns x, laid out [B][L][H][D], as [B][H][L][D] float64 (and
// bshd32 the way back, as float32): the transposes a caller does when a
// peer's layout is not the one its fastattn call uses.
func bhsd(x []float32, B, L, H, D int) []float64 {
	y := make([]float64, len(x))
	for b := 0; b < B; b++ {
		for l := 0; l < L; l++ {
			for h := 0; h < H; h++ {
				for d := 0; d < D; d++ {
					y[((b*H+h)*L+l)*D+d] = float64(x[((b*L+l)*H+h)*D+d])
				}
			}
		}
	}
	return y
}

func widen64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// near fails t unless got is want within tol of the largest |want|.
func near(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	nearScale(t, what, got, want, tol, 1e-30)
}

// nearScale is near with the largest |want| taken as at least floor: for
// outputs that cancel to far below their terms (an attention row whose
// values sum to almost 0 is that small, but rounds at the values' scale).
func nearScale(t *testing.T, what string, got []float32, want []float64, tol, floor float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	scale, worst, at := floor, 0.0, 0
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	for i := range got {
		if e := math.Abs(float64(got[i]) - want[i]); !(e <= worst) {
			worst, at = e, i
		}
	}
	if !(worst/scale <= tol) {
		t.Errorf("%s: value %d is %g, the peer's %g (error %.3g of the largest, bound %g)", what, at, got[at], want[at], worst/scale, tol)
	}
}

// eachSet runs f on an engine of every kernel set this CPU runs.
func eachSet(t *testing.T, f func(t *testing.T, e *Engine)) {
	for _, e := range engines {
		t.Run(e.Kernels(), func(t *testing.T) { f(t, e) })
	}
}

// TestPortONNXAttention: opset-23/24 Attention. 4-D inputs are BHSD;
// is_causal without past_key is top-left (offset 0, so QueryOffset 0
// where Lq != Lk), with past_key bottom-right over past + new keys, and
// with nonpad_kv_seqlen per batch (nonpad − Lq): KVLens; a bool attn_mask
// is true = attend; softcap comes before the mask and bias.
func TestPortONNXAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 1))
	const B, H, Hkv, Lq, Lk, D = 2, 4, 2, 5, 9, 16
	q, k, v := random(rng, B*H*Lq*D), random(rng, B*Hkv*Lk*D), random(rng, B*Hkv*Lk*D)
	mask := make([]bool, Lq*Lk) // attn_mask [Lq][Lk], broadcast over B and H
	for i := range mask {
		mask[i] = rng.IntN(5) != 0
	}
	nonpad := []int{9, 7}
	shape := Shape{Batch: B, Heads: H, KVHeads: Hkv, QLen: Lq, KVLen: Lk, HeadDim: D, Layout: BHSD}
	zero := 0
	cases := []struct {
		name string
		opts Options
		vis  func(b, h, i, j int) bool
	}{
		{"is_causal, no past: top-left", Options{Causal: true, QueryOffset: &zero},
			func(b, h, i, j int) bool { return j <= i }},
		{"is_causal with past_key of 4: bottom-right", Options{Causal: true},
			func(b, h, i, j int) bool { return j <= i+Lk-Lq }},
		{"is_causal with nonpad_kv_seqlen", Options{Causal: true, KVLens: nonpad},
			func(b, h, i, j int) bool { return j < nonpad[b] && j <= i+nonpad[b]-Lq }},
		{"bool attn_mask, softcap 5, scale 0.3", Options{Mask: mask, Softcap: 5, Scale: 0.3},
			func(b, h, i, j int) bool { return mask[i*Lk+j] }},
	}
	eachSet(t, func(t *testing.T, e *Engine) {
		for _, c := range cases {
			p := peerAttn{B: B, H: H, Hkv: Hkv, Lq: Lq, Lk: Lk, D: D, scale: 1 / math.Sqrt(D), visible: c.vis}
			if c.opts.Scale != 0 {
				p.scale, p.softcap = float64(c.opts.Scale), float64(c.opts.Softcap)
			}
			out := make([]float32, len(q))
			if err := e.Attention(out, q, k, v, shape, &c.opts); err != nil {
				t.Fatal(c.name, err)
			}
			near(t, c.name, out, p.run(widen64(q), widen64(k), widen64(v)), 2e-6)
		}
	})
}

// TestPortORTGroupQueryAttention: com.microsoft GroupQueryAttention's
// attention part. seqlens_k[b] is the total length − 1, so KVLens =
// seqlens_k + 1 and the new tokens are the last Lq positions (causal
// bottom-right); local_window_size W sees W keys including the query's
// own (Window W; releases before 1.22 saw W + 1); smooth_softmax is a sink
// of 0 per head, head_sink gives the sinks; softcap before the bias.
func TestPortORTGroupQueryAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 2))
	const B, H, Hkv, Lq, Lk, D, W = 2, 8, 2, 3, 20, 32, 6
	seqlensK := []int{19, 11}
	q, k, v := random(rng, B*H*Lq*D), random(rng, B*Hkv*Lk*D), random(rng, B*Hkv*Lk*D)
	headSink := widen64(random(rng, H))
	sinks := make([]float32, H)
	for h := range sinks {
		sinks[h] = float32(headSink[h])
	}
	kvlens := []int{seqlensK[0] + 1, seqlensK[1] + 1}
	shape := Shape{Batch: B, Heads: H, KVHeads: Hkv, QLen: Lq, KVLen: Lk, HeadDim: D, Layout: BHSD}
	vis := func(b, h, i, j int) bool {
		pos := seqlensK[b] + 1 - Lq + i
		return j <= pos && j > pos-W
	}
	eachSet(t, func(t *testing.T, e *Engine) {
		for _, c := range []struct {
			name  string
			sinks []float32
			peer  []float64
		}{{"local_window_size", nil, nil}, {"smooth_softmax", make([]float32, H), make([]float64, H)},
			{"head_sink", sinks, headSink}} {
			out := make([]float32, len(q))
			opts := Options{Causal: true, KVLens: kvlens, Window: W, Softcap: 8, Sinks: c.sinks}
			if err := e.Attention(out, q, k, v, shape, &opts); err != nil {
				t.Fatal(err)
			}
			p := peerAttn{B: B, H: H, Hkv: Hkv, Lq: Lq, Lk: Lk, D: D, scale: 1 / math.Sqrt(D), softcap: 8, visible: vis, sink: c.peer}
			near(t, c.name, out, p.run(widen64(q), widen64(k), widen64(v)), 2e-6)
		}
	})
}

// TestPortORTMultiHeadAttention: com.microsoft MultiHeadAttention on
// [B][L][H·D] inputs (BSHD): key_padding_mask as lengths is KVLens,
// unidirectional with a past is bottom-right, attention_bias
// [1][H][Lq][Lk] is Bias with BiasHeads H.
func TestPortORTMultiHeadAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 3))
	const B, H, Lq, Lk, D = 2, 3, 4, 10, 8
	q, k, v := random(rng, B*Lq*H*D), random(rng, B*Lk*H*D), random(rng, B*Lk*H*D)
	bias := random(rng, H*Lq*Lk)
	lens := []int{10, 6}
	shape := Shape{Batch: B, Heads: H, QLen: Lq, KVLen: Lk, HeadDim: D}
	eachSet(t, func(t *testing.T, e *Engine) {
		out := make([]float32, len(q))
		opts := Options{Causal: true, KVLens: lens, Bias: bias, BiasHeads: H}
		if err := e.Attention(out, q, k, v, shape, &opts); err != nil {
			t.Fatal(err)
		}
		p := peerAttn{B: B, H: H, Hkv: H, Lq: Lq, Lk: Lk, D: D, scale: 1 / math.Sqrt(D),
			visible: func(b, h, i, j int) bool { return j < lens[b] && j <= i+lens[b]-Lq },
			bias:    func(b, h, i, j int) float64 { return float64(bias[(h*Lq+i)*Lk+j]) }}
		want := p.run(bhsd(q, B, Lq, H, D), bhsd(k, B, Lk, H, D), bhsd(v, B, Lk, H, D))
		near(t, "MultiHeadAttention", toBSHD(out, B, Lq, H, D), want, 2e-6)
	})
}

// toBSHD returns out, [B][L][H][D], as [B][H][L][D] float32 for near.
func toBSHD(out []float32, B, L, H, D int) []float32 {
	y := bhsd(out, B, L, H, D)
	z := make([]float32, len(y))
	for i, x := range y {
		z[i] = float32(x)
	}
	return z
}

// TestPortPyTorchSDPA: torch.nn.functional.scaled_dot_product_attention
// takes [B][H][L][D] (BHSD); is_causal is top-left (tril of an Lq×Lk
// ones matrix), so QueryOffset 0 where Lq != Lk; a bool attn_mask is
// true = attend; enable_gqa repeats KV heads interleaved.
func TestPortPyTorchSDPA(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 4))
	const B, H, Hkv, Lq, Lk, D = 2, 6, 3, 7, 11, 24
	q, k, v := random(rng, B*H*Lq*D), random(rng, B*Hkv*Lk*D), random(rng, B*Hkv*Lk*D)
	mask := make([]bool, B*Lq*Lk) // [B][1][Lq][Lk]
	for i := range mask {
		mask[i] = rng.IntN(4) != 0
	}
	for b := 0; b < B; b++ { // every row keeps key 0: PyTorch gives NaN to a row that sees nothing
		for i := 0; i < Lq; i++ {
			mask[(b*Lq+i)*Lk] = true
		}
	}
	shape := Shape{Batch: B, Heads: H, KVHeads: Hkv, QLen: Lq, KVLen: Lk, HeadDim: D, Layout: BHSD}
	zero := 0
	eachSet(t, func(t *testing.T, e *Engine) {
		for _, c := range []struct {
			name string
			opts Options
			vis  func(b, h, i, j int) bool
		}{
			{"is_causal", Options{Causal: true, QueryOffset: &zero}, func(b, h, i, j int) bool { return j <= i }},
			{"attn_mask, scale", Options{Mask: mask, MaskBatch: B, Scale: 0.1},
				func(b, h, i, j int) bool { return mask[(b*Lq+i)*Lk+j] }},
		} {
			out := make([]float32, len(q))
			if err := e.Attention(out, q, k, v, shape, &c.opts); err != nil {
				t.Fatal(err)
			}
			scale := 1 / math.Sqrt(D)
			if c.opts.Scale != 0 {
				scale = float64(c.opts.Scale)
			}
			p := peerAttn{B: B, H: H, Hkv: Hkv, Lq: Lq, Lk: Lk, D: D, scale: scale, visible: c.vis}
			near(t, c.name, out, p.run(widen64(q), widen64(k), widen64(v)), 2e-6)
		}
	})
}

// TestPortLlamaCppFlashAttnExt: ggml_flash_attn_ext(q, k, v, mask, scale,
// max_bias, logit_softcap) with sinks. ggml's q [D, n_q, H, B] and k, v
// [D, n_kv, Hkv, B] are BHSD in memory, the result [D, H, n_q, B] is
// BSHD; the f16 mask [n_q][n_kv] is an additive Bias (−Inf masks) shared
// by heads; max_bias > 0 makes ALiBi slopes (ALiBiSlopes(H, max_bias))
// times the mask, whose entries llama.cpp sets to −|i − j| on visible
// keys: the same, causal, as Options.ALiBi's slope·(j − i).
func TestPortLlamaCppFlashAttnExt(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 5))
	const B, H, Hkv, Lq, Lk, D = 1, 8, 4, 4, 13, 64
	q, k, v := random(rng, B*H*Lq*D), random(rng, B*Hkv*Lk*D), random(rng, B*Hkv*Lk*D)
	const maxBias, softcap, scale = 8, 20, 0.125
	slopes, err := ALiBiSlopes(H, maxBias)
	if err != nil {
		t.Fatal(err)
	}
	sinks := random(rng, H)
	shape := Shape{Batch: B, Heads: H, KVHeads: Hkv, QLen: Lq, KVLen: Lk, HeadDim: D, Layout: BHSD}
	// llama.cpp's mask: causal over the cache, 0 or −Inf; with ALiBi the
	// visible entries hold −|p_i − p_j|.
	pos := func(i int) int { return Lk - Lq + i }
	eachSet(t, func(t *testing.T, e *Engine) {
		out := make([]float32, len(q))
		opts := Options{Causal: true, Scale: scale, Softcap: softcap, ALiBi: slopes, Sinks: sinks}
		if err := e.Attention(out, q, k, v, shape, &opts); err != nil {
			t.Fatal(err)
		}
		p := peerAttn{B: B, H: H, Hkv: Hkv, Lq: Lq, Lk: Lk, D: D, scale: scale, softcap: softcap,
			visible: func(b, h, i, j int) bool { return j <= pos(i) },
			bias: func(b, h, i, j int) float64 {
				return float64(slopes[h]) * -math.Abs(float64(pos(i)-j))
			},
			sink: widen64(sinks)}
		near(t, "flash_attn_ext", out, p.run(widen64(q), widen64(k), widen64(v)), 2e-6)
	})
}
