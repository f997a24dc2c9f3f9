package mha

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// hfRope is transformers' ROPE_INIT_FUNCTIONS[rope_type](config, seq_len)
// (modeling_rope_utils.py, main branch as read at commit 26892c16b782 of
// a fork tracking it) transcribed statement by statement in float64:
// the inverse frequencies of dims rotated dimensions and the attention
// factor, for a forward pass whose largest position is seqLen−1 (the
// dynamic_rope_update decorator's seq_len). Field names are the
// config.json keys'.
func hfRope(r Rotary, seqLen int) ([]float64, float64) {
	base := r.Base
	if base == 0 {
		base = 10000
	}
	dim := r.Dims
	arange := func() []float64 { // torch.arange(0, dim, 2) / dim
		a := make([]float64, dim/2)
		for i := range a {
			a[i] = float64(2*i) / float64(dim)
		}
		return a
	}
	defaultInv := func(base float64) []float64 { // 1.0 / (base ** arange)
		inv := arange()
		for i, e := range inv {
			inv[i] = 1 / math.Pow(base, e)
		}
		return inv
	}
	sc := r.Scaling
	if sc == nil || sc.Type == "" || sc.Type == "default" {
		return defaultInv(base), 1
	}
	factor := sc.Factor
	maxPos, orig := sc.MaxPositions, sc.OriginalMaxPositions
	switch sc.Type {
	case "linear":
		inv := defaultInv(base)
		for i := range inv {
			inv[i] /= factor
		}
		return inv, 1
	case "dynamic":
		if seqLen < maxPos {
			seqLen = maxPos
		}
		base = base * math.Pow((factor*float64(seqLen)/float64(maxPos))-(factor-1), float64(dim)/float64(dim-2))
		return defaultInv(base), 1
	case "yarn":
		if orig == 0 {
			orig = maxPos
		}
		if factor == 0 {
			factor = float64(maxPos) / float64(orig)
		}
		getMScale := func(scale, mscale float64) float64 {
			if scale <= 1 {
				return 1
			}
			return 0.1*mscale*math.Log(scale) + 1
		}
		attention := sc.AttentionFactor
		if attention == 0 {
			if sc.MScale != 0 && sc.MScaleAllDim != 0 {
				attention = getMScale(factor, sc.MScale) / getMScale(factor, sc.MScaleAllDim)
			} else {
				attention = getMScale(factor, 1)
			}
		}
		betaFast, betaSlow := sc.BetaFast, sc.BetaSlow
		if betaFast == 0 {
			betaFast = 32
		}
		if betaSlow == 0 {
			betaSlow = 1
		}
		findCorrectionDim := func(numRotations float64) float64 {
			return (float64(dim) * math.Log(float64(orig)/(numRotations*2*math.Pi))) / (2 * math.Log(base))
		}
		low, high := findCorrectionDim(betaFast), findCorrectionDim(betaSlow)
		if !sc.NoTruncate {
			low, high = math.Floor(low), math.Ceil(high)
		}
		low, high = math.Max(low, 0), math.Min(high, float64(dim-1))
		if low == high {
			high += 0.001
		}
		posFreqs := arange()
		inv := make([]float64, dim/2)
		for i, e := range posFreqs {
			posFreq := math.Pow(base, e)
			extrapolation, interpolation := 1/posFreq, 1/(factor*posFreq)
			ramp := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
			extrapolationFactor := 1 - ramp
			inv[i] = interpolation*(1-extrapolationFactor) + extrapolation*extrapolationFactor
		}
		return inv, attention
	case "longrope":
		if factor == 0 {
			factor = float64(maxPos) / float64(orig)
		}
		attention := sc.AttentionFactor
		if attention == 0 {
			if factor <= 1 {
				attention = 1
			} else {
				attention = math.Sqrt(1 + math.Log(factor)/math.Log(float64(orig)))
			}
		}
		ext := sc.ShortFactor
		if seqLen > orig {
			ext = sc.LongFactor
		}
		inv := arange()
		for i, e := range inv {
			inv[i] = 1 / (ext[i] * math.Pow(base, e))
		}
		return inv, attention
	case "llama3":
		inv := defaultInv(base)
		lowWavelen := float64(orig) / sc.LowFreqFactor
		highWavelen := float64(orig) / sc.HighFreqFactor
		out := make([]float64, len(inv))
		for i, f := range inv {
			wavelen := 2 * math.Pi / f
			llama := f
			if wavelen > lowWavelen {
				llama = f / factor
			}
			smooth := (float64(orig)/wavelen - sc.LowFreqFactor) / (sc.HighFreqFactor - sc.LowFreqFactor)
			smoothed := (1-smooth)*llama/factor + smooth*llama
			if !(wavelen < highWavelen) && !(wavelen > lowWavelen) {
				llama = smoothed
			}
			out[i] = llama
		}
		return out, 1
	}
	panic("hfRope: " + sc.Type)
}

