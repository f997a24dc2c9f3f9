package mha

import (
	"fmt"
	"math"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/tile"
)

// resolve fills in the shape's defaults and checks its dimensions.
func (s Shape) resolve() (Shape, error) {
	if s.KVHeads == 0 {
		s.KVHeads = s.Heads
	}
	if s.ValueDim == 0 {
		s.ValueDim = s.HeadDim
	}
	for _, d := range []struct {
		name string
		v    int
	}{{"Batch", s.Batch}, {"Heads", s.Heads}, {"KVHeads", s.KVHeads}, {"QLen", s.QLen},
		{"KVLen", s.KVLen}, {"HeadDim", s.HeadDim}, {"ValueDim", s.ValueDim}} {
		if d.v < 1 {
			return s, fmt.Errorf("%w: %s = %d, must be >= 1", ErrShape, d.name, d.v)
		}
	}
	if s.Heads%s.KVHeads != 0 {
		return s, fmt.Errorf("%w: Heads = %d is not a multiple of KVHeads = %d", ErrShape, s.Heads, s.KVHeads)
	}
	if s.ValueInKey && s.ValueDim > s.HeadDim {
		return s, fmt.Errorf("%w: ValueInKey with ValueDim = %d > HeadDim = %d: a value row is a prefix of its key row", ErrShape, s.ValueDim, s.HeadDim)
	}
	if s.Layout != BSHD && s.Layout != BHSD {
		return s, fmt.Errorf("%w: unknown Layout %d", ErrShape, int(s.Layout))
	}
	return s, nil
}

// kvData is the K and V of a call: float32, 16-bit of type t, or int8
// or int4 with scales (a valid type: the Attention functions and
// NewCacheOf check it).
type kvData struct {
	t          DType
	k, v       []float32
	k16, v16   []uint16
	k8, v8     []int8    // int8, or int4's bytes (Int4RowBytes(dim) a row)
	ks, vs     []float32 // int8 and int4: the scales, QuantBlocks(dim) per row
	headsMajor bool      // [B][KVHeads][KVLen][dim] whatever the shape's Layout (a Cache's rows)
	// pageKeys > 0: paged (a PagedCache's pool, tile.Problem.PageKeys):
	// the slices hold whole blocks of [KVHeads][pageKeys][dim], pages[b]
	// batch b's blocks, and the shape's KVLen is len(pages[b])·pageKeys.
	pageKeys int
	pages    [][]int32
}

// lens returns the lengths of K and V.
func (d kvData) lens() (k, v int) {
	switch d.t {
	case Float32:
		return len(d.k), len(d.v)
	case Int8, Int4:
		return len(d.k8), len(d.v8)
	}
	return len(d.k16), len(d.v16)
}

// spans returns the memory K and V use, rows rows of dk and dv elements,
// and that of their scales (empty unless int8).
func (d kvData) spans(rows, dk, dv int) (k, v, ks, vs span) {
	switch d.t {
	case Float32:
		return f32("k", d.k, rows*dk), f32("v", d.v, rows*dv), span{}, span{}
	case Int8, Int4:
		return i8("k", d.k8, rows*d.t.width(dk)), i8("v", d.v8, rows*d.t.width(dv)),
			f32("k scales", d.ks, rows*fallback.Int8Blocks(dk)), f32("v scales", d.vs, rows*fallback.Int8Blocks(dv))
	}
	return u16("k", d.k16, rows*dk), u16("v", d.v16, rows*dv), span{}, span{}
}

