package mha_test

import (
	"fmt"
	"math"

	"github.com/fastattn/fastattn/mha"
)

// Rotary scaling as config.json states it: each field of rope_scaling (or
// rope_parameters) maps to one of RopeScaling's. The layers here are
// small so the example runs; the comments give each model's real shape.
func ExampleRopeScaling() {
	e, err := mha.NewEngine(mha.Config{Threads: 1})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	rotaries := map[string]mha.Rotary{
		// Llama 3.1 8B (DModel 4096, Heads 32, KVHeads 8, HeadDim 128):
		// "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3",
		// "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
		// "original_max_position_embeddings": 8192}
		"llama3.1": {Dims: 128, Base: 500000, Scaling: &mha.RopeScaling{Type: "llama3", Factor: 8,
			LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}},
		// Qwen2.5 7B past 32k tokens: "rope_theta": 1000000.0,
		// "rope_scaling": {"type": "yarn", "factor": 4.0,
		// "original_max_position_embeddings": 32768}
		"qwen2.5-yarn": {Dims: 128, Base: 1e6, Scaling: &mha.RopeScaling{Type: "yarn", Factor: 4,
			OriginalMaxPositions: 32768}},
		// Phi-3.5 mini (HeadDim 96): "rope_theta": 10000.0,
		// "max_position_embeddings": 131072,
		// "original_max_position_embeddings": 4096, "rope_scaling":
		// {"type": "longrope", "short_factor": [48 values],
		// "long_factor": [48 values]}; ones here stand for the values.
		"phi3.5-longrope": {Dims: 96, Base: 10000, Scaling: &mha.RopeScaling{Type: "longrope",
			OriginalMaxPositions: 4096, MaxPositions: 131072, ShortFactor: ones(48), LongFactor: ones(48)}},
		// DeepSeek V3's 64 rotary dims (interleaved): "rope_theta": 10000,
		// "max_position_embeddings": 163840, "rope_scaling": {"type":
		// "yarn", "factor": 40, "original_max_position_embeddings": 4096,
		// "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
		// "mscale_all_dim": 1.0}
		"deepseek-v3": {Dims: 64, Base: 10000, Interleaved: true, Scaling: &mha.RopeScaling{Type: "yarn", Factor: 40,
			OriginalMaxPositions: 4096, MaxPositions: 163840, BetaFast: 32, BetaSlow: 1, MScale: 1, MScaleAllDim: 1}},
	}
	for _, name := range []string{"llama3.1", "qwen2.5-yarn", "phi3.5-longrope", "deepseek-v3"} {
		r := rotaries[name]
		cfg := mha.LayerConfig{DModel: 32, Heads: 2, HeadDim: r.Dims, Rotary: r}
		n := cfg.DModel * cfg.Heads * cfg.HeadDim
		w := mha.Weights{WQ: make([]float32, n), WK: make([]float32, n), WV: make([]float32, n), WO: make([]float32, n)}
		if _, err := mha.NewLayer(e, cfg, w); err != nil {
			fmt.Println(name, err)
			continue
		}
		fmt.Println(name, "ok")
	}
	// DeepSeek also scales its softmax: 1/sqrt(192) (its q·k head dim)
	// times m(40, mscale_all_dim)².
	scale := mha.YarnSoftmaxScale(40, 1) / math.Sqrt(192)
	fmt.Printf("DeepSeek V3 Options.Scale %.4f\n", scale)
	// Output:
	// llama3.1 ok
	// qwen2.5-yarn ok
	// phi3.5-longrope ok
	// deepseek-v3 ok
	// DeepSeek V3 Options.Scale 0.1352
}

// ones returns n ones.
func ones(n int) []float64 {
	f := make([]float64, n)
	for i := range f {
		f[i] = 1
	}
	return f
}