// ropeConfigs are the rotary settings of checkpoints people run, with the
// values their config.json states (Phi-3.5's 48 short and long factors
// are replaced by a ramp of the same range: the rule, not the numbers,
// is under test).
func ropeConfigs() map[string]Rotary {
	ramp := func(n int, lo, hi float64) []float64 {
		f := make([]float64, n)
		for i := range f {
			f[i] = lo + (hi-lo)*float64(i)/float64(n-1)
		}
		return f
	}
	return map[string]Rotary{
		// Llama 3.1 8B: rope_theta 500000, head_dim 128.
		"llama3.1": {Dims: 128, Base: 500000, Scaling: &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1,
			HighFreqFactor: 4, OriginalMaxPositions: 8192}},
		// Llama 3.2 1B/3B: factor 32, head_dim 64.
		"llama3.2": {Dims: 64, Base: 500000, Scaling: &RopeScaling{Type: "llama3", Factor: 32, LowFreqFactor: 1,
			HighFreqFactor: 4, OriginalMaxPositions: 8192}},
		// Qwen2.5 7B with its long-context rope_scaling.
		"qwen2.5-yarn": {Dims: 128, Base: 1e6, Scaling: &RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositions: 32768}},
		// DeepSeek V3: the 64 rotary dims of MLA, mscale and mscale_all_dim.
		"deepseek-v3": {Dims: 64, Base: 10000, Interleaved: true, Scaling: &RopeScaling{Type: "yarn", Factor: 40,
			OriginalMaxPositions: 4096, MaxPositions: 163840, BetaFast: 32, BetaSlow: 1, MScale: 1, MScaleAllDim: 1}},
		// gpt-oss: yarn without truncation.
		"gpt-oss": {Dims: 64, Base: 150000, Scaling: &RopeScaling{Type: "yarn", Factor: 32, OriginalMaxPositions: 4096,
			BetaFast: 32, BetaSlow: 1, NoTruncate: true}},
		// Phi-3.5 mini: head_dim 96, original 4096, max 131072.
		"phi3.5-longrope": {Dims: 96, Base: 10000, Scaling: &RopeScaling{Type: "longrope", OriginalMaxPositions: 4096,
			MaxPositions: 131072, ShortFactor: ramp(48, 1, 1.4), LongFactor: ramp(48, 1.1, 60)}},
		"dynamic": {Dims: 128, Base: 10000, Scaling: &RopeScaling{Type: "dynamic", Factor: 4, MaxPositions: 4096}},
		"linear":  {Dims: 128, Base: 10000, Scaling: &RopeScaling{Type: "linear", Factor: 2.5}},
		"default": {Dims: 80, Base: 10000, Scaling: &RopeScaling{Type: "default"}},
	}
}

