package mha

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// Cache is a layer's KV cache for incremental decoding: the projected keys
// and values (rotated, with rotary embeddings) of every token seen so far
// (keys only for a layer with ValueInKey: V is empty),
// [Batch][KVHeads][Cap][dim] each (heads major, so that a decode step
// streams each KV head's keys contiguously), stored as float32 (K and V) or, from
// NewCacheOf, as 16-bit floats (K16 and V16, rounded to nearest even as
// tokens are appended: half the memory, and half the bytes a decode step
// reads), as int8 (K8 and V8 with their scales KScale and VScale,
// quantized per row as tokens are appended, QuantizeInt8KV's rule: 0.28 of
// the memory and bytes read at HeadDim 128) or as int4 (K4 and V4,
// Int4RowBytes(dim) bytes a row, with KScale and VScale: QuantizeInt4KV's
// rule, ggml's q4_0 blocks; 0.16 of the memory at HeadDim 128).
//
// Each sequence of the batch has its own length (a ragged batch: one
// sequence may take a 300-token prompt while the others decode a token
// each, see Layer.DecodeSeqs); Truncate rolls a sequence back and Reset
// empties it. The cache never grows: appending past Cap returns
// ErrCacheFull and changes no sequence. A Cache takes one call at a time:
// a Decode, Truncate or Reset while another is running on it returns
// ErrBusy and does nothing; Len and Lens may be called at any time.
type Cache struct {
	K, V     []float32 // float32 storage: [Batch][KVHeads][Cap][HeadDim], [Batch][KVHeads][Cap][ValueDim]
	K16, V16 []uint16  // 16-bit storage, the same shapes
	K8, V8   []int8    // int8 storage, the same shapes
	K4, V4   []byte    // int4 storage: [Batch][KVHeads][Cap][Int4RowBytes(dim)]
	// KScale and VScale are the int8 or int4 rows' scales,
	// [Batch][KVHeads][Cap][QuantBlocks(dim)].
	KScale, VScale []float32

	typ         DType
	layer       *Layer
	batch, capa int
	lens        []atomic.Int64 // tokens held per sequence
	busy        atomic.Bool    // a call holds the cache

	// Scratch of the call holding the cache.
	kvlens []int // per sequence: its length after the call (a problem's KVLens)
	counts []int // Decode's uniform counts
}

// NewCache returns an empty float32 cache for batch sequences of up to
// capacity tokens each. A cache larger than this machine can allocate is
// an error wrapping ErrShape; a layer whose Engine is closed, ErrClosed.
//
// The cache belongs to l: l's decoding calls take it, and those of any
// other Layer value refuse it (ErrOption), even one of the same geometry —
// every layer of a model has the same geometry, and a cache handed to the
// wrong one would give wrong outputs silently. To move tokens to another
// layer's cache (a Layer made again from the same weights, on another
// Engine), CopyTo copies them between caches of the same geometry.
func (l *Layer) NewCache(batch, capacity int) (*Cache, error) {
	return l.NewCacheOf(batch, capacity, Float32)
}

