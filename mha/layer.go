package mha

import (
	"context"
	"fmt"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/tile"
)

// LayerConfig is the shape of a multi-head attention layer and what it
// does between projection and attention.
type LayerConfig struct {
	DModel   int // model width, the last dimension of the input and output
	Heads    int // query heads H
	KVHeads  int // key/value heads; 0 means Heads. Heads % KVHeads == 0 (GQA, MQA)
	HeadDim  int // Dk of queries and keys
	ValueDim int // Dv of values; 0 means HeadDim
	// ValueInKey projects no values: each head's value is the first
	// ValueDim elements of its key (after QK-norm and rotary), as MLA's
	// absorbed form reads its latent (NewMLALayer sets it). WV and BV
	// must then be absent (WQKV is Q then K), ValueDim at most HeadDim,
	// and a cache holds the keys only.
	ValueInKey bool

	// Rotary, when Rotary.Dims > 0, rotates queries and keys by their
	// positions (RoPE) in self-attention (Forward, Decode); the cache
	// keeps keys rotated. Cross-attention (ForwardCross, CrossKV) has no
	// shared positions and applies none.
	Rotary Rotary
	// NormEps is the epsilon of QK-norm (Weights.QNorm, KNorm); 0 means
	// 1e-6 (Qwen3, Gemma 3, OLMo 2).
	NormEps float32
}

// storedV is the width of a value row the layer projects and a cache
// stores: ValueDim, or 0 when values are read inside the keys.
func (cfg *LayerConfig) storedV() int {
	if cfg.ValueInKey {
		return 0
	}
	return cfg.ValueDim
}

// Weights are an MHA layer's parameters. By default the matrices are
// row-major [in][out], so that a projection is X·W and its output,
// [B][L][heads·dim], is already BSHD; with OutIn they are [out][in], as
// PyTorch's nn.Linear (and so a Hugging Face checkpoint) stores them.
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

	// WQKV, when not nil, replaces WQ, WK and WV (which must then be
	// nil): the three stacked along the output dimension, Q then K then
	// V, [DModel][Q+K+V widths] (or [Q+K+V widths][DModel] with OutIn),
	// as fused checkpoints store them (Phi-3's qkv_proj, GPT-2's c_attn).
	// Models that interleave the heads of q, k and v (GPT-NeoX, Falcon)
	// need their rows reordered first. BQKV likewise replaces BQ, BK, BV.
	WQKV, BQKV []float32
	// OutIn marks the matrices as [out][in] rather than [in][out].
	OutIn bool

	// Type is the type the layer keeps WQ, WK, WV and WO in (biases and
	// norms stay float32): Float32 (the zero value), BFloat16, Float16,
	// Int8 (a float32 scale per output and block of QuantBlock inputs, as
	// GGUF's q8_0 and ONNX's MatMulNBits block a weight row) or Int4 (a
	// scale and a zero point per block: see Int4). A matrix given as
	// float32 is rounded to it (16-bit: to nearest, ties to even) or
	// quantized (Int8: QuantizeInt8KV's rule per block; Int4: Int4's). The
	// projections multiply by exactly the stored values, widened or
	// dequantized in registers, with a half (16-bit) or 0.28 (Int8, scales
	// included) of the bytes to read per step (WeightBytes): a 16-bit
	// layer computes what a Float32 layer holding the rounded weights
	// computes, bit for bit; an Int8 layer too, except that a projection
	// of at most 6 rows (a decode step's) sums each block's 32 products
	// before scaling them (a float32 rounding apart); an Int4 one too,
	// except that such a projection also takes the zero points off through
	// each block's sum of its input. On realistic data the output is
	// within 0.3% (BFloat16), 0.03% (Float16), 0.8% (Int8) and 11%
	// (Int4) of the float32 weights' (TestLayerWeightAccuracy).
	Type DType
	// WQ16, WK16, WV16, WO16 and WQKV16 give a matrix as the 16-bit floats
	// of Type (Float16 or BFloat16) a checkpoint holds, instead of
	// float32 (its safetensors bytes, read as little-endian uint16). Same
	// shapes and orientation as the float32 fields; one form per matrix.
	WQ16, WK16, WV16, WO16, WQKV16 []uint16
	// WQ8, WK8, WV8, WO8 and WQKV8 give a matrix as int8 with scales (Type
	// Int8): Data shaped as the float32 matrix, and Scales as the matrix
	// with its input dimension (DModel for WQ, WK, WV, WQKV; Heads·ValueDim
	// for WO) replaced by its QuantBlocks: [⌈in/32⌉][out], or [out][⌈in/32⌉]
	// with OutIn (a q8_0 row's scales in order). Element (i, o) is
	// float32(q)·scale of block i/32 of output o. A scale must be finite
	// and >= 0.
	WQ8, WK8, WV8, WO8, WQKV8 Int8Weight
	// WQ4, WK4, WV4, WO4 and WQKV4 give a matrix as 4-bit blocks (Type
	// Int4) in MatMulNBits' layout with OutIn: see Int4Weight. A scale
	// must be finite and >= 0.
	WQ4, WK4, WV4, WO4, WQKV4 Int4Weight

	// QNorm and KNorm, when not nil, are the weights of QK-norm: an
	// RMSNorm of each projected query and key before rotary,
	// y = x / sqrt(mean(x²) + NormEps) · w. Of HeadDim weights, it runs
	// over each head (Qwen3; for Gemma 3, whose norm multiplies by 1 + w,
	// pass 1 + w); of Heads·HeadDim (KVHeads·HeadDim for KNorm), over
	// all heads of a token at once (OLMo 2).
	QNorm, KNorm []float32
}

