package mha

import (
	"fmt"
	"math"
)

// Rotary configures rotary position embeddings (RoPE): after projection
// (and QK-norm), the first Dims dimensions of every query and key head are
// rotated in pairs by angles proportional to the token's position p:
//
//	θ_i = p · Base^(-2i/Dims),  i in [0, Dims/2)
//	(x_a, x_b) → A·(x_a·cos θ_i − x_b·sin θ_i,  x_b·cos θ_i + x_a·sin θ_i)
//
// where Scaling, when set, replaces the frequencies Base^(-2i/Dims) by its
// rule's (llama3, yarn, longrope, dynamic NTK…) and A is its attention
// factor (1 without one; yarn and longrope scale cos and sin by it), and
// the pair (a, b) is (i, i + Dims/2) — rotate_half, as HF
// transformers' Llama, Mistral, Qwen, Gemma and GPT-NeoX — or (2i, 2i+1)
// with Interleaved, as GPT-J. The remaining HeadDim − Dims dimensions pass
// through (NeoX's and Phi's partial rotary). The angles are computed in
// float64 from the exact position (HF computes them in float32, which at
// position p is off by up to about p·2^-24 radians).
type Rotary struct {
	// Dims is the number of rotated dimensions per head: even, at most
	// HeadDim; 0 turns rotary embeddings off.
	Dims int
	// Base is θ; 0 means 10000.
	Base float64
	// Interleaved pairs dimensions (2i, 2i+1) (GPT-J) instead of (i,
	// i + Dims/2).
	Interleaved bool
	// Scaling, when not nil, is the checkpoint's rope_scaling rule
	// (linear position scaling, Llama 3.1+, Qwen2.5 YaRN, DeepSeek, Phi-3
	// LongRoPE, dynamic NTK). NewLayer copies it.
	Scaling *RopeScaling
}

// rope is a layer's resolved rotary embedding.
type rope struct {
	half        int       // Dims/2: pairs per head, 0 when off
	interleaved bool      // pairs (2i, 2i+1)
	freq        []float64 // [half]: radians per position (Base^(-2i/Dims) / Scale, or Scaling's; longrope: short)
	attn        float64   // the attention factor multiplied into cos and sin
	rule        ropeRule  // Scaling's dependence on the sequence's length (longrope, dynamic)
}

// newRope checks r against the head dimension and resolves it.
func newRope(r Rotary, headDim int) (rope, error) {
	if r.Dims == 0 {
		return rope{}, nil
	}
	if r.Dims < 0 || r.Dims%2 != 0 || r.Dims > headDim {
		return rope{}, fmt.Errorf("%w: Rotary.Dims = %d, must be even and in [0, HeadDim = %d]", ErrOption, r.Dims, headDim)
	}
	base := r.Base
	if base == 0 {
		base = 10000
	}
	if !(base > 0 && base <= math.MaxFloat64) {
		return rope{}, fmt.Errorf("%w: Rotary.Base = %v, must be finite and > 0", ErrOption, r.Base)
	}
	ro := rope{half: r.Dims / 2, interleaved: r.Interleaved, attn: 1}
	if r.Scaling != nil {
		var err error
		if ro.freq, ro.attn, ro.rule, err = r.Scaling.scaled(base, r.Dims); err != nil {
			return rope{}, err
		}
	} else {
		ro.freq = defaultFreqs(base, r.Dims)
	}
	for i, f := range ro.freq {
		if math.IsInf(f, 0) || math.IsNaN(f) { // base far below 1, or a factor near 0
			return rope{}, fmt.Errorf("%w: Rotary.Base = %v with its Scaling makes pair %d's frequency overflow", ErrOption, base, i)
		}
	}
	return ro, nil
}

