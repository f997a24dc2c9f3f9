package mha

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
)

// seqHistory is one sequence's tokens fed so far (what its cache holds).
type seqHistory [][]float32

// flat returns the history as [len][DModel].
func (h seqHistory) flat() []float32 {
	var x []float32
	for _, t := range h {
		x = append(x, t...)
	}
	return x
}

// checkLastRows runs Forward with Causal (and opts) over each stepping
// sequence's whole history and compares its last counts[b] output rows
// with got, the packed output of a DecodeSeqs call.
func checkLastRows(t *testing.T, what string, l *Layer, hist []seqHistory, counts []int, got []float32, opts Options) {
	t.Helper()
	dm := l.Config().DModel
	opts.Causal = true
	row := 0
	for b, n := range counts {
		if n == 0 {
			continue
		}
		L := len(hist[b])
		full := make([]float32, L*dm)
		if err := l.Forward(full, hist[b].flat(), 1, L, &opts); err != nil {
			t.Fatal(err)
		}
		want := make([]float64, n*dm)
		for i := range want {
			want[i] = float64(full[(L-n)*dm+i])
		}
		compare(t, what, got[row*dm:(row+n)*dm], want, 1e-5, &worstLayer)
		row += n
	}
}

// TestDecodeSeqs: a ragged batch where sequences join, take prompts in
// chunks, decode a token at a time, sit steps out, roll back and restart;
// every call's output rows equal Forward over that sequence's history.
func TestDecodeSeqs(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	plain := LayerConfig{DModel: 32, Heads: 4, KVHeads: 2, HeadDim: 8}
	rotary := plain // with QK-norm: Qwen3's layer
	rotary.Rotary = Rotary{Dims: 8, Base: 1e6}
	slopes, _ := ALiBiSlopes(plain.Heads, 0)
	for _, tc := range []struct {
		cfg  LayerConfig
		opts Options
	}{{plain, Options{}}, {plain, Options{ALiBi: slopes, Sinks: random(rng, plain.Heads), Window: 150}},
		{rotary, Options{}}, {rotary, Options{Window: 120, Sinks: random(rng, plain.Heads)}}} {
		cfg, opts := tc.cfg, tc.opts
		for _, typ := range []DType{Float32, BFloat16} {
			for _, e := range engines {
				l, w := testLayer(t, e, rng, cfg, true)
				if cfg.Rotary.Dims > 0 {
					w.QNorm, w.KNorm = random(rng, cfg.HeadDim), random(rng, cfg.HeadDim)
					var err error
					if l, err = NewLayer(e, cfg, w); err != nil {
						t.Fatal(err)
					}
				}
				dm := cfg.DModel
				const B, capa = 4, 300
				cache, err := l.NewCacheOf(B, capa, typ)
				if err != nil {
					t.Fatal(err)
				}
				hist := make([]seqHistory, B)
				// rounding makes a 16-bit cache differ from Forward's float32
				// K/V; compare those against a float32 cache run instead.
				ref, _ := l.NewCache(B, capa)
				schedule := [][]int{
					{5, 0, 0, 0}, {1, 140, 0, 0}, {1, 1, 3, 0}, {1, 1, 1, 200}, {0, 1, 1, 1},
					{2, 0, 70, 1}, {1, 1, 1, 1},
				}
				for step, counts := range schedule {
					total := 0
					for _, n := range counts {
						total += n
					}
					x := random(rng, total*dm)
					for b, row := 0, 0; b < B; b++ {
						for i := 0; i < counts[b]; i++ {
							hist[b] = append(hist[b], x[(row+i)*dm:(row+i+1)*dm])
						}
						row += counts[b]
					}
					out := make([]float32, total*dm)
					o := opts
					lse := make([]float32, total*cfg.Heads)
					o.OutLSE = lse
					if err := l.DecodeSeqs(context.Background(), out, x, cache, counts, &o); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
					if typ == Float32 {
						checkLastRows(t, e.Kernels()+" ragged decode", l, hist, counts, out, opts)
					} else {
						want := make([]float32, total*dm)
						if err := l.DecodeSeqs(context.Background(), want, x, ref, counts, &opts); err != nil {
							t.Fatal(err)
						}
						checkClose(t, e.Kernels()+" ragged bf16 vs f32", out, want, 0.05)
					}
					for b := range counts {
						if cache.Len(b) != len(hist[b]) {
							t.Fatalf("step %d: sequence %d holds %d tokens, want %d", step, b, cache.Len(b), len(hist[b]))
						}
					}
					if step == 3 { // roll sequence 1 back, restart sequence 2
						if err := cache.Truncate(1, 100); err != nil {
							t.Fatal(err)
						}
						hist[1] = hist[1][:100]
						if err := cache.Reset(2); err != nil {
							t.Fatal(err)
						}
						hist[2] = nil
						if typ != Float32 {
							_ = ref.Truncate(1, 100)
							_ = ref.Reset(2)
						}
					}
				}
			}
		}
	}
}

