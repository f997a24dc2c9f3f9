package mha

import (
	"fmt"
	"math"
)

// RopeScaling is a checkpoint's rotary scaling rule: Hugging Face
// transformers' rope_scaling (rope_parameters in v5) of config.json, field
// for field, so porting a model is copying its numbers. Type is the
// rope_type ("type" in older configs):
//
//	"" or "default"  none
//	"linear"         every frequency divided by Factor
//	"dynamic"        dynamic NTK: past MaxPositions the base grows with the
//	                 sequence's length n: Base·(Factor·n/MaxPositions −
//	                 (Factor − 1))^(Dims/(Dims−2))
//	"yarn"           YaRN: frequencies ramped between extrapolation (fast
//	                 pairs, beyond BetaFast rotations over the original
//	                 context) and interpolation by Factor (slow pairs, below
//	                 BetaSlow), and an attention factor on cos and sin
//	                 (Qwen2.5 long context, DeepSeek V2/V3 with MScale,
//	                 MScaleAllDim)
//	"longrope"       LongRoPE: pair i's frequency divided by ShortFactor[i],
//	                 or LongFactor[i] once the sequence is longer than
//	                 OriginalMaxPositions, and an attention factor (Phi-3,
//	                 Phi-3.5, Phi-4-mini)
//	"llama3"         Llama 3.1+: pairs whose wavelength exceeds
//	                 OriginalMaxPositions/LowFreqFactor divided by Factor,
//	                 those below OriginalMaxPositions/HighFreqFactor kept,
//	                 the band between interpolated smoothly
//
// The formulas are those of modeling_rope_utils.py in transformers' main
// branch (read at commit 26892c16b782 of a fork tracking it, 2026-11), in
// float64; docs/PORTING.md lists where transformers' own float32
// arithmetic differs and which of its versions disagree.
//
// "dynamic" and "longrope" depend on the sequence's length: the number of
// its tokens once the call's new tokens are in (the Forward's query length;
// in DecodeSeqs, the cache's length plus the new tokens), as transformers
// computes it from the largest position of the forward pass. Keys in a
// cache keep the rotation they were stored with, as in transformers.
type RopeScaling struct {
	// Type is the rope_type: "", "default", "linear", "dynamic", "yarn",
	// "longrope" or "llama3".
	Type string
	// Factor is "factor". For yarn and longrope 0 means
	// MaxPositions/OriginalMaxPositions (as transformers does when the
	// config has none).
	Factor float64
	// OriginalMaxPositions is "original_max_position_embeddings" (of
	// rope_scaling, or the top-level field Phi-3 uses): llama3, yarn and
	// longrope need it; yarn takes MaxPositions when it is 0.
	OriginalMaxPositions int
	// MaxPositions is the config's top-level "max_position_embeddings":
	// dynamic needs it; yarn and longrope use it when Factor is 0.
	MaxPositions int
	// LowFreqFactor and HighFreqFactor are llama3's "low_freq_factor"
	// and "high_freq_factor".
	LowFreqFactor, HighFreqFactor float64
	// BetaFast and BetaSlow are yarn's "beta_fast" and "beta_slow"; 0
	// means 32 and 1.
	BetaFast, BetaSlow float64
	// MScale and MScaleAllDim are yarn's "mscale" and "mscale_all_dim":
	// with both set (DeepSeek), the attention factor is
	// m(Factor, MScale)/m(Factor, MScaleAllDim), m(s, k) = 0.1·k·ln s + 1
	// (1 for s ≤ 1). DeepSeek also multiplies its softmax scale by
	// m(Factor, MScaleAllDim)², which is the attention's own option
	// (YarnSoftmaxScale), not rotary's.
	MScale, MScaleAllDim float64
	// AttentionFactor is "attention_factor" (yarn, longrope): it
	// multiplies cos and sin, so scores scale by its square. 0 derives it:
	// yarn m(Factor, 1) (or the MScale ratio above); longrope
	// sqrt(1 + ln Factor / ln OriginalMaxPositions), 1 when Factor ≤ 1.
	AttentionFactor float64
	// NoTruncate is yarn's "truncate": false (the correction range's
	// bounds not rounded to whole pairs; gpt-oss).
	NoTruncate bool
	// ShortFactor and LongFactor are longrope's "short_factor" and
	// "long_factor": Dims/2 values each.
	ShortFactor, LongFactor []float64
}

// clone returns a deep copy of sc (nil for nil), so the layer's rule
// stays its own.
func (sc *RopeScaling) clone() *RopeScaling {
	if sc == nil {
		return nil
	}
	c := *sc
	c.ShortFactor = append([]float64(nil), sc.ShortFactor...)
	c.LongFactor = append([]float64(nil), sc.LongFactor...)
	if sc.ShortFactor == nil {
		c.ShortFactor = nil
	}
	if sc.LongFactor == nil {
		c.LongFactor = nil
	}
	return &c
}

