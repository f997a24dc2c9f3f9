package main

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sort"
	"time"

	"github.com/fastattn/fastattn/mha"
)

// ServingRow is one measurement of the serving layer (-serving): a ragged
// decode step against a uniform one with the same K/V bytes, the cost of
// rotary embeddings and QK-norm in a layer call, or how soon a cancelled
// call returns.
type ServingRow struct {
	Kind     string  `json:"kind"` // "serving"
	ISA      string  `json:"isa"`
	Test     string  `json:"test"` // "ragged decode", "rope+qknorm decode", "rope+qknorm forward", "cancel"
	Shape    string  `json:"shape"`
	Threads  int     `json:"threads"`
	MedianMs float64 `json:"median_ms"`          // the measured call (ragged, rope, or the cancelled call's latency)
	RefMs    float64 `json:"ref_ms,omitempty"`   // the reference call (uniform, plain)
	GBs      float64 `json:"gb_per_s,omitempty"` // decode: K+V read by the measured call
	RefGBs   float64 `json:"ref_gb_per_s,omitempty"`
	PctBW    float64 `json:"pct_bandwidth,omitempty"`
	Ratio    float64 `json:"ratio"` // ragged GB/s / uniform GB/s; rope ms / plain ms; cancel: latency ms
}

// servingShapes are the rows' sizes: the issue's, or small ones (-quick).
type servingShapes struct {
	decode      decodeModel // ragged vs uniform
	layer       decodeModel // rope+qknorm decode step
	ctx         int         // its context length
	forwardL    int         // rope+qknorm forward length
	cancelL     int         // tokens of the cancelled prefill
	cancelLayer decodeModel
	cancelAfter []time.Duration
}

// decodeModel is a layer's shape.
type decodeModel struct{ dm, h, hkv, d int }

func (m decodeModel) String() string {
	return fmt.Sprintf("dm=%d,H=%d,Hkv=%d,D=%d", m.dm, m.h, m.hkv, m.d)
}

func (cfg *config) servingShapes() servingShapes {
	if cfg.quick {
		return servingShapes{decode: decodeModel{64, 8, 2, 64}, layer: decodeModel{256, 4, 2, 64}, ctx: 512,
			forwardL: 128, cancelL: 4096, cancelLayer: decodeModel{256, 4, 2, 64}, cancelAfter: []time.Duration{20 * time.Millisecond}}
	}
	return servingShapes{decode: decodeModel{128, 32, 8, 128}, layer: decodeModel{4096, 32, 8, 128}, ctx: 4096,
		forwardL: 512, cancelL: 32768, cancelLayer: decodeModel{4096, 32, 8, 128},
		cancelAfter: []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, 1000 * time.Millisecond}}
}

// newModelLayer returns a layer of shape m, with rotary embeddings and
// QK-norm (Qwen3's) when rope.
func newModelLayer(e *mha.Engine, m decodeModel, rope bool) (*mha.Layer, error) {
	cfg := mha.LayerConfig{DModel: m.dm, Heads: m.h, KVHeads: m.hkv, HeadDim: m.d}
	in := float32(1 / math.Sqrt(float64(m.dm))) // a trained layer's scale: activations stay O(1)
	w := mha.Weights{WQ: noise(m.dm*m.h*m.d, 1, in), WK: noise(m.dm*m.hkv*m.d, 2, in), WV: noise(m.dm*m.hkv*m.d, 3, in),
		WO: noise(m.h*m.d*m.dm, 4, float32(1/math.Sqrt(float64(m.h*m.d))))}
	if rope {
		cfg.Rotary = mha.Rotary{Dims: m.d, Base: 1e6}
		w.QNorm, w.KNorm = noise(m.d, 5, 1), noise(m.d, 6, 1)
		for i := range w.QNorm {
			w.QNorm[i] += 1.5
			w.KNorm[i] += 1.5
		}
	}
	return mha.NewLayer(e, cfg, w)
}

