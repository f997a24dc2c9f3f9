package mha

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/fastattn/fastattn/kernels"
)

// TestThreadsBitwise: the same call at 1, 2 and 7 threads gives the same
// bits, on every kernel set, for attention and for the layer.
func TestThreadsBitwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, s := range []Shape{
		{Batch: 2, Heads: 6, KVHeads: 2, QLen: 150, KVLen: 170, HeadDim: 40, ValueDim: 24},
		{Batch: 2, Heads: 8, KVHeads: 2, QLen: 1, KVLen: 700, HeadDim: 40, ValueDim: 24}, // split decode
	} {
		threadsBitwise(t, rng, s)
	}
}

func threadsBitwise(t *testing.T, rng *rand.Rand, s Shape) {
	q, k, v, _ := inputs(rng, s)
	for _, ks := range bf16Engines {
		e7 := &Engine{ks: ks.ks, pool: newPool(7)} // New's engine on ks's set
		defer e7.Close()
		for _, o := range []Options{{}, {Causal: true, Window: 33, Softcap: 5}, {Causal: true, Compute: ComputeBF16}} {
			var ref []float32
			for _, th := range []int{1, 2, 7} {
				o.Threads = th
				out := make([]float32, s.Batch*s.QLen*s.Heads*s.ValueDim)
				if err := e7.Attention(out, q, k, v, s, &o); err != nil {
					t.Fatal(err)
				}
				if ref == nil {
					ref = out
					continue
				}
				if i := firstDiff(out, ref); i >= 0 {
					t.Fatalf("%s: threads=%d differs from threads=1 at %d: %v vs %v", ks.Kernels(), th, i, out[i], ref[i])
				}
			}
		}
		l, _ := testLayer(t, e7, rng, LayerConfig{DModel: 96, Heads: 4, KVHeads: 2, HeadDim: 24}, true)
		x := random(rng, 2*80*96)
		var ref []float32
		for _, th := range []int{1, 2, 7} {
			out := make([]float32, len(x))
			if err := l.Forward(out, x, 2, 80, &Options{Causal: true, Threads: th}); err != nil {
				t.Fatal(err)
			}
			if ref == nil {
				ref = out
				continue
			}
			if i := firstDiff(out, ref); i >= 0 {
				t.Fatalf("%s layer: threads=%d differs at %d", ks.Kernels(), th, i)
			}
		}
	}
}

