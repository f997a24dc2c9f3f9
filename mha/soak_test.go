package mha

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSoak runs the library the way a server does: one Engine shared by
// several goroutines, each serving the slots of its own Cache through a
// Layer (some layers shared between goroutines), with requests arriving
// and finishing, prompts fed in random chunks beside slots decoding one
// token at a time, speculative tokens rolled back, caches run full on
// purpose, and calls cancelled at random moments and at chosen work-item
// boundaries. After every step the new tokens' outputs of sampled slots
// are checked against a recomputation from that sequence's whole history
// (one DecodeSeqs of all its tokens on a fresh cache of the same layer and
// storage type); the heap in use near the end must not have grown past
// what it was after warm-up (25%, and a few MiB for short runs), and no
// goroutine may be left once the run is over.
//
// FASTATTN_SOAK=10m sets the duration (default 2 s with FASTATTN_LONG=1,
// 0.25 s without; skipped with -short
// unless it is set). The closing line gives steps, checks, mismatches and
// the heap growth.
func TestSoak(t *testing.T) {
	d := soakDuration(t)
	e, err := NewEngine(Config{Threads: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rng := rand.New(rand.NewPCG(34, 10))
	slopes, _ := ALiBiSlopes(4, 0)
	type model struct {
		l    *Layer
		opts *Options
	}
	// Three layers: GQA with rotary and QK-norm; MHA with ALiBi, a window,
	// sinks and a softcap; GQA with rotary, biases and bf16 weights.
	a, _ := testLayer(t, e, rng, LayerConfig{DModel: 64, Heads: 4, KVHeads: 2, HeadDim: 16,
		Rotary: Rotary{Dims: 16, Base: 10000}}, false)
	aw := Weights{WQ: random(rng, 64*64), WK: random(rng, 64*32), WV: random(rng, 64*32), WO: random(rng, 64*64),
		QNorm: random(rng, 16), KNorm: random(rng, 16)}
	for _, m := range [][]float32{aw.WQ, aw.WK, aw.WV, aw.WO} {
		for i := range m {
			m[i] *= 0.125
		}
	}
	if a, err = NewLayer(e, a.Config(), aw); err != nil {
		t.Fatal(err)
	}
	b, _ := testLayer(t, e, rng, LayerConfig{DModel: 48, Heads: 4, HeadDim: 12}, true)
	c, cw := testLayer(t, e, rng, LayerConfig{DModel: 64, Heads: 8, KVHeads: 2, HeadDim: 8,
		Rotary: Rotary{Dims: 8, Base: 1e6, Interleaved: true}}, true)
	cw.Type = BFloat16
	if c, err = NewLayer(e, c.Config(), cw); err != nil {
		t.Fatal(err)
	}
	models := []model{{a, nil}, {a, nil}, {b, &Options{ALiBi: slopes, Window: 24, Sinks: []float32{0.5, -1, 0, 2}, Softcap: 30}}, {c, nil}}
	kinds := []DType{Float32, Float16, BFloat16, Int8, Int4}

	// The item hook: a call registered here is cancelled when its job
	// reaches the given item (counted over all the call's jobs).
	var hookMu sync.Mutex
	cutAt := map[<-chan struct{}]*struct {
		left   int
		cancel context.CancelFunc
	}{}
	itemHook = func(ch <-chan struct{}) {
		if ch == nil {
			return
		}
		hookMu.Lock()
		defer hookMu.Unlock()
		if c := cutAt[ch]; c != nil {
			if c.left--; c.left < 0 {
				c.cancel()
			}
		}
	}
	defer func() { itemHook = nil }()

	var steps, checks, mismatches, cancelled, full atomic.Int64
	var worst atomic.Uint64 // float64 bits of the largest relative error seen
	deadline := time.Now().Add(d)
	// The heap in use and the goroutine count, after a GC, at the end of
	// the warm-up and near the end, with the serving goroutines running
	// both times: what the run holds must not grow between the two.
	var heapWarm, heapLate uint64
	var goroutinesWarm, goroutinesLate int
	goroutinesBefore := runtime.NumGoroutine()
	measured := make(chan struct{})
	go func() {
		defer close(measured)
		snap := func(at time.Time) (uint64, int) {
			time.Sleep(time.Until(at))
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return ms.HeapInuse, runtime.NumGoroutine()
		}
		heapWarm, goroutinesWarm = snap(time.Now().Add(d / 5))
		heapLate, goroutinesLate = snap(deadline.Add(-d / 20))
	}()

	var wg sync.WaitGroup
	for g, m := range models {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(34, uint64(100+g)))
			cfg := m.l.Config()
			dm, slots, capacity := cfg.DModel, 4, 96
			kind := kinds[g%len(kinds)]
			cache, err := m.l.NewCacheOf(slots, capacity, kind)
			if err != nil {
				t.Error(err)
				return
			}
			ref, err := m.l.NewCacheOf(1, capacity, kind)
			if err != nil {
				t.Error(err)
				return
			}
			hist := make([][]float32, slots) // every token of each slot's sequence, [n·dm]
			tokens := func(s int) int { return len(hist[s]) / dm }
			target := make([]int, slots) // a request's total length; 0: idle
			prompt := make([]int, slots) // tokens of its prompt still to feed
			for step := 0; time.Now().Before(deadline); step++ {
				steps.Add(1)
				counts := make([]int, slots)
				for s := range counts {
					switch {
					case target[s] == 0 && rng.IntN(3) == 0: // a request arrives
						target[s], prompt[s] = 1+rng.IntN(capacity-8), 1+rng.IntN(40)
						fallthrough
					case prompt[s] > 0:
						counts[s] = min(prompt[s], 1+rng.IntN(16), target[s]-tokens(s))
					case target[s] > 0:
						counts[s] = min(1, target[s]-tokens(s))
					}
				}
				lens := cache.Lens(nil)
				if rng.IntN(40) == 0 { // run a slot full on purpose
					s := rng.IntN(slots)
					over := append([]int(nil), counts...)
					over[s] = capacity - lens[s] + 1
					n := sum(over)
					err := m.l.DecodeSeqs(context.Background(), make([]float32, n*dm), random(rng, n*dm), cache, over, m.opts)
					if !errors.Is(err, ErrCacheFull) {
						t.Errorf("goroutine %d: overfilling slot %d: %v, want ErrCacheFull", g, s, err)
					}
					full.Add(1)
					if got := cache.Lens(nil); !equalInts(got, lens) {
						t.Errorf("goroutine %d: ErrCacheFull changed the lengths %v to %v", g, lens, got)
					}
				}
				n := sum(counts)
				if n == 0 {
					continue
				}
				x := random(rng, n*dm)
				out := make([]float32, n*dm)
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				switch rng.IntN(12) {
				case 0: // cancelled after a random short while
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rng.IntN(300))*time.Microsecond)
				case 1, 2: // cancelled at a chosen work-item boundary
					ctx, cancel = context.WithCancel(context.Background())
					hookMu.Lock()
					cutAt[ctx.Done()] = &struct {
						left   int
						cancel context.CancelFunc
					}{rng.IntN(12), cancel}
					hookMu.Unlock()
				}
				err := m.l.DecodeSeqs(ctx, out, x, cache, counts, m.opts)
				hookMu.Lock()
				delete(cutAt, ctx.Done())
				hookMu.Unlock()
				cancel()
				if err != nil {
					if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("goroutine %d: DecodeSeqs: %v", g, err)
						return
					}
					cancelled.Add(1)
					if got := cache.Lens(nil); !equalInts(got, lens) {
						t.Errorf("goroutine %d: a cancelled call changed the lengths %v to %v", g, lens, got)
					}
					continue // the tokens were never added: the sequence goes on without them
				}
				for s, row := 0, 0; s < slots; s++ {
					k := counts[s]
					if k == 0 {
						continue
					}
					hist[s] = append(hist[s], x[row*dm:(row+k)*dm]...)
					if prompt[s] > 0 {
						prompt[s] = max(prompt[s]-k, 0)
					}
					if s == 0 || rng.IntN(3) == 0 { // the sampled slots: recompute
						checks.Add(1)
						if e := recompute(m.l, ref, hist[s], out[row*dm:(row+k)*dm], m.opts); e > 2e-4 || math.IsNaN(e) {
							mismatches.Add(1)
							t.Errorf("goroutine %d (%v cache), slot %d at %d tokens: outputs differ from the recomputation by %.3g", g, kind, s, tokens(s), e)
						} else if e > math.Float64frombits(worst.Load()) {
							worst.Store(math.Float64bits(e))
						}
					}
					row += k
				}
				for s := range hist {
					switch {
					case target[s] > 0 && tokens(s) >= target[s]: // finished: free the slot
						if err := cache.Reset(s); err != nil {
							t.Error(err)
						}
						hist[s], target[s], prompt[s] = hist[s][:0], 0, 0
					case tokens(s) > 2 && rng.IntN(8) == 0: // rejected draft tokens
						keep := tokens(s) - 1 - rng.IntN(min(3, tokens(s)-1))
						if err := cache.Truncate(s, keep); err != nil {
							t.Error(err)
						}
						hist[s] = hist[s][:keep*dm]
					}
				}
			}
		}()
	}
	wg.Wait()
	<-measured
	growth := 100 * (float64(heapLate) - float64(heapWarm)) / float64(heapWarm)
	t.Logf("soak: %d steps, %d recomputation checks, %d mismatches, heap growth %.1f%% (%d cancelled calls, %d runs into ErrCacheFull, largest relative error %.2g, %d and %d goroutines after warm-up and near the end, %v, %s)",
		steps.Load(), checks.Load(), mismatches.Load(), growth, cancelled.Load(), full.Load(),
		math.Float64frombits(worst.Load()), goroutinesWarm, goroutinesLate, d, e.Kernels())
	if float64(heapLate) > 1.25*float64(heapWarm)+(4<<20) { // a few MiB of slack: short runs hold small, noisy heaps
		t.Errorf("heap in use grew from %d to %d bytes between the warm-up and the end", heapWarm, heapLate)
	}
	// Goroutines: none left behind once the serving goroutines are done
	// (timers of cancelled contexts may take a moment to finish).
	for wait := time.Now().Add(time.Second); runtime.NumGoroutine() > goroutinesBefore && time.Now().Before(wait); {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutinesBefore {
		t.Errorf("%d goroutines after the run, %d before it", n, goroutinesBefore)
	}
	if checks.Load() == 0 {
		t.Errorf("the soak checked nothing")
	}
}