// Layer is a multi-head attention layer:
//
//	Q = Xq·WQ + BQ, K = Xkv·WK + BK, V = Xkv·WV + BV   (each [B][L][heads][dim])
//	Q, K = Rotary(QKNorm(Q), QKNorm(K))                (when configured)
//	out = Attention(Q, K, V)·WO + BO                  ([B][Lq][DModel])
//
// The projections run on the engine's GEMM kernel and pool. NewLayer
// copies the weights into the kernels' packed panel layout (so later
// changes to the caller's slices do not affect the layer, and the caller
// may drop them). A Layer is safe for concurrent use.
type Layer struct {
	e            *Engine
	cfg          LayerConfig
	w            layerWeights
	rope         rope
	qNorm, kNorm qkNorm
	mla          *mlaParts // NewMLALayer's query stage, key norm and scale; nil for others

	free freeList[*layerScratch]
}

// layerScratch holds one call's projected tensors, and the positions and
// rotary angles of its tokens.
type layerScratch struct {
	tree          *treeScratch  // DecodeTree's, made by its first call
	paged         *pagedScratch // DecodePaged's, made by its first call
	q, k, v, attn []float32
	qa            []float32    // an MLA layer's low-rank queries
	opts          Options      // a call's options with an MLA layer's scale
	step          Options      // a decoding step's options (Layer.step), cleared after it
	spans         []span       // a decoding step's outputs for noOverlap
	bf16a         tile.BF16A   // a projection's activations rounded once (the bfloat16 mode)
	packedA       tile.PackedA // a projection's activations packed for the packed kernels (tile.Gemm.PackA)
	pos           []int
	cs            []float32
}

// NewLayer checks the weights against cfg and returns a layer running on e
// (nil means Default(); a closed e is ErrClosed).
func NewLayer(e *Engine, cfg LayerConfig, w Weights) (*Layer, error) {
	return newLayer(e, cfg, w, 0)
}