// TestBadInput: every kind of bad input is an error wrapping the right
// sentinel, never a panic.
func TestBadInput(t *testing.T) {
	ok := Shape{Batch: 2, Heads: 4, KVHeads: 2, QLen: 3, KVLen: 5, HeadDim: 8, ValueDim: 6}
	n := func(dims ...int) []float32 {
		p := 1
		for _, d := range dims {
			p *= d
		}
		return make([]float32, p)
	}
	q, k, v, out := n(2, 3, 4, 8), n(2, 5, 2, 8), n(2, 5, 2, 6), n(2, 3, 4, 6)
	neg, nan, inf := float32(-1), float32(math.NaN()), float32(math.Inf(1))
	huge := math.MaxInt
	with := func(f func(*Shape)) Shape { s := ok; f(&s); return s }
	cases := []struct {
		name  string
		shape Shape
		opts  *Options
		q     []float32
		out   []float32
		want  error
	}{
		{"zero batch", with(func(s *Shape) { s.Batch = 0 }), nil, q, out, ErrShape},
		{"negative heads", with(func(s *Shape) { s.Heads = -4 }), nil, q, out, ErrShape},
		{"zero QLen", with(func(s *Shape) { s.QLen = 0 }), nil, q, out, ErrShape},
		{"zero KVLen", with(func(s *Shape) { s.KVLen = 0 }), nil, q, out, ErrShape},
		{"negative HeadDim", with(func(s *Shape) { s.HeadDim = -8 }), nil, q, out, ErrShape},
		{"negative ValueDim", with(func(s *Shape) { s.ValueDim = -1 }), nil, q, out, ErrShape},
		{"H % Hkv", with(func(s *Shape) { s.KVHeads = 3 }), nil, q, out, ErrShape},
		{"bad layout", with(func(s *Shape) { s.Layout = 7 }), nil, q, out, ErrShape},
		{"overflow", with(func(s *Shape) { s.QLen = huge / 2; s.Batch = 4 }), nil, q, out, ErrShape},
		{"short q", ok, nil, q[:len(q)-1], out, ErrBuffer},
		{"short out", ok, nil, q, out[:len(out)-1], ErrBuffer},
		{"nil q", ok, nil, nil, out, ErrBuffer},
		{"scale NaN", ok, &Options{Scale: nan}, q, out, ErrOption},
		{"scale negative", ok, &Options{Scale: neg}, q, out, ErrOption},
		{"scale Inf", ok, &Options{Scale: inf}, q, out, ErrOption},
		{"softcap NaN", ok, &Options{Softcap: nan}, q, out, ErrOption},
		{"softcap negative", ok, &Options{Softcap: neg}, q, out, ErrOption},
		{"window negative", ok, &Options{Causal: true, Window: -1}, q, out, ErrOption},
		{"window huge", ok, &Options{Causal: true, Window: huge}, q, out, ErrOption},
		{"offset huge", ok, &Options{Causal: true, QueryOffset: &huge}, q, out, ErrOption},
		{"threads negative", ok, &Options{Threads: -1}, q, out, ErrOption},
		{"kvlens count", ok, &Options{KVLens: []int{5}}, q, out, ErrBuffer},
		{"kvlens negative", ok, &Options{KVLens: []int{5, -1}}, q, out, ErrOption},
		{"kvlens past KVLen", ok, &Options{KVLens: []int{6, 5}}, q, out, ErrOption},
		{"bias short", ok, &Options{Bias: n(3, 4)}, q, out, ErrBuffer},
		{"bias batch", ok, &Options{Bias: n(3, 3, 5), BiasBatch: 3}, q, out, ErrOption},
		{"bias heads", ok, &Options{Bias: n(2, 3, 5), BiasHeads: 2}, q, out, ErrOption},
		{"bias heads negative", ok, &Options{Bias: n(3, 5), BiasHeads: -1}, q, out, ErrOption},
		{"lse short", ok, &Options{OutLSE: n(2, 4, 2)}, q, out, ErrBuffer},
		{"bias qlen", ok, &Options{Bias: n(2, 5), BiasQLen: 2}, q, out, ErrOption},
		{"bias qlen negative", ok, &Options{Bias: n(3, 5), BiasQLen: -1}, q, out, ErrOption},
		{"bias row-broadcast short", ok, &Options{Bias: n(4), BiasQLen: 1}, q, out, ErrBuffer},
		{"mask short", ok, &Options{Mask: make([]bool, 14)}, q, out, ErrBuffer},
		{"mask heads", ok, &Options{Mask: make([]bool, 3*3*5), MaskHeads: 3}, q, out, ErrOption},
		{"mask batch", ok, &Options{Mask: make([]bool, 5*15), MaskBatch: 5}, q, out, ErrOption},
		{"mask qlen", ok, &Options{Mask: make([]bool, 10), MaskQLen: 2}, q, out, ErrOption},
		{"alibi count", ok, &Options{ALiBi: n(3)}, q, out, ErrBuffer},
		{"alibi NaN", ok, &Options{ALiBi: []float32{0.5, nan, 0.1, 0.1}}, q, out, ErrOption},
		{"alibi Inf", ok, &Options{ALiBi: []float32{0.5, 0.1, 0.1, -inf}}, q, out, ErrOption},
		{"alibi huge", ok, &Options{ALiBi: []float32{0.5, 0.1, 0.1, 1e6}}, q, out, ErrOption},
		{"sinks count", ok, &Options{Sinks: n(5)}, q, out, ErrBuffer},
		{"sinks NaN", ok, &Options{Sinks: []float32{nan, 0, 0, 0}}, q, out, ErrOption},
		{"sinks Inf", ok, &Options{Sinks: []float32{0, 0, inf, 0}}, q, out, ErrOption},
		{"sinks -Inf", ok, &Options{Sinks: []float32{0, 0, -inf, 0}}, q, out, ErrOption},
	}
	for _, c := range cases {
		for _, e := range engines {
			err := e.Attention(c.out, c.q, k, v, c.shape, c.opts)
			if !errors.Is(err, c.want) {
				t.Errorf("%s: %s: got %v, want %v", e.Kernels(), c.name, err, c.want)
			}
		}
	}
	// The layer's own checks.
	e := engines[0]
	if _, err := NewLayer(e, LayerConfig{DModel: 0, Heads: 1, HeadDim: 1}, Weights{}); !errors.Is(err, ErrShape) {
		t.Errorf("DModel 0: %v", err)
	}
	if _, err := NewLayer(e, LayerConfig{DModel: 4, Heads: 2, HeadDim: 2}, Weights{WQ: n(4, 4), WK: n(4, 4), WV: n(4, 4), WO: n(4, 3)}); !errors.Is(err, ErrBuffer) {
		t.Errorf("short WO: %v", err)
	}
	if _, err := NewLayer(e, LayerConfig{DModel: 4, Heads: 2, HeadDim: 2}, Weights{WQ: n(4, 4), WK: n(4, 4), WV: n(4, 4), WO: n(4, 4), BO: n(3)}); !errors.Is(err, ErrBuffer) {
		t.Errorf("short BO: %v", err)
	}
	l, err := NewLayer(e, LayerConfig{DModel: 4, Heads: 2, HeadDim: 2}, Weights{WQ: n(4, 4), WK: n(4, 4), WV: n(4, 4), WO: n(4, 4)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Forward(n(2*3*4), n(2*3*4-1), 2, 3, nil); !errors.Is(err, ErrBuffer) {
		t.Errorf("short x: %v", err)
	}
	if err := l.Forward(n(2*3*4), n(2*3*4), 2, 0, nil); !errors.Is(err, ErrShape) {
		t.Errorf("zero length: %v", err)
	}
	if _, err := l.NewCache(1, 0); !errors.Is(err, ErrShape) {
		t.Errorf("zero capacity: %v", err)
	}
	c, _ := l.NewCache(1, 4)
	if err := l.Decode(n(4), n(4), c, 1, &Options{KVLens: []int{1}}); !errors.Is(err, ErrOption) {
		t.Errorf("decode with KVLens: %v", err)
	}
	if err := l.Decode(n(5*4), n(5*4), c, 5, nil); !errors.Is(err, ErrCacheFull) {
		t.Errorf("decode past capacity: %v", err)
	}
	other, _ := NewLayer(e, l.Config(), Weights{WQ: n(4, 4), WK: n(4, 4), WV: n(4, 4), WO: n(4, 4)})
	if err := other.Decode(n(4), n(4), c, 1, nil); !errors.Is(err, ErrOption) {
		t.Errorf("decode with another layer's cache: %v", err)
	}
	// The documented way to move tokens between layers' caches: CopyTo.
	if oc, err := other.NewCache(1, 4); err != nil || c.CopyTo(oc, 0, 0, c.Len(0)) != nil || other.Decode(n(4), n(4), oc, 1, nil) != nil {
		t.Errorf("CopyTo into another layer's cache, then decoding there: %v", err)
	}
	if _, err := NewEngine(Config{ISA: "sse9"}); !errors.Is(err, ErrISA) {
		t.Errorf("unknown ISA: %v", err)
	}
	closed, _ := NewEngine(Config{Threads: 1})
	closed.Close()
	if err := closed.Attention(out, q, k, v, ok, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("closed engine: %v", err)
	}
}

// TestConcurrentCallers: many goroutines share engines and a layer (run
// with -race); every result must equal the one computed alone.
func TestConcurrentCallers(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	s := Shape{Batch: 1, Heads: 4, KVHeads: 2, QLen: 40, KVLen: 90, HeadDim: 16}
	q, k, v, want := inputs(rng, s)
	e := engines[0]
	if err := e.Attention(want, q, k, v, s, &Options{Causal: true}); err != nil {
		t.Fatal(err)
	}
	l, _ := testLayer(t, e, rng, LayerConfig{DModel: 32, Heads: 4, KVHeads: 2, HeadDim: 8}, true)
	x := random(rng, 2*20*32)
	wantL := make([]float32, len(x))
	if err := l.Forward(wantL, x, 2, 20, nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]float32, len(want))
			outL := make([]float32, len(wantL))
			for it := 0; it < 10; it++ {
				if err := e.Attention(out, q, k, v, s, &Options{Causal: true, Threads: 1 + it%3}); err != nil {
					errs <- err
					return
				}
				if err := Attention(out[:0:0], q, k, v, s, nil); !errors.Is(err, ErrBuffer) {
					errs <- err
					return
				}
				if err := l.Forward(outL, x, 2, 20, nil); err != nil {
					errs <- err
					return
				}
				for i := range out {
					if out[i] != want[i] {
						errs <- errors.New("concurrent attention result differs")
						return
					}
				}
				for i := range outL {
					if outL[i] != wantL[i] {
						errs <- errors.New("concurrent layer result differs")
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestNoAllocs: steady-state calls allocate nothing.
func TestNoAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	s := Shape{Batch: 1, Heads: 4, KVHeads: 2, QLen: 70, KVLen: 130, HeadDim: 32}
	q, k, v, out := inputs(rng, s)
	lse := make([]float32, s.Batch*s.Heads*s.QLen)
	for _, e := range engines {
		opts := &Options{Causal: true, Softcap: 3, OutLSE: lse}
		if n := testing.AllocsPerRun(allocRuns(), func() {
			if err := e.Attention(out, q, k, v, s, opts); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: Attention allocates %v times per call", e.Kernels(), n)
		}
		// The semantics of issue 10 allocate nothing either: ALiBi, sinks,
		// a bidirectional window, a padding mask and a row-broadcast bias,
		// prefill and split decode.
		mask := make([]bool, s.KVLen)
		for j := range mask {
			mask[j] = j < 100 && j%9 != 0
		}
		sem := &Options{ALiBi: []float32{0.5, 0.25, 0.125, 0.0625}, Sinks: []float32{1, 0, -1, 2}, Window: 40,
			Mask: mask, MaskQLen: 1, Bias: random(rng, s.KVLen), BiasQLen: 1, OutLSE: lse}
		dec := s
		dec.QLen, dec.KVLen = 1, 1000
		dq, dk, dv, dout := inputs(rng, dec)
		dsem := &Options{ALiBi: sem.ALiBi, Sinks: sem.Sinks, Mask: make([]bool, 1000), MaskQLen: 1}
		for j := range dsem.Mask {
			dsem.Mask[j] = j < 700
		}
		for name, call := range map[string]func() error{
			"prefill": func() error { return e.Attention(out, q, k, v, s, sem) },
			"decode":  func() error { return e.Attention(dout, dq, dk, dv, dec, dsem) },
		} {
			if n := testing.AllocsPerRun(allocRuns(), func() {
				if err := call(); err != nil {
					t.Fatal(err)
				}
			}); n != 0 {
				t.Errorf("%s: Attention with ALiBi, sinks, window, mask and bias (%s) allocates %v times per call", e.Kernels(), name, n)
			}
		}
		// The heads-major regroup copy: BSHD K/V whose rows are a multiple
		// of 4 KiB apart, and every prefill in the bfloat16 mode.
		for name, c := range map[string]struct {
			s Shape
			o *Options
		}{
			"BSHD aliasing rows": {Shape{Batch: 1, Heads: 8, KVHeads: 8, QLen: 256, KVLen: 256, HeadDim: 128}, &Options{Causal: true}},
			"ComputeBF16":        {Shape{Batch: 1, Heads: 4, KVHeads: 4, QLen: 128, KVLen: 128, HeadDim: 64}, &Options{Causal: true, Compute: ComputeBF16}},
		} {
			rs, o := c.s, c.o
			rq, rk, rv, rout := inputs(rng, rs)
			if n := testing.AllocsPerRun(allocRuns(), func() {
				if err := e.Attention(rout, rq, rk, rv, rs, o); err != nil {
					t.Fatal(err)
				}
			}); n != 0 {
				t.Errorf("%s: Attention (%s, the regroup copy) allocates %v times per call", e.Kernels(), name, n)
			}
		}
		cfg := LayerConfig{DModel: 32, Heads: 4, KVHeads: 2, HeadDim: 8, Rotary: Rotary{Dims: 6, Interleaved: true}}
		l, w := testLayer(t, e, rng, cfg, true)
		w.QNorm, w.KNorm = random(rng, 8), random(rng, 16)
		l, err := NewLayer(e, cfg, w)
		if err != nil {
			t.Fatal(err)
		}
		x := random(rng, 2*20*32)
		y := make([]float32, len(x))
		if n := testing.AllocsPerRun(allocRuns(), func() {
			if err := l.Forward(y, x, 2, 20, &Options{Causal: true}); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: Layer.Forward allocates %v times per call", e.Kernels(), n)
		}
		c, _ := l.NewCache(2, 1000)
		tok := random(rng, 2*32)
		if n := testing.AllocsPerRun(allocRuns(), func() {
			if err := l.Decode(y[:2*32], tok, c, 1, nil); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: Layer.Decode allocates %v times per call", e.Kernels(), n)
		}
		c4, _ := l.NewCacheOf(2, 1000, Int4) // int4: the decode kernels widen chunks in their scratch
		if n := testing.AllocsPerRun(allocRuns(), func() {
			if err := l.Decode(y[:2*32], tok, c4, 1, &Options{Compute: ComputeInt8}); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: Layer.Decode on an int4 cache in the int8 mode allocates %v times per call", e.Kernels(), n)
		}
		// A ragged step (one sequence decoding, one taking a chunk) and
		// cross-attention to a CrossKV, with a cancellable context.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		counts := []int{1, 5}
		held := c.Len(1)
		if n := testing.AllocsPerRun(allocRuns(), func() {
			if err := l.DecodeSeqs(ctx, y[:6*32], x[:6*32], c, counts, nil); err != nil {
				t.Fatal(err)
			}
			if err := c.Truncate(1, held); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: Layer.DecodeSeqs allocates %v times per call", e.Kernels(), n)
		}
		kv, err := l.NewCrossKV(x, 2, 20)
		if err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(allocRuns(), func() {
			if err := l.CrossContext(ctx, y[:2*3*32], x[:2*3*32], kv, 3, nil); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: Layer.Cross allocates %v times per call", e.Kernels(), n)
		}
	}
}

// TestNoAllocsAnyWorker: after the first call of a shape, calls allocate
// nothing whichever of the engine's workers pick up their items: each
// worker's scratch is reserved by that first call (before, a worker grew
// its scratch the first time it happened to run such an item, so calls
// on an 8-worker engine allocated long after the first).
func TestNoAllocsAnyWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("steady-state allocation counts: the full suite checks them")
	}
	rng := rand.New(rand.NewPCG(34, 8))
	e, err := NewEngine(Config{Threads: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s := Shape{Batch: 1, Heads: 1, QLen: 8, KVLen: 64, HeadDim: 32}                 // one work item
	dec := Shape{Batch: 1, Heads: 8, KVHeads: 2, QLen: 1, KVLen: 1500, HeadDim: 64} // split decode
	q, k, v, out := inputs(rng, s)
	dq, dk, dv, dout := inputs(rng, dec)
	l, _ := testLayer(t, e, rng, LayerConfig{DModel: 64, Heads: 4, KVHeads: 2, HeadDim: 16}, true)
	cache, err := l.NewCache(1, 300)
	if err != nil {
		t.Fatal(err)
	}
	// A decode step at a fixed context: 200 tokens, one more, rolled back.
	if err := l.Decode(make([]float32, 200*64), random(rng, 200*64), cache, 200, nil); err != nil {
		t.Fatal(err)
	}
	x, y := random(rng, 64), make([]float32, 64)
	opts := &Options{Causal: true}
	call := func() {
		if err := e.Attention(out, q, k, v, s, opts); err != nil {
			t.Fatal(err)
		}
		if err := e.Attention(dout, dq, dk, dv, dec, nil); err != nil {
			t.Fatal(err)
		}
		if err := l.Decode(y, x, cache, 1, nil); err != nil {
			t.Fatal(err)
		}
		if err := cache.Truncate(0, 200); err != nil {
			t.Fatal(err)
		}
	}
	call() // the first call of each shape
	// Every worker's scratch is sized now, also those that ran no item.
	want := e.pool.ws[0].Bytes()
	for i := range e.pool.ws {
		if got := e.pool.ws[i].Bytes(); got != want || got == 0 {
			t.Errorf("after the first call, worker %d holds %d bytes of scratch, worker 0 %d", i, got, want)
		}
	}
	// The Go runtime allocates now and then for itself (the m of an OS
	// thread it starts to wake a worker, more often under emulation):
	// libraryAllocs counts only what the library's code allocates.
	n, where := libraryAllocs(t, func() {
		for i := 0; i < 100; i++ {
			call()
		}
	})
	if n != 0 {
		t.Errorf("100 calls after the first on an 8-worker engine allocated %d objects in the library: %s", n, where)
	}
}

// TestNoAllocsConcurrent: after the first call of a shape, calls from
// several goroutines allocate nothing, whichever of the engine's workers
// run their items (each worker's scratch is reserved by that first call,
// not grown the first time the worker happens to run such an item).
func TestNoAllocsConcurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("steady-state allocation counts: the full suite checks them")
	}
	rng := rand.New(rand.NewPCG(34, 9))
	e, err := NewEngine(Config{Threads: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s := Shape{Batch: 1, Heads: 1, QLen: 8, KVLen: 64, HeadDim: 32}
	dec := Shape{Batch: 1, Heads: 8, KVHeads: 2, QLen: 1, KVLen: 3000, HeadDim: 64}
	l, _ := testLayer(t, e, rng, LayerConfig{DModel: 64, Heads: 4, KVHeads: 2, HeadDim: 16}, true)
	const goroutines, calls = 4, 25
	type state struct {
		q, k, v, out     []float32
		dq, dk, dv, dout []float32
		x, y             []float32
		cache            *Cache
	}
	st := make([]state, goroutines)
	for g := range st {
		st[g].q, st[g].k, st[g].v, st[g].out = inputs(rng, s)
		st[g].dq, st[g].dk, st[g].dv, st[g].dout = inputs(rng, dec)
		st[g].x, st[g].y = random(rng, 64), make([]float32, 64)
		if st[g].cache, err = l.NewCache(1, 2*calls+2); err != nil {
			t.Fatal(err)
		}
		if err := l.Decode(make([]float32, calls*64), random(rng, calls*64), st[g].cache, calls, nil); err != nil {
			t.Fatal(err)
		}
	}
	causal := &Options{Causal: true}
	call := func(g int) {
		c := &st[g]
		if err := e.Attention(c.out, c.q, c.k, c.v, s, causal); err != nil {
			t.Error(err)
		}
		if err := e.Attention(c.dout, c.dq, c.dk, c.dv, dec, nil); err != nil {
			t.Error(err)
		}
		if err := l.Decode(c.y, c.x, c.cache, 1, nil); err != nil {
			t.Error(err)
		}
		if err := c.cache.Truncate(0, calls); err != nil { // a fixed context
			t.Error(err)
		}
	}
	call(0) // the first call of each shape, on one goroutine
	// phase runs the calls from every goroutine at once and returns the
	// objects the library allocated, and where.
	phase := func() (int64, string) {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < calls; i++ {
					call(g)
				}
			}()
		}
		n, where := libraryAllocs(t, func() {
			close(start)
			wg.Wait()
		})
		return n, where
	}
	// A call's own buffers (its job, problem list, a layer's projections)
	// come from free lists: the first time more calls run at once than
	// before, each extra one allocates its set, so the first phase is only
	// logged. Nothing grows with the number of calls: a second phase at the
	// same concurrency finds the sets there (a few more only if its calls
	// happen to overlap more than the first's did).
	first, _ := phase()
	second, where := phase()
	t.Logf("%d calls from %d goroutines: %d library allocations, then %d", 3*goroutines*calls, goroutines, first, second)
	if bound := int64(16 * goroutines); second > bound {
		t.Errorf("%d calls from %d goroutines on a %d-worker engine allocated %d objects in the library after a first phase of %d (bound %d): %s",
			3*goroutines*calls, goroutines, e.Threads(), second, first, bound, where)
	}
}

// TestEngineNoAMX: Config.NoAMX gives an engine on the same set that runs
// no AMX tiles, on every CPU (where there are none, the set itself).
func TestEngineNoAMX(t *testing.T) {
	for _, ks := range kernels.Available() {
		e, err := NewEngine(Config{ISA: ks.Name, Threads: 1, NoAMX: true})
		if err != nil {
			t.Fatal(err)
		}
		if e.Kernels() != ks.Name || e.ks.AMX() {
			t.Errorf("%s with NoAMX: set %q, AMX %v", ks.Name, e.Kernels(), e.ks.AMX())
		}
		if !ks.AMX() && e.ks != ks {
			t.Errorf("%s has no AMX: NoAMX should keep the set", ks.Name)
		}
		e.Close()
	}
}