// Frequencies returns what the layer rotates a sequence of seqLen tokens
// with: the radians per position of each rotated pair, Dims/2 values
// (pair i rotates dimensions i and i + Dims/2, or 2i and 2i+1 when
// Interleaved), and the attention factor multiplied into cos and sin (1
// unless Scaling sets one). It is for checking a port against the
// checkpoint's own inv_freq and attention_scaling (transformers'
// rope_init_fn). seqLen matters only for longrope and dynamic NTK. A
// Rotary that NewLayer would refuse is ErrOption; Dims 0 gives none.
func (r Rotary) Frequencies(seqLen int) (freq []float64, attentionFactor float64, err error) {
	ro, err := newRope(r, r.Dims)
	if err != nil {
		return nil, 0, err
	}
	if ro.half == 0 {
		return nil, 1, nil
	}
	if seqLen < 0 {
		return nil, 0, fmt.Errorf("%w: Frequencies of a sequence of %d tokens", ErrOption, seqLen)
	}
	return append([]float64(nil), ro.table(seqLen, make([]float64, ro.half))...), ro.attn, nil
}

// maxRopeStack is the pairs whose dynamic-NTK frequencies table fits on
// the stack (head dims up to 512).
const maxRopeStack = 256

// table returns the frequencies for a sequence of seqLen tokens: the fixed
// table, longrope's long one past its original context, or dynamic NTK's,
// computed into buf (len half) when the sequence is past MaxPositions.
func (ro *rope) table(seqLen int, buf []float64) []float64 {
	switch {
	case ro.rule.long != nil && seqLen > ro.rule.switchAt:
		return ro.rule.long
	case ro.rule.dynamic && seqLen > ro.rule.maxPos:
		dims := float64(2 * ro.half)
		// transformers' factor·n/max − (factor − 1), written so that a huge
		// factor overflows to +Inf (every pair but the first then stands
		// still) instead of Inf − Inf = NaN.
		grow := 1 + ro.rule.factor*(float64(seqLen)/float64(ro.rule.maxPos)-1)
		base := ro.rule.base * math.Pow(grow, dims/(dims-2))
		return powFreqs(buf, base)
	}
	return ro.freq
}

// lengthDependent reports whether the frequencies depend on the
// sequence's length (longrope, dynamic NTK).
func (ro *rope) lengthDependent() bool { return ro.rule.long != nil || ro.rule.dynamic }

// angles writes the cosines and then the sines of position pos, [2][half],
// for the frequencies freq (from table), times the attention factor.
func (ro *rope) angles(cs []float32, pos int, freq []float64) {
	c, s := cs[:ro.half], cs[ro.half:2*ro.half]
	for i, f := range freq {
		sin, cos := math.Sincos(float64(pos) * f)
		c[i], s[i] = float32(ro.attn*cos), float32(ro.attn*sin)
	}
}

// apply scales v by inv·w (w nil: no scaling) and rotates its pairs by
// the angles cs (nil: no rotation), in one pass.
func (ro *rope) apply(v, cs []float32, inv float32, w []float32) {
	n := 0
	if cs != nil {
		n = ro.half
	}
	if w != nil {
		w = w[:len(v)]
		for i := 2 * n; i < len(v); i++ { // the dims rotary leaves alone
			v[i] = v[i] * inv * w[i]
		}
	}
	if n == 0 {
		return
	}
	c, s := cs[:n], cs[n:2*n]
	if ro.interleaved {
		p := v[:2*n]
		for i := range c {
			a, b := p[2*i], p[2*i+1]
			if w != nil {
				a, b = a*inv*w[2*i], b*inv*w[2*i+1]
			}
			p[2*i], p[2*i+1] = a*c[i]-b*s[i], b*c[i]+a*s[i]
		}
		return
	}
	lo, hi := v[:n], v[n:2*n]
	var wl, wh []float32
	if w != nil {
		wl, wh = w[:n], w[n:2*n]
	}
	for i := range c {
		a, b := lo[i], hi[i]
		if w != nil {
			a, b = a*inv*wl[i], b*inv*wh[i]
		}
		lo[i], hi[i] = a*c[i]-b*s[i], b*c[i]+a*s[i]
	}
}
