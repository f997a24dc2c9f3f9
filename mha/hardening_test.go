package mha

import (
	"errors"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unsafe"
)

var _ io.Closer = (*Engine)(nil)

// noPanic runs f, failing the test on a panic or if it has not returned
// within a few seconds (a configuration that loops for ever).
func noPanic(t *testing.T, name string, f func() error) error {
	t.Helper()
	type result struct {
		err   error
		panic any
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{panic: p}
			}
		}()
		done <- result{err: f()}
	}()
	select {
	case r := <-done:
		if r.panic != nil {
			t.Fatalf("%s panicked: %v", name, r.panic)
		}
		return r.err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not return", name)
	}
	return nil
}

// huge returns 2^n, or math.MaxInt where int has no room for it (32-bit
// targets), so the absurd sizes below compile everywhere.
func huge(n uint) int {
	if n >= bits.UintSize-1 {
		return math.MaxInt
	}
	return 1 << n
}

// wantErr checks that err wraps want.
func wantErr(t *testing.T, name string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v, want %v", name, err, want)
	}
}

// TestAbsurdConfigurations: configurations that panicked or never returned
// are errors now.
func TestAbsurdConfigurations(t *testing.T) {
	for _, th := range []int{huge(62), MaxThreads + 1, -1} {
		_, err := NewEngine(Config{Threads: th})
		wantErr(t, "New threads", err, ErrOption)
	}
	e := engines[0]
	l, _ := testLayer(t, e, rand.New(rand.NewPCG(1, 1)), LayerConfig{DModel: 8, Heads: 2, HeadDim: 4}, false)
	for _, c := range []struct{ batch, capacity int }{{1, huge(50)}, {huge(40), huge(40)}, {huge(62), 4}, {4, math.MaxInt}} {
		err := noPanic(t, "NewCache", func() error { _, err := l.NewCache(c.batch, c.capacity); return err })
		wantErr(t, "NewCache", err, ErrShape)
	}
	small := make([]float32, 64)
	for _, cfg := range []LayerConfig{
		{DModel: 4, Heads: huge(32), HeadDim: huge(32)},         // Heads·HeadDim wraps to 0
		{DModel: 4, Heads: huge(33), HeadDim: huge(31) + 1},     // wraps to 2^33
		{DModel: 4, Heads: 2, KVHeads: 1, HeadDim: huge(62)},    // wraps with DModel
		{DModel: huge(40), Heads: 1, HeadDim: 1},                // packed panels beyond memory
		{DModel: 1 << 20, Heads: 1 << 20, HeadDim: 1 << 20},     // far beyond memory
		{DModel: 4, Heads: 3, HeadDim: 2, ValueDim: huge(61)},   // WO wraps
		{DModel: math.MaxInt, Heads: 1, HeadDim: 1},             // overflow with the panel padding
		{DModel: 4, Heads: math.MaxInt, KVHeads: 1, HeadDim: 1}, // overflow of Heads·HeadDim·DModel
	} {
		err := noPanic(t, "NewLayer", func() error {
			_, err := NewLayer(e, cfg, Weights{WQ: small, WK: small, WV: small, WO: small})
			return err
		})
		if !errors.Is(err, ErrShape) && !errors.Is(err, ErrBuffer) {
			t.Errorf("NewLayer(%+v): %v, want ErrShape or ErrBuffer", cfg, err)
		}
	}
	err := noPanic(t, "Forward huge", func() error { return l.Forward(small, small, huge(40), huge(40), nil) })
	wantErr(t, "Forward huge", err, ErrShape)
	forged := &Cache{layer: l, batch: huge(40), capa: huge(40), kvlens: make([]int, 1)}
	err = noPanic(t, "Decode huge", func() error { return l.Decode(small, small, forged, huge(40), nil) })
	if err == nil {
		t.Errorf("Decode of 2^40 tokens into a forged cache succeeded")
	}
}

