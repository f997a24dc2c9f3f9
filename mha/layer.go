package mha

import (
	"context"
	"fmt"
	"sync"

	"github.com/fastattn/fastattn/tile"
)

// LayerConfig is the shape of a multi-head attention layer.
type LayerConfig struct {
	DModel   int // model width, the last dimension of the input and output
	Heads    int // query heads H
	KVHeads  int // key/value heads; 0 means Heads. Heads % KVHeads == 0 (GQA, MQA)
	HeadDim  int // Dk of queries and keys
	ValueDim int // Dv of values; 0 means HeadDim
}

// Weights are an MHA layer's parameters, row-major [in][out], so that a
// projection is X·W and its output, [B][L][heads·dim], is already BSHD.
// Biases are optional (nil).
type Weights struct {
	WQ []float32 // [DModel][Heads·HeadDim]
	WK []float32 // [DModel][KVHeads·HeadDim]
	WV []float32 // [DModel][KVHeads·ValueDim]
	WO []float32 // [Heads·ValueDim][DModel]

	BQ []float32 // [Heads·HeadDim]
	BK []float32 // [KVHeads·HeadDim]
	BV []float32 // [KVHeads·ValueDim]
	BO []float32 // [DModel]
}

// Layer is a multi-head attention layer:
//
//	Q = Xq·WQ + BQ, K = Xkv·WK + BK, V = Xkv·WV + BV   (each [B][L][heads][dim])
//	out = Attention(Q, K, V)·WO + BO                  ([B][Lq][DModel])
//
// The projections run on the engine's GEMM kernel and pool. NewLayer
// copies the weights into the kernels' packed panel layout (so later
// changes to the caller's slices do not affect the layer, and the caller
// may drop them). A Layer is safe for concurrent use.
type Layer struct {
	e   *Engine
	cfg LayerConfig
	w   Weights // packed WQ..WO (tile.PackB), copied biases

	mu   sync.Mutex
	free []*layerScratch
}

// layerScratch holds one call's projected tensors.
type layerScratch struct {
	q, k, v, attn []float32
}

// NewLayer checks the weights against cfg and returns a layer running on e
// (nil means Default()).
func NewLayer(e *Engine, cfg LayerConfig, w Weights) (*Layer, error) {
	if e == nil {
		var err error
		if e, err = Default(); err != nil {
			return nil, err
		}
	}
	if err := e.usable(); err != nil {
		return nil, err
	}
	if cfg.KVHeads == 0 {
		cfg.KVHeads = cfg.Heads
	}
	if cfg.ValueDim == 0 {
		cfg.ValueDim = cfg.HeadDim
	}
	s := Shape{Batch: 1, Heads: cfg.Heads, KVHeads: cfg.KVHeads, QLen: 1, KVLen: 1,
		HeadDim: cfg.HeadDim, ValueDim: cfg.ValueDim}
	if _, err := s.resolve(); err != nil {
		return nil, err
	}
	if cfg.DModel < 1 {
		return nil, fmt.Errorf("%w: DModel = %d, must be >= 1", ErrShape, cfg.DModel)
	}
	dm := cfg.DModel
	var widths [4]int // of Q, K, V and the concatenated heads (WO's input)
	for i, d := range [4][2]int{{cfg.Heads, cfg.HeadDim}, {cfg.KVHeads, cfg.HeadDim}, {cfg.KVHeads, cfg.ValueDim}, {cfg.Heads, cfg.ValueDim}} {
		n, ok := product(d[0], d[1])
		if !ok {
			return nil, overflow("projection width", d[:])
		}
		widths[i] = n
	}
	qw, kw, vw, ow := widths[0], widths[1], widths[2], widths[3]
	packed := uint64(0) // PackB pads every matrix to whole panels
	for _, m := range [4][2]int{{dm, qw}, {dm, kw}, {dm, vw}, {ow, dm}} {
		n, err := allocFloats("packed weights", m[0], (m[1]+tile.PanelCols-1)/tile.PanelCols, tile.PanelCols)
		if err != nil {
			return nil, err
		}
		packed += uint64(n)
	}
	if err := checkAlloc("packed weights", packed); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		name     string
		have     int
		in, out  int
		optional bool
	}{
		{"WQ", len(w.WQ), dm, qw, false}, {"WK", len(w.WK), dm, kw, false},
		{"WV", len(w.WV), dm, vw, false}, {"WO", len(w.WO), ow, dm, false},
		{"BQ", len(w.BQ), 1, qw, true}, {"BK", len(w.BK), 1, kw, true},
		{"BV", len(w.BV), 1, vw, true}, {"BO", len(w.BO), 1, dm, true},
	} {
		if c.optional && c.have == 0 {
			continue
		}
		if err := needLen(c.name, c.have, c.in, c.out); err != nil {
			return nil, err
		}
	}
	pw := Weights{
		WQ: tile.PackB(w.WQ, dm, qw), WK: tile.PackB(w.WK, dm, kw),
		WV: tile.PackB(w.WV, dm, vw), WO: tile.PackB(w.WO, ow, dm),
		BQ: clone(w.BQ, qw), BK: clone(w.BK, kw), BV: clone(w.BV, vw), BO: clone(w.BO, dm),
	}
	return &Layer{e: e, cfg: cfg, w: pw}, nil
}