// NewCacheOf is NewCache with K and V stored as t: Float32, Float16,
// BFloat16, Int8 or Int4 (another value is ErrOption). Decoding against a
// 16-bit, int8 or int4 cache gives the float32 result of the rounded
// (dequantized) keys and values. Appending a token whose K or V is not finite in the cache's
// type — NaN or ±Inf in any type, or beyond a 16-bit type's range (float16
// from 65520 on, bfloat16 from 3.3961776e38 on: it would round to ±Inf) —
// is ErrNonFinite, naming the sequence, token, head and element, and that
// call appends nothing to any sequence: such a token would make every
// later step of its sequence NaN.
func (l *Layer) NewCacheOf(batch, capacity int, t DType) (*Cache, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	if !t.kvTypeOK() {
		return nil, fmt.Errorf("%w: cache DType %d is not Float32, Float16, BFloat16, Int8 or Int4", ErrOption, int(t))
	}
	if batch < 1 || capacity < 1 {
		return nil, fmt.Errorf("%w: cache batch = %d, capacity = %d, both must be >= 1", ErrShape, batch, capacity)
	}
	nk, errK := allocFloats("cache K", batch, capacity, l.cfg.KVHeads, l.cfg.HeadDim)
	nv, errV := allocFloats("cache V", batch, capacity, l.cfg.KVHeads, l.cfg.storedV())
	if err := errors.Join(errK, errV); err != nil {
		return nil, err
	}
	size := uint64(nk) + uint64(nv)
	switch {
	case t.is16():
		size /= 2
	case t == Int8: // a byte per element and a float per block
		size = (size + 4*uint64(l.cacheScales(batch, capacity, l.cfg.HeadDim)+l.cacheScales(batch, capacity, l.cfg.storedV()))) / 4
	case t == Int4: // 16 bytes and a float per block
		size = 20 * uint64(l.cacheScales(batch, capacity, l.cfg.HeadDim)+l.cacheScales(batch, capacity, l.cfg.storedV())) / 4
	}
	if err := checkAlloc("the cache", size+uint64(batch)*6); err != nil {
		return nil, err
	}
	c := &Cache{typ: t, layer: l, batch: batch, capa: capacity,
		lens: make([]atomic.Int64, batch), kvlens: make([]int, batch), counts: make([]int, batch)}
	switch {
	case t.is16():
		c.K16, c.V16 = make([]uint16, nk), make([]uint16, nv)
	case t == Int8:
		c.K8, c.V8 = make([]int8, nk), make([]int8, nv)
		c.KScale = make([]float32, l.cacheScales(batch, capacity, l.cfg.HeadDim))
		c.VScale = make([]float32, l.cacheScales(batch, capacity, l.cfg.storedV()))
	case t == Int4:
		c.KScale = make([]float32, l.cacheScales(batch, capacity, l.cfg.HeadDim))
		c.K4, c.V4 = make([]byte, len(c.KScale)*Int4BlockBytes), make([]byte, l.cacheScales(batch, capacity, l.cfg.storedV())*Int4BlockBytes)
		c.VScale = make([]float32, l.cacheScales(batch, capacity, l.cfg.storedV()))
	default:
		c.K, c.V = make([]float32, nk), make([]float32, nv)
	}
	return c, nil
}

// cacheScales is the number of int8 or int4 scales of a cache's K (dim
// HeadDim) or V (ValueDim); its element count passed allocFloats, so it
// fits.
func (l *Layer) cacheScales(batch, capacity, dim int) int {
	return batch * l.cfg.KVHeads * capacity * QuantBlocks(dim)
}

// Type returns the cache's storage type (Float32 for a nil Cache).
func (c *Cache) Type() DType {
	if c == nil {
		return Float32
	}
	return c.typ
}

// kv returns the K and V of sequence b, [KVHeads][Cap][dim] each.
func (c *Cache) kv(b int) kvData {
	kw, vw := c.layer.cfg.KVHeads*c.typ.width(c.layer.cfg.HeadDim), c.layer.cfg.KVHeads*c.typ.width(c.layer.cfg.storedV())
	kr, vr := b*c.capa*kw, b*c.capa*vw
	switch {
	case c.typ.is16():
		return kvData{t: c.typ, k16: c.K16[kr : kr+c.capa*kw], v16: c.V16[vr : vr+c.capa*vw], headsMajor: true}
	case c.typ.quantized():
		ksw, vsw := c.layer.cfg.KVHeads*QuantBlocks(c.layer.cfg.HeadDim), c.layer.cfg.KVHeads*QuantBlocks(c.layer.cfg.storedV())
		ksr, vsr := b*c.capa*ksw, b*c.capa*vsw
		k8, v8 := c.K8, c.V8
		if c.typ == Int4 {
			k8, v8 = fallback.Int4Carried(c.K4), fallback.Int4Carried(c.V4)
		}
		return kvData{t: c.typ, k8: k8[kr : kr+c.capa*kw], v8: v8[vr : vr+c.capa*vw],
			ks: c.KScale[ksr : ksr+c.capa*ksw], vs: c.VScale[vsr : vsr+c.capa*vsw], headsMajor: true}
	}
	return kvData{t: c.typ, k: c.K[kr : kr+c.capa*kw], v: c.V[vr : vr+c.capa*vw], headsMajor: true}
}

