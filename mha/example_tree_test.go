package mha_test

import (
	"context"
	"fmt"
	"log"
	"slices"

	"github.com/fastattn/fastattn/mha"
)

// Tree speculation: a drafter proposes two continuations of a prompt,
// "a b" and "a c d" (a shared first token, then two branches), and one
// DecodeTree call scores all four tokens; each sees the prompt, its
// ancestors and itself. The accepted path (here "a c d") is committed
// with Keep, which leaves the cache as decoding that path alone would.
func ExampleLayer_DecodeTree() {
	fill := func(n, seed int) []float32 { // any data will do
		x := make([]float32, n)
		for i := range x {
			x[i] = float32((i*7+seed*13)%17)/8.5 - 1
		}
		return x
	}
	cfg := mha.LayerConfig{DModel: 8, Heads: 2, HeadDim: 4, Rotary: mha.Rotary{Dims: 4}}
	w := mha.Weights{WQ: fill(64, 1), WK: fill(64, 2), WV: fill(64, 3), WO: fill(64, 4)}
	layer, err := mha.NewLayer(nil, cfg, w)
	if err != nil {
		log.Fatal(err)
	}
	cache, err := layer.NewCache(1, 32)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	prompt := fill(5*8, 9) // 5 tokens
	if err := layer.DecodeSeqs(ctx, make([]float32, len(prompt)), prompt, cache, []int{5}, nil); err != nil {
		log.Fatal(err)
	}
	// Draft tokens in any order with a parent before its child:
	// 0 "a" (follows the prompt), 1 "b" (after a), 2 "c" (after a),
	// 3 "d" (after c). Positions default to 5 + depth: 5, 6, 6, 7.
	a, b, c, d := fill(8, 20), fill(8, 21), fill(8, 22), fill(8, 23)
	drafts := slices.Concat(a, b, c, d)
	out := make([]float32, len(drafts)) // the layer's output for each draft token
	tree := mha.Tree{Parents: []int{-1, 0, 0, 2}}
	if err := layer.DecodeTree(ctx, out, drafts, cache, []int{4}, tree, nil); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after the tree:", cache.Len(0), "tokens")
	// Keep "a c d": slots 5+0, 5+2, 5+3 move to 5, 6, 7.
	if err := cache.Keep(0, 5, []int{5, 7, 8}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after Keep:", cache.Len(0), "tokens")
	// Output:
	// after the tree: 9 tokens
	// after Keep: 8 tokens
}
