package mha_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log"

	"github.com/fastattn/fastattn/mha"
)

// pagedExampleLayer returns a small Llama-style layer for the paged examples.
func pagedExampleLayer() *mha.Layer {
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
	w := mha.Weights{WQ: fill(8*16, 1), WK: fill(8*8, 2), WV: fill(8*8, 3), WO: fill(16*8, 4)}
	layer, err := mha.NewLayer(nil, cfg, w)
	if err != nil {
		log.Fatal(err)
	}
	return layer
}

// embed stands in for a model's embedding: a token id's row of DModel 8.
func embed(ids ...int) []float32 {
	var x []float32
	for _, id := range ids {
		for i := 0; i < 8; i++ {
			x = append(x, float32((id*5+i*3)%11)/5.5-1)
		}
	}
	return x
}

// A chat server on a paged cache: the system prompt is decoded once;
// each request forks it (no row copied) and adds its own tokens; the
// requests decode together, the shared prompt's attention computed once
// for all of them (cascade); a finished request frees its blocks, and a
// new one arrives in the same pool.
func ExamplePagedCache() {
	layer := pagedExampleLayer()
	cache, err := layer.NewPagedCache(mha.PagedConfig{Type: mha.BFloat16, BlockTokens: 16, Bytes: 1 << 20})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	decode := func(seqs []mha.SeqID, counts []int, x []float32) []float32 {
		out := make([]float32, len(x))
		if err := layer.DecodePaged(ctx, out, x, cache, seqs, counts, nil); err != nil {
			log.Fatal(err)
		}
		return out
	}
	system := make([]int, 40) // a 40-token system prompt
	for i := range system {
		system[i] = 100 + i
	}
	root, _ := cache.NewSeq()
	decode([]mha.SeqID{root}, []int{40}, embed(system...))
	fmt.Println("blocks held by the system prompt:", cache.Blocks()-cache.FreeBlocks())

	// Two requests arrive: each is the system prompt by reference, then
	// its own prompt (the first write into the shared, partly filled
	// block copies that one block).
	a, _ := cache.Fork(root, 40)
	b, _ := cache.Fork(root, 40)
	decode([]mha.SeqID{a, b}, []int{3, 2}, embed(7, 8, 9, 4, 5))
	fmt.Println("blocks held:", cache.Blocks()-cache.FreeBlocks())

	// They generate side by side: one token each per step.
	for step := 0; step < 3; step++ {
		decode([]mha.SeqID{a, b}, []int{1, 1}, embed(20+step, 30+step))
	}
	la, _ := cache.Len(a)
	lb, _ := cache.Len(b)
	fmt.Println("lengths:", la, lb)

	// Request a finishes; a new one arrives in its place.
	if err := cache.Free(a); err != nil {
		log.Fatal(err)
	}
	c, _ := cache.Fork(root, 40)
	out := decode([]mha.SeqID{b, c}, []int{1, 2}, embed(33, 50, 51))
	fmt.Println("blocks held:", cache.Blocks()-cache.FreeBlocks())
	fmt.Printf("request c, last prompt token: %.3f\n", out[2*8:3*8])
	// Output:
	// blocks held by the system prompt: 3
	// blocks held: 5
	// lengths: 46 45
	// blocks held: 5
	// request c, last prompt token: [0.339 0.028 -1.223 0.072 0.226 -0.368 1.042 -1.789]
}

// Prefix caching: the full blocks of a prompt are keyed by a hash of
// their tokens (chained, so that a key names the whole prefix, as vLLM
// does); after the request is freed its blocks stay cached, and a later
// request with the same prefix starts on them and decodes only the rest.
func ExamplePagedCache_Reuse() {
	layer := pagedExampleLayer()
	const block = 16
	cache, err := layer.NewPagedCache(mha.PagedConfig{BlockTokens: block, Bytes: 1 << 20})
	if err != nil {
		log.Fatal(err)
	}
	// keys hashes each full block of ids with every token before it.
	keys := func(ids []int) []uint64 {
		h := fnv.New64a()
		var out []uint64
		for i, id := range ids {
			fmt.Fprint(h, id, ",")
			if (i+1)%block == 0 {
				out = append(out, h.Sum64())
			}
		}
		return out
	}
	ctx := context.Background()
	prompt := make([]int, 50)
	for i := range prompt {
		prompt[i] = i % 23
	}
	first, _ := cache.NewSeq()
	out := make([]float32, 50*8)
	if err := layer.DecodePaged(ctx, out, embed(prompt...), cache, []mha.SeqID{first}, []int{50}, nil); err != nil {
		log.Fatal(err)
	}
	if err := cache.SetKeys(first, keys(prompt)); err != nil { // 3 full blocks
		log.Fatal(err)
	}
	if err := cache.Free(first); err != nil {
		log.Fatal(err)
	}
	fmt.Println("cached blocks:", cache.CachedBlocks())

	// The same prompt again: 48 tokens are found, 2 are decoded.
	again, found, err := cache.Reuse(keys(prompt))
	if err != nil {
		log.Fatal(err)
	}
	rest := make([]float32, (50-found)*8)
	if err := layer.DecodePaged(ctx, rest, embed(prompt[found:]...), cache, []mha.SeqID{again}, []int{50 - found}, nil); err != nil {
		log.Fatal(err)
	}
	fmt.Println("tokens reused:", found)
	same := true
	for i := range rest {
		d := rest[i] - out[found*8+i]
		same = same && d < 1e-5 && d > -1e-5
	}
	fmt.Println("last tokens' outputs as in the first request:", same)
	// Output:
	// cached blocks: 3
	// tokens reused: 48
	// last tokens' outputs as in the first request: true
}

