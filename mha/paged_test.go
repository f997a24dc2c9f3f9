package mha

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// pagedTypes are the storage types a paged cache takes.
var pagedTypes = []DType{Float32, Float16, BFloat16, Int8, Int4}

// pagedStep is one call of a paged scenario: tokens per sequence.
type pagedStep []int

// pagedRun feeds the same tokens through DecodeSeqs on a contiguous cache
// and through DecodePaged, sequence i of one the seqs[i] of the other,
// checking the pool after every call, and calls cmp with both outputs.
func pagedRun(t *testing.T, l *Layer, rng *rand.Rand, c *Cache, pc *PagedCache, seqs []SeqID, steps []pagedStep, opts *Options, cmp func(step int, counts, lens []int, paged, want []float32)) {
	t.Helper()
	dm := l.Config().DModel
	for si, counts := range steps {
		total := 0
		var ids []SeqID
		var nonzero []int
		for i, n := range counts {
			total += n
			if n > 0 {
				ids, nonzero = append(ids, seqs[i]), append(nonzero, n)
			}
		}
		x := random(rng, total*dm)
		want, got := make([]float32, total*dm), make([]float32, total*dm)
		if err := l.DecodeSeqs(context.Background(), want, x, c, counts, opts); err != nil {
			t.Fatal(err)
		}
		if err := l.DecodePaged(context.Background(), got, x, pc, ids, nonzero, opts); err != nil {
			t.Fatal(err)
		}
		if err := pc.Check(); err != nil {
			t.Fatalf("step %d: %v", si, err)
		}
		for i, id := range seqs {
			if n, _ := pc.Len(id); n != c.Len(i) {
				t.Fatalf("step %d: sequence %d holds %d tokens, the contiguous cache %d", si, i, n, c.Len(i))
			}
		}
		cmp(si, counts, c.Lens(nil), got, want)
	}
}

// checkPaged compares a paged call's output with the contiguous cache's:
// bit for bit if bitwise, else within tol.
func checkPaged(t *testing.T, what string, bitwise bool, got, want []float32, tol float32) {
	t.Helper()
	if !bitwise {
		checkClose(t, what, got, want, tol)
		return
	}
	if d := firstDiff(got, want); d >= 0 {
		t.Fatalf("%s: out[%d] = %v, the contiguous cache %v", what, d, got[d], want[d])
	}
}

// TestPagedMatchesCache: a paged cache with nothing shared gives the
// contiguous cache's outputs bit for bit on every set and storage type
// when its blocks are a multiple of 64 keys (the split decode's chunks
// then never cross one; the flash loop's blocks read across pages in
// place, in the same order), and within float32's rounding with blocks of
// 16 (the fused decode kernel is then called once a block); prompts in
// chunks, single tokens, sequences sitting out.
func TestPagedMatchesCache(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 1))
	cfg := LayerConfig{DModel: 64, Heads: 4, KVHeads: 2, HeadDim: 16, Rotary: Rotary{Dims: 16, Base: 1e4}}
	steps := []pagedStep{{130, 0, 70}, {1, 200, 1}, {1, 1, 1}, {1, 1, 1}, {40, 1, 0}, {1, 1, 1}}
	for _, e := range engines {
		l, _ := testLayer(t, e, rng, cfg, true)
		for _, typ := range pagedTypes {
			for _, bt := range []int{64, 16} {
				if !longTests() && bt == 16 && typ != Float32 && typ != Int8 {
					continue
				}
				c, err := l.NewCacheOf(3, 512, typ)
				if err != nil {
					t.Fatal(err)
				}
				pc, err := l.NewPagedCache(PagedConfig{Type: typ, BlockTokens: bt, Bytes: 40 * 64 * 4 * 16 * 2 * 2})
				if err != nil {
					t.Fatal(err)
				}
				seqs := make([]SeqID, 3)
				for i := range seqs {
					seqs[i], _ = pc.NewSeq()
				}
				what := fmt.Sprintf("%s %v blocks of %d", e.Kernels(), typ, bt)
				pagedRun(t, l, rng, c, pc, seqs, steps, nil, func(step int, _, _ []int, got, want []float32) {
					checkPaged(t, fmt.Sprintf("%s step %d", what, step), bt%64 == 0, got, want, 2e-5)
				})
			}
		}
	}
}

// pagedLayer is a small GQA layer with rotary embeddings on engine e.
func pagedLayer(t *testing.T, e *Engine, rng *rand.Rand) *Layer {
	cfg := LayerConfig{DModel: 64, Heads: 8, KVHeads: 2, HeadDim: 16, Rotary: Rotary{Dims: 16, Base: 1e4}}
	l, _ := testLayer(t, e, rng, cfg, true)
	return l
}

