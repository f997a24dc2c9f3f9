package mha

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// randomTree returns the parents of n draft tokens: each a root (-1) or
// a child of an earlier token, at most 4 children per token (and roots),
// depth at most 6.
func randomTree(rng *rand.Rand, n int) []int {
	parents, depth, kids := make([]int, n), make([]int, n), make([]int, n+1) // kids[n]: the roots
	for i := range n {
		for {
			p := rng.IntN(i+1) - 1
			slot := p
			if p < 0 {
				slot = n
			}
			if kids[slot] >= 4 || (p >= 0 && depth[p] >= 5) {
				continue
			}
			parents[i], kids[slot] = p, kids[slot]+1
			if p >= 0 {
				depth[i] = depth[p] + 1
			}
			break
		}
	}
	return parents
}

// pathTo returns token i's ancestors from its root, then i.
func pathTo(parents []int, i int) []int {
	var path []int
	for k := i; k >= 0; k = parents[k] {
		path = append(path, k)
	}
	slices.Reverse(path)
	return path
}

// seqRows returns the stored bits of sequence b's first n tokens, K then
// V, every KV head, whatever the cache's type.
func seqRows(c *Cache, b, n int) []uint32 {
	cfg := c.layer.cfg
	var s []uint32
	for _, d := range []struct {
		dim int
		f   []float32
		h   []uint16
		q   []int8
		sc  []float32
	}{{cfg.HeadDim, c.K, c.K16, c.K8, c.KScale}, {cfg.ValueDim, c.V, c.V16, c.V8, c.VScale}} {
		nb := QuantBlocks(d.dim)
		for g := 0; g < cfg.KVHeads; g++ {
			r := (b*cfg.KVHeads + g) * c.capa
			for _, x := range d.f[min(len(d.f), r*d.dim):min(len(d.f), (r+n)*d.dim)] {
				s = append(s, math.Float32bits(x))
			}
			for _, x := range d.h[min(len(d.h), r*d.dim):min(len(d.h), (r+n)*d.dim)] {
				s = append(s, uint32(x))
			}
			for _, x := range d.q[min(len(d.q), r*d.dim):min(len(d.q), (r+n)*d.dim)] {
				s = append(s, uint32(uint8(x)))
			}
			for _, x := range d.sc[min(len(d.sc), r*nb):min(len(d.sc), (r+n)*nb)] {
				s = append(s, math.Float32bits(x))
			}
		}
	}
	return s
}

// relErr is the largest |got − want| relative to the largest |want|.
func relErr(got, want []float32) float64 {
	scale, worst := 1e-30, 0.0
	for i := range want {
		scale = math.Max(scale, math.Abs(float64(want[i])))
		worst = math.Max(worst, math.Abs(float64(got[i])-float64(want[i])))
	}
	if anyNaN(got) != anyNaN(want) {
		return math.NaN()
	}
	return worst / scale
}

