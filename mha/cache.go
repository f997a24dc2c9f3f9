package mha

import (
	"errors"
	"fmt"

	"github.com/fastattn/fastattn/fallback"
)

// Cache is a layer's KV cache for incremental decoding: the projected keys
// and values of every token seen so far, [Batch][Cap][KVHeads][dim] each,
// stored as float32 (K and V) or, from NewCacheOf, as 16-bit floats (K16
// and V16, rounded to nearest even as tokens are appended: half the
// memory, and half the bytes a decode step reads). All sequences of the
// batch have the same length. It never grows: Decode past Cap returns
// ErrCacheFull and leaves the cache as it was. A Cache belongs to the
// layer that made it and is not safe for concurrent use.
type Cache struct {
	K, V     []float32 // float32 storage: [Batch][Cap][KVHeads][HeadDim], [Batch][Cap][KVHeads][ValueDim]
	K16, V16 []uint16  // 16-bit storage, the same shapes

	typ                KVType
	layer              *Layer
	batch, capa, count int
	kvlens             []int // count for every batch, for Options.KVLens
}

// NewCache returns an empty float32 cache for batch sequences of up to
// capacity tokens each. A cache larger than this machine can allocate is
// an error wrapping ErrShape.
func (l *Layer) NewCache(batch, capacity int) (*Cache, error) {
	return l.NewCacheOf(batch, capacity, Float32)
}

// NewCacheOf is NewCache with K and V stored as t: Float32, Float16 or
// BFloat16 (another value is ErrOption). Decoding against a 16-bit cache
// gives the float32 result of the rounded keys and values.
func (l *Layer) NewCacheOf(batch, capacity int, t KVType) (*Cache, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	if t != Float32 && !t.is16() {
		return nil, fmt.Errorf("%w: cache KVType %d is not Float32, Float16 or BFloat16", ErrOption, int(t))
	}
	if batch < 1 || capacity < 1 {
		return nil, fmt.Errorf("%w: cache batch = %d, capacity = %d, both must be >= 1", ErrShape, batch, capacity)
	}
	nk, errK := allocFloats("cache K", batch, capacity, l.cfg.KVHeads, l.cfg.HeadDim)
	nv, errV := allocFloats("cache V", batch, capacity, l.cfg.KVHeads, l.cfg.ValueDim)
	if err := errors.Join(errK, errV); err != nil {
		return nil, err
	}
	size := uint64(nk) + uint64(nv)
	if t.is16() {
		size /= 2
	}
	if err := checkAlloc("the cache", size); err != nil {
		return nil, err
	}
	c := &Cache{typ: t, layer: l, batch: batch, capa: capacity, kvlens: make([]int, batch)}
	if t.is16() {
		c.K16, c.V16 = make([]uint16, nk), make([]uint16, nv)
	} else {
		c.K, c.V = make([]float32, nk), make([]float32, nv)
	}
	return c, nil
}

// Type returns the cache's storage type (Float32 for a nil Cache).
func (c *Cache) Type() KVType {
	if c == nil {
		return Float32
	}
	return c.typ
}

// kv returns the cache's K and V for a problem.
func (c *Cache) kv() kvData {
	return kvData{t: c.typ, k: c.K, v: c.V, k16: c.K16, v16: c.V16}
}