// TestPagedCascade: sequences forked from one prompt (at a block boundary
// and inside a block: its partial block is copied on their first write)
// decode together; the shared blocks run as one grouped problem, merged
// by LSE with each sequence's own part, and every output and LSE equals
// the contiguous cache's within float32's rounding, bit-identical at any
// thread count. Sinks and softcap count once.
func TestPagedCascade(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 2))
	for _, e := range engines {
		l := pagedLayer(t, e, rng)
		H := l.Config().Heads
		sinks := random(rng, H)
		for _, prompt := range []int{192, 150} {
			for _, opts := range []Options{{}, {Sinks: sinks, Softcap: 30}} {
				c, _ := l.NewCache(4, 512)
				pc, err := l.NewPagedCache(PagedConfig{Bytes: 64 << 20})
				if err != nil {
					t.Fatal(err)
				}
				root, _ := pc.NewSeq()
				seqs := []SeqID{root}
				// The prompt into sequence 0 of both; the others of the
				// contiguous cache get the same rows, so their histories match.
				x := random(rng, prompt*l.Config().DModel)
				out := make([]float32, len(x))
				if err := l.DecodePaged(context.Background(), out, x, pc, seqs, []int{prompt}, &opts); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 4; i++ {
					counts := make([]int, 4)
					counts[i] = prompt
					if err := l.DecodeSeqs(context.Background(), make([]float32, len(x)), x, c, counts, &opts); err != nil {
						t.Fatal(err)
					}
				}
				free := pc.FreeBlocks()
				for i := 1; i < 4; i++ {
					f, err := pc.Fork(root, prompt)
					if err != nil {
						t.Fatal(err)
					}
					seqs = append(seqs, f)
				}
				if pc.FreeBlocks() != free {
					t.Fatalf("forks took %d blocks", free-pc.FreeBlocks())
				}
				steps := []pagedStep{{1, 1, 1, 1}, {3, 1, 0, 2}, {1, 1, 1, 1}, {1, 0, 1, 1}}
				what := fmt.Sprintf("%s prompt %d %+v", e.Kernels(), prompt, opts)
				lse := make([]float32, 0)
				pagedRun(t, l, rng, c, pc, seqs, steps, &opts, func(step int, _, _ []int, got, want []float32) {
					sc := l.getScratch()
					if sc.paged == nil || len(sc.paged.groups) != 1 {
						t.Fatalf("%s step %d: no cascade group", what, step)
					}
					l.putScratch(sc)
					checkClose(t, what, got, want, 2e-5)
				})
				_ = lse
				if err := pc.Check(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestPagedCascadeThreads: the cascade's result is bit-identical at any
// thread count, and so is its LSE.
func TestPagedCascadeThreads(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 3))
	for _, e := range engines {
		l := pagedLayer(t, e, rng)
		dm, H := l.Config().DModel, l.Config().Heads
		var outs [2][]float32
		var lses [2][]float32
		x := random(rng, 300*dm)
		steps := random(rng, 4*3*dm)
		for ti, threads := range []int{1, 3} {
			pc, _ := l.NewPagedCache(PagedConfig{Bytes: 64 << 20, Type: BFloat16})
			root, _ := pc.NewSeq()
			if err := l.DecodePaged(context.Background(), make([]float32, len(x)), x, pc, []SeqID{root}, []int{300}, nil); err != nil {
				t.Fatal(err)
			}
			seqs := []SeqID{root}
			for i := 0; i < 3; i++ {
				f, _ := pc.Fork(root, 256+i*20)
				seqs = append(seqs, f)
			}
			outs[ti], lses[ti] = make([]float32, 4*3*dm), make([]float32, 4*3*H)
			o := Options{Threads: threads, OutLSE: lses[ti]}
			if err := l.DecodePaged(context.Background(), outs[ti], steps, pc, seqs, []int{3, 3, 3, 3}, &o); err != nil {
				t.Fatal(err)
			}
		}
		if d := firstDiff(outs[1], outs[0]); d >= 0 {
			t.Errorf("%s: 3 threads differ from 1 at out[%d]", e.Kernels(), d)
		}
		if d := firstDiff(lses[1], lses[0]); d >= 0 {
			t.Errorf("%s: 3 threads differ from 1 at LSE[%d]", e.Kernels(), d)
		}
	}
}

// TestPagedBlocks: the pool's accounting through forks, copy on write,
// truncation, frees and a full pool: a fork copies no row, the first write
// into a shared block copies that block only, a refused call changes
// nothing, and every block returns when the sequences are freed.
func TestPagedBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 4))
	l := pagedLayer(t, engines[0], rng)
	dm := l.Config().DModel
	pc, err := l.NewPagedCache(PagedConfig{BlockTokens: 16, Bytes: 0})
	if !errors.Is(err, ErrShape) {
		t.Fatalf("a pool of 0 bytes: %v", err)
	}
	pc, err = l.NewPagedCache(PagedConfig{BlockTokens: 16})
	_ = pc
	if !errors.Is(err, ErrShape) {
		t.Fatalf("a pool of no bytes: %v", err)
	}
	if _, err := l.NewPagedCache(PagedConfig{BlockTokens: 24, Bytes: 1 << 20}); !errors.Is(err, ErrOption) {
		t.Fatalf("blocks of 24 tokens: %v", err)
	}
	per := int64(16 * 2 * (16 + 16) * 4)
	pc, err = l.NewPagedCache(PagedConfig{BlockTokens: 16, Bytes: 300*per + per/2})
	if err != nil || pc.Blocks() != 300 || pc.BlockBytes() != per {
		t.Fatalf("%d blocks of %d bytes, %v", pc.Blocks(), pc.BlockBytes(), err)
	}
	step := func(seqs []SeqID, counts []int) error {
		total := 0
		for _, n := range counts {
			total += n
		}
		return l.DecodePaged(context.Background(), make([]float32, total*dm), random(rng, total*dm), pc, seqs, counts, nil)
	}
	check := func(what string, free int) {
		t.Helper()
		if err := pc.Check(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := pc.FreeBlocks(); got != free {
			t.Fatalf("%s: %d free blocks, want %d", what, got, free)
		}
	}
	a, _ := pc.NewSeq()
	if err := step([]SeqID{a}, []int{4801}); !errors.Is(err, ErrCacheFull) {
		t.Fatalf("4801 tokens in 300 blocks of 16: %v", err)
	}
	check("refused", 300)
	if err := step([]SeqID{a}, []int{4000}); err != nil {
		t.Fatal(err)
	}
	check("4000 tokens", 50)
	f, _ := pc.Fork(a, 4000)
	check("fork of 4000 tokens", 50)
	g, _ := pc.Fork(a, 3990) // inside block 249
	check("fork at 3990", 50)
	if err := step([]SeqID{g}, []int{1}); err != nil { // writes into shared block 249: copied
		t.Fatal(err)
	}
	check("the fork's first token", 49)
	if err := step([]SeqID{a, f}, []int{1, 1}); err != nil { // both new blocks: 4000 is a block boundary
		t.Fatal(err)
	}
	check("a token each", 47)
	if err := step([]SeqID{a}, []int{1}); err != nil { // block 250 is a's own
		t.Fatal(err)
	}
	check("a's second", 47)
	if err := pc.Truncate(a, 100); err != nil {
		t.Fatal(err)
	}
	check("a cut to 100: its block 250 freed", 48)
	if err := step([]SeqID{a}, []int{1}); err != nil { // block 6 is shared with f and g: copied
		t.Fatal(err)
	}
	check("a's token at 100", 47)
	if err := pc.Truncate(a, 200); !errors.Is(err, ErrOption) {
		t.Fatalf("Truncate past the length: %v", err)
	}
	if err := step([]SeqID{a, a}, []int{1, 1}); !errors.Is(err, ErrOption) {
		t.Fatalf("a sequence twice: %v", err)
	}
	if err := step([]SeqID{a, 99}, []int{1, 1}); !errors.Is(err, ErrOption) {
		t.Fatalf("an unknown sequence: %v", err)
	}
	for _, id := range []SeqID{a, f, g} {
		if err := pc.Free(id); err != nil {
			t.Fatal(err)
		}
	}
	check("all freed", 300)
	if err := pc.Free(a); !errors.Is(err, ErrOption) {
		t.Fatalf("a second Free: %v", err)
	}
	// A cancelled call takes no block and changes no length.
	b, _ := pc.NewSeq()
	if err := step([]SeqID{b}, []int{20}); err != nil {
		t.Fatal(err)
	}
	x := random(rng, 40*dm)
	err = l.DecodePaged(&doneCtx{Context: context.Background()}, make([]float32, len(x)), x, pc, []SeqID{b}, []int{40}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if n, _ := pc.Len(b); n != 20 {
		t.Fatalf("a cancelled call left %d tokens", n)
	}
	check("cancelled", 298)
	// Another layer's cache, or a closed layer, is refused.
	other := pagedLayer(t, engines[0], rng)
	if err := other.DecodePaged(context.Background(), make([]float32, dm), random(rng, dm), pc, []SeqID{b}, []int{1}, nil); !errors.Is(err, ErrOption) {
		t.Fatalf("another layer's paged cache: %v", err)
	}
}

// TestPagedKeys: full blocks keyed by the caller are found again by
// Reuse after their sequence is freed, decode from there equals decoding
// the whole history, and cached blocks are evicted least recently
// released first when the pool runs short.
func TestPagedKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 5))
	l := pagedLayer(t, engines[0], rng)
	dm := l.Config().DModel
	per := int64(16 * 2 * (16 + 16) * 4)
	pc, _ := l.NewPagedCache(PagedConfig{BlockTokens: 16, Bytes: 20 * per})
	prompt := random(rng, 70*dm)
	a, _ := pc.NewSeq()
	if err := l.DecodePaged(context.Background(), make([]float32, len(prompt)), prompt, pc, []SeqID{a}, []int{70}, nil); err != nil {
		t.Fatal(err)
	}
	keys := []uint64{11, 12, 13, 14}
	if err := pc.SetKeys(a, append(keys, 15)); !errors.Is(err, ErrOption) {
		t.Fatalf("keys for 5 blocks of a 70-token sequence: %v", err)
	}
	if err := pc.SetKeys(a, keys); err != nil {
		t.Fatal(err)
	}
	if err := pc.Free(a); err != nil {
		t.Fatal(err)
	}
	if pc.CachedBlocks() != 4 || pc.FreeBlocks() != 20 {
		t.Fatalf("after Free: %d cached, %d free", pc.CachedBlocks(), pc.FreeBlocks())
	}
	r, n, err := pc.Reuse([]uint64{11, 12, 99})
	if err != nil || n != 32 {
		t.Fatalf("Reuse: %d tokens, %v", n, err)
	}
	if pc.CachedBlocks() != 2 {
		t.Fatalf("%d cached blocks after reusing 2", pc.CachedBlocks())
	}
	// Decoding the prompt's rest onto the reused blocks equals the whole
	// prompt fed at once, then the same tokens.
	c, _ := l.NewCache(1, 128)
	want := make([]float32, len(prompt))
	if err := l.DecodeSeqs(context.Background(), want, prompt, c, []int{70}, nil); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 38*dm)
	if err := l.DecodePaged(context.Background(), got, prompt[32*dm:], pc, []SeqID{r}, []int{38}, nil); err != nil {
		t.Fatal(err)
	}
	checkClose(t, "decode after Reuse", got, want[32*dm:], 2e-5)
	if err := pc.Check(); err != nil {
		t.Fatal(err)
	}
	// Blocks 13 and 14 are cached, held by none; a sequence that needs
	// every other block takes them, oldest first: 13 (released before
	// 14, lower in a's table) goes first.
	b, _ := pc.NewSeq()
	free := pc.FreeBlocks() - pc.CachedBlocks()
	x := random(rng, (free*16+16)*dm)
	if err := l.DecodePaged(context.Background(), make([]float32, len(x)), x, pc, []SeqID{b}, []int{free*16 + 16}, nil); err != nil {
		t.Fatal(err)
	}
	if pc.CachedBlocks() != 1 {
		t.Fatalf("%d cached blocks after one eviction", pc.CachedBlocks())
	}
	if _, n, _ := pc.Reuse([]uint64{11, 12, 13}); n != 32 {
		t.Fatalf("the evicted block 13 was found: %d tokens", n)
	}
	if err := pc.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestPagedWindow: a sliding-window layer's blocks outside every