// TestDecodeTree: every token of random draft trees (depth <= 6, width
// <= 4, several sequences, an empty history too) gets, within float32
// rounding, the output and LSE of decoding its root-to-token path alone
// after the same history — with rotary (llama3), GQA, Dk != Dv, and with
// window, sinks, softcap and ALiBi — on every kernel set and K/V storage
// type; Keep of a path then leaves the cache, bit for bit, as decoding
// the path alone does, and the next step's outputs are bit for bit the
// same.
func TestDecodeTree(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 62))
	cfg := LayerConfig{DModel: 32, Heads: 4, KVHeads: 2, HeadDim: 8, ValueDim: 6,
		Rotary: Rotary{Dims: 8, Base: 10000, Scaling: &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 16}}}
	dm, H := cfg.DModel, cfg.Heads
	ctx := context.Background()
	optionSets := []Options{{}, {Window: 4}, {Sinks: []float32{0.5, -1, 2, 0}, Softcap: 2}, {ALiBi: []float32{0.25, 0.0625, 0.015625, 0.00390625}},
		{Window: 6, ALiBi: []float32{-0.3, 0.2, 0.1, 0.05}, Sinks: []float32{1, 1, 1, 1}}}
	for _, typ := range []DType{Float32, Float16, BFloat16, Int8, Int4} {
		for _, e := range engines {
			for oi, base := range optionSets {
				if !longTests() && oi%2 != int(typ)%2 {
					continue
				}
				name := fmt.Sprintf("%s/%v/%+v", e.Kernels(), typ, base)
				l, _ := testLayer(t, e, rng, cfg, true)
				const capa = 64
				c, err := l.NewCacheOf(3, capa, typ)
				if err != nil {
					t.Fatal(err)
				}
				ref, _ := l.NewCacheOf(1, capa, typ)
				prompt := []int{9, 0, 3} // sequence 1 has no history
				np := sum(prompt)
				if err := l.DecodeSeqs(ctx, make([]float32, np*dm), random(rng, np*dm), c, prompt, nil); err != nil {
					t.Fatal(err)
				}
				counts := []int{1 + rng.IntN(12), 1 + rng.IntN(12), 1 + rng.IntN(12)}
				var parents []int
				for _, n := range counts {
					parents = append(parents, randomTree(rng, n)...)
				}
				total := sum(counts)
				x, out := random(rng, total*dm), make([]float32, total*dm)
				o := base
				o.OutLSE = make([]float32, total*H)
				if err := l.DecodeTree(ctx, out, x, c, counts, Tree{Parents: parents}, &o); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for b, row := 0, 0; b < 3; b++ {
					n, have := counts[b], prompt[b]
					tree := parents[row : row+n]
					for i := 0; i < n; i++ {
						path := pathTo(tree, i)
						want, wantLSE := decodePath(t, l, c, ref, b, have, path, x[row*dm:], base)
						if d := relErr(out[(row+i)*dm:(row+i+1)*dm], want); !(d <= 1e-4) {
							t.Fatalf("%s: sequence %d token %d (path %v): output differs from decoding the path alone by %.3g", name, b, i, path, d)
						}
						for h := 0; h < H; h++ {
							g, w := o.OutLSE[row*H+h*n+i], wantLSE[h]
							if !(math.Abs(float64(g-w)) <= 1e-4*(1+math.Abs(float64(w)))) {
								t.Fatalf("%s: sequence %d token %d head %d: LSE %v, the path alone %v", name, b, i, h, g, w)
							}
						}
					}
					// Commit a random token's path; the cache then is the
					// path-alone cache, and so is the next step.
					leaf := rng.IntN(n)
					path := pathTo(tree, leaf)
					decodePath(t, l, c, ref, b, have, path, x[row*dm:], base)
					slots := make([]int, len(path))
					for j, k := range path {
						slots[j] = have + k
					}
					if err := c.Keep(b, have, slots); err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(seqRows(c, b, have+len(path)), seqRows(ref, 0, have+len(path))) || c.Len(b) != ref.Len(0) {
						t.Fatalf("%s: sequence %d after Keep of path %v: the cache differs from decoding the path alone", name, b, path)
					}
					tok := random(rng, dm)
					got, want := make([]float32, dm), make([]float32, dm)
					one := make([]int, 3)
					one[b] = 1
					ob, or := base, base
					if err := errors.Join(l.DecodeSeqs(ctx, got, tok, c, one, &ob), l.DecodeSeqs(ctx, want, tok, ref, []int{1}, &or)); err != nil {
						t.Fatal(err)
					}
					if i := firstDiff(got, want); i >= 0 {
						t.Fatalf("%s: sequence %d, the step after Keep: out[%d] = %v, after the path alone %v", name, b, i, got[i], want[i])
					}
					row += n
				}
			}
		}
	}
}

// decodePath decodes, into ref's sequence 0, sequence b's first have
// tokens of c (copied) and then the tree tokens of path (rows of xs), and
// returns the last token's output and its LSE per head.
func decodePath(t *testing.T, l *Layer, c, ref *Cache, b, have int, path []int, xs []float32, o Options) ([]float32, []float32) {
	t.Helper()
	dm, H := l.cfg.DModel, l.cfg.Heads
	if err := c.CopyTo(ref, 0, b, have); err != nil {
		t.Fatal(err)
	}
	var x []float32
	for _, k := range path {
		x = append(x, xs[k*dm:(k+1)*dm]...)
	}
	n := len(path)
	out := make([]float32, n*dm)
	o.OutLSE = make([]float32, n*H)
	if err := l.DecodeSeqs(context.Background(), out, x, ref, []int{n}, &o); err != nil {
		t.Fatal(err)
	}
	lse := make([]float32, H)
	for h := range lse {
		lse[h] = o.OutLSE[h*n+n-1]
	}
	return out[(n-1)*dm:], lse
}