// storable checks that the n new tokens of sequence b from position at
// (k and v: [n][KVHeads][dim]) are finite in the cache's storage type: a
// NaN or ±Inf (in any type), or a finite float32 beyond a 16-bit type's
// range (it would round to ±Inf), is ErrNonFinite naming the sequence,
// token, head and element. One such token would turn every later step of
// its sequence to NaN; refused, it leaves the cache as it was.
func (c *Cache) storable(b, at, n int, k, v []float32) error {
	return storableRows(c.layer.cfg, c.typ, b, at, n, k, v)
}

// storableRows is the check of storable for a cache of type typ.
func storableRows(cfg LayerConfig, typ DType, b, at, n int, k, v []float32) error {
	limit := storableLimit(typ)
	for _, t := range [2]struct {
		name string
		src  []float32
		dim  int
	}{{"K", k, cfg.HeadDim}, {"V", v, cfg.storedV()}} {
		rows := t.src[:n*cfg.KVHeads*t.dim]
		d := beyond(rows, limit)
		if d < 0 {
			continue
		}
		i, g, e := d/(cfg.KVHeads*t.dim), d/t.dim%cfg.KVHeads, d%t.dim
		why := ""
		if x := rows[d]; !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) {
			why = fmt.Sprintf(", beyond %v's range", typ)
		}
		return fmt.Errorf("%w: %v cache: sequence %d, token %d, KV head %d: %s element %d is %v%s",
			ErrNonFinite, typ, b, at+i, g, t.name, e, rows[d], why)
	}
	return nil
}

// storableLimit returns the float32 magnitude bits from which a value is
// not finite once stored as t: float16's 65520 and bfloat16's
// 0x7f7f8000 round to ±Inf (to nearest, ties to even: the largest finite
// values are 65504 and 0x7f7f0000), and from 0x7f800000 on a float32 is
// ±Inf or NaN (int8 quantizes finite values only).
func storableLimit(t DType) uint32 {
	switch t {
	case Float16:
		return 0x477ff000 // 65520
	case BFloat16:
		return 0x7f7f8000
	}
	return 0x7f800000
}

// beyond returns the index of the first element of x whose magnitude bits
// are at least limit (NaN's are above every limit), or -1.
func beyond(x []float32, limit uint32) int {
	for i, v := range x {
		if math.Float32bits(v)&0x7fffffff >= limit {
			return i
		}
	}
	return -1
}

// store writes n new tokens of sequence b, from position at, into the
// cache: k and v are their projections, [n][KVHeads][dim] (BSHD rows), and
// each head's rows go to that head's run of the cache (rounded to the
// cache's 16-bit type, or quantized to int8, if it has one: storable has
// passed).
func (c *Cache) store(ks *kernels.Set, b, at, n int, k, v []float32) {
	storeRows(ks, c.layer.cfg, c.kv(b), n, k, v, func(i, g int) int { return g*c.capa + at + i })
}