// problem validates one attention call and resolves it for the tile layer.
// workers is the most workers the call may use (their scratch is checked
// against what can be allocated).
func problem(out, q []float32, kv kvData, shape Shape, opts *Options, workers int) (tile.Problem, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	s, err := shape.resolve()
	if err != nil {
		return tile.Problem{}, err
	}
	B, H, Hkv, Lq, Lk, Dk, Dv := s.Batch, s.Heads, s.KVHeads, s.QLen, s.KVLen, s.HeadDim, s.ValueDim
	// Separate calls, not a table: a table of []int literals escapes to the heap.
	if err := needLen("q", len(q), B, Lq, H, Dk); err != nil {
		return tile.Problem{}, err
	}
	kl, vl := kv.lens()
	kvRows := B * Lk * Hkv // the rows K and V hold
	wk, wv := kv.t.width(Dk), kv.t.width(Dv)
	if kv.pageKeys > 0 {
		if err := kv.pagesFit(kl, Lk, Hkv, wk); err != nil {
			return tile.Problem{}, err
		}
		kvRows = kl / wk
	} else if err := needLen("k", kl, B, Lk, Hkv, wk); err != nil {
		return tile.Problem{}, err
	}
	switch {
	case kv.pageKeys > 0: // the pool's V and scales are sized with its K
	case s.ValueInKey:
		if vl != 0 || len(kv.vs) != 0 {
			return tile.Problem{}, fmt.Errorf("%w: v holds %d elements and %d scales: with ValueInKey it must be empty (V is read inside k)", ErrBuffer, vl, len(kv.vs))
		}
	default:
		if err := needLen("v", vl, B, Lk, Hkv, wv); err != nil {
			return tile.Problem{}, err
		}
	}
	if kv.t.quantized() && kv.pageKeys == 0 {
		if err := needLen("k scales", len(kv.ks), B, Lk, Hkv, fallback.Int8Blocks(Dk)); err != nil {
			return tile.Problem{}, err
		}
		if !s.ValueInKey {
			if err := needLen("v scales", len(kv.vs), B, Lk, Hkv, fallback.Int8Blocks(Dv)); err != nil {
				return tile.Problem{}, err
			}
		}
	}
	if err := needLen("out", len(out), B, Lq, H, Dv); err != nil {
		return tile.Problem{}, err
	}
	p := tile.Problem{
		Q: q, K: kv.k, V: kv.v, Out: out, KVType: fallback.KVType(kv.t), K16: kv.k16, V16: kv.v16,
		K8: kv.k8, V8: kv.v8, KS: kv.ks, VS: kv.vs,
		Batch: B, Heads: H, KVHeads: Hkv, QLen: Lq, KVLen: Lk, HeadDim: Dk, ValueDim: Dv,
		HeadsMajor:   s.Layout == BHSD,
		KVHeadsMajor: s.Layout == BHSD || kv.headsMajor,
		VInK:         s.ValueInKey,
		PageKeys:     kv.pageKeys,
		Pages:        kv.pages,
		Causal:       o.Causal,
		Window:       o.Window,
		BiasBatch:    1, BiasHeads: 1, BiasQLen: 1,
		MaskBatch: 1, MaskHeads: 1, MaskQLen: 1,
	}
	if err := resolveOptions(&o, &p); err != nil {
		return tile.Problem{}, err
	}
	if ws := tile.WorkspaceBytes(Dk, Dv) * float64(workers); ws > float64(memoryLimit) {
		return tile.Problem{}, fmt.Errorf("%w: HeadDim = %d, ValueDim = %d need %.3g bytes of scratch on %d workers, more than this machine can allocate (%d)",
			ErrShape, Dk, Dv, ws, workers, memoryLimit)
	}
	ks, vs, kScales, vScales := kv.spans(kvRows, Dk, Dv)
	if s.ValueInKey {
		vs, vScales = span{}, span{}
	}
	return p, noOverlap(
		[]span{f32("out", out, B*Lq*H*Dv), f32("OutLSE", p.LSE, B*H*Lq)},
		[]span{f32("q", q, B*Lq*H*Dk), ks, vs, kScales, vScales, f32("Bias", p.Bias, p.BiasBatch*p.BiasHeads*p.BiasQLen*Lk),
			bools("Mask", p.Mask, p.MaskBatch*p.MaskHeads*p.MaskQLen*Lk),
			f32("ALiBi", p.Slopes, H), f32("Sinks", p.Sinks, H), ints("KVLens", p.KVLens, len(p.KVLens))})
}

