package mha

import (
	"context"
	"errors"
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
	for _, typ := range []KVType{Float32, Float16, BFloat16, Int8} {
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
