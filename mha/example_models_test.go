package mha_test

import (
	"fmt"
	"math"

	"github.com/fastattn/fastattn/mha"
)

// Llama 3.1 8B's attention as its config.json states it: "hidden_size":
// 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim":
// 128, "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3",
// "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
// "original_max_position_embeddings": 8192}. (Llama 3.2 1B/3B: "factor":
// 32.0.) The layer here has a smaller model dimension so the example runs
// quickly; every other number is the checkpoint's.
func ExampleRopeScaling_llama31() {
	rot := mha.Rotary{Dims: 128, Base: 500000, Scaling: &mha.RopeScaling{Type: "llama3", Factor: 8,
		LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}}
	freq, attn, err := rot.Frequencies(0)
	if err != nil {
		panic(err)
	}
	// Wavelengths shorter than 8192/4 keep their frequency, longer than
	// 8192/1 are divided by 8, the band between is interpolated.
	fmt.Printf("pair 0 %.6g, pair 40 %.6g, pair 63 %.6g (unscaled %.6g), attention factor %g\n",
		freq[0], freq[40], freq[63], math.Pow(500000, -126.0/128), attn)
	decodeTwo(mha.LayerConfig{DModel: 256, Heads: 32, KVHeads: 8, HeadDim: 128, Rotary: rot})
	// Output:
	// pair 0 1, pair 40 3.4281e-05, pair 63 3.06893e-07 (unscaled 2.45514e-06), attention factor 1
	// 2 tokens decoded, 32 heads over 8 KV heads of 128
}

// Qwen2.5 7B Instruct past 32k tokens, as its model card asks config.json
// to say: "num_attention_heads": 28, "num_key_value_heads": 4,
// "rope_theta": 1000000.0, "rope_scaling": {"type": "yarn", "factor":
// 4.0, "original_max_position_embeddings": 32768}. The head dim is
// 3584/28 = 128; q, k and v have biases (Weights.BQ, BK, BV).
func ExampleRopeScaling_qwen25Yarn() {
	rot := mha.Rotary{Dims: 128, Base: 1e6, Scaling: &mha.RopeScaling{Type: "yarn", Factor: 4,
		OriginalMaxPositions: 32768}}
	freq, attn, err := rot.Frequencies(0)
	if err != nil {
		panic(err)
	}
	// YaRN keeps the fast pairs, divides the slow ones by the factor and
	// ramps between; cos and sin are multiplied by 0.1·ln(4) + 1.
	fmt.Printf("pair 0 %.6g, pair 63 %.6g, attention factor %.6f\n", freq[0], freq[63], attn)
	decodeTwo(mha.LayerConfig{DModel: 256, Heads: 28, KVHeads: 4, HeadDim: 128, Rotary: rot})
	// Output:
	// pair 0 1, pair 63 3.10234e-07, attention factor 1.138629
	// 2 tokens decoded, 28 heads over 4 KV heads of 128
}

// Phi-3 mini 128k: "num_attention_heads": 32, "num_key_value_heads": 32,
// "hidden_size": 3072 (head dim 96), "rope_theta": 10000.0,
// "max_position_embeddings": 131072, "original_max_position_embeddings":
// 4096, "rope_scaling": {"type": "longrope", "short_factor": [48
// values], "long_factor": [48 values]}. Copy the checkpoint's two lists
// into ShortFactor and LongFactor; the lists here stand in for them (1
// and 2 everywhere). A sequence up to 4096 tokens rotates with the short
// factors, a longer one with the long factors; both scale cos and sin by
// sqrt(1 + ln 32 / ln 4096).
func ExampleRopeScaling_phi3LongRoPE() {
	short, long := make([]float64, 48), make([]float64, 48)
	for i := range short {
		short[i], long[i] = 1, 2
	}
	rot := mha.Rotary{Dims: 96, Base: 10000, Scaling: &mha.RopeScaling{Type: "longrope",
		OriginalMaxPositions: 4096, MaxPositions: 131072, ShortFactor: short, LongFactor: long}}
	for _, n := range []int{4096, 4097} {
		freq, attn, err := rot.Frequencies(n)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%d tokens: pair 47 %.6g, attention factor %.6f\n", n, freq[47], attn)
	}
	decodeTwo(mha.LayerConfig{DModel: 192, Heads: 32, HeadDim: 96, Rotary: rot})
	// Output:
	// 4096 tokens: pair 47 0.000121153, attention factor 1.190238
	// 4097 tokens: pair 47 6.05764e-05, attention factor 1.190238
	// 2 tokens decoded, 32 heads over 32 KV heads of 96
}