// resolveOptions checks o against the dimensions already in p and stores
// the resolved options in p.
func resolveOptions(o *Options, p *tile.Problem) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrOption}, args...)...)
	}
	scale := float64(o.Scale)
	switch {
	case !(scale >= 0 && scale <= MaxScale): // NaN fails too
		return bad("Scale = %v, must be in [0, %v] (0 means 1/sqrt(HeadDim))", o.Scale, MaxScale)
	case scale == 0:
		scale = 1 / math.Sqrt(float64(p.HeadDim))
	}
	p.Scale = float32(scale)
	if c := float64(o.Softcap); c != 0 && !(c >= MinSoftcap && c <= math.MaxFloat32) {
		return bad("Softcap = %v, must be 0 (off) or in [%v, MaxFloat32]", o.Softcap, MinSoftcap)
	}
	p.Softcap = o.Softcap
	if o.Window < 0 || o.Window > maxCoord {
		return bad("Window = %d, must be in [0, %d]", o.Window, maxCoord)
	}
	if o.QueryOffset != nil {
		if off := *o.QueryOffset; off < -maxCoord || off > maxCoord {
			return bad("QueryOffset = %d, must be in [%d, %d]", off, -maxCoord, maxCoord)
		}
		p.OffsetSet, p.Offset = true, *o.QueryOffset
	}
	if o.Threads < 0 {
		return bad("Threads = %d, must be >= 0", o.Threads)
	}
	if !o.Compute.valid() {
		return bad("Compute = %v, must be ComputeF32, ComputeBF16 or ComputeInt8", o.Compute)
	}
	if o.Compute == ComputeInt8 && !p.KVType.Quantized() {
		return bad("Compute = %v needs K stored as Int8 or Int4, not %v", o.Compute, DType(p.KVType))
	}
	// The bfloat16 mode applies to problems of many rows per KV head
	// (prefill, a cascade's shared part, MLA's absorbed decode of many
	// heads); a decode step's few rows stay float32 (ComputeBF16's doc).
	p.BF16 = o.Compute == ComputeBF16 && !tile.DecodeRows(p)
	p.Q8 = o.Compute == ComputeInt8
	if o.KVLens != nil {
		if len(o.KVLens) != p.Batch {
			return fmt.Errorf("%w: KVLens has %d entries, Batch is %d", ErrBuffer, len(o.KVLens), p.Batch)
		}
		for b, n := range o.KVLens {
			if n < 0 || n > p.KVLen {
				return bad("KVLens[%d] = %d, must be in [0, KVLen = %d]", b, n, p.KVLen)
			}
		}
		p.KVLens = o.KVLens
	}
	if o.Bias != nil {
		bb, bh, bq, err := broadcastDims("Bias", len(o.Bias), o.BiasBatch, o.BiasHeads, o.BiasQLen, p)
		if err != nil {
			return err
		}
		p.Bias, p.BiasBatch, p.BiasHeads, p.BiasQLen = o.Bias, bb, bh, bq
	}
	if o.Mask != nil {
		mb, mh, mq, err := broadcastDims("Mask", len(o.Mask), o.MaskBatch, o.MaskHeads, o.MaskQLen, p)
		if err != nil {
			return err
		}
		p.Mask, p.MaskBatch, p.MaskHeads, p.MaskQLen = o.Mask, mb, mh, mq
	}
	var err error
	if p.Slopes, err = perHead("ALiBi", o.ALiBi, p.Heads, MaxSlope); err != nil {
		return err
	}
	if p.Slopes != nil {
		// Every distance j - (i + off) must be an exact float32 integer;
		// the operands are at most maxCoord each, so the sum cannot overflow.
		keys := p.KVLen // the keys a row can see: KVLens bounds them when given
		if p.KVLens != nil {
			keys = 0
			for _, n := range p.KVLens {
				keys = max(keys, n)
			}
		}
		span := p.QLen + keys
		if o.QueryOffset != nil {
			span += max(*o.QueryOffset, -*o.QueryOffset)
		}
		if span >= MaxALiBiSpan {
			return bad("ALiBi with QLen %d, KVLen %d and QueryOffset %v: distances reach %d, ALiBi needs them below %d (exact float32 integers)",
				p.QLen, p.KVLen, derefOffset(o.QueryOffset), span, MaxALiBiSpan)
		}
	}
	if p.Sinks, err = perHead("Sinks", o.Sinks, p.Heads, math.MaxFloat32); err != nil {
		return err
	}
	if o.OutLSE != nil {
		if err := needLen("LSE", len(o.OutLSE), p.Batch, p.Heads, p.QLen); err != nil {
			return err
		}
		p.LSE = o.OutLSE
	}
	return nil
}