// TestDecodeTreeThreads: a tree step is bit for bit the same at 1, 2 and
// 7 threads, and a chain is DecodeSeqs within float32 rounding.
func TestDecodeTreeThreads(t *testing.T) {
	rng := rand.New(rand.NewPCG(63, 64))
	cfg := LayerConfig{DModel: 32, Heads: 4, KVHeads: 1, HeadDim: 16, Rotary: Rotary{Dims: 16}}
	_, w := testLayer(t, engines[0], rng, cfg, true)
	dm := cfg.DModel
	prompt := random(rng, 40*dm)
	counts := []int{11, 7}
	parents := slices.Concat(randomTree(rng, 11), randomTree(rng, 7))
	x := random(rng, 18*dm)
	opts := &Options{Window: 30, ALiBi: []float32{0.1, 0.2, 0.3, 0.4}}
	var first []float32
	for _, threads := range []int{1, 2, 7} {
		e, err := NewEngine(Config{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		l, err := NewLayer(e, cfg, w)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := l.NewCache(2, 64)
		if err := l.DecodeSeqs(context.Background(), make([]float32, 40*dm), prompt, c, []int{30, 10}, nil); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, 18*dm)
		if err := l.DecodeTree(context.Background(), out, x, c, counts, Tree{Parents: parents}, opts); err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = out
		} else if i := firstDiff(out, first); i >= 0 {
			t.Fatalf("%d threads: out[%d] = %v, 1 thread %v", threads, i, out[i], first[i])
		}
		// The same tokens as chains: DecodeSeqs.
		chain := slices.Concat([]int{-1}, seqTo(10), []int{-1}, seqTo(6))
		if err := errors.Join(c.Truncate(0, 30), c.Truncate(1, 10)); err != nil {
			t.Fatal(err)
		}
		got, want := make([]float32, 18*dm), make([]float32, 18*dm)
		if err := l.DecodeTree(context.Background(), got, x, c, counts, Tree{Parents: chain}, opts); err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(c.Truncate(0, 30), c.Truncate(1, 10)); err != nil {
			t.Fatal(err)
		}
		if err := l.DecodeSeqs(context.Background(), want, x, c, counts, opts); err != nil {
			t.Fatal(err)
		}
		if d := relErr(got, want); !(d <= 1e-4) {
			t.Fatalf("%d threads: a chain through DecodeTree differs from DecodeSeqs by %.3g", threads, d)
		}
	}
}