// noise returns n pseudo-random values from seed, uniform with standard
// deviation amp: realistic data, where fill's short period would give the
// softmax an unusual pattern.
func noise(n int, seed uint64, amp float32) []float32 {
	x := make([]float32, n)
	st := seed*0x9E3779B97F4A7C15 | 1
	for i := range x {
		st ^= st << 13
		st ^= st >> 7
		st ^= st << 17
		x[i] = (float32(st>>40)/(1<<24)*2 - 1) * amp * 1.7320508
	}
	return x
}

// filledCache returns a cache of layer l, K/V stored as t, holding
// lens[b] tokens in sequence b, room for one more. It is filled with a
// window of 1, so the prefill costs little attention.
func filledCache(l *mha.Layer, lens []int, t mha.DType) (*mha.Cache, error) {
	capa := 0
	for _, n := range lens {
		capa = max(capa, n+1)
	}
	c, err := l.NewCacheOf(len(lens), capa, t)
	if err != nil {
		return nil, err
	}
	dm := l.Config().DModel
	const chunk = 1024
	counts := make([]int, len(lens))
	for done := false; !done; {
		done, total := true, 0
		for b, n := range lens {
			counts[b] = min(chunk, n-c.Len(b))
			total += counts[b]
			done = done && counts[b] == 0
		}
		if done {
			break
		}
		x := noise(total*dm, 7, 1)
		if err := l.DecodeSeqs(context.Background(), make([]float32, total*dm), x, c, counts, &mha.Options{Window: 1}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// stepper returns a decode step of one token per sequence that leaves the
// cache as it found it (Truncate after each step).
func stepper(l *mha.Layer, c *mha.Cache, threads int) func() error {
	return stepperWith(l, c, &mha.Options{Threads: threads})
}

// stepperWith is stepper with the step's options.
func stepperWith(l *mha.Layer, c *mha.Cache, opts *mha.Options) func() error {
	b, dm := c.Batch(), l.Config().DModel
	x, y := noise(b*dm, 8, 1), make([]float32, b*dm)
	lens := c.Lens(nil)
	return func() error {
		if err := l.Decode(y, x, c, 1, opts); err != nil {
			return err
		}
		for s, n := range lens {
			if err := c.Truncate(s, n); err != nil {
				return err
			}
		}
		return nil
	}
}

// interleaved times a and b alternately until minTime has passed (at
// least 5 each, after a warm-up), so drifts in the machine's speed hit
// both alike, and returns their medians.
func interleaved(a, b func() error, minTime time.Duration) (da, db time.Duration, err error) {
	if err := a(); err != nil {
		return 0, 0, err
	}
	if err := b(); err != nil {
		return 0, 0, err
	}
	var ta, tb []time.Duration
	start := time.Now()
	for len(ta) < 5 || time.Since(start) < minTime {
		for _, f := range []struct {
			f func() error
			t *[]time.Duration
		}{{a, &ta}, {b, &tb}} {
			t0 := time.Now()
			if err := f.f(); err != nil {
				return 0, 0, err
			}
			*f.t = append(*f.t, time.Since(t0))
		}
	}
	return median(ta), median(tb), nil
}

func median(ts []time.Duration) time.Duration {
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	return ts[len(ts)/2]
}

// measureServing runs every serving row of one kernel set and thread
// count.
func measureServing(cfg *config, e *mha.Engine, isa string, threads int, m Machine, emit func(ServingRow)) error {
	sh := cfg.servingShapes()
	// Ragged: 8 sequences with lengths spread evenly over [1, ctx];
	// uniform: 8 of their mean length, the same K/V bytes.
	l, err := newModelLayer(e, sh.decode, false)
	if err != nil {
		return err
	}
	ragged, uniform := make([]int, 8), make([]int, 8)
	total := 0
	for b := range ragged {
		ragged[b] = 1 + b*(sh.ctx-1)/7
		total += ragged[b]
	}
	for b := range uniform {
		uniform[b] = total / 8
	}
	cr, err := filledCache(l, ragged, mha.Float32)
	if err != nil {
		return err
	}
	cu, err := filledCache(l, uniform, mha.Float32)
	if err != nil {
		return err
	}
	dr, du, err := interleaved(stepper(l, cr, threads), stepper(l, cu, threads), cfg.minTime)
	if err != nil {
		return err
	}
	kvBytes := func(lens []int) float64 {
		n := 0
		for _, x := range lens {
			n += x + 1
		}
		return float64(n) * float64(sh.decode.hkv*sh.decode.d) * 4 * 2
	}
	gr, gu := kvBytes(ragged)/dr.Seconds()/1e9, kvBytes(uniform)/du.Seconds()/1e9
	emit(ServingRow{Kind: "serving", ISA: isa, Test: "ragged decode", Threads: threads,
		Shape:    fmt.Sprintf("%v B=8 lens %d..%d vs %d", sh.decode, ragged[0], ragged[7], uniform[0]),
		MedianMs: ms(dr), RefMs: ms(du), GBs: gr, RefGBs: gu, PctBW: 100 * gr / m.ReadBW(cfg.bwBuf, threads), Ratio: gr / gu})
	cr, cu = nil, nil

	// Rotary + QK-norm: a decode step at ctx and a forward of forwardL.
	plain, err := newModelLayer(e, sh.layer, false)
	if err != nil {
		return err
	}
	rope, err := newModelLayer(e, sh.layer, true)
	if err != nil {
		return err
	}
	cp, err := filledCache(plain, []int{sh.ctx}, mha.Float32)
	if err != nil {
		return err
	}
	cq, err := filledCache(rope, []int{sh.ctx}, mha.Float32)
	if err != nil {
		return err
	}
	dq, dp, err := interleaved(stepper(rope, cq, threads), stepper(plain, cp, threads), cfg.minTime)
	if err != nil {
		return err
	}
	emit(ServingRow{Kind: "serving", ISA: isa, Test: "rope+qknorm decode", Threads: threads,
		Shape: fmt.Sprintf("%v ctx=%d", sh.layer, sh.ctx), MedianMs: ms(dq), RefMs: ms(dp), Ratio: dq.Seconds() / dp.Seconds()})
	cq = nil

	// An int8 cache against the float32 one: the same step, K/V bytes
	// (scales included) 0.28 of f32's at D = 128; Ratio is int8's time over
	// f32's.
	c8, err := filledCache(plain, []int{sh.ctx}, mha.Int8)
	if err != nil {
		return err
	}
	d8, d32, err := interleaved(stepper(plain, c8, threads), stepper(plain, cp, threads), cfg.minTime)
	if err != nil {
		return err
	}
	kv8 := float64(len(c8.K8)+len(c8.V8)) + 4*float64(len(c8.KScale)+len(c8.VScale))
	emit(ServingRow{Kind: "serving", ISA: isa, Test: "int8 cache decode", Threads: threads,
		Shape:    fmt.Sprintf("%v ctx=%d K/V bytes %.2f× f32's", sh.layer, sh.ctx, kv8/(4*float64(len(cp.K)+len(cp.V)))),
		MedianMs: ms(d8), RefMs: ms(d32), Ratio: d8.Seconds() / d32.Seconds()})
	cp, c8 = nil, nil
	x := noise(sh.forwardL*sh.layer.dm, 9, 1)
	y := make([]float32, len(x))
	opts := &mha.Options{Causal: true, Threads: threads}
	// A few percent between two calls of ~0.3 s: more pairs than the
	// other rows, for a median the machine's noise moves less.
	dq, dp, err = interleaved(func() error { return rope.Forward(y, x, 1, sh.forwardL, opts) },
		func() error { return plain.Forward(y, x, 1, sh.forwardL, opts) }, 4*cfg.minTime)
	if err != nil {
		return err
	}
	emit(ServingRow{Kind: "serving", ISA: isa, Test: "rope+qknorm forward", Threads: threads,
		Shape: fmt.Sprintf("%v L=%d", sh.layer, sh.forwardL), MedianMs: ms(dq), RefMs: ms(dp), Ratio: dq.Seconds() / dp.Seconds()})

	// Cancellation: a long prefill (the layer, and attention alone) is
	// cancelled after each delay; the row gives the worst latency from
	// cancel() to the call's return.
	return measureCancel(sh, e, isa, threads, emit)
}

// measureCancel times how soon cancelled long calls return.
func measureCancel(sh servingShapes, e *mha.Engine, isa string, threads int, emit func(ServingRow)) error {
	m, L := sh.cancelLayer, sh.cancelL
	l, err := newModelLayer(e, m, true)
	if err != nil {
		return err
	}
	x := noise(L*m.dm, 10, 1)
	y := make([]float32, len(x))
	opts := &mha.Options{Causal: true, Threads: threads}
	shape := mha.Shape{Batch: 1, Heads: m.h, KVHeads: m.hkv, QLen: L, KVLen: L, HeadDim: m.d}
	q, k, v := fill(L*m.h*m.d), fill(L*m.hkv*m.d), fill(L*m.hkv*m.d)
	o := make([]float32, len(q))
	for _, c := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{fmt.Sprintf("layer forward %v L=%d", m, L), func(ctx context.Context) error { return l.ForwardContext(ctx, y, x, 1, L, opts) }},
		{fmt.Sprintf("attention %d,%d,%d,%d,%d,%d causal", 1, m.h, m.hkv, L, L, m.d), func(ctx context.Context) error {
			return e.AttentionContext(ctx, o, q, k, v, shape, opts)
		}},
	} {
		// A first call allocates the call's scratch (not interruptible:
		// it is before any work item); cancel one early so the timed ones
		// find it, and collect the garbage of the rows before.
		warm, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		if err := c.call(warm); err != nil && err != context.DeadlineExceeded {
			cancel()
			return err
		}
		cancel()
		runtime.GC()
		worst := time.Duration(0)
		for _, after := range sh.cancelAfter {
			for rep := 0; rep < 3; rep++ {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- c.call(ctx) }()
				time.Sleep(after)
				t0 := time.Now()
				cancel()
				err := <-done
				lat := time.Since(t0)
				if err == nil {
					continue // finished before the cancel: nothing to time
				}
				if err != context.Canceled {
					return err
				}
				worst = max(worst, lat)
			}
		}
		emit(ServingRow{Kind: "serving", ISA: isa, Test: "cancel", Shape: c.name, Threads: threads,
			MedianMs: ms(worst), Ratio: ms(worst)})
	}
	return nil
}

// servingRow prints one serving row.
func (p *printer) servingRow(r ServingRow) {
	if p.json {
		p.enc.Encode(r)
		return
	}
	switch r.Test {
	case "ragged decode":
		fmt.Printf("%-7s %-20s %-52s thr %d  ragged %7.3fms %6.1f GB/s (%3.0f%% bw)  uniform %7.3fms %6.1f GB/s  ragged/uniform %.2f\n",
			r.ISA, r.Test, r.Shape, r.Threads, r.MedianMs, r.GBs, r.PctBW, r.RefMs, r.RefGBs, r.Ratio)
	case "cancel":
		fmt.Printf("%-7s %-20s %-52s thr %d  worst latency after cancel %.1fms\n", r.ISA, r.Test, r.Shape, r.Threads, r.MedianMs)
	default:
		ref := "plain"
		if r.Test == "int8 cache decode" {
			ref = "f32"
		}
		fmt.Printf("%-7s %-20s %-52s thr %d  %8.3fms vs %-5s %8.3fms: %+.1f%%\n",
			r.ISA, r.Test, r.Shape, r.Threads, r.MedianMs, ref, r.RefMs, 100*(r.Ratio-1))
	}
}