// sequence's window return to the pool, so a long conversation holds a
// bounded number of blocks, and its outputs equal the contiguous cache's.
func TestPagedWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 6))
	l := pagedLayer(t, engines[0], rng)
	per := int64(16 * 2 * (16 + 16) * 4)
	pc, _ := l.NewPagedCache(PagedConfig{BlockTokens: 16, Bytes: 12 * per, Window: 40})
	c, _ := l.NewCache(1, 1024)
	a, _ := pc.NewSeq()
	opts := &Options{Window: 40}
	steps := []pagedStep{{100}}
	for i := 0; i < 60; i++ {
		steps = append(steps, pagedStep{1 + i%13})
	}
	pagedRun(t, l, rng, c, pc, []SeqID{a}, steps, opts, func(step int, _, _ []int, got, want []float32) {
		checkClose(t, "window", got, want, 2e-5)
		if held := pc.Blocks() - pc.FreeBlocks(); held > (40+16)/16+2 {
			t.Fatalf("step %d: %d blocks held with a window of 40", step, held)
		}
	})
	n, _ := pc.Len(a)
	if err := pc.Truncate(a, n-100); !errors.Is(err, ErrOption) {
		t.Fatalf("Truncate into released blocks: %v", err)
	}
	if err := l.DecodePaged(context.Background(), nil, nil, pc, []SeqID{a}, []int{0}, &Options{Window: 41}); !errors.Is(err, ErrOption) {
		t.Fatalf("another window: %v", err)
	}
}