// factor returns Factor, or MaxPositions/OriginalMaxPositions when it is 0
// (yarn's and longrope's default; 0 when either is 0).
func (sc *RopeScaling) factor() float64 {
	if sc.Factor > 0 {
		return sc.Factor
	}
	if sc.MaxPositions == 0 || sc.OriginalMaxPositions == 0 {
		return 0
	}
	return float64(sc.MaxPositions) / float64(sc.OriginalMaxPositions)
}

// YarnSoftmaxScale returns the factor DeepSeek V2/V3 (and transformers'
// DeepseekV3Attention) multiply the softmax scale 1/sqrt(q·k head dim) by
// under yarn scaling: m(factor, mscaleAllDim)², m(s, k) = 0.1·k·ln s + 1
// (1 for s ≤ 1). Pass the product as Options.Scale (ExampleRopeScaling).
func YarnSoftmaxScale(factor, mscaleAllDim float64) float64 {
	m := yarnMScale(factor, mscaleAllDim)
	return m * m
}

// yarnMScale is yarn's get_mscale(scale, k): 0.1·k·ln scale + 1, and 1
// for scale ≤ 1.
func yarnMScale(scale, k float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*k*math.Log(scale) + 1
}

// ropeRule is a resolved scaling rule: a fixed table of frequencies, or
// one chosen (longrope) or computed (dynamic) from the sequence's length.
type ropeRule struct {
	long     []float64 // longrope: the table once the sequence passes switchAt
	switchAt int       // longrope: OriginalMaxPositions
	dynamic  bool      // dynamic NTK
	base     float64   // dynamic: Base
	factor   float64   // dynamic: Factor
	maxPos   int       // dynamic: MaxPositions
}

// defaultFreqs returns transformers' default frequencies for dims rotated
// dimensions: base^(−2i/dims), i in [0, dims/2).
func defaultFreqs(base float64, dims int) []float64 {
	return powFreqs(make([]float64, dims/2), base)
}

// powFreqs fills f with base^(−2i/dims), dims = 2·len(f), and returns it.
func powFreqs(f []float64, base float64) []float64 {
	dims := float64(2 * len(f))
	for i := range f {
		f[i] = math.Pow(base, -float64(2*i)/dims)
	}
	return f
}

