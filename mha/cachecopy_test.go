package mha

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestCopyTo: a prefix forked into another slot (of the same cache or of
// another cache of the layer) and then decoded gives bit for bit the
// outputs of the sequence that decoded the prefix itself, on every set
// and storage type; the source is unchanged, and stale tokens past the
// copied prefix in the destination are never seen.
func TestCopyTo(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	cfg := LayerConfig{DModel: 32, Heads: 4, KVHeads: 2, HeadDim: 8, ValueDim: 6,
		Rotary: Rotary{Dims: 8, Base: 500000, Scaling: &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 64}}}
	for _, typ := range []DType{Float32, Float16, BFloat16, Int8, Int4} {
		for _, e := range engines {
			l, _ := testLayer(t, e, rng, cfg, true)
			dm := cfg.DModel
			const capa, prompt, steps = 200, 37, 5
			a, err := l.NewCacheOf(3, capa, typ)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := l.NewCacheOf(2, capa-50, typ)
			// Slot 2 of a holds unrelated tokens first, so a fork into it
			// must hide them.
			if err := l.DecodeSeqs(context.Background(), make([]float32, 60*dm), random(rng, 60*dm), a, []int{0, 0, 60}, nil); err != nil {
				t.Fatal(err)
			}
			x := random(rng, prompt*dm)
			if err := l.DecodeSeqs(context.Background(), make([]float32, prompt*dm), x, a, []int{prompt, 0, 0}, nil); err != nil {
				t.Fatal(err)
			}
			// A prefix of 30 of the 37 tokens into slots 1 and 2 of a and
			// slot 0 of b; the source gets rolled back to 30 too, so all
			// four continue from the same prefix.
			const keep = 30
			for _, f := range []struct {
				to  *Cache
				dst int
			}{{a, 1}, {a, 2}, {b, 0}} {
				if err := a.CopyTo(f.to, f.dst, 0, keep); err != nil {
					t.Fatal(err)
				}
				if f.to.Len(f.dst) != keep {
					t.Fatalf("length after CopyTo %d, want %d", f.to.Len(f.dst), keep)
				}
			}
			if err := a.Truncate(0, keep); err != nil {
				t.Fatal(err)
			}
			for s := 0; s < steps; s++ {
				tok := random(rng, dm)
				outA := make([]float32, 3*dm)
				if err := l.DecodeSeqs(context.Background(), outA, slices.Concat(tok, tok, tok), a, []int{1, 1, 1}, nil); err != nil {
					t.Fatal(err)
				}
				outB := make([]float32, dm)
				if err := l.DecodeSeqs(context.Background(), outB, tok, b, []int{1, 0}, nil); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < dm; i++ {
					if outA[i] != outA[dm+i] || outA[i] != outA[2*dm+i] || outA[i] != outB[i] {
						t.Fatalf("%s %v step %d: forked outputs differ at %d: %v %v %v %v", e.Kernels(), typ, s, i,
							outA[i], outA[dm+i], outA[2*dm+i], outB[i])
					}
				}
			}
		}
	}
}

// TestCopyToErrors: every refused copy names its problem, wraps its
// sentinel and changes no length.
func TestCopyToErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(53, 54))
	e := engines[0]
	cfg := LayerConfig{DModel: 16, Heads: 2, HeadDim: 8, Rotary: Rotary{Dims: 8}}
	l, w := testLayer(t, e, rng, cfg, true)
	other := cfg
	other.Rotary.Base = 1e6
	l2, err := NewLayer(e, other, w)
	if err != nil {
		t.Fatal(err)
	}
	wide := cfg
	wide.HeadDim, wide.Rotary.Dims = 4, 4
	l3, _ := testLayer(t, e, rng, wide, true)
	a, _ := l.NewCache(2, 20)
	a16, _ := l.NewCacheOf(2, 20, BFloat16)
	small, _ := l.NewCache(1, 5)
	rot, _ := l2.NewCache(1, 20)
	geo, _ := l3.NewCache(1, 20)
	if err := l.DecodeSeqs(context.Background(), make([]float32, 10*16), random(rng, 10*16), a, []int{10, 0}, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		to       *Cache
		dst, src int
		n        int
		want     error
	}{
		{"type", a16, 0, 0, 5, ErrOption},
		{"rotary", rot, 0, 0, 5, ErrOption},
		{"geometry", geo, 0, 0, 5, ErrOption},
		{"too many", a, 1, 0, 11, ErrOption},
		{"negative", a, 1, 0, -1, ErrOption},
		{"source", a, 1, 2, 1, ErrOption},
		{"destination", a, 2, 0, 1, ErrOption},
		{"capacity", small, 0, 0, 6, ErrCacheFull},
		{"nil", nil, 0, 0, 1, ErrNil},
	} {
		before := a.Lens(nil)
		if err := a.CopyTo(c.to, c.dst, c.src, c.n); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
		if !slices.Equal(before, a.Lens(nil)) || small.Len(0) != 0 {
			t.Errorf("%s: lengths changed", c.name)
		}
	}
	// Busy: a cache held by another call.
	if !a.busy.CompareAndSwap(false, true) {
		t.Fatal("cache busy")
	}
	if err := small.CopyTo(a, 0, 0, 0); !errors.Is(err, ErrBusy) {
		t.Errorf("into a busy cache: %v, want ErrBusy", err)
	}
	if err := a.CopyTo(small, 0, 0, 1); !errors.Is(err, ErrBusy) {
		t.Errorf("from a busy cache: %v, want ErrBusy", err)
	}
	a.release()
	if small.busy.Load() {
		t.Fatal("a failed CopyTo left the other cache held")
	}
	// Onto itself: a cut, as Truncate.
	if err := a.CopyTo(a, 0, 0, 4); err != nil || a.Len(0) != 4 {
		t.Fatalf("self copy: %v, length %d", err, a.Len(0))
	}
}