// TestPagedModes: the bfloat16 mode (its prefill chunks rounded and
// paired through a Regroup, its decode on the pair kernels), the int8
// mode over int8 caches (its decode on DecodeQ8 where the set has it) and
// an MLA layer's latent cache (V inside K) through a paged cache of the
// default blocks give the contiguous cache's bits, decode steps and
// chunks; with blocks of 48 or 16 keys the chunks keep the bits and the
// decode rows are within float32's rounding.
func TestPagedModes(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 7))
	steps := []pagedStep{{300, 0, 70}, {1, 200, 1}, {1, 1, 1}, {40, 1, 0}}
	type setup struct {
		name  string
		l     *Layer
		opts  *Options
		typ   DType
		block int // tokens a block (0: the default)
	}
	var cases []setup
	for _, e := range bf16Engines {
		l := pagedLayer(t, e, rng)
		for _, typ := range []DType{Float32, BFloat16, Int8, Int4} {
			cases = append(cases, setup{e.Kernels() + " bf16 mode", l, &Options{Compute: ComputeBF16}, typ, 0})
		}
		// Bfloat16 pages read in place a page's run at a time (48) or,
		// on AMX tiles, gathered (16: under a tile block), V paired once:
		// the paths of the bfloat16 kernels.
		if !e.ks.HasBF16() {
			continue
		}
		for _, block := range []int{48, 16} {
			cases = append(cases, setup{fmt.Sprintf("%s bf16 mode, %d-token blocks", e.Kernels(), block), l, &Options{Compute: ComputeBF16}, BFloat16, block})
		}
		mc := newMLACase(rng, 24, true, true) // V inside K on pages
		ml, err := NewMLALayer(e, mc.cfg, mc.w)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, setup{e.Kernels() + " MLA bf16 mode, 48-token blocks", ml, &Options{Compute: ComputeBF16}, BFloat16, 48})
	}
	for _, e := range engines {
		mc := newMLACase(rng, 24, true, true)
		l, err := NewMLALayer(e, mc.cfg, mc.w)
		if err != nil {
			t.Fatal(err)
		}
		for _, typ := range []DType{Float32, BFloat16, Int8, Int4} {
			cases = append(cases, setup{e.Kernels() + " MLA", l, nil, typ, 0})
		}
		cases = append(cases, setup{e.Kernels() + " MLA int8 mode", l, &Options{Compute: ComputeInt8}, Int8, 0},
			setup{e.Kernels() + " int8 mode", pagedLayer(t, e, rng), &Options{Compute: ComputeInt8}, Int8, 0})
	}
	for _, cs := range cases {
		c, err := cs.l.NewCacheOf(3, 640, cs.typ)
		if err != nil {
			t.Fatal(err)
		}
		pc, err := cs.l.NewPagedCache(PagedConfig{Type: cs.typ, BlockTokens: cs.block, Bytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		seqs := make([]SeqID, 3)
		for i := range seqs {
			seqs[i], _ = pc.NewSeq()
		}
		what := fmt.Sprintf("%s %v", cs.name, cs.typ)
		dm := cs.l.Config().DModel
		pagedRun(t, cs.l, rng, c, pc, seqs, steps, cs.opts, func(step int, counts, _ []int, got, want []float32) {
			// A decode row (a sequence's one token) keeps float32 in
			// the mode: its split decode runs a call per page's run, so
			// pages of fewer than 64 keys sum in other chunks than
			// the contiguous cache's (TestPagedMatchesCache's rule).
			row := 0
			for i, n := range counts {
				if n == 0 {
					continue
				}
				bitwise := n > 1 || cs.block == 0 || cs.block%64 == 0
				lo, hi := row*dm, (row+n)*dm
				checkPaged(t, fmt.Sprintf("%s step %d sequence %d", what, step, i), bitwise, got[lo:hi], want[lo:hi], 2e-5)
				row += n
			}
		})
	}
}

// TestPagedTree: DecodePagedTree and PagedCache.Keep do what DecodeTree
// and Cache.Keep do on a contiguous cache — the same outputs for random
// draft trees (within float32's rounding: the history runs on pages), the
// same lengths, and then the same decoding — including a tree on a
// sequence that shares its blocks with a fork (the kept path's moves copy
// the shared block) and a windowed layer (ALiBi and Window: a history
// problem per row).
func TestPagedTree(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 8))
	slopes, _ := ALiBiSlopes(8, 0)
	for _, e := range engines {
		l := pagedLayer(t, e, rng)
		dm := l.Config().DModel
		for _, opts := range []*Options{nil, {Window: 40, ALiBi: slopes}} {
			window := 0
			if opts != nil {
				window = opts.Window
			}
			for _, typ := range []DType{Float32, BFloat16, Int8, Int4} {
				c, _ := l.NewCacheOf(2, 400, typ)
				pc, err := l.NewPagedCache(PagedConfig{Type: typ, BlockTokens: 16, Bytes: 64 << 20, Window: window})
				if err != nil {
					t.Fatal(err)
				}
				seqs := []SeqID{}
				for i := 0; i < 2; i++ {
					id, _ := pc.NewSeq()
					seqs = append(seqs, id)
				}
				what := fmt.Sprintf("%s %v %+v", e.Kernels(), typ, opts)
				pagedRun(t, l, rng, c, pc, seqs, []pagedStep{{150, 37}}, opts, func(step int, _, _ []int, got, want []float32) {
					checkClose(t, what, got, want, 2e-5)
				})
				// A fork shares sequence 0's blocks: the tree's Keep must not touch them.
				fork, _ := pc.Fork(seqs[0], 150)
				probe := random(rng, dm)
				forkOut := func() []float32 { // a token on the fork, rolled back: its blocks' contents
					out := make([]float32, dm)
					if window > 0 { // a rollback past the window's release is refused
						return out
					}
					if err := l.DecodePaged(context.Background(), out, probe, pc, []SeqID{fork}, []int{1}, opts); err != nil {
						t.Fatal(err)
					}
					if err := pc.Truncate(fork, 150); err != nil {
						t.Fatal(err)
					}
					return out
				}
				before := forkOut()
				for round := 0; round < 3; round++ {
					counts := []int{7 + round, 5}
					parents := append(randomTree(rng, counts[0]), randomTree(rng, counts[1])...)
					tree := Tree{Parents: parents}
					n := sum(counts)
					x := random(rng, n*dm)
					want, got := make([]float32, n*dm), make([]float32, n*dm)
					if err := l.DecodeTree(context.Background(), want, x, c, counts, tree, opts); err != nil {
						t.Fatal(err)
					}
					if err := l.DecodePagedTree(context.Background(), got, x, pc, seqs, counts, tree, opts); err != nil {
						t.Fatal(err)
					}
					checkClose(t, what+" tree", got, want, 2e-5)
					// A fork of the whole tree, made before Keep: Keep's moves land in
					// its shared blocks, which must be copied, not written.
					treeLen, _ := pc.Len(seqs[0])
					mid, _ := pc.Fork(seqs[0], treeLen)
					midOut := func() []float32 {
						out := make([]float32, dm)
						if window > 0 {
							return out
						}
						if err := l.DecodePaged(context.Background(), out, probe, pc, []SeqID{mid}, []int{1}, opts); err != nil {
							t.Fatal(err)
						}
						if err := pc.Truncate(mid, treeLen); err != nil {
							t.Fatal(err)
						}
						return out
					}
					midBefore := midOut()
					for i, row := 0, 0; i < 2; i++ {
						have := c.Len(i) - counts[i]
						path := pathTo(parents[row:row+counts[i]], counts[i]-1)
						for k := range path {
							path[k] += have
						}
						if err := c.Keep(i, have, path); err != nil {
							t.Fatal(err)
						}
						if err := pc.Keep(seqs[i], have, path); err != nil {
							t.Fatal(err)
						}
						row += counts[i]
					}
					if err := pc.Check(); err != nil {
						t.Fatal(err)
					}
					if d := firstDiff(midOut(), midBefore); d >= 0 {
						t.Fatalf("%s: Keep wrote into a block a fork holds", what)
					}
					if err := pc.Free(mid); err != nil {
						t.Fatal(err)
					}
					pagedRun(t, l, rng, c, pc, seqs, []pagedStep{{1, 1}}, opts, func(step int, _, _ []int, got, want []float32) {
						checkClose(t, what+" after Keep", got, want, 2e-5)
					})
				}
				if d := firstDiff(forkOut(), before); d >= 0 {
					t.Fatalf("%s: the fork's blocks changed under the trees and Keeps", what)
				}
				if err := pc.Keep(seqs[0], 0, []int{500}); !errors.Is(err, ErrOption) {
					t.Fatalf("Keep past the length: %v", err)
				}
				if err := l.DecodePagedTree(context.Background(), make([]float32, dm), random(rng, dm), pc, seqs[:1], []int{1}, Tree{Parents: []int{0}}, opts); !errors.Is(err, ErrOption) {
					t.Fatalf("a token its own parent: %v", err)
				}
			}
		}
	}
}