// Tree speculation on a paged cache: two sequences forked from one
// prompt each score a tree of drafts in one DecodePagedTree call (each
// draft sees its sequence, its ancestors and itself), then Keep commits
// each one's accepted path. Each fork's first write copies the prompt's
// shared, partly filled block, so neither sees the other's drafts.
func ExampleLayer_DecodePagedTree() {
	layer := pagedExampleLayer()
	cache, err := layer.NewPagedCache(mha.PagedConfig{BlockTokens: 16, Bytes: 1 << 20})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	root, _ := cache.NewSeq()
	prompt := embed(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	if err := layer.DecodePaged(ctx, make([]float32, len(prompt)), prompt, cache, []mha.SeqID{root}, []int{10}, nil); err != nil {
		log.Fatal(err)
	}
	a, _ := cache.Fork(root, 10)
	b, _ := cache.Fork(root, 10)
	// a drafts "x y" and "x z" (3 tokens: x, then y and z after x); b
	// drafts a chain of 2. Parents index each sequence's own drafts.
	drafts := embed(40, 41, 42, 50, 51)
	out := make([]float32, len(drafts))
	tree := mha.Tree{Parents: []int{-1, 0, 0, -1, 0}}
	if err := layer.DecodePagedTree(ctx, out, drafts, cache, []mha.SeqID{a, b}, []int{3, 2}, tree, nil); err != nil {
		log.Fatal(err)
	}
	la, _ := cache.Len(a)
	lb, _ := cache.Len(b)
	fmt.Println("after the trees:", la, lb)
	// a accepts "x z" (slots 10 and 12), b its first draft only.
	if err := cache.Keep(a, 10, []int{10, 12}); err != nil {
		log.Fatal(err)
	}
	if err := cache.Keep(b, 10, []int{10}); err != nil {
		log.Fatal(err)
	}
	la, _ = cache.Len(a)
	lb, _ = cache.Len(b)
	fmt.Println("after Keep:", la, lb)
	// Output:
	// after the trees: 13 12
	// after Keep: 12 11
}

// A sliding-window layer (Mistral-style): PagedConfig.Window releases the
// blocks no later query can see, so a long conversation holds about
// Window tokens of blocks, not its whole length. Every call passes the
// same Options.Window.
func ExamplePagedConfig_window() {
	layer := pagedExampleLayer()
	const window = 32
	cache, err := layer.NewPagedCache(mha.PagedConfig{BlockTokens: 16, Bytes: 1 << 20, Window: window})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	seq, _ := cache.NewSeq()
	opts := &mha.Options{Window: window}
	for step := 0; step < 20; step++ { // 20 chunks of 10 tokens
		ids := make([]int, 10)
		for i := range ids {
			ids[i] = step*10 + i
		}
		x := embed(ids...)
		if err := layer.DecodePaged(ctx, make([]float32, len(x)), x, cache, []mha.SeqID{seq}, []int{10}, opts); err != nil {
			log.Fatal(err)
		}
	}
	n, _ := cache.Len(seq)
	fmt.Println("tokens:", n, "blocks held:", cache.Blocks()-cache.FreeBlocks())
	// Truncating into released blocks is refused: those keys are gone.
	err = cache.Truncate(seq, 100)
	fmt.Println("truncate to 100 refused:", errors.Is(err, mha.ErrOption))
	// Output:
	// tokens: 200 blocks held: 3
	// truncate to 100 refused: true
}