// seqTo returns 0, 1, ..., n-1: the parents of a chain's tokens after its first.
func seqTo(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// TestDecodeTreeErrors: bad parents name the problem and change nothing.
func TestDecodeTreeErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(65, 66))
	cfg := LayerConfig{DModel: 16, Heads: 2, HeadDim: 8, Rotary: Rotary{Dims: 8}}
	l, _ := testLayer(t, engines[0], rng, cfg, true)
	c, _ := l.NewCache(2, 16)
	ctx := context.Background()
	if err := l.DecodeSeqs(ctx, make([]float32, 4*16), random(rng, 4*16), c, []int{2, 2}, nil); err != nil {
		t.Fatal(err)
	}
	before := cacheState(c)
	x, out := random(rng, 5*16), make([]float32, 5*16)
	for _, bad := range []struct {
		tree Tree
		want error
	}{{Tree{}, ErrOption}, {Tree{Parents: []int{-1, 0, 1}}, ErrBuffer}, {Tree{Parents: []int{-1, 1, 1, -1, 0}}, ErrOption},
		{Tree{Parents: []int{-1, 0, 0, -1, -2}}, ErrOption}, {Tree{Parents: []int{0, 0, 0, -1, 0}}, ErrOption},
		{Tree{Parents: []int{-1, 0, 3, -1, 0}}, ErrOption},
		{Tree{Parents: []int{-1, 0, 0, -1, 0}, Positions: []int{2, 3, 3}}, ErrBuffer},
		{Tree{Parents: []int{-1, 0, 0, -1, 0}, Positions: []int{1, 3, 3, 2, 3}}, ErrOption},                 // before the cache's end
		{Tree{Parents: []int{-1, 0, 0, -1, 0}, Positions: []int{2, 3, 2, 2, 3}}, ErrOption},                 // not after its parent
		{Tree{Parents: []int{-1, 0, 0, -1, 0}, Positions: []int{2, 3, 3, 2, MaxPosition + 1}}, ErrOption}} { // too far
		if err := l.DecodeTree(ctx, out, x, c, []int{3, 2}, bad.tree, nil); !errors.Is(err, bad.want) {
			t.Errorf("tree %+v: %v, want %v", bad.tree, err, bad.want)
		}
	}
	if err := l.DecodeTree(ctx, out, x, c, []int{3, 2}, Tree{Parents: []int{-1, 0, 0, -1, 0}}, &Options{Mask: []bool{true}}); !errors.Is(err, ErrOption) {
		t.Errorf("a Mask: %v, want ErrOption", err)
	}
	// ALiBi's distances are float32 integers: positions 2^25 apart are refused.
	if err := l.DecodeTree(ctx, out, x, c, []int{3, 2}, Tree{Parents: []int{-1, 0, 0, -1, 0}, Positions: []int{2, 3, 3, 2, 1 << 25}},
		&Options{ALiBi: []float32{0.1, 0.2}}); !errors.Is(err, ErrOption) {
		t.Errorf("ALiBi at position 2^25: %v, want ErrOption", err)
	}
	// The limit does not depend on the cache's capacity: the same tree, a
	// 5-token history, positions near 2^24, runs or is refused alike in a
	// cache of 8 and of 64, and a refusal names the token.
	for _, capa := range []int{8, 64} {
		cc, _ := l.NewCache(1, capa)
		if err := l.DecodeSeqs(ctx, make([]float32, 5*16), random(rng, 5*16), cc, []int{5}, nil); err != nil {
			t.Fatal(err)
		}
		o := &Options{ALiBi: []float32{0.1, 0.2}}
		fits := []int{MaxALiBiSpan - 8, MaxALiBiSpan - 7} // 5 + position + 1 < 2^24
		if err := l.DecodeTree(ctx, out[:2*16], x[:2*16], cc, []int{2}, Tree{Parents: []int{-1, 0}, Positions: fits}, o); err != nil {
			t.Errorf("capacity %d: ALiBi tree at positions %v: %v", capa, fits, err)
		}
		if err := cc.Truncate(0, 5); err != nil {
			t.Fatal(err)
		}
		over := []int{MaxALiBiSpan - 8, MaxALiBiSpan - 6}
		err := l.DecodeTree(ctx, out[:2*16], x[:2*16], cc, []int{2}, Tree{Parents: []int{-1, 0}, Positions: over}, o)
		if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "Tree token 1 (token 1 of sequence 0) at position") {
			t.Errorf("capacity %d: ALiBi tree at positions %v: %v, want ErrOption naming token 1", capa, over, err)
		}
	}
	if !slices.Equal(before, cacheState(c)) {
		t.Fatal("a refused DecodeTree changed the cache")
	}
	full, _ := l.NewCache(1, 3)
	if err := l.DecodeTree(ctx, out[:4*16], x[:4*16], full, []int{4}, Tree{Parents: []int{-1, 0, 0, 1}}, nil); !errors.Is(err, ErrCacheFull) {
		t.Errorf("past capacity: %v, want ErrCacheFull", err)
	}
}