// TestPagedNoAllocs: a steady decode step on a paged cache, with a
// cascade and with none, allocates nothing (the blocks a step takes come
// from the pool, its scratch is the layer's).
func TestPagedNoAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 9))
	l := pagedLayer(t, engines[0], rng)
	dm := l.Config().DModel
	pc, _ := l.NewPagedCache(PagedConfig{Bytes: 16 << 20})
	root, _ := pc.NewSeq()
	x := random(rng, 200*dm)
	if err := l.DecodePaged(context.Background(), make([]float32, len(x)), x, pc, []SeqID{root}, []int{200}, nil); err != nil {
		t.Fatal(err)
	}
	seqs := []SeqID{root}
	for i := 0; i < 3; i++ {
		f, _ := pc.Fork(root, 200)
		seqs = append(seqs, f)
	}
	lone, _ := pc.NewSeq()
	if err := l.DecodePaged(context.Background(), make([]float32, len(x)), x, pc, []SeqID{lone}, []int{200}, nil); err != nil {
		t.Fatal(err)
	}
	step, out := random(rng, 4*dm), make([]float32, 4*dm)
	ones := []int{1, 1, 1, 1}
	for name, ids := range map[string][]SeqID{"cascade": seqs, "private": {lone}} {
		run := func() {
			if err := l.DecodePaged(context.Background(), out[:len(ids)*dm], step[:len(ids)*dm], pc, ids, ones[:len(ids)], nil); err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				if err := pc.Truncate(id, 200); err != nil {
					t.Fatal(err)
				}
			}
		}
		run()
		if n := testing.AllocsPerRun(allocRuns(), run); n != 0 {
			t.Errorf("%s: a paged decode step allocates %v times", name, n)
		}
	}
}