// DeepSeek V3's attention decodes in MLA's absorbed form: every query
// head ("num_attention_heads": 128) attends over one shared KV head whose
// rows are the 512-dim latent ("kv_lora_rank": 512) followed by 64
// rotary dims ("qk_rope_head_dim": 64), and the value is the latent
// itself: Dk = 576, Dv = 512, V the first 512 elements of each K row.
// Shape.ValueInKey reads each row once. The softmax scale is
// 1/sqrt(192) ("qk_nope_head_dim" 128 + 64) times YaRN's m(40, 1)², from
// "rope_scaling": {"type": "yarn", "factor": 40, "mscale": 1.0,
// "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
// "beta_fast": 32, "beta_slow": 1}, "rope_theta": 10000. The caller
// projects and absorbs (q·W_UK, the latent's norm, k_pe's interleaved
// rotary), stores the latent K rows, and multiplies the output by W_UV.
func ExampleShape_valueInKey() {
	const heads, ctx, dk, dv = 128, 64, 576, 512
	s := mha.Shape{Batch: 1, Heads: heads, KVHeads: 1, QLen: 1, KVLen: ctx, HeadDim: dk, ValueDim: dv, ValueInKey: true}
	q := make([]float32, heads*dk)    // the absorbed queries of one new token
	latent := make([]float32, ctx*dk) // the cached [latent | k_pe] rows
	for i := range latent {
		latent[i] = float32(i%7) / 7
	}
	out := make([]float32, heads*dv) // per head, to multiply by W_UV
	opts := &mha.Options{Causal: true, Scale: float32(mha.YarnSoftmaxScale(40, 1) / math.Sqrt(192))}
	if err := mha.Attention(out, q, latent, nil, s, opts); err != nil {
		panic(err)
	}
	// q is zero, so every key weighs the same: out is the mean of the
	// latent rows, (2r+j mod 7)/7 averaged over r < 64 for element j.
	fmt.Printf("scale %.4f; head 0: %.6f %.6f; head 127: %.6f\n", opts.Scale, out[0], out[1], out[127*dv+1])
	// Output:
	// scale 0.1352; head 0: 0.421875 0.424107; head 127: 0.424107
}

// decodeTwo makes a layer of cfg with zero weights, decodes two tokens
// through a bf16 cache and says so.
func decodeTwo(cfg mha.LayerConfig) {
	kv := cfg.KVHeads
	if kv == 0 {
		kv = cfg.Heads
	}
	w := mha.Weights{WQ: make([]float32, cfg.DModel*cfg.Heads*cfg.HeadDim), WK: make([]float32, cfg.DModel*kv*cfg.HeadDim),
		WV: make([]float32, cfg.DModel*kv*cfg.HeadDim), WO: make([]float32, cfg.Heads*cfg.HeadDim*cfg.DModel)}
	e, err := mha.Default()
	if err != nil {
		panic(err)
	}
	l, err := mha.NewLayer(e, cfg, w)
	if err != nil {
		panic(err)
	}
	cache, err := l.NewCacheOf(1, 16, mha.BFloat16)
	if err != nil {
		panic(err)
	}
	x, out := make([]float32, 2*cfg.DModel), make([]float32, 2*cfg.DModel)
	// Decode is causal. A decoder's prefill through Forward (no cache)
	// must say so: Forward(out, x, 1, 2, &mha.Options{Causal: true}) —
	// Forward without it is an encoder's, bidirectional.
	if err := l.Decode(out, x, cache, 2, nil); err != nil {
		panic(err)
	}
	fmt.Printf("%d tokens decoded, %d heads over %d KV heads of %d\n", cache.Len(0), cfg.Heads, kv, cfg.HeadDim)
}

