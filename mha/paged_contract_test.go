package mha

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestPagedKeepReleased: Keep that would move a token into (or out of) a
// block the sliding window released is ErrOption and changes nothing
// (it panicked, index -1, before).
func TestPagedKeepReleased(t *testing.T) {
	rng := rand.New(rand.NewPCG(68, 1))
	cfg := LayerConfig{DModel: 16, Heads: 2, KVHeads: 2, HeadDim: 8}
	l, _ := testLayer(t, engines[0], rng, cfg, true)
	pc, err := l.NewPagedCache(PagedConfig{Bytes: 1 << 20, BlockTokens: 16, Window: 16})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := pc.NewSeq()
	x := random(rng, 64*16) // blocks 0-2 leave the sequence
	if err := l.DecodePaged(nil, make([]float32, len(x)), x, pc, []SeqID{id}, []int{64}, &Options{Window: 16}); err != nil {
		t.Fatal(err)
	}
	free, before := pc.FreeBlocks(), slices.Clone(pc.seqs[id].blocks)
	var slots []int // 40..63 without 47: slot 48 moves to 47, in released block 2
	for s := 40; s < 64; s++ {
		if s != 47 {
			slots = append(slots, s)
		}
	}
	if err := pc.Keep(id, 40, slots); !errors.Is(err, ErrOption) {
		t.Fatalf("Keep into a released block: %v, want ErrOption", err)
	}
	if err := pc.Keep(id, 20, []int{30, 50}); !errors.Is(err, ErrOption) { // out of one
		t.Fatalf("Keep out of a released block: %v, want ErrOption", err)
	}
	if n, _ := pc.Len(id); n != 64 || pc.FreeBlocks() != free || !slices.Equal(pc.seqs[id].blocks, before) {
		t.Fatalf("a refused Keep changed the sequence: %d tokens, %d free (was %d), blocks %v (was %v)",
			n, pc.FreeBlocks(), free, pc.seqs[id].blocks, before)
	}
	if err := pc.Check(); err != nil {
		t.Fatal(err)
	}
	// Within the window, Keep still works.
	if err := pc.Keep(id, 62, []int{63}); err != nil {
		t.Fatal(err)
	}
	if err := pc.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestPagedFailedCallKeepsPool: a DecodePaged refused after its copy on
// write of a shared partial block (ComputeInt8 over float32 K), or
// cancelled mid-step, leaves every block table, length and the free
// count as they were: the copy returns to the pool and the sequence holds
// the shared block again (one block leaked per such call before).
func TestPagedFailedCallKeepsPool(t *testing.T) {
	rng := rand.New(rand.NewPCG(68, 2))
	l := pagedLayer(t, engines[0], rng)
	dm := l.Config().DModel
	pc, err := l.NewPagedCache(PagedConfig{Bytes: 1 << 22, BlockTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := pc.NewSeq()
	x := random(rng, 40*dm)
	if err := l.DecodePaged(nil, make([]float32, len(x)), x, pc, []SeqID{a}, []int{40}, nil); err != nil {
		t.Fatal(err)
	}
	var forks []SeqID // sharing a's partial third block
	for range 8 {
		f, err := pc.Fork(a, 40)
		if err != nil {
			t.Fatal(err)
		}
		forks = append(forks, f)
	}
	tables := func() [][]int32 {
		var ts [][]int32
		for _, id := range append([]SeqID{a}, forks...) {
			ts = append(ts, slices.Clone(pc.seqs[id].blocks))
		}
		return ts
	}
	unchanged := func(what string, free int, ts [][]int32) {
		t.Helper()
		if pc.FreeBlocks() != free {
			t.Fatalf("%s: %d free blocks, %d before", what, pc.FreeBlocks(), free)
		}
		if got := tables(); !slices.EqualFunc(got, ts, slices.Equal) {
			t.Fatalf("%s: block tables %v, before %v", what, got, ts)
		}
		for _, id := range forks {
			if n, _ := pc.Len(id); n != 40 {
				t.Fatalf("%s: a fork holds %d tokens", what, n)
			}
		}
		if err := pc.Check(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	counts := []int{1, 1, 1, 1, 1, 1, 1, 1}
	x = random(rng, 8*dm)
	out := make([]float32, len(x))
	free, ts := pc.FreeBlocks(), tables()
	if err := l.DecodePaged(nil, out, x, pc, forks, counts, &Options{Compute: ComputeInt8}); !errors.Is(err, ErrOption) {
		t.Fatalf("ComputeInt8 over float32 K: %v, want ErrOption", err)
	}
	unchanged("refused", free, ts)
	// Cancelled at delays across the call's time: each either completes
	// (then undone by Truncate) or is cancelled and changes nothing.
	big := []int{300, 300, 300, 300, 300, 300, 300, 300}
	x = random(rng, 2400*dm)
	out = make([]float32, len(x))
	start := time.Now()
	if err := l.DecodePaged(nil, out, x, pc, forks, big, nil); err != nil {
		t.Fatal(err)
	}
	full := time.Since(start)
	for _, id := range forks {
		if err := pc.Truncate(id, 40); err != nil {
			t.Fatal(err)
		}
	}
	free, ts = pc.FreeBlocks(), tables()
	cancelled := 0
	for i := range 24 {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(full * time.Duration(i) / 24)
			cancel()
		}()
		err := l.DecodePaged(ctx, out, x, pc, forks, big, nil)
		wg.Wait()
		switch {
		case errors.Is(err, context.Canceled):
			cancelled++
			unchanged("cancelled", free, ts)
		case err != nil:
			t.Fatal(err)
		default:
			for _, id := range forks {
				if err := pc.Truncate(id, 40); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if cancelled == 0 {
		t.Fatalf("no call of 24 was cancelled (a call takes %v)", full)
	}
}

// TestPagedReadsConcurrent: while one goroutine decodes, Len, Seqs,
// FreeBlocks, CachedBlocks and Check never fail (Len gives a length the
// sequence had, growing; Check waits for the call), and a second
// changing call on another sequence gets ErrBusy (the documented rule).
func TestPagedReadsConcurrent(t *testing.T) {
	rng := rand.New(rand.NewPCG(68, 4))
	l := pagedLayer(t, engines[0], rng)
	dm := l.Config().DModel
	pc, err := l.NewPagedCache(PagedConfig{Bytes: 1 << 22, BlockTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := pc.NewSeq()
	b, _ := pc.NewSeq()
	const steps = 40
	x := random(rng, 8*dm)
	out := make([]float32, len(x))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < steps; {
			switch err := l.DecodePaged(nil, out, x, pc, []SeqID{a}, []int{8}, nil); {
			case errors.Is(err, ErrBusy): // the reader's own call on b holds it: again
				runtime.Gosched()
			case err != nil:
				t.Error(err)
				return
			default:
				i++
			}
		}
	}()
	last, reads, busy := 0, 0, 0
	xb := random(rng, dm)
	for running := true; running; reads++ {
		select {
		case <-done:
			running = false
		default:
		}
		n, err := pc.Len(a)
		if err != nil || n < last || n%8 != 0 || n > 8*steps {
			t.Fatalf("Len during decoding: %d, %v (last %d)", n, err, last)
		}
		last = n
		if pc.Seqs() != 2 || pc.FreeBlocks() > pc.Blocks() || pc.CachedBlocks() != 0 {
			t.Fatalf("counts during decoding: %d seqs, %d free, %d cached", pc.Seqs(), pc.FreeBlocks(), pc.CachedBlocks())
		}
		if reads%16 == 0 {
			if err := pc.Check(); err != nil {
				t.Fatal(err)
			}
		}
		switch err := l.DecodePaged(nil, make([]float32, dm), xb, pc, []SeqID{b}, []int{1}, nil); {
		case errors.Is(err, ErrBusy):
			busy++
		case err != nil:
			t.Fatal(err)
		}
	}
	if n, _ := pc.Len(a); n != 8*steps {
		t.Fatalf("sequence holds %d tokens after %d steps of 8", n, steps)
	}
	t.Logf("%d reads, %d calls on another sequence refused busy", reads, busy)
}
