package mha_test

import (
	"fmt"
	"log"

	"github.com/fastattn/fastattn/mha"
)

// One call: causal attention of 3 query tokens over 3 keys, 2 heads of
// dimension 4, BSHD layout.
func ExampleAttention() {
	shape := mha.Shape{Batch: 1, Heads: 2, QLen: 3, KVLen: 3, HeadDim: 4}
	n := 1 * 3 * 2 * 4
	q, k, v := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range q {
		q[i], k[i], v[i] = float32(i%5)/5, float32(i%3)/3, float32(i)
	}
	out := make([]float32, n)
	lse := make([]float32, 2*3)
	if err := mha.Attention(out, q, k, v, shape, &mha.Options{Causal: true, LSE: lse}); err != nil {
		log.Fatal(err)
	}
	// Row 0 sees only key 0, so it copies v's first row for each head.
	fmt.Printf("token 0, head 0: %.3f\n", out[0:4])
	fmt.Printf("token 2, head 1: %.3f\n", out[20:24])
	// Output:
	// token 0, head 0: [0.000 1.000 2.000 3.000]
	// token 2, head 1: [12.271 13.271 14.271 15.271]
}

// An MHA layer with grouped-query attention: prefill a prompt with Forward
// semantics through the KV cache, then decode one token.
func ExampleLayer_Decode() {
	cfg := mha.LayerConfig{DModel: 8, Heads: 4, KVHeads: 2, HeadDim: 2}
	w := mha.Weights{
		WQ: make([]float32, 8*8), WK: make([]float32, 8*4),
		WV: make([]float32, 8*4), WO: make([]float32, 8*8),
	}
	for i := range w.WQ {
		w.WQ[i], w.WO[i] = float32(i%7)/10, float32(i%5)/10
	}
	for i := range w.WK {
		w.WK[i], w.WV[i] = float32(i%3)/10, float32(i%4)/10
	}
	layer, err := mha.NewLayer(nil, cfg, w)
	if err != nil {
		log.Fatal(err)
	}
	cache, err := layer.NewCache(1, 16) // batch 1, up to 16 tokens
	if err != nil {
		log.Fatal(err)
	}
	prompt := []float32{ // 2 tokens of width 8
		1, 0, 0, 0, 0, 0, 0, 1,
		0, 1, 0, 0, 0, 0, 1, 0,
	}
	out := make([]float32, len(prompt))
	if err := layer.Decode(out, prompt, cache, 2, nil); err != nil {
		log.Fatal(err)
	}
	next := []float32{0, 0, 1, 0, 0, 1, 0, 0}
	if err := layer.Decode(out[:8], next, cache, 1, nil); err != nil {
		log.Fatal(err)
	}
	fmt.Println("cached tokens:", cache.Len())
	fmt.Printf("output: %.3f\n", out[:8])
	// Output:
	// cached tokens: 3
	// output: [0.400 0.540 0.480 0.520 0.460 0.400 0.540 0.480]
}