// TestRopeScalingTables: every rope type's frequencies (to 1e-12
// relative) and attention factor against the transcription of
// transformers' formulas, at the sequence lengths that switch longrope's
// and dynamic NTK's tables; and the angles rope writes at the positions
// 0, 1, 17, 4095, 8191 and 131071 against float32(A·cos(p·f)) and
// float32(A·sin(p·f)) exactly.
func TestRopeScalingTables(t *testing.T) {
	for name, r := range ropeConfigs() {
		ro, err := newRope(r, r.Dims)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, n := range []int{1, 18, 4096, 4097, 8192, 131072} {
			want, wantAttn := hfRope(r, n)
			got := ro.table(n, make([]float64, ro.half))
			for i := range want {
				if d := math.Abs(got[i]-want[i]) / want[i]; d > 1e-12 {
					t.Fatalf("%s, length %d: pair %d frequency %v, transformers %v (rel %.2g)", name, n, i, got[i], want[i], d)
				}
			}
			if math.Abs(ro.attn-wantAttn) > 1e-15*wantAttn {
				t.Fatalf("%s: attention factor %v, transformers %v", name, ro.attn, wantAttn)
			}
			cs := make([]float32, 2*ro.half)
			for _, pos := range []int{0, 1, 17, 4095, 8191, 131071} {
				if pos >= n {
					continue
				}
				ro.angles(cs, pos, got)
				for i, f := range want {
					sin, cos := math.Sincos(float64(pos) * f)
					c, s := float32(wantAttn*cos), float32(wantAttn*sin)
					// The frequencies agree to 1e-12, so p·f to 1e-7 rad at
					// worst: allow that, not an exact match.
					if math.Abs(float64(cs[i]-c)) > 2e-7 || math.Abs(float64(cs[ro.half+i]-s)) > 2e-7 {
						t.Fatalf("%s, length %d, position %d, pair %d: cos, sin %v %v, want %v %v", name, n, pos, i, cs[i], cs[ro.half+i], c, s)
					}
				}
			}
		}
	}
	// Spot values that do not depend on the transcription: llama3's first
	// pair is kept, its last divided by the factor; yarn's default
	// attention factor is 0.1·ln 4 + 1; DeepSeek's mscale ratio is 1.
	cfg := ropeConfigs()
	ro, _ := newRope(cfg["llama3.1"], 128)
	if ro.freq[0] != 1 || math.Abs(ro.freq[63]-math.Pow(500000, -126.0/128)/8) > 1e-20 {
		t.Fatalf("llama3: first and last frequencies %v, %v", ro.freq[0], ro.freq[63])
	}
	if ro, _ = newRope(cfg["qwen2.5-yarn"], 128); math.Abs(ro.attn-(0.1*math.Log(4)+1)) > 1e-15 {
		t.Fatalf("yarn attention factor %v", ro.attn)
	}
	if ro, _ = newRope(cfg["deepseek-v3"], 64); ro.attn != 1 {
		t.Fatalf("DeepSeek attention factor %v, want 1 (mscale = mscale_all_dim)", ro.attn)
	}
	if got, want := YarnSoftmaxScale(40, 1), math.Pow(0.1*math.Log(40)+1, 2); math.Abs(got-want) > 1e-15 {
		t.Fatalf("YarnSoftmaxScale(40, 1) = %v, want %v", got, want)
	}
}

// TestRopeScalingErrors: each bad rule is an ErrOption naming its field,
// from NewLayer.
func TestRopeScalingErrors(t *testing.T) {
	e, _ := NewEngine(Config{Threads: 1})
	defer e.Close()
	for _, c := range []struct {
		r    Rotary
		want string
	}{
		{Rotary{Dims: 8, Scaling: &RopeScaling{Type: "ntk"}}, "unknown type"},
		{Rotary{Dims: 8, Scaling: &RopeScaling{Type: "linear"}}, "Factor = 0"},
		{Rotary{Dims: 8, Scaling: &RopeScaling{Type: "linear", Factor: math.NaN()}}, "Factor = NaN"},
		{Rotary{Dims: 8, Scaling: &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 4, HighFreqFactor: 1, OriginalMaxPositions: 8192}}, "LowFreqFactor"},
		{Rotary{Dims: 8, Scaling: &RopeScaling{Type: "dynamic", Factor: 2}}, "MaxPositions = 0"},
		{Rotary{Dims: 2, Scaling: &RopeScaling{Type: "dynamic", Factor: 2, MaxPositions: 16}}, "Dims > 2"},
		{Rotary{Dims: 8, Scaling: &RopeScaling{Type: "yarn"}}, "Factor = 0 needs"},
		{Rotary{Dims: 8, Scaling: &RopeScaling{Type: "longrope", OriginalMaxPositions: 8, Factor: 2, ShortFactor: []float64{1, 1, 1}, LongFactor: []float64{1, 1, 1, 1}}}, "Dims/2 = 4"},
		{Rotary{Dims: 4, Scaling: &RopeScaling{Type: "longrope", OriginalMaxPositions: 8, Factor: 2, ShortFactor: []float64{1, 0}, LongFactor: []float64{1, 1}}}, "ShortFactor[1] = 0"},
		{Rotary{Dims: 4, Scaling: &RopeScaling{Type: "yarn", Factor: 2, OriginalMaxPositions: 8, ShortFactor: []float64{1, 1}}}, "longrope's"},
		{Rotary{Dims: 4, Scaling: &RopeScaling{Type: "yarn", Factor: 2, OriginalMaxPositions: 8, AttentionFactor: -1}}, "AttentionFactor = -1"},
	} {
		cfg := LayerConfig{DModel: 16, Heads: 2, HeadDim: 8, Rotary: c.r}
		_, err := NewLayer(e, cfg, Weights{WQ: make([]float32, 16*16), WK: make([]float32, 16*16), WV: make([]float32, 16*16), WO: make([]float32, 16*16)})
		if !errors.Is(err, ErrOption) || !contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want ErrOption naming %q", *c.r.Scaling, err, c.want)
		}
	}
}