// TestDecodeTreeNoAllocs: after the first call, a tree step allocates
// nothing in the library.
func TestDecodeTreeNoAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("steady-state allocation counts: the full suite checks them")
	}
	rng := rand.New(rand.NewPCG(67, 68))
	cfg := LayerConfig{DModel: 32, Heads: 4, KVHeads: 2, HeadDim: 16, Rotary: Rotary{Dims: 16}}
	l, _ := testLayer(t, engines[0], rng, cfg, true)
	c, _ := l.NewCache(2, 64)
	ctx := context.Background()
	if err := l.DecodeSeqs(ctx, make([]float32, 40*32), random(rng, 40*32), c, []int{30, 10}, nil); err != nil {
		t.Fatal(err)
	}
	counts, parents := []int{6, 5}, slices.Concat(randomTree(rng, 6), randomTree(rng, 5))
	x, out := random(rng, 11*32), make([]float32, 11*32)
	for _, o := range []*Options{nil, {Window: 20, ALiBi: []float32{0.1, 0.2, 0.3, 0.4}, OutLSE: make([]float32, 11*4)}} {
		step := func() {
			if err := l.DecodeTree(ctx, out, x, c, counts, Tree{Parents: parents}, o); err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(c.Truncate(0, 30), c.Truncate(1, 10)); err != nil {
				t.Fatal(err)
			}
		}
		if n, where := stepAllocs(t, 20, step); n != 0 {
			t.Errorf("options %+v: 20 tree steps allocated %d objects in the library: %s", o, n, where)
		}
	}
}

// TestDecodeTreePositions: explicit positions equal to the defaults give
// the same result bit for bit; over an empty history, shifting every
// position by one constant changes only rounding (rotary, window and
// ALiBi see distances); and positions are used (a gap changes the result).
func TestDecodeTreePositions(t *testing.T) {
	rng := rand.New(rand.NewPCG(69, 70))
	cfg := LayerConfig{DModel: 32, Heads: 4, KVHeads: 2, HeadDim: 16, Rotary: Rotary{Dims: 16, Base: 100}}
	dm := cfg.DModel
	ctx := context.Background()
	for _, e := range engines {
		l, _ := testLayer(t, e, rng, cfg, true)
		parents := randomTree(rng, 12)
		x := random(rng, 12*dm)
		opts := &Options{Window: 3, ALiBi: []float32{0.3, 0.1, -0.2, 0.05}}
		run := func(positions []int) []float32 {
			c, _ := l.NewCache(1, 16)
			out := make([]float32, 12*dm)
			if err := l.DecodeTree(ctx, out, x, c, []int{12}, Tree{Parents: parents, Positions: positions}, opts); err != nil {
				t.Fatal(err)
			}
			return out
		}
		depth := make([]int, 12)
		for i, p := range parents {
			if p >= 0 {
				depth[i] = depth[p] + 1
			}
		}
		def := run(nil)
		if i := firstDiff(run(depth), def); i >= 0 {
			t.Fatalf("%s: positions equal to the defaults: out[%d] = %v, %v", e.Kernels(), i, run(depth)[i], def[i])
		}
		shifted := make([]int, 12)
		for i, d := range depth {
			shifted[i] = d + 1000
		}
		if d := relErr(run(shifted), def); !(d <= 1e-4) {
			t.Fatalf("%s: positions shifted by 1000 differ by %.3g", e.Kernels(), d)
		}
		gapped := make([]int, 12)
		for i, d := range depth {
			gapped[i] = 2 * d
		}
		if d := relErr(run(gapped), def); !(d > 1e-3) {
			t.Fatalf("%s: positions twice the depths change the result by only %.3g", e.Kernels(), d)
		}
	}
}

// FuzzDecodeTree feeds arbitrary parents, positions and counts: every
// call either succeeds, advancing each sequence by its count, or returns
// an error wrapping a sentinel and changes nothing; never a panic.
func FuzzDecodeTree(f *testing.F) {
	f.Add([]byte{3, 2, 0, 1, 0, 1, 2, 0, 1}, false)
	f.Add([]byte{4, 0, 0, 1, 1, 2, 3, 9, 200}, true)
	rng := rand.New(rand.NewPCG(71, 72))
	cfg := LayerConfig{DModel: 16, Heads: 2, HeadDim: 8, Rotary: Rotary{Dims: 8}}
	l, _ := testLayer(f, engines[0], rng, cfg, true)
	f.Fuzz(func(t *testing.T, data []byte, withPositions bool) {
		if len(data) < 2 || len(data) > 64 {
			return
		}
		c, _ := l.NewCache(2, 12)
		if err := l.DecodeSeqs(context.Background(), make([]float32, 3*16), make([]float32, 3*16), c, []int{2, 1}, nil); err != nil {
			t.Fatal(err)
		}
		counts := []int{int(data[0] % 8), int(data[1] % 8)}
		total := counts[0] + counts[1]
		tree := Tree{Parents: make([]int, total)}
		if withPositions {
			tree.Positions = make([]int, total)
		}
		for i := range total {
			b := 0
			if 2+i < len(data) {
				b = int(data[2+i])
			}
			tree.Parents[i] = b%9 - 2
			if withPositions {
				tree.Positions[i] = b % 13
			}
		}
		before := cacheState(c)
		err := l.DecodeTree(context.Background(), make([]float32, total*16), make([]float32, total*16), c, counts, tree, &Options{ALiBi: []float32{0.5, 0.25}})
		switch {
		case err == nil:
			if c.Len(0) != 2+counts[0] || c.Len(1) != 1+counts[1] {
				t.Fatalf("lengths %d, %d after a step of %v", c.Len(0), c.Len(1), counts)
			}
		case !errors.Is(err, ErrOption) && !errors.Is(err, ErrCacheFull) && !errors.Is(err, ErrBuffer):
			t.Fatalf("%v: no sentinel", err)
		case !slices.Equal(before, cacheState(c)):
			t.Fatalf("a refused call (%v) changed the cache", err)
		}
	})
}