// Len returns the number of tokens cached per sequence (0 for a nil
// Cache).
func (c *Cache) Len() int {
	if c == nil {
		return 0
	}
	return c.count
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

// Reset empties the cache (keeping its memory); it does nothing to a nil
// Cache.
func (c *Cache) Reset() {
	if c != nil {
		c.count = 0
	}
}

// Decode appends n new tokens per sequence, x = [Batch][n][DModel], to the
// cache and writes their attention layer output, [Batch][n][DModel], to
// out. The new tokens attend causally to everything cached and to each
// other (bottom-right alignment), so decoding token by token gives the same
// result as Forward with Causal over the whole sequence. opts (may be nil)
// may set Window, Softcap, Scale, ALiBi, Sinks, LSE ([Batch][Heads][n])
// and Threads; Causal is implied, and KVLens, Bias, Mask and QueryOffset
// are the cache's to decide (an error if set).
func (l *Layer) Decode(out, x []float32, cache *Cache, n int, opts *Options) error {
	if err := l.usable(); err != nil {
		return err
	}
	if cache == nil || cache.layer == nil {
		return fmt.Errorf("%w: Cache (make one with Layer.NewCache)", ErrNil)
	}
	if cache.layer != l {
		return fmt.Errorf("%w: cache was not made by this layer", ErrOption)
	}
	var o Options
	if opts != nil {
		o = *opts
		if o.KVLens != nil || o.Bias != nil || o.Mask != nil || o.QueryOffset != nil {
			return fmt.Errorf("%w: Decode sets KVLens, Bias, Mask and QueryOffset itself", ErrOption)
		}
	}
	if n < 1 {
		return fmt.Errorf("%w: Decode of n = %d tokens, must be >= 1", ErrShape, n)
	}
	if n > cache.capa-cache.count {
		return fmt.Errorf("%w: %d cached + %d new tokens > capacity %d", ErrCacheFull, cache.count, n, cache.capa)
	}
	cfg, B, dm := l.cfg, cache.batch, l.cfg.DModel
	if err := needLen("x", len(x), B, n, dm); err != nil {
		return err
	}
	if err := needLen("out", len(out), B, n, dm); err != nil {
		return err
	}
	if err := noOverlap([]span{f32("out", out, B*n*dm), f32("LSE", o.LSE, B*cfg.Heads*n),
		f32("cache.K", cache.K, len(cache.K)), f32("cache.V", cache.V, len(cache.V)),
		u16("cache.K16", cache.K16, len(cache.K16)), u16("cache.V16", cache.V16, len(cache.V16))},
		[]span{f32("x", x, B*n*dm)}); err != nil {
		return err
	}
	total := cache.count + n
	for b := range cache.kvlens {
		cache.kvlens[b] = total
	}
	o.Causal, o.KVLens = true, cache.kvlens
	shape := Shape{Batch: B, Heads: cfg.Heads, KVHeads: cfg.KVHeads, QLen: n, KVLen: cache.capa,
		HeadDim: cfg.HeadDim, ValueDim: cfg.ValueDim}
	sc := l.getScratch()
	defer l.putScratch(sc)
	if err := sc.size(Shape{Batch: B, Heads: cfg.Heads, KVHeads: cfg.KVHeads, QLen: n, KVLen: n,
		HeadDim: cfg.HeadDim, ValueDim: cfg.ValueDim}); err != nil {
		return err
	}
	p, err := problem(sc.attn, sc.q, cache.kv(), shape, &o, l.e.workers(&o))
	if err != nil {
		return err
	}
	if err := l.e.acquire(); err != nil {
		return err
	}
	defer l.e.release()
	m, kw, vw := B*n, cfg.KVHeads*cfg.HeadDim, cfg.KVHeads*cfg.ValueDim
	l.project(sc.q, x, l.w.WQ, l.w.BQ, m, dm, cfg.Heads*cfg.HeadDim, o.Threads)
	l.project(sc.k, x, l.w.WK, l.w.BK, m, dm, kw, o.Threads)
	l.project(sc.v, x, l.w.WV, l.w.BV, m, dm, vw, o.Threads)
	for b := 0; b < B; b++ {
		at := b*cache.capa + cache.count
		if cache.typ.is16() {
			t := fallback.KVType(cache.typ)
			l.e.ks.Narrow(cache.K16[at*kw:(at+n)*kw], sc.k[b*n*kw:(b+1)*n*kw], t)
			l.e.ks.Narrow(cache.V16[at*vw:(at+n)*vw], sc.v[b*n*vw:(b+1)*n*vw], t)
			continue
		}
		copy(cache.K[at*kw:(at+n)*kw], sc.k[b*n*kw:(b+1)*n*kw])
		copy(cache.V[at*vw:(at+n)*vw], sc.v[b*n*vw:(b+1)*n*vw])
	}
	cache.count = total
	l.e.attention(&p, o.Threads)
	l.project(out, sc.attn, l.w.WO, l.w.BO, m, cfg.Heads*cfg.ValueDim, dm, o.Threads)
	return nil
}