// TestPagedCascadeModes: the cascade in the bfloat16 mode (every engine,
// the emulated AMX included), on an MLA layer (V inside K, one KV head
// for 16 query heads) and in the int8 mode over int8 caches equals the
// contiguous cache's results within the mode's rounding.
func TestPagedCascadeModes(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 11))
	type setup struct {
		name string
		l    *Layer
		opts *Options
		tol  float32
		typ  DType
	}
	var cases []setup
	for _, e := range bf16Engines {
		cases = append(cases, setup{e.Kernels() + " bf16 mode", pagedLayer(t, e, rng), &Options{Compute: ComputeBF16}, 1e-3, Float32})
	}
	for _, e := range engines {
		mc := newMLACase(rng, 24, true, true)
		l, err := NewMLALayer(e, mc.cfg, mc.w)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, setup{e.Kernels() + " MLA", l, nil, 2e-5, Float32},
			setup{e.Kernels() + " MLA int8 mode", l, &Options{Compute: ComputeInt8}, 2e-5, Int8},
			setup{e.Kernels() + " int8 mode", pagedLayer(t, e, rng), &Options{Compute: ComputeInt8}, 2e-5, Int8})
	}
	for _, cs := range cases {
		dm := cs.l.Config().DModel
		c, _ := cs.l.NewCacheOf(3, 512, cs.typ)
		pc, err := cs.l.NewPagedCache(PagedConfig{Type: cs.typ, Bytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		root, _ := pc.NewSeq()
		x := random(rng, 300*dm)
		if err := cs.l.DecodePaged(context.Background(), make([]float32, len(x)), x, pc, []SeqID{root}, []int{300}, cs.opts); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			counts := make([]int, 3)
			counts[i] = 300
			if err := cs.l.DecodeSeqs(context.Background(), make([]float32, len(x)), x, c, counts, cs.opts); err != nil {
				t.Fatal(err)
			}
		}
		seqs := []SeqID{root}
		for i := 0; i < 2; i++ {
			f, _ := pc.Fork(root, 300)
			seqs = append(seqs, f)
		}
		pagedRun(t, cs.l, rng, c, pc, seqs, []pagedStep{{1, 1, 1}, {2, 1, 3}, {1, 1, 1}}, cs.opts, func(step int, _, _ []int, got, want []float32) {
			sc := cs.l.getScratch()
			if sc.paged == nil || len(sc.paged.groups) != 1 {
				t.Fatalf("%s step %d: no cascade group", cs.name, step)
			}
			cs.l.putScratch(sc)
			checkClose(t, fmt.Sprintf("%s step %d", cs.name, step), got, want, cs.tol)
		})
	}
}