// usable returns ErrNil for a nil or zero Layer.
func (l *Layer) usable() error {
	if l == nil || l.e == nil {
		return fmt.Errorf("%w: Layer (make one with NewLayer)", ErrNil)
	}
	return l.e.usable()
}

// clone copies the first n elements of a bias, or returns nil for none.
func clone(bias []float32, n int) []float32 {
	if len(bias) == 0 {
		return nil
	}
	return append([]float32(nil), bias[:n]...)
}

// Config returns the layer's configuration, defaults filled in (the zero
// value for a nil Layer).
func (l *Layer) Config() LayerConfig {
	if l == nil {
		return LayerConfig{}
	}
	return l.cfg
}

func (l *Layer) getScratch() *layerScratch {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.free); n > 0 {
		s := l.free[n-1]
		l.free = l.free[:n-1]
		return s
	}
	return new(layerScratch)
}

func (l *Layer) putScratch(s *layerScratch) {
	l.mu.Lock()
	l.free = append(l.free, s)
	l.mu.Unlock()
}

// project computes c = a·w + bias for m rows on the pool: a is [m][in],
// w is [in][out] packed by tile.PackB, c is [m][out]. It reports whether
// it ran to the end.
func (l *Layer) project(c, a, w, bias []float32, m, in, out int, cl call) bool {
	return l.e.gemm(tile.Gemm{A: a, LDA: in, B: w, C: c, LDC: out, Bias: bias, M: m, N: out, K: in}, cl)
}

// Forward runs self-attention over x, [batch][seqLen][DModel], into out,
// [batch][seqLen][DModel]. opts (may be nil) apply to the attention; its
// Bias and LSE, if set, are shaped for QLen = KVLen = seqLen.
func (l *Layer) Forward(out, x []float32, batch, seqLen int, opts *Options) error {
	return l.ForwardContext(context.Background(), out, x, batch, seqLen, opts)
}

// ForwardContext is Forward that stops when ctx is done: the work items
// already started finish, the rest are skipped, and it returns ctx.Err();
// out (and the LSE) then hold unspecified values.
func (l *Layer) ForwardContext(ctx context.Context, out, x []float32, batch, seqLen int, opts *Options) error {
	return l.ForwardCrossContext(ctx, out, x, x, batch, seqLen, seqLen, opts)
}

// ForwardCross runs cross-attention: queries from xq, [batch][qLen][DModel],
// keys and values from xkv, [batch][kvLen][DModel]; out is
// [batch][qLen][DModel].
func (l *Layer) ForwardCross(out, xq, xkv []float32, batch, qLen, kvLen int, opts *Options) error {
	return l.ForwardCrossContext(context.Background(), out, xq, xkv, batch, qLen, kvLen, opts)
}