// checkClose compares two float32 outputs within an absolute tolerance.
func checkClose(t *testing.T, what string, got, want []float32, tol float32) {
	t.Helper()
	for i := range got {
		if d := got[i] - want[i]; !(d <= tol && d >= -tol) {
			t.Fatalf("%s: [%d] = %v, want %v ± %v", what, i, got[i], want[i], tol)
		}
	}
}

// TestDecodeSeqsErrors: what a ragged call refuses, and that a refused call
// changes no sequence.
func TestDecodeSeqsErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	l, _ := testLayer(t, engines[0], rng, LayerConfig{DModel: 8, Heads: 2, HeadDim: 4}, false)
	c, _ := l.NewCache(3, 10)
	ctx := context.Background()
	if err := l.DecodeSeqs(ctx, make([]float32, 12*8), random(rng, 12*8), c, []int{4, 0, 8}, nil); err != nil {
		t.Fatal(err)
	}
	before := c.Lens(nil)
	for _, tc := range []struct {
		name   string
		counts []int
		opts   *Options
		want   error
	}{
		{"one sequence full", []int{1, 1, 3}, nil, ErrCacheFull},
		{"counts length", []int{1, 1}, nil, ErrBuffer},
		{"negative count", []int{1, -1, 1}, nil, ErrShape},
		{"KVLens set", []int{1, 1, 1}, &Options{KVLens: []int{1, 1, 1}}, ErrOption},
		{"short LSE", []int{1, 1, 1}, &Options{OutLSE: make([]float32, 5)}, ErrBuffer},
	} {
		n := 0
		for _, k := range tc.counts {
			n += max(k, 0)
		}
		err := l.DecodeSeqs(ctx, make([]float32, n*8), random(rng, n*8), c, tc.counts, tc.opts)
		wantErr(t, tc.name, err, tc.want)
		if got := c.Lens(nil); got[0] != before[0] || got[1] != before[1] || got[2] != before[2] {
			t.Fatalf("%s changed the lengths: %v, were %v", tc.name, got, before)
		}
	}
	wantErr(t, "short x", l.DecodeSeqs(ctx, make([]float32, 16), make([]float32, 15), c, []int{1, 0, 1}, nil), ErrBuffer)
	wantErr(t, "truncate up", c.Truncate(0, 5), ErrOption)
	wantErr(t, "truncate negative", c.Truncate(0, -1), ErrOption)
	wantErr(t, "truncate seq", c.Truncate(3, 0), ErrOption)
	wantErr(t, "reset seq", c.Reset(-1), ErrOption)
	//lint:ignore SA1012 a nil context is Background, not a panic
	if err := l.DecodeSeqs(nil, make([]float32, 8), random(rng, 8), c, []int{0, 1, 0}, nil); err != nil || c.Len(1) != 1 {
		t.Fatalf("a nil context: %v, lengths %v", err, c.Lens(nil))
	}
	if err := l.DecodeSeqs(ctx, nil, nil, c, []int{0, 0, 0}, nil); err != nil {
		t.Fatalf("an empty step: %v", err)
	}
	if err := c.ResetAll(); err != nil || c.Len(0)+c.Len(1)+c.Len(2) != 0 {
		t.Fatalf("ResetAll: %v, lengths %v", err, c.Lens(nil))
	}
}