// TestPagedNil: a nil or zero PagedCache, and calls on a closed engine's
// layer, are errors, never panics.
func TestPagedNil(t *testing.T) {
	var nilCache *PagedCache
	var zero PagedCache
	for name, c := range map[string]*PagedCache{"nil": nilCache, "zero": &zero} {
		if _, err := c.NewSeq(); !errors.Is(err, ErrNil) {
			t.Errorf("%s: NewSeq: %v", name, err)
		}
		if err := c.Free(0); !errors.Is(err, ErrNil) {
			t.Errorf("%s: Free: %v", name, err)
		}
		if _, _, err := c.Reuse(nil); !errors.Is(err, ErrNil) {
			t.Errorf("%s: Reuse: %v", name, err)
		}
		if c.FreeBlocks() != 0 || c.Seqs() != 0 {
			t.Errorf("%s: counts", name)
		}
	}
	rng := rand.New(rand.NewPCG(48, 12))
	e, _ := NewEngine(Config{Threads: 1})
	l := pagedLayer(t, e, rng)
	pc, _ := l.NewPagedCache(PagedConfig{Bytes: 1 << 20})
	id, _ := pc.NewSeq()
	if err := l.DecodePaged(context.Background(), nil, nil, nilCache, nil, nil, nil); !errors.Is(err, ErrNil) {
		t.Errorf("DecodePaged on a nil cache: %v", err)
	}
	e.Close()
	if _, err := l.NewPagedCache(PagedConfig{Bytes: 1 << 20}); !errors.Is(err, ErrClosed) {
		t.Errorf("NewPagedCache on a closed engine: %v", err)
	}
	dm := l.Config().DModel
	if err := l.DecodePaged(context.Background(), make([]float32, dm), random(rng, dm), pc, []SeqID{id}, []int{1}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("DecodePaged on a closed engine: %v", err)
	}
}