// TestScratchBeyondMemory: a head dim whose per-worker scratch is more
// than the machine can allocate is an error, not a fatal out-of-memory
// (the limit is lowered here to make that testable).
func TestScratchBeyondMemory(t *testing.T) {
	saved := memoryLimit
	memoryLimit = 1 << 20
	defer func() { memoryLimit = saved }()
	s := Shape{Batch: 1, Heads: 1, QLen: 1, KVLen: 1, HeadDim: 8192}
	buf := make([]float32, 8192)
	err := engines[0].Attention(make([]float32, 8192), buf, buf, buf, s, nil)
	wantErr(t, "HeadDim 8192 with 1 MiB", err, ErrShape)
	l, _ := testLayer(t, engines[0], rand.New(rand.NewPCG(1, 2)), LayerConfig{DModel: 8, Heads: 2, HeadDim: 4}, false)
	_, err = l.NewCache(1, 1<<16)
	wantErr(t, "cache of 4 MiB with 1 MiB", err, ErrShape)
	// Projections of 4 × 512 KiB for an input of 512 KiB.
	x := make([]float32, 1<<17)
	wantErr(t, "Forward with 2 MiB of projections", l.Forward(make([]float32, 1<<17), x, 1, 1<<14, nil), ErrShape)
}

// TestNilAndZeroValues: methods of nil and zero-value Engines, Layers and
// Caches return ErrNil instead of dereferencing nil.
func TestNilAndZeroValues(t *testing.T) {
	s := Shape{Batch: 1, Heads: 1, QLen: 1, KVLen: 1, HeadDim: 1}
	one := []float32{1}
	for name, e := range map[string]*Engine{"nil": nil, "zero": {}} {
		wantErr(t, name+" Attention", noPanic(t, name, func() error { return e.Attention(one, one, one, one, s, nil) }), ErrNil)
		wantErr(t, name+" Close", noPanic(t, name, e.Close), ErrNil)
		if e.Kernels() != "" || e.Threads() != 0 {
			t.Errorf("%s engine: Kernels %q, Threads %d", name, e.Kernels(), e.Threads())
		}
		if name == "zero" {
			_, err := NewLayer(e, LayerConfig{DModel: 1, Heads: 1, HeadDim: 1}, Weights{WQ: one, WK: one, WV: one, WO: one})
			wantErr(t, "NewLayer on a zero Engine", err, ErrNil)
		}
	}
	for name, l := range map[string]*Layer{"nil": nil, "zero": {}} {
		wantErr(t, name+" Forward", noPanic(t, name, func() error { return l.Forward(one, one, 1, 1, nil) }), ErrNil)
		wantErr(t, name+" ForwardCross", noPanic(t, name, func() error { return l.ForwardCross(one, one, one, 1, 1, 1, nil) }), ErrNil)
		wantErr(t, name+" Decode", noPanic(t, name, func() error { return l.Decode(one, one, nil, 1, nil) }), ErrNil)
		wantErr(t, name+" NewCache", noPanic(t, name, func() error { _, err := l.NewCache(1, 1); return err }), ErrNil)
		wantErr(t, name+" DecodeSeqs", noPanic(t, name, func() error { return l.DecodeSeqs(nil, one, one, nil, []int{1}, nil) }), ErrNil) //nolint:staticcheck // a nil ctx must not panic either
		wantErr(t, name+" NewCrossKV", noPanic(t, name, func() error { _, err := l.NewCrossKV(one, 1, 1); return err }), ErrNil)
		wantErr(t, name+" Cross", noPanic(t, name, func() error { return l.Cross(one, one, nil, 1, nil) }), ErrNil)
		_ = l.Config()
	}
	l, _ := testLayer(t, engines[0], rand.New(rand.NewPCG(3, 4)), LayerConfig{DModel: 4, Heads: 1, HeadDim: 4}, false)
	for name, c := range map[string]*Cache{"nil": nil, "zero": {}} {
		wantErr(t, name+" cache Decode", noPanic(t, name, func() error { return l.Decode(make([]float32, 4), make([]float32, 4), c, 1, nil) }), ErrNil)
		wantErr(t, name+" cache Reset", noPanic(t, name, func() error { return c.Reset(0) }), ErrNil)
		wantErr(t, name+" cache ResetAll", noPanic(t, name, func() error { return c.ResetAll() }), ErrNil)
		wantErr(t, name+" cache Truncate", noPanic(t, name, func() error { return c.Truncate(0, 0) }), ErrNil)
		if c.Len(0) != 0 || c.Cap() != 0 || c.Batch() != 0 || len(c.Lens(nil)) != 0 {
			t.Errorf("%s cache: Len %d Cap %d Batch %d Lens %v", name, c.Len(0), c.Cap(), c.Batch(), c.Lens(nil))
		}
	}
}