// TestConcurrentCacheMisuse: two goroutines decoding into one Cache get
// ErrBusy for the calls that collide; no token is lost silently.
func TestConcurrentCacheMisuse(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	l, _ := testLayer(t, engines[0], rng, LayerConfig{DModel: 16, Heads: 2, HeadDim: 8}, false)
	const calls = 100
	c, _ := l.NewCache(1, 2*calls)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, busy := 0, 0
	for g := 0; g < 2; g++ {
		x := random(rng, 16)
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]float32, 16)
			for i := 0; i < calls; i++ {
				err := l.Decode(out, x, c, 1, nil)
				mu.Lock()
				switch {
				case err == nil:
					ok++
				case errors.Is(err, ErrBusy):
					busy++
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ok+busy != 2*calls || c.Len(0) != ok {
		t.Fatalf("%d calls succeeded, %d were busy; the cache holds %d tokens", ok, busy, c.Len(0))
	}
	t.Logf("%d succeeded, %d refused as busy", ok, busy)
}

// doneCtx is a context whose Done channel is closed but whose Err is nil
// until Done has been looked at: it cancels a call after its entry check,
// deterministically, before its first work item.
type doneCtx struct {
	context.Context
	seen bool
}

func (c *doneCtx) Done() <-chan struct{} {
	c.seen = true
	ch := make(chan struct{})
	close(ch)
	return ch
}

func (c *doneCtx) Err() error {
	if c.seen {
		return context.Canceled
	}
	return nil
}

// TestCancel: a call whose context is done before it starts, or while it
// runs, returns the context's error; a cancelled Decode leaves the cache
// as it was, and the next Decode gives the right result.
func TestCancel(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	cfg := LayerConfig{DModel: 32, Heads: 4, KVHeads: 2, HeadDim: 8}
	for _, e := range engines {
		l, _ := testLayer(t, e, rng, cfg, true)
		dead, cancel := context.WithCancel(context.Background())
		cancel()
		s := Shape{Batch: 1, Heads: 4, QLen: 300, KVLen: 300, HeadDim: 8}
		q, k, v, out := inputs(rng, s)
		for name, ctx := range map[string]func() context.Context{
			"before": func() context.Context { return dead },
			"during": func() context.Context { return &doneCtx{Context: context.Background()} },
		} {
			wantErr(t, name+" attention", e.AttentionContext(ctx(), out, q, k, v, s, nil), context.Canceled)
			x := random(rng, 2*300*32)
			y := make([]float32, len(x))
			wantErr(t, name+" forward", l.ForwardContext(ctx(), y, x, 2, 300, nil), context.Canceled)
			wantErr(t, name+" cross", l.ForwardCrossContext(ctx(), y[:32], x[:32], x[:300*32], 1, 1, 300, nil), context.Canceled)
			c, _ := l.NewCache(2, 300)
			hist := make([]seqHistory, 2)
			for i, counts := range [][]int{{100, 3}, {1, 1}, {0, 150}} {
				total := counts[0] + counts[1]
				xs, ys := random(rng, total*32), make([]float32, total*32)
				wantErr(t, name+" decode", l.DecodeSeqs(ctx(), ys, xs, c, counts, nil), context.Canceled)
				if i > 0 {
					wantErr(t, name+" uniform decode", l.DecodeContext(ctx(), ys[:64], xs[:64], c, 1, nil), context.Canceled)
				}
				if got := c.Lens(nil); got[0] != len(hist[0]) || got[1] != len(hist[1]) {
					t.Fatalf("%s: a cancelled decode changed the lengths to %v", name, got)
				}
				if err := l.DecodeSeqs(context.Background(), ys, xs, c, counts, nil); err != nil {
					t.Fatal(err)
				}
				hist[0] = append(hist[0], split(xs[:counts[0]*32], 32)...)
				hist[1] = append(hist[1], split(xs[counts[0]*32:], 32)...)
				checkLastRows(t, e.Kernels()+" decode after a cancel", l, hist, counts, ys, Options{})
			}
		}
	}
}

// split cuts x into rows of n.
func split(x []float32, n int) [][]float32 {
	var rows [][]float32
	for i := 0; i+n <= len(x); i += n {
		rows = append(rows, x[i:i+n])
	}
	return rows
}