// newLayer is NewLayer with WQ's input width qIn (0: DModel; MLA's
// q_lora_rank when its queries come from a low-rank stage).
func newLayer(e *Engine, cfg LayerConfig, w Weights, qIn int) (*Layer, error) {
	e, err := openOr(e)
	if err != nil {
		return nil, err
	}
	if cfg.KVHeads == 0 {
		cfg.KVHeads = cfg.Heads
	}
	if cfg.ValueDim == 0 {
		cfg.ValueDim = cfg.HeadDim
	}
	s := cfg.shape(1, 1, 1)
	if _, err := s.resolve(); err != nil {
		return nil, err
	}
	if cfg.DModel < 1 {
		return nil, fmt.Errorf("%w: DModel = %d, must be >= 1", ErrShape, cfg.DModel)
	}
	dm := cfg.DModel
	if qIn == 0 {
		qIn = dm
	}
	var widths [4]int // of Q, K, V and the concatenated heads (WO's input)
	for i, d := range [4][2]int{{cfg.Heads, cfg.HeadDim}, {cfg.KVHeads, cfg.HeadDim}, {cfg.KVHeads, cfg.storedV()}, {cfg.Heads, cfg.ValueDim}} {
		n, ok := product(d[0], d[1])
		if !ok {
			return nil, overflow("projection width", d[:])
		}
		widths[i] = n
	}
	qw, kw, vw, ow := widths[0], widths[1], widths[2], widths[3]
	if cfg.ValueInKey && (w.WV != nil || w.WV16 != nil || w.WV8.Data != nil || w.WV8.Scales != nil || w.WV4.Data != nil || w.BV != nil) {
		return nil, fmt.Errorf("%w: ValueInKey reads values inside the keys: WV and BV must be nil", ErrOption)
	}
	if qw > maxCoord-kw-vw {
		return nil, overflow("fused QKV width", []int{qw, kw, vw})
	}
	cols := tile.PanelCols(e.ks)
	packed := uint64(0) // PackB pads every matrix to whole panels
	for _, m := range [4][2]int{{qIn, qw}, {dm, kw}, {dm, vw}, {ow, dm}} {
		n, err := allocFloats("packed weights", m[0], (m[1]+cols-1)/cols, cols)
		if err != nil {
			return nil, err
		}
		packed += uint64(n)
	}
	if err := checkAlloc("packed weights", packed); err != nil {
		return nil, err
	}
	eps, err := normEps(cfg.NormEps)
	if err != nil {
		return nil, err
	}
	cfg.Rotary.Scaling = cfg.Rotary.Scaling.clone()
	l := &Layer{e: e, cfg: cfg}
	if l.rope, err = newRope(cfg.Rotary, cfg.HeadDim); err != nil {
		return nil, err
	}
	if l.qNorm, err = newQKNorm("QNorm", w.QNorm, cfg.Heads, cfg.HeadDim, eps); err != nil {
		return nil, err
	}
	if l.kNorm, err = newQKNorm("KNorm", w.KNorm, cfg.KVHeads, cfg.HeadDim, eps); err != nil {
		return nil, err
	}
	if l.w, err = packWeights(w, dm, qIn, qw, kw, vw, ow, cols); err != nil {
		return nil, err
	}
	l.w.pairRows(e.ks)
	return l, nil
}

// reserve sizes the engine's workers for this layer's calls
// (Engine.reserve): its head dims and, for weights kept in a type the
// GEMM widens, the largest weight block; for a call in the int8 mode
// (o not nil) its split items' rows too (Engine.reserveQ8).
func (l *Layer) reserve(o *Options) {
	if o != nil && o.Compute == ComputeInt8 {
		l.e.reserveQ8(l.cfg.KVHeads, l.cfg.HeadDim)
	}
	wb := 0
	if l.w.q.Type != fallback.KVFloat32 {
		wb = tile.WeightBlockFloats(max(l.cfg.DModel, l.cfg.Heads*l.cfg.ValueDim, l.w.q.K), l.w.q.Ld)
	}
	l.e.reserve(l.cfg.HeadDim, l.cfg.ValueDim, wb)
	l.e.reserveGemm()
}

// usable returns ErrNil for a nil or zero Layer and ErrClosed for one
// whose Engine is closed.
func (l *Layer) usable() error {
	if l == nil || l.e == nil {
		return fmt.Errorf("%w: Layer (make one with NewLayer)", ErrNil)
	}
	return l.e.open()
}

// clone copies the first n elements of a bias, or returns nil for none.
func clone(bias []float32, n int) []float32 {
	if len(bias) == 0 {
		return nil
	}
	return append([]float32(nil), bias[:n]...)
}

// Config returns the layer's configuration with every default filled in
// (KVHeads, ValueDim, NormEps, and Rotary.Base and Scale when Rotary is
// on), so that NewLayer of it makes the same layer; the zero value for a
// nil Layer. For a layer from NewMLALayer it describes the absorbed
// attention (one KV head of KVLoraRank+RopeDim, ValueInKey), which
// NewLayer cannot rebuild: its low-rank query stage, latent norm and
// rotary placement are NewMLALayer's.
func (l *Layer) Config() LayerConfig {
	if l == nil {
		return LayerConfig{}
	}
	cfg := l.cfg
	cfg.NormEps, _ = normEps(cfg.NormEps) // checked by NewLayer
	if cfg.Rotary.Dims > 0 {
		if cfg.Rotary.Base == 0 {
			cfg.Rotary.Base = 10000
		}
	}
	cfg.Rotary.Scaling = cfg.Rotary.Scaling.clone()
	return cfg
}