// TestDefaultEngineUnclosable: closing the Default engine does nothing, so
// the package-level Attention keeps working; other engines close once and
// then return ErrClosed.
func TestDefaultEngineUnclosable(t *testing.T) {
	d, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Default().Close() = %v, want nil", err)
	}
	s := Shape{Batch: 1, Heads: 1, QLen: 2, KVLen: 3, HeadDim: 4}
	q, k, v, out := inputs(rand.New(rand.NewPCG(5, 6)), s)
	if err := Attention(out, q, k, v, s, nil); err != nil {
		t.Fatalf("Attention after Default().Close(): %v", err)
	}
	e, _ := NewEngine(Config{Threads: 1})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	wantErr(t, "closed engine", e.Attention(out, q, k, v, s, nil), ErrClosed)
}

// TestClosedEngineRefusedAtMaking: a closed engine is refused where things
// are made — NewLayer, NewMLALayer, NewCache, NewCacheOf, NewCrossKV — and
// by every call of a layer made before the Close, not first at a Decode.
func TestClosedEngineRefusedAtMaking(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 3))
	e, err := NewEngine(Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := LayerConfig{DModel: 16, Heads: 2, KVHeads: 1, HeadDim: 8}
	l, w := testLayer(t, e, rng, cfg, false)
	c, err := l.NewCache(1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := NewLayer(e, cfg, w)
	wantErr(t, "NewLayer on a closed engine", err, ErrClosed)
	if l2 != nil {
		t.Error("NewLayer on a closed engine returned a layer")
	}
	_, err = NewMLALayer(e, MLAConfig{}, MLAWeights{})
	wantErr(t, "NewMLALayer on a closed engine", err, ErrClosed)
	_, err = l.NewCache(1, 4)
	wantErr(t, "NewCache of a closed engine's layer", err, ErrClosed)
	_, err = l.NewCacheOf(1, 4, BFloat16)
	wantErr(t, "NewCacheOf of a closed engine's layer", err, ErrClosed)
	x := random(rng, 16)
	_, err = l.NewCrossKV(x, 1, 1)
	wantErr(t, "NewCrossKV of a closed engine's layer", err, ErrClosed)
	wantErr(t, "Forward of a closed engine's layer", l.Forward(make([]float32, 16), x, 1, 1, nil), ErrClosed)
	wantErr(t, "Decode of a closed engine's layer", l.Decode(make([]float32, 16), x, c, 1, nil), ErrClosed)
}

// TestScaleAndSoftcapRange: an absurd Scale or a Softcap whose inverse
// overflows is rejected; the extremes of the accepted ranges agree with
// the oracle on every set.
func TestScaleAndSoftcapRange(t *testing.T) {
	s := Shape{Batch: 1, Heads: 2, QLen: 5, KVLen: 40, HeadDim: 16}
	q, k, v, out := inputs(rand.New(rand.NewPCG(7, 8)), s)
	for _, o := range []Options{{Scale: 3e38}, {Scale: MaxScale * 1.0001}, {Softcap: 1e-39}, {Softcap: 1e-45},
		{Softcap: float32(math.Inf(1))}, {Scale: float32(math.NaN())}} {
		wantErr(t, "options", engines[0].Attention(out, q, k, v, s, &o), ErrOption)
	}
	for _, o := range []Options{{Softcap: MinSoftcap}, {Softcap: math.MaxFloat32}, {Softcap: MinSoftcap, Causal: true, Scale: 1e-3}} {
		checkInputs(t, s, o, q, k, v)
	}
	// A large scale on small queries, so the float32 scores stay O(10)
	// and the oracle's tolerance holds.
	for i := range q {
		q[i] *= 1e-5
	}
	for _, o := range []Options{{Scale: MaxScale}, {Softcap: 3, Scale: MaxScale}, {Softcap: 1e6, Scale: 1e4}} {
		checkInputs(t, s, o, q, k, v)
	}
}

// TestOverlap: an output that shares memory with an input or with the
// other output is ErrBuffer; disjoint parts of one arena are fine.
func TestOverlap(t *testing.T) {
	s := Shape{Batch: 1, Heads: 2, QLen: 4, KVLen: 6, HeadDim: 8}
	nq, nk, no, nl := 2*4*8, 6*2*8, 2*4*8, 2*4
	arena := make([]float32, nq+2*nk+no+nl+4*6)
	q, k, v := arena[:nq], arena[nq:nq+nk], arena[nq+nk:nq+2*nk]
	out := arena[nq+2*nk : nq+2*nk+no]
	lse := arena[nq+2*nk+no : nq+2*nk+no+nl]
	bias := arena[nq+2*nk+no+nl:]
	rng := rand.New(rand.NewPCG(11, 12))
	copy(q, random(rng, nq))
	copy(k, random(rng, nk))
	copy(v, random(rng, nk))
	e := engines[0]
	if err := e.Attention(out, q, k, v, s, &Options{OutLSE: lse, Bias: bias}); err != nil {
		t.Fatalf("disjoint parts of one arena: %v", err)
	}
	if err := e.Attention(out, arena, k, v, s, nil); !errors.Is(err, ErrBuffer) || !strings.Contains(err.Error(), "q has") {
		t.Fatalf("q longer than the shape needs: %v, want ErrBuffer naming q", err)
	}
	for name, c := range map[string]struct {
		out, q, k, v, lse, bias []float32
	}{
		"out = k":          {k, q, k, v, nil, nil},
		"out inside v":     {arena[nq+nk+3:], q, k, v, nil, nil},
		"out over q's end": {arena[nq-1:], q, k, v, nil, nil},
		"lse in out":       {out, q, k, v, out[5:], nil},
		"lse in q":         {out, q, k, v, q, nil},
		"out in bias":      {bias, q, k, v, nil, bias},
	} {
		wantErr(t, name, e.Attention(c.out, c.q, c.k, c.v, s, &Options{OutLSE: c.lse, Bias: c.bias}), ErrBuffer)
	}
	// KVLens is an input too: an out over its memory (reachable only
	// through unsafe) is refused.
	ints := make([]int, (no*4+7)/8)
	outOver := unsafe.Slice((*float32)(unsafe.Pointer(&ints[0])), no)
	lens := ints[len(ints)-1:]
	lens[0] = 3
	wantErr(t, "out over KVLens", e.Attention(outOver, q, k, v, s, &Options{KVLens: lens}), ErrBuffer)
	l, _ := testLayer(t, e, rng, LayerConfig{DModel: 8, Heads: 2, HeadDim: 4}, false)
	x := random(rng, 2*3*8)
	wantErr(t, "layer out = x", l.Forward(x, x, 2, 3, nil), ErrBuffer)
	wantErr(t, "layer out in xkv", l.ForwardCross(x[8:], random(rng, 8), x, 1, 1, 3, nil), ErrBuffer)
	c, _ := l.NewCache(1, 4)
	wantErr(t, "decode out = cache.K", l.Decode(c.K[:8], x[:8], c, 1, nil), ErrBuffer)
	wantErr(t, "decode x = cache.V", l.Decode(make([]float32, 8), c.V[:8], c, 1, nil), ErrBuffer)
	if c.Len(0) != 0 {
		t.Fatalf("a refused Decode changed the cache: Len %d", c.Len(0))
	}
}

// TestDecodePoisonedCache: a Decode step reads nothing of the cache that
// its rows do not see — neither the slots past the cached length nor,
// with a window, the tokens that fell out of it — even when they hold NaN
// and Inf.
func TestDecodePoisonedCache(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, e := range engines {
		cfg := LayerConfig{DModel: 32, Heads: 4, KVHeads: 2, HeadDim: 8}
		l, _ := testLayer(t, e, rng, cfg, true)
		const B, prompt, window = 2, 150, 20
		clean, _ := l.NewCache(B, 256)
		dirty, _ := l.NewCache(B, 256)
		for i := range dirty.K {
			dirty.K[i], dirty.V[i] = poison[i%3], poison[(i+1)%3]
		}
		x := random(rng, B*prompt*cfg.DModel)
		opts := &Options{Window: window}
		out := make([]float32, len(x))
		for _, c := range []*Cache{clean, dirty} {
			if err := l.Decode(out, x, c, prompt, opts); err != nil {
				t.Fatal(err)
			}
		}
		// Poison what the window no longer sees.
		// The cache is [B][KVHeads][256][HeadDim].
		for bg := 0; bg < B*cfg.KVHeads; bg++ {
			at, n := bg*256*cfg.HeadDim, (prompt-window)*cfg.HeadDim
			fill(dirty.K[at:at+n], nan32)
			fill(dirty.V[at:at+n], inf32)
		}
		tok := random(rng, B*cfg.DModel)
		want, got := make([]float32, len(tok)), make([]float32, len(tok))
		if err := l.Decode(want, tok, clean, 1, opts); err != nil {
			t.Fatal(err)
		}
		if err := l.Decode(got, tok, dirty, 1, opts); err != nil {
			t.Fatal(err)
		}
		w := make([]float64, len(want))
		for i, x := range want {
			w[i] = float64(x)
		}
		compare(t, e.Kernels()+" poisoned cache", got, w, 1e-6, &worstLayer)
	}
}