// storeRows writes n new tokens, k and v [n][KVHeads][dim] (storable
// checked), into kv: token i's row of KV head g at row rowOf(i, g) of kv's
// K and V (and int8 scales), rounded to kv's 16-bit type or quantized to
// int8 if it has one. A Cache and a PagedCache differ only in rowOf.
func storeRows(ks *kernels.Set, cfg LayerConfig, kv kvData, n int, k, v []float32, rowOf func(i, g int) int) {
	for _, t := range [2]struct {
		src    []float32
		f32    []float32
		u16    []uint16
		i8     []int8
		scales []float32
		dim    int
	}{{k, kv.k, kv.k16, kv.k8, kv.ks, cfg.HeadDim}, {v, kv.v, kv.v16, kv.v8, kv.vs, cfg.storedV()}} {
		if t.dim == 0 {
			continue
		}
		nb, w := QuantBlocks(t.dim), kv.t.width(t.dim)
		for i := 0; i < n; i++ {
			for g := 0; g < cfg.KVHeads; g++ {
				row := t.src[(i*cfg.KVHeads+g)*t.dim:][:t.dim]
				r := rowOf(i, g)
				off := r * w
				switch {
				case kv.t.is16():
					ks.Narrow(t.u16[off:off+t.dim], row, fallback.KVType(kv.t))
				case kv.t == Int8:
					fallback.QuantizeInt8(t.i8[off:off+t.dim], t.scales[r*nb:][:nb], row) // finite: storable
				case kv.t == Int4:
					fallback.QuantizeInt4KV(fallback.Int4Bytes(t.i8[off:off+w]), t.scales[r*nb:][:nb], row)
				default:
					copy(t.f32[off:off+t.dim], row)
				}
			}
		}
	}
}

// Len returns the number of tokens sequence seq holds (0 for a nil Cache
// or a seq outside [0, Batch)).
func (c *Cache) Len(seq int) int {
	if c == nil || seq < 0 || seq >= len(c.lens) {
		return 0
	}
	return int(c.lens[seq].Load())
}

// Lens appends the length of every sequence to dst and returns it.
func (c *Cache) Lens(dst []int) []int {
	if c == nil {
		return dst
	}
	for b := range c.lens {
		dst = append(dst, int(c.lens[b].Load()))
	}
	return dst
}

// Cap returns the most tokens per sequence the cache holds (0 for a nil
// Cache).
func (c *Cache) Cap() int {
	if c == nil {
		return 0
	}
	return c.capa
}

// Batch returns the number of sequences (0 for a nil Cache).
func (c *Cache) Batch() int {
	if c == nil {
		return 0
	}
	return c.batch
}

// hold takes the cache for one call; release must follow if it succeeds.
func (c *Cache) hold() error {
	if c == nil || c.layer == nil {
		return fmt.Errorf("%w: Cache (make one with Layer.NewCache)", ErrNil)
	}
	if !c.busy.CompareAndSwap(false, true) {
		return ErrBusy
	}
	return nil
}

func (c *Cache) release() { c.busy.Store(false) }

// Truncate rolls sequence seq back to its first n tokens (speculative
// decoding, beam pruning): later calls overwrite the rest. n must be in
// [0, Len(seq)] and seq in [0, Batch) (ErrOption).
func (c *Cache) Truncate(seq, n int) error {
	if err := c.hold(); err != nil {
		return err
	}
	defer c.release()
	if seq < 0 || seq >= c.batch {
		return fmt.Errorf("%w: Truncate of sequence %d, the cache has %d", ErrOption, seq, c.batch)
	}
	if have := c.lens[seq].Load(); n < 0 || int64(n) > have {
		return fmt.Errorf("%w: Truncate of sequence %d to %d tokens, it holds %d", ErrOption, seq, n, have)
	}
	c.lens[seq].Store(int64(n))
	return nil
}

// Reset empties sequence seq (keeping its memory), for a new request in
// its slot.
func (c *Cache) Reset(seq int) error { return c.Truncate(seq, 0) }

// ResetAll empties every sequence.
func (c *Cache) ResetAll() error {
	if err := c.hold(); err != nil {
		return err
	}
	defer c.release()
	for b := range c.lens {
		c.lens[b].Store(0)
	}
	return nil
}