// TestKeep: the tokens Keep keeps from a sequence's newest ones, then
// decoding on, give bit for bit what decoding only the kept tokens gives,
// on every set and storage type; bad arguments change nothing.
func TestKeep(t *testing.T) {
	rng := rand.New(rand.NewPCG(53, 54))
	// No rotary: a token's K and V do not depend on its slot, so kept
	// tokens that move down hold what decoding them there would store.
	cfg := LayerConfig{DModel: 24, Heads: 4, KVHeads: 2, HeadDim: 8, ValueDim: 6}
	ctx := context.Background()
	for _, typ := range []DType{Float32, Float16, BFloat16, Int8, Int4} {
		for _, e := range engines {
			l, _ := testLayer(t, e, rng, cfg, true)
			dm := cfg.DModel
			c, err := l.NewCacheOf(2, 64, typ)
			if err != nil {
				t.Fatal(err)
			}
			prompt := random(rng, 10*dm)
			if err := l.DecodeSeqs(ctx, make([]float32, 20*dm), slices.Concat(prompt, prompt), c, []int{10, 10}, nil); err != nil {
				t.Fatal(err)
			}
			// Sequence 0 decodes 7 drafts; slots 10, 12, 13 and 16 are
			// accepted. Sequence 1 decodes only those four.
			drafts := random(rng, 7*dm)
			slots := []int{10, 12, 13, 16}
			var kept []float32
			for _, s := range slots {
				kept = append(kept, drafts[(s-10)*dm:(s-9)*dm]...)
			}
			if err := l.DecodeSeqs(ctx, make([]float32, 11*dm), slices.Concat(drafts, kept), c, []int{7, 4}, nil); err != nil {
				t.Fatal(err)
			}
			before := cacheState(c)
			for _, bad := range []struct {
				seq, from int
				slots     []int
			}{{2, 10, slots}, {-1, 10, slots}, {0, 18, nil}, {0, -1, nil}, {0, 10, []int{9}}, {0, 10, []int{17}},
				{0, 10, []int{12, 12}}, {0, 10, []int{13, 12}}} {
				if err := c.Keep(bad.seq, bad.from, bad.slots); !errors.Is(err, ErrOption) {
					t.Errorf("Keep(%d, %d, %v) = %v, want ErrOption", bad.seq, bad.from, bad.slots, err)
				}
			}
			if !slices.Equal(before, cacheState(c)) || c.Len(0) != 17 {
				t.Fatalf("a refused Keep changed the cache")
			}
			if err := c.Keep(0, 10, slots); err != nil {
				t.Fatal(err)
			}
			if c.Len(0) != 14 || c.Len(1) != 14 {
				t.Fatalf("lengths after Keep %d, %d, want 14", c.Len(0), c.Len(1))
			}
			for s := 0; s < 3; s++ {
				tok := random(rng, dm)
				out := make([]float32, 2*dm)
				if err := l.DecodeSeqs(ctx, out, slices.Concat(tok, tok), c, []int{1, 1}, nil); err != nil {
					t.Fatal(err)
				}
				if i := firstDiff(out[:dm], out[dm:]); i >= 0 {
					t.Fatalf("%s %v step %d: kept sequence out[%d] = %v, decoded-alone %v", e.Kernels(), typ, s, i, out[i], out[dm+i])
				}
			}
			if err := c.Keep(1, 17, nil); err != nil || c.Len(1) != 17 { // keeping nothing after all: a no-op
				t.Fatalf("Keep(1, 17, nil): %v, length %d", err, c.Len(1))
			}
		}
	}
}

// cacheState is a copy of every byte a cache stores, as float32 bits, and
// its lengths.
func cacheState(c *Cache) []uint32 {
	var s []uint32
	for _, f := range [][]float32{c.K, c.V, c.KScale, c.VScale} {
		for _, x := range f {
			s = append(s, math.Float32bits(x))
		}
	}
	for _, h := range [][]uint16{c.K16, c.V16} {
		for _, x := range h {
			s = append(s, uint32(x))
		}
	}
	for _, q := range [][]int8{c.K8, c.V8} {
		for _, x := range q {
			s = append(s, uint32(uint8(x)))
		}
	}
	for b := range c.Batch() {
		s = append(s, uint32(c.Len(b)))
	}
	return s
}