// ForwardCrossContext is ForwardCross that stops when ctx is done, as
// ForwardContext.
func (l *Layer) ForwardCrossContext(ctx context.Context, out, xq, xkv []float32, batch, qLen, kvLen int, opts *Options) error {
	if err := l.usable(); err != nil {
		return err
	}
	c, err := callOf(ctx, opts)
	if err != nil {
		return err
	}
	cfg := l.cfg
	shape := Shape{Batch: batch, Heads: cfg.Heads, KVHeads: cfg.KVHeads, QLen: qLen, KVLen: kvLen,
		HeadDim: cfg.HeadDim, ValueDim: cfg.ValueDim}
	if _, err := shape.resolve(); err != nil {
		return err
	}
	dm := cfg.DModel
	for _, c := range []struct {
		name string
		have int
		rows int
	}{{"xq", len(xq), qLen}, {"xkv", len(xkv), kvLen}, {"out", len(out), qLen}} {
		if err := needLen(c.name, c.have, batch, c.rows, dm); err != nil {
			return err
		}
	}
	if err := noOverlap([]span{f32("out", out, batch*qLen*dm), f32("LSE", lseOf(opts), batch*cfg.Heads*qLen)},
		[]span{f32("xq", xq, batch*qLen*dm), f32("xkv", xkv, batch*kvLen*dm)}); err != nil {
		return err
	}
	sc := l.getScratch()
	defer l.putScratch(sc)
	if err := sc.size(shape); err != nil {
		return err
	}
	ws := l.e.getWorks(1)
	defer l.e.putWorks(ws)
	if ws[0].p, err = problem(sc.attn, sc.q, kvData{k: sc.k, v: sc.v}, shape, opts, l.e.workers(opts)); err != nil {
		return err
	}
	if err := l.e.acquire(); err != nil {
		return err
	}
	defer l.e.release()
	mq, mkv := batch*qLen, batch*kvLen
	if !(l.project(sc.q, xq, l.w.WQ, l.w.BQ, mq, dm, cfg.Heads*cfg.HeadDim, c) &&
		l.project(sc.k, xkv, l.w.WK, l.w.BK, mkv, dm, cfg.KVHeads*cfg.HeadDim, c) &&
		l.project(sc.v, xkv, l.w.WV, l.w.BV, mkv, dm, cfg.KVHeads*cfg.ValueDim, c) &&
		l.e.attend(ws, c) &&
		l.project(out, sc.attn, l.w.WO, l.w.BO, mq, cfg.Heads*cfg.ValueDim, dm, c)) {
		return ctx.Err()
	}
	return nil
}

// size makes the scratch hold the projections of shape (resolved).
func (sc *layerScratch) size(s Shape) error {
	var n [4]int
	total := uint64(0)
	for i, d := range [4][4]int{{s.Batch, s.QLen, s.Heads, s.HeadDim}, {s.Batch, s.KVLen, s.KVHeads, s.HeadDim},
		{s.Batch, s.KVLen, s.KVHeads, s.ValueDim}, {s.Batch, s.QLen, s.Heads, s.ValueDim}} {
		var err error
		if n[i], err = allocFloats("the layer's projections", d[:]...); err != nil {
			return err
		}
		total += uint64(n[i])
	}
	if err := checkAlloc("the layer's projections", total); err != nil {
		return err
	}
	sc.q, sc.k, sc.v, sc.attn = sized(sc.q, n[0]), sized(sc.k, n[1]), sized(sc.v, n[2]), sized(sc.attn, n[3])
	return nil
}

// sized returns buf with length n, reallocating only when it is too small.
func sized(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

// lseOf returns the LSE option, nil for nil options.
func lseOf(o *Options) []float32 {
	if o == nil {
		return nil
	}
	return o.LSE
}