// getScratch returns a free scratch (empty buffers, if it is new).
func (l *Layer) getScratch() *layerScratch {
	if s, ok := l.free.get(); ok {
		return s
	}
	return new(layerScratch)
}

// putScratch returns s to the free list.
func (l *Layer) putScratch(s *layerScratch) { l.free.put(s) }

// project computes c = a·w + bias for m rows on the pool: a is [m][in],
// w is [in][out] packed, c is [m][out]. In the bfloat16 mode (cl.bf16) a
// projection of bfloat16 weights rounds a's elements to bfloat16 first,
// once for all its items (tile.Gemm.RoundA, into sc); in float32
// arithmetic it packs a once for the items' kernels where they read it
// packed (tile.Gemm.PackA, a pool job of its own). It reports whether it
// ran to the end.
func (l *Layer) project(sc *layerScratch, c, a []float32, w *tile.Packed, bias []float32, m int, cl call) bool {
	bf16 := cl.bf16 && w.Type == fallback.KVBFloat16
	g := tile.Gemm{A: a, LDA: w.K, B: *w, C: c, LDC: w.N, Bias: bias, M: m, BF16: bf16, Tiles: l.e.ks.AMX()}
	g.RoundA(l.e.ks, &sc.bf16a)
	if pk := g.PackA(l.e.ks, &sc.packedA); pk.Items() > 0 && !packWorks.run(l.e.pool, pk, l.e.ks, cl) {
		return false
	}
	return l.e.gemm(g, cl)
}

// Forward runs self-attention over x, [batch][seqLen][DModel], into out,
// [batch][seqLen][DModel]. opts (may be nil) apply to the attention; its
// Bias and LSE, if set, are shaped for QLen = KVLen = seqLen.
//
// Forward is bidirectional (an encoder's: BERT, ViT) unless opts sets
// Causal, whatever the layer's Rotary: a decoder's prefill (Llama, Qwen,
// Mistral) passes &Options{Causal: true}. Decode and its kin are always
// causal.
func (l *Layer) Forward(out, x []float32, batch, seqLen int, opts *Options) error {
	return l.ForwardContext(context.Background(), out, x, batch, seqLen, opts)
}

// ForwardContext is Forward that stops when ctx is done: the work items
// already started finish, the rest are skipped, and it returns ctx.Err();
// out (and the LSE) then hold unspecified values.
func (l *Layer) ForwardContext(ctx context.Context, out, x []float32, batch, seqLen int, opts *Options) error {
	return l.forward(ctx, out, x, x, nil, batch, seqLen, seqLen, opts, true)
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
	return l.forward(ctx, out, xq, xkv, nil, batch, qLen, kvLen, opts, false)
}

