package mha_test

import (
	"fmt"
	"log"
	"math"

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
	if err := mha.Attention(out, q, k, v, shape, &mha.Options{Causal: true, OutLSE: lse}); err != nil {
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
	fmt.Println("cached tokens:", cache.Len(0))
	fmt.Printf("output: %.3f\n", out[:8])
	// Output:
	// cached tokens: 3
	// output: [0.400 0.540 0.480 0.520 0.460 0.400 0.540 0.480]
}

// An Engine owns its worker pool and scratch: make one per process (or per
// kernel set), share it between goroutines, Close it when done.
func ExampleNew() {
	// fill returns n values in [-1, 1) in a fixed pattern: any data will do.
	fill := func(n, seed int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32((i*7+seed*13)%17)/8.5 - 1
		}
		return x
	}
	e, err := mha.NewEngine(mha.Config{Threads: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	shape := mha.Shape{Batch: 1, Heads: 4, KVHeads: 2, QLen: 5, KVLen: 7, HeadDim: 8, Layout: mha.BHSD}
	q := fill(1*4*5*8, 1)
	k := fill(1*2*7*8, 2)
	v := fill(1*2*7*8, 3)
	out := make([]float32, len(q))
	if err := e.Attention(out, q, k, v, shape, &mha.Options{Causal: true}); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("head 3, last row: %.3f\n", out[3*5*8+4*8:][:8])
	// Output:
	// head 3, last row: [-0.157 0.059 0.045 -0.163 0.189 -0.360 0.031 -0.392]
}

// ALiBi as an additive bias: slope_h·(j - i) for head h, broadcast over
// the batch (BiasBatch 1). A -Inf entry would mask its key.
func ExampleOptions_bias() {
	// fill returns n values in [-1, 1) in a fixed pattern: any data will do.
	fill := func(n, seed int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32((i*7+seed*13)%17)/8.5 - 1
		}
		return x
	}
	const H, L, D = 2, 4, 4
	shape := mha.Shape{Batch: 1, Heads: H, QLen: L, KVLen: L, HeadDim: D}
	q := fill(L*H*D, 4)
	k := fill(L*H*D, 5)
	v := fill(L*H*D, 6)
	slopes := []float32{0.25, 0.0625} // 2^(-8h/H) for H = 2
	bias := make([]float32, H*L*L)    // [BiasBatch=1][H][Lq][Lk]
	for h := 0; h < H; h++ {
		for i := 0; i < L; i++ {
			for j := 0; j < L; j++ {
				bias[(h*L+i)*L+j] = slopes[h] * float32(j-i)
			}
		}
	}
	out := make([]float32, L*H*D)
	opts := &mha.Options{Causal: true, Bias: bias, BiasHeads: H}
	if err := mha.Attention(out, q, k, v, shape, opts); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("last token, head 0: %.3f\n", out[(L-1)*H*D:][:D])
	// Output:
	// last token, head 0: [0.075 -0.112 -0.278 0.163]
}

// Padded batches: KVLens gives each sequence's real key length, so the
// padding keys are never read. LSE returns each row's log-sum-exp, with
// which partial results over disjoint keys can be merged.
func ExampleOptions_kvLens() {
	// fill returns n values in [-1, 1) in a fixed pattern: any data will do.
	fill := func(n, seed int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32((i*7+seed*13)%17)/8.5 - 1
		}
		return x
	}
	const B, H, Lq, Lk, D = 2, 1, 1, 6, 4
	shape := mha.Shape{Batch: B, Heads: H, QLen: Lq, KVLen: Lk, HeadDim: D}
	q := fill(B*Lq*H*D, 7)
	k := fill(B*Lk*H*D, 8)
	v := fill(B*Lk*H*D, 9)
	out := make([]float32, B*Lq*H*D)
	lse := make([]float32, B*H*Lq)
	opts := &mha.Options{KVLens: []int{6, 2}, OutLSE: lse} // sequence 1 has 2 real keys
	if err := mha.Attention(out, q, k, v, shape, opts); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("out: %.3f\n", out)
	fmt.Printf("lse: %.3f\n", lse)
	// Output:
	// out: [-0.152 0.127 -0.016 -0.226 0.360 -0.337 0.007 -0.690]
	// lse: [1.817 1.139]
}