// TestPagedCascadeOracle: a cascade step (sequences forked from a prompt,
// each with tokens of its own, sinks and a softcap) against the float64
// reference of each sequence's whole history (projections, rotary,
// attention, output projection), on every set: the same weights and
// tokens on each, the references computed once.
func TestPagedCascadeOracle(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(48, 13))
	cfg := LayerConfig{DModel: 64, Heads: 8, KVHeads: 2, HeadDim: 16, ValueDim: 16, Rotary: Rotary{Dims: 16, Base: 1e4}}
	_, w := testLayer(t, engines[0], rng, cfg, true)
	dm := cfg.DModel
	opts := Options{Sinks: random(rng, cfg.Heads), Softcap: 20}
	prompt := random(rng, 260*dm)
	forks := []int{256, 260, 200} // at a block boundary, inside the partial block, inside the shared ones
	steps := [][]int{{1, 3, 1, 2}, {1, 1, 1, 1}}
	xs := make([][]float32, len(steps))
	for i, counts := range steps {
		xs[i] = random(rng, sum(counts)*dm)
	}
	want := map[[2]int][]float64{} // (step, sequence) → the reference of its new rows
	var worst float64              // this test's own: it runs in parallel
	for _, e := range engines {
		l, err := NewLayer(e, cfg, w)
		if err != nil {
			t.Fatal(err)
		}
		pc, err := l.NewPagedCache(PagedConfig{Bytes: 16 << 20})
		if err != nil {
			t.Fatal(err)
		}
		root, _ := pc.NewSeq()
		if err := l.DecodePaged(context.Background(), make([]float32, len(prompt)), prompt, pc, []SeqID{root}, []int{260}, &opts); err != nil {
			t.Fatal(err)
		}
		seqs, hist := []SeqID{root}, [][]float32{append([]float32(nil), prompt...)}
		for _, n := range forks {
			f, _ := pc.Fork(root, n)
			seqs, hist = append(seqs, f), append(hist, append([]float32(nil), prompt[:n*dm]...))
		}
		for step, counts := range steps {
			x := xs[step]
			out := make([]float32, len(x))
			if err := l.DecodePaged(context.Background(), out, x, pc, seqs, counts, &opts); err != nil {
				t.Fatal(err)
			}
			sc := l.getScratch()
			if sc.paged == nil || len(sc.paged.groups) != 1 {
				t.Fatalf("%s step %d: no cascade", e.Kernels(), step)
			}
			l.putScratch(sc)
			for i, row := 0, 0; i < len(seqs); i++ {
				n := counts[i]
				hist[i] = append(hist[i], x[row*dm:(row+n)*dm]...)
				key := [2]int{step, i}
				if want[key] == nil {
					L := len(hist[i]) / dm
					o := opts
					o.Causal = true
					want[key] = referenceSelf(cfg, w, hist[i], 1, L, &o)[(L-n)*dm:]
				}
				compare(t, fmt.Sprintf("%s cascade step %d sequence %d", e.Kernels(), step, i), out[row*dm:(row+n)*dm], want[key], tolLayer, &worst)
				row += n
			}
		}
	}
	t.Logf("largest relative error %.2g", worst)
}
