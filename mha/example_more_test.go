package mha_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/fastattn/fastattn/mha"
)

// exampleLayer returns a small causal decoder layer with rotary
// embeddings and random weights.
func exampleLayer() *mha.Layer {
	rng := rand.New(rand.NewPCG(1, 2))
	randn := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64()) * 0.2
		}
		return x
	}
	cfg := mha.LayerConfig{DModel: 32, Heads: 4, KVHeads: 2, HeadDim: 8, Rotary: mha.Rotary{Dims: 8, Base: 10000}}
	layer, err := mha.NewLayer(nil, cfg, mha.Weights{WQ: randn(32 * 32), WK: randn(32 * 16), WV: randn(32 * 16), WO: randn(32 * 32)})
	if err != nil {
		log.Fatal(err)
	}
	return layer
}

// Forking a prompt: the prompt is decoded once into sequence 0, and
// CopyTo starts sequences 1 and 2 from it (parallel sampling, beam search,
// a shared system prompt) without recomputing it. A forked sequence then
// decodes exactly as one that took the prompt itself.
func ExampleCache_CopyTo() {
	layer := exampleLayer()
	cache, err := layer.NewCache(3, 64) // 3 sequences of up to 64 tokens
	if err != nil {
		log.Fatal(err)
	}
	prompt := make([]float32, 10*32) // 10 tokens of width 32
	for i := range prompt {
		prompt[i] = float32(i%7) / 7
	}
	out := make([]float32, len(prompt))
	if err := layer.DecodeSeqs(nil, out, prompt, cache, []int{10, 0, 0}, nil); err != nil {
		log.Fatal(err)
	}
	for _, seq := range []int{1, 2} {
		if err := cache.CopyTo(cache, seq, 0, cache.Len(0)); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("lengths after the forks:", cache.Lens(nil))

	// One next token for each of the three: the same token gives the
	// same output bit for bit in every fork.
	next := make([]float32, 3*32)
	for i := range next {
		next[i] = float32(i%32) / 32
	}
	y := make([]float32, 3*32)
	if err := layer.DecodeSeqs(nil, y, next, cache, []int{1, 1, 1}, nil); err != nil {
		log.Fatal(err)
	}
	fmt.Println("forks agree:", slices.Equal(y[:32], y[32:64]) && slices.Equal(y[:32], y[64:]))
	fmt.Println("lengths:", cache.Lens(nil))
	// Output:
	// lengths after the forks: [10 10 10]
	// forks agree: true
	// lengths: [11 11 11]
}

// Cancellation: a decoding call stops between work items when its context
// is done and returns ctx.Err(); the cache is then as it was before the
// call, so the server can retry or drop the request.
func ExampleLayer_DecodeContext() {
	layer := exampleLayer()
	cache, err := layer.NewCache(1, 64)
	if err != nil {
		log.Fatal(err)
	}
	x := make([]float32, 8*32)
	out := make([]float32, len(x))
	if err := layer.DecodeContext(context.Background(), out, x, cache, 8, nil); err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the client went away
	err = layer.DecodeContext(ctx, out[:32], x[:32], cache, 1, nil)
	fmt.Println(errors.Is(err, context.Canceled), "tokens held:", cache.Len(0))
	// Output:
	// true tokens held: 8
}

// Quantized checkpoint weights given as they are stored: int8 as GGUF's
// q8_0 blocks (a scale per 32 inputs of each output row) and int4 as ONNX
// Runtime's MatMulNBits (two nibbles a byte, rows padded to whole blocks
// of 32, zero point 8 when none is given). Both tensors here are 4×4
// identities, [out][in] like a checkpoint's.
func ExampleWeights_quantized() {
	cfg := mha.LayerConfig{DModel: 4, Heads: 2, HeadDim: 2}
	x := []float32{1, 2, 3, 4}

	// int8: q = 127 on the diagonal, scale 1/127 for each row's one block.
	q8 := mha.Int8Weight{Data: make([]int8, 16), Scales: make([]float32, 4)}
	for o := 0; o < 4; o++ {
		q8.Data[o*4+o] = 127
		q8.Scales[o] = 1.0 / 127
	}
	w8 := mha.Weights{Type: mha.Int8, OutIn: true, WQ8: q8, WK8: q8, WV8: q8, WO8: q8}

	// int4: each row is one block of 32 nibbles (16 bytes, 4 used):
	// value (u - 8)·scale, so u = 9 on the diagonal and 8 elsewhere.
	q4 := mha.Int4Weight{Data: make([]byte, 4*16), Scales: []float32{1, 1, 1, 1}}
	for o := 0; o < 4; o++ {
		for i := 0; i < 4; i++ {
			u := byte(8)
			if i == o {
				u = 9
			}
			q4.Data[o*16+i/2] |= u << (4 * (i % 2)) // the low nibble is the even element
		}
	}
	w4 := mha.Weights{Type: mha.Int4, OutIn: true, WQ4: q4, WK4: q4, WV4: q4, WO4: q4}

	for _, w := range []mha.Weights{w8, w4} {
		layer, err := mha.NewLayer(nil, cfg, w)
		if err != nil {
			log.Fatal(err)
		}
		out := make([]float32, 4)
		if err := layer.Forward(out, x, 1, 1, nil); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%v: %.4f\n", w.Type, out)
	}
	// Output:
	// int8: [1.0000 2.0000 3.0000 4.0000]
	// int4: [1.0000 2.0000 3.0000 4.0000]
}

// The int8 compute mode: over an int8 cache, the query rows are quantized
// as the keys are, so a GQA decode step's scores are integer dot products
// (VPDPBUSD where the CPU has AVX512_VNNI). The outputs stay within a
// fraction of a percent of the float32 mode's on the same cache.
func ExampleCompute_int8() {
	cfg := mha.LayerConfig{DModel: 64, Heads: 8, KVHeads: 2, HeadDim: 64}
	w := mha.Weights{
		WQ: make([]float32, 64*512), WK: make([]float32, 64*128),
		WV: make([]float32, 64*128), WO: make([]float32, 512*64),
	}
	for i := range w.WQ {
		w.WQ[i], w.WO[i] = float32(i%13-6)/40, float32(i%11-5)/40
	}
	for i := range w.WK {
		w.WK[i], w.WV[i] = float32(i%7-3)/20, float32(i%5-2)/20
	}
	layer, err := mha.NewLayer(nil, cfg, w)
	if err != nil {
		log.Fatal(err)
	}
	var outs [2][]float32
	for i, mode := range []mha.Compute{mha.ComputeF32, mha.ComputeInt8} {
		cache, err := layer.NewCacheOf(1, 256, mha.Int8)
		if err != nil {
			log.Fatal(err)
		}
		x := make([]float32, 200*64) // a 200-token prompt, then one step
		for j := range x {
			x[j] = float32((j*7)%17-8) / 8
		}
		out := make([]float32, len(x))
		opts := &mha.Options{Compute: mode}
		if err := layer.Decode(out[:199*64], x[:199*64], cache, 199, opts); err != nil {
			log.Fatal(err)
		}
		if err := layer.Decode(out[:64], x[199*64:], cache, 1, opts); err != nil {
			log.Fatal(err)
		}
		outs[i] = out[:64]
	}
	var diff, peak float64
	for j, want := range outs[0] {
		diff = max(diff, math.Abs(float64(outs[1][j]-want)))
		peak = max(peak, math.Abs(float64(want)))
	}
	fmt.Println("int8 mode within 1% of the float32 mode:", diff <= 0.01*peak)
	// Output:
	// int8 mode within 1% of the float32 mode: true
}

// ExampleInt4KVTensor takes K and V as ggml's q4_0 blocks (a GGUF file's,
// or llama.cpp's KV cache's): each block's 16 bytes are copied as they
// are and its float16 scale widened, then AttentionInt4 attends over
// them. Here one KV head of 64 keys, each key a block of 32 elements
// whose nibbles count up and whose scale is 1/16.
func ExampleInt4KVTensor() {
	const keys, dim = 64, 32
	type q4Block struct { // ggml's block_q4_0
		d  uint16 // float16
		qs [16]byte
	}
	blocks := make([]q4Block, keys)
	for c := range blocks {
		blocks[c].d = 0x2c00 // 1/16 as float16
		for j := range blocks[c].qs {
			blocks[c].qs[j] = byte((j+c)%16) | byte((15-j)%16)<<4
		}
	}
	kv := mha.Int4KVTensor{Data: make([]byte, keys*mha.Int4RowBytes(dim)), Scales: make([]float32, keys)}
	halfScales := make([]uint16, keys)
	for c, b := range blocks {
		copy(kv.Data[c*16:], b.qs[:])
		halfScales[c] = b.d
	}
	if err := mha.Widen16(kv.Scales, halfScales, mha.Float16); err != nil {
		log.Fatal(err)
	}
	row := make([]float32, dim) // what key 1 stands for: (u-8)·d
	if err := mha.DequantizeInt4KV(row, mha.Int4KVTensor{Data: kv.Data[16:32], Scales: kv.Scales[1:2]}, dim); err != nil {
		log.Fatal(err)
	}
	fmt.Println("key 1, elements 0..3 and 16..19:", row[:4], row[16:20])

	q, out := make([]float32, 4*dim), make([]float32, 4*dim) // 4 query heads on the one KV head
	for i := range q {
		q[i] = float32(i%dim) / dim
	}
	shape := mha.Shape{Batch: 1, Heads: 4, KVHeads: 1, QLen: 1, KVLen: keys, HeadDim: dim, Layout: mha.BHSD}
	if err := mha.AttentionInt4(out, q, kv, kv, shape, nil); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("head 0, output 0: %.4f\n", out[0])
	// Output:
	// key 1, elements 0..3 and 16..19: [-0.4375 -0.375 -0.3125 -0.25] [0.4375 0.375 0.3125 0.25]
	// head 0, output 0: -0.0351
}

// The bfloat16 compute mode for a prefill: a layer of bfloat16 weights
// runs its projections and its attention on bfloat16 operands summed in
// float32 (AMX tiles, VDPBF16PS or BFDOT where the CPU has them, else the
// float32 kernels with the same roundings); its output stays within about
// a percent of the float32 mode's. The same option on a decode step
// keeps the decode tokens in float32, so a serving loop may set it on
// every call.
func ExampleCompute_bf16() {
	cfg := mha.LayerConfig{DModel: 64, Heads: 8, KVHeads: 2, HeadDim: 64,
		Rotary: mha.Rotary{Dims: 64, Base: 10000}}
	w := mha.Weights{Type: mha.BFloat16, // held as bfloat16: half the bytes
		WQ: make([]float32, 64*512), WK: make([]float32, 64*128),
		WV: make([]float32, 64*128), WO: make([]float32, 512*64),
	}
	for i := range w.WQ {
		w.WQ[i], w.WO[i] = float32(i%13-6)/40, float32(i%11-5)/40
	}
	for i := range w.WK {
		w.WK[i], w.WV[i] = float32(i%7-3)/20, float32(i%5-2)/20
	}
	layer, err := mha.NewLayer(nil, cfg, w)
	if err != nil {
		log.Fatal(err)
	}
	x := make([]float32, 300*64) // a 300-token prompt
	for j := range x {
		x[j] = float32((j*7)%17-8) / 8
	}
	var outs [2][]float32
	for i, mode := range []mha.Compute{mha.ComputeF32, mha.ComputeBF16} {
		outs[i] = make([]float32, len(x))
		if err := layer.Forward(outs[i], x, 1, 300, &mha.Options{Causal: true, Compute: mode}); err != nil {
			log.Fatal(err)
		}
	}
	var num, den float64
	for j, want := range outs[0] {
		d := float64(outs[1][j] - want)
		num, den = num+d*d, den+float64(want)*float64(want)
	}
	fmt.Println("bfloat16 mode within 1% of the float32 mode:", math.Sqrt(num/den) <= 0.01)
	// Output:
	// bfloat16 mode within 1% of the float32 mode: true
}