// DeepSeek V3's attention through NewMLALayer, its config.json mapped
// field by field: "hidden_size": 7168 → DModel, "num_attention_heads":
// 128 → Heads, "q_lora_rank": 1536, "kv_lora_rank": 512,
// "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
// "rope_theta": 10000, "rope_interleave": true, "rms_norm_eps": 1e-6 and
// "rope_scaling": {"type": "yarn", "factor": 40, "mscale": 1.0,
// "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1,
// "original_max_position_embeddings": 4096}. Its tensors are the
// checkpoint's q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa,
// kv_a_layernorm, kv_b_proj and o_proj weights (here made up). The layer
// built here has the model's structure at a smaller width, so that the
// example runs quickly.
func ExampleNewMLALayer() {
	v3 := mha.MLAConfig{DModel: 7168, Heads: 128, QLoraRank: 1536, KVLoraRank: 512, NopeDim: 128, RopeDim: 64, VHeadDim: 128,
		Rotary: mha.Rotary{Base: 10000, Interleaved: true, Scaling: &mha.RopeScaling{Type: "yarn", Factor: 40,
			MScale: 1, MScaleAllDim: 1, BetaFast: 32, BetaSlow: 1, OriginalMaxPositions: 4096}}, NormEps: 1e-6}
	// A token's cache row is its latent and rotary values, shared by all
	// 128 heads.
	fmt.Printf("DeepSeek V3: cache row %d values, %d bytes as bfloat16\n", v3.KVLoraRank+v3.RopeDim, 2*(v3.KVLoraRank+v3.RopeDim))

	c := v3
	c.DModel, c.Heads, c.QLoraRank, c.KVLoraRank, c.NopeDim, c.VHeadDim = 64, 4, 32, 32, 16, 16
	fill := func(n int, v float32) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = v + float32(i%13-6)/64
		}
		return x
	}
	w := mha.MLAWeights{
		WQA: fill(c.QLoraRank*c.DModel, 0), QANorm: fill(c.QLoraRank, 1),
		WQB:  fill(c.Heads*(c.NopeDim+c.RopeDim)*c.QLoraRank, 0),
		WKVA: fill((c.KVLoraRank+c.RopeDim)*c.DModel, 0), KVANorm: fill(c.KVLoraRank, 1),
		WKVB: fill(c.Heads*(c.NopeDim+c.VHeadDim)*c.KVLoraRank, 0), WO: fill(c.DModel*c.Heads*c.VHeadDim, 0),
		Type: mha.BFloat16,
	}
	layer, err := mha.NewMLALayer(nil, c, w)
	if err != nil {
		panic(err)
	}
	cfg := layer.Config()
	fmt.Printf("layer: %d heads over %d KV head, HeadDim %d, ValueDim %d read inside the keys: %v\n",
		cfg.Heads, cfg.KVHeads, cfg.HeadDim, cfg.ValueDim, cfg.ValueInKey)

	cache, err := layer.NewCacheOf(1, 16, mha.BFloat16)
	if err != nil {
		panic(err)
	}
	x := fill(5*c.DModel, 0.1)
	stepwise, whole := make([]float32, len(x)), make([]float32, len(x))
	for i := 0; i < 5; i++ { // token by token through the cache
		if err := layer.Decode(stepwise[i*c.DModel:(i+1)*c.DModel], x[i*c.DModel:(i+1)*c.DModel], cache, 1, nil); err != nil {
			panic(err)
		}
	}
	if err := layer.Forward(whole, x, 1, 5, &mha.Options{Causal: true}); err != nil {
		panic(err)
	}
	diff, size := 0.0, 0.0
	for i := range whole {
		diff, size = math.Max(diff, math.Abs(float64(stepwise[i]-whole[i]))), math.Max(size, math.Abs(float64(whole[i])))
	}
	fmt.Printf("%d tokens cached, K %d values, V %d; decoding matches Forward within bfloat16: %v\n",
		cache.Len(0), len(cache.K16), len(cache.V16), diff <= 1e-2*size)
	// Output:
	// DeepSeek V3: cache row 576 values, 1152 bytes as bfloat16
	// layer: 4 heads over 1 KV head, HeadDim 96, ValueDim 32 read inside the keys: true
	// 5 tokens cached, K 1536 values, V 0; decoding matches Forward within bfloat16: true
}