// recompute decodes a sequence's whole history in one call on the empty
// one-slot cache ref and returns the largest difference of its last
// outputs from got, relative to their largest magnitude.
func recompute(l *Layer, ref *Cache, x []float32, got []float32, opts *Options) float64 {
	dm := l.Config().DModel
	n := len(x) / dm
	want := make([]float32, n*dm)
	if err := ref.Reset(0); err != nil {
		return math.NaN()
	}
	if err := l.DecodeSeqs(context.Background(), want, x, ref, []int{n}, opts); err != nil {
		return math.NaN()
	}
	want = want[len(want)-len(got):]
	scale, worst := 1e-30, 0.0
	for i := range want {
		scale = math.Max(scale, math.Abs(float64(want[i])))
		worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
	}
	if anyNaN(got) {
		return math.NaN()
	}
	return worst / scale
}

func anyNaN(x []float32) bool {
	for _, v := range x {
		if v != v {
			return true
		}
	}
	return false
}

func sum(x []int) int {
	n := 0
	for _, v := range x {
		n += v
	}
	return n
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// soakDuration is a soak's length: FASTATTN_SOAK, else 2 s with
// FASTATTN_LONG=1 and 0.25 s without; -short skips the soak unless
// FASTATTN_SOAK is set.
func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	if v := os.Getenv("FASTATTN_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("FASTATTN_SOAK=%q: %v", v, err)
		}
		return d
	}
	if testing.Short() {
		t.Skip("a soak: FASTATTN_SOAK=60s runs it")
	}
	if longTests() {
		return 2 * time.Second
	}
	return 250 * time.Millisecond
}