// broadcastDims resolves the batch, head and query-row sizes of a Bias or
// Mask of n elements: each is 1 or the problem's own (0 means 1 for batch
// and heads, QLen for query rows), and n covers [b][h][q][KVLen].
func broadcastDims(name string, n, batch, heads, qlen int, p *tile.Problem) (b, h, q int, err error) {
	b, h, q = max(batch, 1), max(heads, 1), qlen
	if q == 0 {
		q = p.QLen
	}
	for _, d := range [3]struct {
		field     string
		set, full int
		got       int
	}{{"Batch", batch, p.Batch, b}, {"Heads", heads, p.Heads, h}, {"QLen", qlen, p.QLen, q}} {
		if d.set < 0 || (d.got != 1 && d.got != d.full) {
			return 0, 0, 0, fmt.Errorf("%w: %s%s = %d, must be 1 or %s = %d", ErrOption, name, d.field, d.set, d.field, d.full)
		}
	}
	return b, h, q, needLen(name, n, b, h, q, p.KVLen)
}

// perHead checks a per-head option: nil, or heads finite values of
// magnitude at most limit.
func perHead(name string, x []float32, heads int, limit float64) ([]float32, error) {
	if x == nil {
		return nil, nil
	}
	if len(x) != heads {
		return nil, fmt.Errorf("%w: %s has %d entries, Heads is %d", ErrBuffer, name, len(x), heads)
	}
	for h, v := range x {
		if !(math.Abs(float64(v)) <= limit) { // NaN fails too
			return nil, fmt.Errorf("%w: %s[%d] = %v, must be finite with magnitude at most %v", ErrOption, name, h, v, limit)
		}
	}
	return x, nil
}

// MaxALiBiSpan bounds QLen + KVLen + |QueryOffset| of a call with ALiBi
// (KVLen: the largest KVLens entry when KVLens is set, the keys a row can
// see): its distances are stepped as float32 integers, exact below 2^24.
const MaxALiBiSpan = 1 << 24

// derefOffset returns *off, or "none" for nil, for messages.
func derefOffset(off *int) any {
	if off == nil {
		return "none"
	}
	return *off
}

// pagesFit checks paged K/V (a PagedCache's, built by the package): each
// batch's table spans the shape's kvLen keys and names blocks the pool of
// kl elements of K holds.
func (d kvData) pagesFit(kl, kvLen, kvHeads, dk int) error {
	blocks := kl / (kvHeads * d.pageKeys * dk)
	for b, pages := range d.pages {
		if len(pages)*d.pageKeys != kvLen {
			return fmt.Errorf("%w: paged K/V: batch %d has %d blocks of %d keys, the shape %d keys", ErrBuffer, b, len(pages), d.pageKeys, kvLen)
		}
		for _, p := range pages {
			if int(p) >= blocks {
				return fmt.Errorf("%w: paged K/V: batch %d names block %d of %d", ErrBuffer, b, p, blocks)
			}
		}
	}
	return nil
}