// forward runs Forward (self: rotary at positions 0..seqLen-1),
// ForwardCross, or, with ckv, Cross (xkv unused, nothing to project).
func (l *Layer) forward(ctx context.Context, out, xq, xkv []float32, ckv *CrossKV, batch, qLen, kvLen int, opts *Options, self bool) error {
	if err := l.usable(); err != nil {
		return err
	}
	c, err := callOf(ctx, opts)
	if err != nil {
		return err
	}
	if l.mla != nil && !self {
		return fmt.Errorf("%w: an MLA layer (NewMLALayer) does no cross-attention", ErrOption)
	}
	cfg := l.cfg
	shape := cfg.shape(batch, qLen, kvLen)
	if _, err := shape.resolve(); err != nil {
		return err
	}
	dm := cfg.DModel
	if err := needLen("xq", len(xq), batch, qLen, dm); err != nil {
		return err
	}
	if err := needLen("out", len(out), batch, qLen, dm); err != nil {
		return err
	}
	if ckv == nil {
		if err := needLen("xkv", len(xkv), batch, kvLen, dm); err != nil {
			return err
		}
	}
	oi := optionInputs(opts)
	var ck, cv span
	if ckv != nil {
		ck, cv = f32("CrossKV.K", ckv.K, len(ckv.K)), f32("CrossKV.V", ckv.V, len(ckv.V))
	}
	if err := noOverlap([]span{f32("out", out, batch*qLen*dm), f32("OutLSE", lseOf(opts), batch*cfg.Heads*qLen)},
		[]span{f32("xq", xq, batch*qLen*dm), f32("xkv", xkv, batch*kvLen*dm), ck, cv,
			oi[0], oi[1], oi[2], oi[3], oi[4]}); err != nil {
		return err
	}
	sc := l.getScratch()
	defer l.putScratch(sc)
	if err := sc.size(shape, ckv == nil); err != nil {
		return err
	}
	mq, mkv := batch*qLen, batch*kvLen
	kv, prep := kvData{k: sc.k, v: sc.v}, prepWork{q: sc.q, k: sc.k, qRows: mq, kRows: mkv}
	if ckv != nil {
		kv, prep.kRows = kvData{k: ckv.K, v: ckv.V}, 0
	}
	if self && l.rope.half > 0 {
		prep.pos, prep.seqLen, prep.cs = sc.positions(mq, l.rope.half)
		for r := range prep.pos {
			prep.pos[r], prep.seqLen[r] = r%qLen, qLen
		}
	}
	ws := l.e.getWorks(1)
	defer l.e.putWorks(ws)
	opts = l.mlaScale(sc, opts)
	if ws[0].p, err = problem(sc.attn, sc.q, kv, shape, opts, l.e.workers(opts)); err != nil {
		return err
	}
	l.reserve(opts)
	if err := l.e.acquire(); err != nil {
		return err
	}
	defer l.e.release()
	if !(l.projectQ(sc, xq, mq, c) &&
		(ckv != nil || l.projectKV(sc, sc.k, sc.v, xkv, mkv, c)) &&
		l.prepare(prep, c) &&
		l.e.attend(ws, c) &&
		l.project(sc, out, sc.attn, &l.w.o, l.w.bo, mq, c)) {
		return ctx.Err()
	}
	return nil
}

// projectKV projects m rows of x into keys and values (keys only with
// ValueInKey).
func (l *Layer) projectKV(sc *layerScratch, k, v, x []float32, m int, c call) bool {
	return l.project(sc, k, x, &l.w.k, l.w.bk, m, c) && (l.cfg.ValueInKey || l.project(sc, v, x, &l.w.v, l.w.bv, m, c))
}

// shape is the attention shape of the layer's calls: batch sequences of
// qLen queries over kvLen keys.
func (cfg *LayerConfig) shape(batch, qLen, kvLen int) Shape {
	return Shape{Batch: batch, Heads: cfg.Heads, KVHeads: cfg.KVHeads, QLen: qLen, KVLen: kvLen,
		HeadDim: cfg.HeadDim, ValueDim: cfg.ValueDim, ValueInKey: cfg.ValueInKey}
}

// size makes the scratch hold the projections of shape (resolved), those
// of K and V only when kv (no V with ValueInKey).
func (sc *layerScratch) size(s Shape, kv bool) error {
	if !kv {
		s.KVLen = 0
	}
	dv := s.ValueDim
	if s.ValueInKey {
		dv = 0
	}
	var n [4]int
	total := uint64(0)
	for i, d := range [4][4]int{{s.Batch, s.QLen, s.Heads, s.HeadDim}, {s.Batch, s.KVLen, s.KVHeads, s.HeadDim},
		{s.Batch, s.KVLen, s.KVHeads, dv}, {s.Batch, s.QLen, s.Heads, s.ValueDim}} {
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

// positions returns the scratch's position, sequence-length and angle
// buffers for rows tokens with half rotary pairs each.
func (sc *layerScratch) positions(rows, half int) (pos, seqLen []int, cs []float32) {
	sc.pos = sized(sc.pos, 2*rows)
	sc.cs = sized(sc.cs, rows*2*half)
	return sc.pos[:rows], sc.pos[rows:], sc.cs
}

// sized returns buf with length n, reallocating only when it is too small.
func sized[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	return buf[:n]
}

// lseOf returns the LSE option, nil for nil options.
func lseOf(o *Options) []float32 {
	if o == nil {
		return nil
	}
	return o.OutLSE
}
