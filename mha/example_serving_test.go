package mha_test

import (
	"context"
	"fmt"
	"log"

	"github.com/fastattn/fastattn/mha"
)

// A serving loop: a Llama-style layer (rotary embeddings, QK-norm, GQA)
// decodes a ragged batch. Sequence 0 is generating; sequence 1 joins with
// a 3-token prompt in the same call; a rejected speculative token is
// rolled back with Truncate; a finished slot is reused after Reset.
func ExampleLayer_DecodeSeqs() {
	// fill returns n values in [-1, 1) in a fixed pattern: any data will do.
	fill := func(n, seed int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32((i*7+seed*13)%17)/8.5 - 1
		}
		return x
	}
	cfg := mha.LayerConfig{DModel: 8, Heads: 4, KVHeads: 2, HeadDim: 4,
		Rotary: mha.Rotary{Dims: 4, Base: 10000}}
	w := mha.Weights{WQ: fill(8*16, 1), WK: fill(8*8, 2),
		WV: fill(8*8, 3), WO: fill(16*8, 4),
		QNorm: []float32{1, 1, 1, 1}, KNorm: []float32{1, 1, 1, 1}}
	layer, err := mha.NewLayer(nil, cfg, w)
	if err != nil {
		log.Fatal(err)
	}
	cache, err := layer.NewCache(2, 64) // 2 sequences of up to 64 tokens
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	token := func(seed int) []float32 { return fill(8, seed) }
	step := func(counts []int, x []float32) []float32 {
		out := make([]float32, len(x))
		if err := layer.DecodeSeqs(ctx, out, x, cache, counts, nil); err != nil {
			log.Fatal(err)
		}
		return out
	}
	// Sequence 0 takes its 2-token prompt alone.
	step([]int{2, 0}, append(token(10), token(11)...))
	// Sequence 0 decodes a token while sequence 1 takes a 3-token prompt:
	// x packs sequence 0's row, then sequence 1's three.
	x := append(token(12), append(token(20), append(token(21), token(22)...)...)...)
	out := step([]int{1, 3}, x)
	fmt.Println("lengths:", cache.Lens(nil))
	// Speculative decoding: sequence 0 tries 2 draft tokens, the model
	// accepts one, the other is rolled back.
	step([]int{2, 1}, append(append(token(13), token(14)...), token(23)...))
	if err := cache.Truncate(0, cache.Len(0)-1); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after the rollback:", cache.Lens(nil))
	// Sequence 1 finishes; its slot takes a new request.
	if err := cache.Reset(1); err != nil {
		log.Fatal(err)
	}
	step([]int{1, 1}, append(token(15), token(30)...))
	fmt.Println("after the reset:", cache.Lens(nil))
	fmt.Printf("sequence 1, last prompt token: %.3f\n", out[3*8:4*8])
	// Output:
	// lengths: [3 3]
	// after the rollback: [4 4]
	// after the reset: [5 1]
	// sequence 1, last prompt token: [-0.558 -0.114 1.109 -1.544 1.494 -0.575 -0.453 0.547]
}

// Loading a checkpoint's weights as they are stored: PyTorch's nn.Linear
// keeps [out][in] matrices, and some models fuse q, k and v into one
// (Phi-3's qkv_proj). OutIn takes them as they are; the layer is the same
// as one built from [in][out] copies.
func ExampleWeights_outIn() {
	// fill returns n values in [-1, 1) in a fixed pattern: any data will do.
	fill := func(n, seed int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32((i*7+seed*13)%17)/8.5 - 1
		}
		return x
	}
	const dm, heads, kvHeads, dim = 6, 2, 1, 3
	// As a safetensors file would hold them (name → [out][in] tensor).
	tensors := map[string][]float32{
		"qkv_proj.weight": fill((heads+2*kvHeads)*dim*dm, 1), // [(2+1+1)·3][6]
		"o_proj.weight":   fill(dm*heads*dim, 2),             // [6][2·3]
	}
	cfg := mha.LayerConfig{DModel: dm, Heads: heads, KVHeads: kvHeads, HeadDim: dim}
	fusedLayer, err := mha.NewLayer(nil, cfg, mha.Weights{OutIn: true,
		WQKV: tensors["qkv_proj.weight"], WO: tensors["o_proj.weight"]})
	if err != nil {
		log.Fatal(err)
	}
	// The same layer from transposed, separate [in][out] matrices.
	t := func(m []float32, rows, cols, r0 int) []float32 { // rows r0.. of [?][cols], transposed
		out := make([]float32, rows*cols)
		for r := 0; r < rows; r++ {
			for c := 0; c < cols; c++ {
				out[c*rows+r] = m[(r0+r)*cols+c]
			}
		}
		return out
	}
	qkv := tensors["qkv_proj.weight"]
	plainLayer, err := mha.NewLayer(nil, cfg, mha.Weights{
		WQ: t(qkv, 6, dm, 0), WK: t(qkv, 3, dm, 6), WV: t(qkv, 3, dm, 9),
		WO: t(tensors["o_proj.weight"], dm, 6, 0)})
	if err != nil {
		log.Fatal(err)
	}
	x := fill(4*dm, 5)
	a, b := make([]float32, len(x)), make([]float32, len(x))
	if err := fusedLayer.Forward(a, x, 1, 4, &mha.Options{Causal: true}); err != nil {
		log.Fatal(err)
	}
	if err := plainLayer.Forward(b, x, 1, 4, &mha.Options{Causal: true}); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("fused [out][in]: %.3f\nseparate [in][out]: %.3f\n", a[18:24], b[18:24])
	// Output:
	// fused [out][in]: [0.243 -0.769 0.327 -0.256 0.410 0.844]
	// separate [in][out]: [0.243 -0.769 0.327 -0.256 0.410 0.844]
}