// scaled resolves sc for dims rotated dimensions at base (after Rotary's
// own checks): the frequency table, the attention
// factor and the length-dependent rule, or an error naming the field.
func (sc *RopeScaling) scaled(base float64, dims int) (freq []float64, attn float64, rule ropeRule, err error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: Rotary.Scaling (%q): %s", ErrOption, sc.Type, fmt.Sprintf(format, a...))
	}
	finite := func(name string, v float64, positive bool) error {
		switch {
		case positive && !(v > 0 && v <= math.MaxFloat64):
			return bad("%s = %v, must be finite and > 0", name, v)
		case !(v >= 0 && v <= math.MaxFloat64):
			return bad("%s = %v, must be finite and >= 0", name, v)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"Factor", sc.Factor}, {"LowFreqFactor", sc.LowFreqFactor}, {"HighFreqFactor", sc.HighFreqFactor},
		{"BetaFast", sc.BetaFast}, {"BetaSlow", sc.BetaSlow}, {"MScale", sc.MScale},
		{"MScaleAllDim", sc.MScaleAllDim}, {"AttentionFactor", sc.AttentionFactor}} {
		if err := finite(f.name, f.v, false); err != nil {
			return nil, 0, rule, err
		}
	}
	if sc.OriginalMaxPositions < 0 || sc.MaxPositions < 0 {
		return nil, 0, rule, bad("OriginalMaxPositions = %d, MaxPositions = %d, must be >= 0", sc.OriginalMaxPositions, sc.MaxPositions)
	}
	if sc.Type != "longrope" && (sc.ShortFactor != nil || sc.LongFactor != nil) {
		return nil, 0, rule, bad("ShortFactor and LongFactor are longrope's")
	}
	attn = 1
	freq = defaultFreqs(base, dims)
	// factorOr: Factor, or MaxPositions/OriginalMaxPositions when it is 0.
	factorOr := func() (float64, error) {
		f := sc.factor()
		if f == 0 {
			return 0, bad("Factor = 0 needs MaxPositions and OriginalMaxPositions")
		}
		return f, nil
	}
	switch sc.Type {
	case "", "default":
	case "linear":
		if err := finite("Factor", sc.Factor, true); err != nil {
			return nil, 0, rule, err
		}
		for i := range freq {
			freq[i] /= sc.Factor
		}
	case "dynamic":
		if err := finite("Factor", sc.Factor, true); err != nil {
			return nil, 0, rule, err
		}
		if sc.MaxPositions <= 0 {
			return nil, 0, rule, bad("MaxPositions = %d, must be > 0", sc.MaxPositions)
		}
		if dims <= 2 {
			return nil, 0, rule, bad("needs Rotary.Dims > 2 (its exponent is Dims/(Dims−2))")
		}
		rule = ropeRule{dynamic: true, base: base, factor: sc.Factor, maxPos: sc.MaxPositions}
	case "llama3":
		if err := finite("Factor", sc.Factor, true); err != nil {
			return nil, 0, rule, err
		}
		lo, hi, orig := sc.LowFreqFactor, sc.HighFreqFactor, float64(sc.OriginalMaxPositions)
		if !(lo > 0 && hi > lo) || orig <= 0 {
			return nil, 0, rule, bad("LowFreqFactor = %v, HighFreqFactor = %v, OriginalMaxPositions = %d: need 0 < low < high and positions > 0", lo, hi, sc.OriginalMaxPositions)
		}
		lowWave, highWave := orig/lo, orig/hi
		for i, f := range freq {
			wave := 2 * math.Pi / f
			switch {
			case wave < highWave: // high frequencies: kept
			case wave > lowWave: // low frequencies: interpolated by Factor
				freq[i] = f / sc.Factor
			default: // the band between: a smooth mix of the two
				s := (orig/wave - lo) / (hi - lo)
				freq[i] = (1-s)*f/sc.Factor + s*f
			}
		}
	case "yarn":
		factor, err := factorOr()
		if err != nil {
			return nil, 0, rule, err
		}
		orig := sc.OriginalMaxPositions
		if orig == 0 {
			orig = sc.MaxPositions
		}
		if orig <= 0 {
			return nil, 0, rule, bad("needs OriginalMaxPositions (or MaxPositions)")
		}
		attn = sc.AttentionFactor
		if attn == 0 {
			if sc.MScale != 0 && sc.MScaleAllDim != 0 {
				attn = yarnMScale(factor, sc.MScale) / yarnMScale(factor, sc.MScaleAllDim)
			} else {
				attn = yarnMScale(factor, 1)
			}
		}
		fast, slow := sc.BetaFast, sc.BetaSlow
		if fast == 0 {
			fast = 32
		}
		if slow == 0 {
			slow = 1
		}
		// The pair index at which a frequency makes n rotations over the
		// original context: dims·ln(orig/(2πn)) / (2·ln base).
		pairOf := func(n float64) float64 {
			return float64(dims) * math.Log(float64(orig)/(n*2*math.Pi)) / (2 * math.Log(base))
		}
		low, high := pairOf(fast), pairOf(slow)
		if !sc.NoTruncate {
			low, high = math.Floor(low), math.Ceil(high)
		}
		low, high = max(low, 0), min(high, float64(dims-1))
		if low == high {
			high += 0.001 // transformers' guard against a zero-width ramp
		}
		for i, f := range freq {
			// ramp: 0 below low (extrapolation: the pair kept), 1 above high
			// (interpolation: divided by factor).
			ramp := min(max((float64(i)-low)/(high-low), 0), 1)
			freq[i] = f/factor*ramp + f*(1-ramp)
		}
	case "longrope":
		factor, err := factorOr()
		if err != nil {
			return nil, 0, rule, err
		}
		orig := sc.OriginalMaxPositions
		if orig <= 0 {
			return nil, 0, rule, bad("needs OriginalMaxPositions")
		}
		if len(sc.ShortFactor) != dims/2 || len(sc.LongFactor) != dims/2 {
			return nil, 0, rule, bad("ShortFactor and LongFactor have %d and %d values, need Rotary.Dims/2 = %d", len(sc.ShortFactor), len(sc.LongFactor), dims/2)
		}
		for _, t := range []struct {
			name string
			v    []float64
		}{{"ShortFactor", sc.ShortFactor}, {"LongFactor", sc.LongFactor}} {
			for i, v := range t.v {
				if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
					return nil, 0, rule, bad("%s[%d] = %v, must be finite and > 0", t.name, i, v)
				}
			}
		}
		attn = sc.AttentionFactor
		if attn == 0 {
			attn = 1
			if factor > 1 {
				attn = math.Sqrt(1 + math.Log(factor)/math.Log(float64(orig)))
			}
		}
		long := make([]float64, len(freq))
		for i, f := range freq {
			long[i] = f / sc.LongFactor[i]
			freq[i] = f / sc.ShortFactor[i]
		}
		rule = ropeRule{long: long, switchAt: orig}
	default:
		return nil, 0, rule, bad("unknown type; want default, linear, dynamic, yarn, longrope or llama3")
	}
	for i, f := range freq {
		if !(f > 0 && f <= math.MaxFloat64) {
			return nil, 0, rule, bad("pair %d's frequency is %v", i, f)
		}
	}
	if !(attn > 0 && attn <= math.MaxFloat64) {
		return nil, 0, rule, bad("attention factor %v, must be finite and > 0", attn)
	}
	return freq, attn, rule, nil
}