// contains reports whether s holds sub.
func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestRopeScalingLayer: Forward with each rope type against the float64
// reference (rope64 with transformers' frequencies and attention factor),
// on every set, at lengths on both sides of longrope's and dynamic NTK's
// switch; then token-by-token DecodeSeqs, where each token is rotated by
// the table of the sequence's length at its step (as transformers does),
// against the same reference with those per-step lengths.
func TestRopeScalingLayer(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	small := map[string]Rotary{
		"llama3":   {Dims: 16, Base: 500000, Scaling: &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 64}},
		"yarn":     {Dims: 16, Base: 10000, Scaling: &RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositions: 32}},
		"deepseek": {Dims: 8, Base: 10000, Interleaved: true, Scaling: &RopeScaling{Type: "yarn", Factor: 40, OriginalMaxPositions: 16, MaxPositions: 640, MScale: 0.707, MScaleAllDim: 1}},
		"longrope": {Dims: 12, Base: 10000, Scaling: &RopeScaling{Type: "longrope", OriginalMaxPositions: 20, MaxPositions: 200,
			ShortFactor: []float64{1, 1.1, 1.2, 1.3, 1.4, 1.5}, LongFactor: []float64{1, 2, 4, 8, 16, 32}}},
		"dynamic": {Dims: 16, Base: 10000, Scaling: &RopeScaling{Type: "dynamic", Factor: 3, MaxPositions: 20}},
	}
	for name, r := range small {
		for _, e := range engines {
			l, w := testLayer(t, e, rng, LayerConfig{DModel: 32, Heads: 4, KVHeads: 2, HeadDim: 16, Rotary: r}, true)
			cfg := l.Config()
			for _, L := range []int{15, 37} {
				const B = 2
				x := random(rng, B*L*cfg.DModel)
				opts := Options{Causal: true}
				want := referenceSelfLens(cfg, w, x, B, L, &opts, func(int) int { return L })
				out := make([]float32, len(want))
				if err := l.Forward(out, x, B, L, &opts); err != nil {
					t.Fatal(err)
				}
				compare(t, e.Kernels()+" "+name+" forward", out, want, tolLayer, &worstLayer)
			}
			// Token by token: token p is rotated with the table of length p+1.
			const L = 30
			x := random(rng, L*cfg.DModel)
			want := referenceSelfLens(cfg, w, x, 1, L, &Options{Causal: true}, func(p int) int { return p + 1 })
			cache, err := l.NewCache(1, L)
			if err != nil {
				t.Fatal(err)
			}
			for p := 0; p < L; p++ {
				out := make([]float32, cfg.DModel)
				if err := l.DecodeSeqs(context.Background(), out, x[p*cfg.DModel:(p+1)*cfg.DModel], cache, []int{1}, nil); err != nil {
					t.Fatal(err)
				}
				compare(t, e.Kernels()+" "+name+" decode", out, want[p*cfg.DModel:(p+1)*cfg.DModel], tolLayer, &worstLayer)
			}
		}
	}
}