// TestDecodeTreeCancelled: a tree step on a done context returns its
// error and leaves every sequence's tokens and length as they were.
func TestDecodeTreeCancelled(t *testing.T) {
	rng := rand.New(rand.NewPCG(75, 76))
	cfg := LayerConfig{DModel: 16, Heads: 2, HeadDim: 8, Rotary: Rotary{Dims: 8}}
	l, _ := testLayer(t, engines[0], rng, cfg, true)
	c, _ := l.NewCacheOf(2, 32, BFloat16)
	if err := l.DecodeSeqs(context.Background(), make([]float32, 7*16), random(rng, 7*16), c, []int{4, 3}, nil); err != nil {
		t.Fatal(err)
	}
	rows0, rows1 := seqRows(c, 0, 4), seqRows(c, 1, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := l.DecodeTree(ctx, make([]float32, 9*16), random(rng, 9*16), c, []int{5, 4},
		Tree{Parents: []int{-1, 0, 0, 1, 1, -1, 0, 1, 1}}, &Options{Window: 3})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled tree step: %v", err)
	}
	if c.Len(0) != 4 || c.Len(1) != 3 || !slices.Equal(rows0, seqRows(c, 0, 4)) || !slices.Equal(rows1, seqRows(c, 1, 3)) {
		t.Fatal("a cancelled tree step changed the cached tokens")
	}
}

// BenchmarkDecodeTree times one verification step of 16 draft tokens
// over a 4096-token context: as a tree (4 branches of 4), as a chain of
// 16 through DecodeSeqs, and a plain one-token step, on the same layer.
func BenchmarkDecodeTree(b *testing.B) {
	rng := rand.New(rand.NewPCG(77, 78))
	cfg := LayerConfig{DModel: 1024, Heads: 16, KVHeads: 4, HeadDim: 64, Rotary: Rotary{Dims: 64}}
	l, _ := testLayer(b, engines[0], rng, cfg, false)
	const ctxLen, drafts = 4096, 16
	c, _ := l.NewCacheOf(1, ctxLen+drafts, BFloat16)
	for i := 0; i < ctxLen; i += 512 {
		if err := l.DecodeSeqs(context.Background(), make([]float32, 512*1024), random(rng, 512*1024), c, []int{512}, nil); err != nil {
			b.Fatal(err)
		}
	}
	x, out := random(rng, drafts*1024), make([]float32, drafts*1024)
	tree := Tree{Parents: []int{-1, 0, 1, 2, -1, 4, 5, 6, -1, 8, 9, 10, -1, 12, 13, 14}}
	for _, bc := range []struct {
		name string
		n    int
		run  func(n int) error
	}{
		{"tree16", drafts, func(n int) error { return l.DecodeTree(context.Background(), out, x, c, []int{n}, tree, nil) }},
		{"chain16", drafts, func(n int) error { return l.DecodeSeqs(context.Background(), out, x, c, []int{n}, nil) }},
		{"step1", 1, func(n int) error { return l.DecodeSeqs(context.Background(), out[:1024], x[:1024], c, []int{n}, nil) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				if err := bc.run(bc.n); err != nil {
					b.Fatal(err)
				}
				if err := c.Truncate(0, ctxLen); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