// Self-attention over a batch of 2 sequences of 3 tokens, causal.
func ExampleLayer_Forward() {
	// fill returns n values in [-1, 1) in a fixed pattern: any data will do.
	fill := func(n, seed int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32((i*7+seed*13)%17)/8.5 - 1
		}
		return x
	}
	cfg := mha.LayerConfig{DModel: 8, Heads: 4, KVHeads: 2, HeadDim: 2}
	w := mha.Weights{
		WQ: fill(8*8, 1), WK: fill(8*4, 2),
		WV: fill(8*4, 3), WO: fill(8*8, 4),
		BO: fill(8, 5),
	}
	layer, err := mha.NewLayer(nil, cfg, w)
	if err != nil {
		log.Fatal(err)
	}
	x := fill(2*3*8, 6) // [batch][seq][DModel]
	out := make([]float32, len(x))
	if err := layer.Forward(out, x, 2, 3, &mha.Options{Causal: true}); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("sequence 1, token 2: %.3f\n", out[(1*3+2)*8:][:8])
	// Output:
	// sequence 1, token 2: [1.488 -1.141 0.719 -0.832 -1.228 2.046 -0.962 0.921]
}

// Cross-attention: 2 decoder tokens attend to 5 encoder tokens.
func ExampleLayer_ForwardCross() {
	// fill returns n values in [-1, 1) in a fixed pattern: any data will do.
	fill := func(n, seed int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32((i*7+seed*13)%17)/8.5 - 1
		}
		return x
	}
	cfg := mha.LayerConfig{DModel: 8, Heads: 4, KVHeads: 2, HeadDim: 2}
	w := mha.Weights{
		WQ: fill(8*8, 1), WK: fill(8*4, 2),
		WV: fill(8*4, 3), WO: fill(8*8, 4),
		BO: fill(8, 5),
	}
	layer, err := mha.NewLayer(nil, cfg, w)
	if err != nil {
		log.Fatal(err)
	}
	dec := fill(2*8, 7) // [1][2][DModel]
	enc := fill(5*8, 8) // [1][5][DModel]
	out := make([]float32, len(dec))
	if err := layer.ForwardCross(out, dec, enc, 1, 2, 5, nil); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("token 1: %.3f\n", out[8:])
	// Output:
	// token 1: [1.123 -1.695 1.385 -1.538 0.915 1.555 -1.281 1.606]
}

// Sequence-parallel attention: the keys of one call split into 3 shards,
// each run on its own (as different machines would), merged by their
// LSEs into the single call's result.
func ExampleMerge() {
	const heads, qlen, kvlen, dim = 2, 4, 12, 8
	shape := mha.Shape{Batch: 1, Heads: heads, QLen: qlen, KVLen: kvlen, HeadDim: dim}
	q := make([]float32, qlen*heads*dim)
	k := make([]float32, kvlen*heads*dim)
	v := make([]float32, kvlen*heads*dim)
	for i := range q {
		q[i] = float32(i%7) / 7
	}
	for i := range k {
		k[i], v[i] = float32(i%5)/5, float32(i%11)
	}
	// The single call: causal, bottom-right (the queries are the last 4
	// positions of the 12).
	want := make([]float32, len(q))
	if err := mha.Attention(want, q, k, v, shape, &mha.Options{Causal: true}); err != nil {
		log.Fatal(err)
	}
	// Three shards of keys [0,5), [5,9), [9,12). In BSHD with batch 1 the
	// keys of a shard are one contiguous run of k and v.
	row := heads * dim
	var outs, lses [][]float32
	for _, sh := range [][2]int{{0, 5}, {5, 9}, {9, 12}} {
		a, b := sh[0], sh[1]
		part := shape
		part.KVLen = b - a
		off := (kvlen - qlen) - a // the queries' positions, from the shard's first key
		out := make([]float32, len(q))
		lse := make([]float32, heads*qlen)
		opts := &mha.Options{Causal: true, QueryOffset: &off, OutLSE: lse}
		if err := mha.Attention(out, q, k[a*row:b*row], v[a*row:b*row], part, opts); err != nil {
			log.Fatal(err)
		}
		outs, lses = append(outs, out), append(lses, lse)
	}
	got := make([]float32, len(q))
	if err := mha.Merge(got, nil, outs, lses, shape); err != nil {
		log.Fatal(err)
	}
	worst := 0.0
	for i := range got {
		worst = math.Max(worst, math.Abs(float64(got[i]-want[i]))/(1+math.Abs(float64(want[i]))))
	}
	fmt.Println("merged equals the single call within 1e-6:", worst <= 1e-6)
	// Output:
	// merged equals the single call within 1e-6: true
}