// FuzzRopeScaling: any rule NewLayer's rotary resolution accepts gives
// finite, non-negative frequencies and finite angles at any sequence
// length and position; any it refuses is an ErrOption. Never a panic.
func FuzzRopeScaling(f *testing.F) {
	f.Add(uint8(0), 8.0, 1.0, 4.0, 8192, 0, 0.0, 0.0, 0.0, 0.0, 0.0, false, 128, 500000.0, 100000)
	f.Add(uint8(1), 4.0, 0.0, 0.0, 32768, 0, 32.0, 1.0, 0.0, 0.0, 0.0, false, 128, 1e6, 40000)
	f.Add(uint8(1), 40.0, 0.0, 0.0, 4096, 163840, 32.0, 1.0, 1.0, 1.0, 0.0, true, 64, 10000.0, 1<<20)
	f.Add(uint8(2), 0.0, 0.0, 0.0, 4096, 131072, 0.0, 0.0, 0.0, 0.0, 0.0, false, 96, 10000.0, 5000)
	f.Add(uint8(3), 1e300, 0.0, 0.0, 0, 16, 0.0, 0.0, 0.0, 0.0, 0.0, false, 16, 10000.0, math.MaxInt)
	f.Add(uint8(4), 2.5, 0.0, 0.0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, false, 6, 1e-300, 3)
	f.Fuzz(func(t *testing.T, kind uint8, factor, low, high float64, orig, maxPos int, betaFast, betaSlow, mscale, mscaleAll, attn float64, noTrunc bool, dims int, base float64, n int) {
		types := []string{"llama3", "yarn", "longrope", "dynamic", "linear", "default", "bogus"}
		sc := &RopeScaling{Type: types[int(kind)%len(types)], Factor: factor, LowFreqFactor: low, HighFreqFactor: high,
			OriginalMaxPositions: orig, MaxPositions: maxPos, BetaFast: betaFast, BetaSlow: betaSlow, MScale: mscale,
			MScaleAllDim: mscaleAll, AttentionFactor: attn, NoTruncate: noTrunc}
		if dims < 0 || dims > 512 {
			dims = 8
		}
		if sc.Type == "longrope" && dims >= 2 {
			sc.ShortFactor, sc.LongFactor = make([]float64, dims/2), make([]float64, dims/2)
			for i := range sc.ShortFactor {
				sc.ShortFactor[i], sc.LongFactor[i] = 1+float64(i)/8, 1+float64(i)
			}
		}
		ro, err := newRope(Rotary{Dims: dims, Base: base, Scaling: sc}, 512)
		if err != nil {
			if !errors.Is(err, ErrOption) {
				t.Fatalf("%+v: %v is no ErrOption", *sc, err)
			}
			return
		}
		if ro.half == 0 {
			return
		}
		if !(ro.attn > 0) || math.IsInf(ro.attn, 0) {
			t.Fatalf("%+v: attention factor %v", *sc, ro.attn)
		}
		cs := make([]float32, 2*ro.half)
		for _, length := range []int{1, max(orig, 1), max(orig+1, 1), max(maxPos+1, 1), max(n, 1)} {
			freq := ro.table(length, make([]float64, ro.half))
			for i, fr := range freq {
				if !(fr >= 0) || math.IsInf(fr, 0) {
					t.Fatalf("%+v, length %d: pair %d frequency %v", *sc, length, i, fr)
				}
			}
			ro.angles(cs, length-1, freq)
			for i, c := range cs {
				if c != c || math.IsInf(float64(c), 0) {
					t.Fatalf("%+v, length %d: angle value %d is %v", *sc, length, i, c)
				}
			}
		}
	})
}

// TestFrequencies: the exported table is the layer's own, a copy, and
// length-dependent for longrope; a bad Rotary or length is ErrOption.
func TestFrequencies(t *testing.T) {
	rot := Rotary{Dims: 8, Base: 500000, Scaling: &RopeScaling{Type: "longrope", OriginalMaxPositions: 16, MaxPositions: 64,
		ShortFactor: []float64{1, 1, 1, 1}, LongFactor: []float64{1, 2, 4, 8}}}
	ro, err := newRope(rot, 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 16, 17, 1000} {
		freq, attn, err := rot.Frequencies(n)
		if err != nil {
			t.Fatal(err)
		}
		want := ro.table(n, make([]float64, 4))
		if !slices.Equal(freq, want) || attn != ro.attn {
			t.Errorf("length %d: %v, %v; the layer uses %v, %v", n, freq, attn, want, ro.attn)
		}
		freq[0] = -1 // a copy: the layer's table stays
	}
	if ro.freq[0] == -1 || ro.rule.long[0] == -1 {
		t.Error("Frequencies handed out the layer's table")
	}
	if f, a, err := (Rotary{}).Frequencies(5); f != nil || a != 1 || err != nil {
		t.Errorf("no rotary: %v, %v, %v", f, a, err)
	}
	for _, bad := range []Rotary{{Dims: 3}, {Dims: 8, Base: -1}, {Dims: 8, Scaling: &RopeScaling{Type: "linear", Factor: 0x1p-1070}}} {
		if _, _, err := bad.Frequencies(1); !errors.Is(err, ErrOption) {
			t.Errorf("%+v: %v, want ErrOption", bad, err)
		}
	}
	if _, _, err := rot.Frequencies(-1); !errors.Is(err, ErrOption) {
		t.Errorf("length -1: %v, want ErrOption", err)
	}
}
