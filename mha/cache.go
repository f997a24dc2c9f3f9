package mha

import (
	"errors"
	"fmt"
)

// Cache is a layer's KV cache for incremental decoding: the projected keys
// and values of every token seen so far, [Batch][Cap][KVHeads][dim] each.
// All sequences of the batch have the same length. It never grows: Decode
// past Cap returns ErrCacheFull and leaves the cache as it was. A Cache
// belongs to the layer that made it and is not safe for concurrent use.
type Cache struct {
	K, V []float32 // [Batch][Cap][KVHeads][HeadDim], [Batch][Cap][KVHeads][ValueDim]

	layer              *Layer
	batch, capa, count int
	kvlens             []int // count for every batch, for Options.KVLens
}

// NewCache returns an empty cache for batch sequences of up to capacity
// tokens each. A cache larger than this machine can allocate is an error
// wrapping ErrShape.
func (l *Layer) NewCache(batch, capacity int) (*Cache, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	if batch < 1 || capacity < 1 {
		return nil, fmt.Errorf("%w: cache batch = %d, capacity = %d, both must be >= 1", ErrShape, batch, capacity)
	}
	nk, errK := allocFloats("cache K", batch, capacity, l.cfg.KVHeads, l.cfg.HeadDim)
	nv, errV := allocFloats("cache V", batch, capacity, l.cfg.KVHeads, l.cfg.ValueDim)
	if err := errors.Join(errK, errV); err != nil {
		return nil, err
	}
	if err := checkAlloc("the cache", uint64(nk)+uint64(nv)); err != nil {
		return nil, err
	}
	return &Cache{
		K: make([]float32, nk), V: make([]float32, nv),
		layer: l, batch: batch, capa: capacity, kvlens: make([]int, batch),
	}, nil
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
// may set Window, Softcap, Scale, LSE ([Batch][Heads][n]) and Threads;
// Causal is implied, and KVLens, Bias and QueryOffset are the cache's to
// decide (an error if set).
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
		if o.KVLens != nil || o.Bias != nil || o.QueryOffset != nil {
			return fmt.Errorf("%w: Decode sets KVLens, Bias and QueryOffset itself", ErrOption)
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
	if err := noOverlap([]span{{"out", out, B * n * dm}, {"LSE", o.LSE, B * cfg.Heads * n},
		{"cache.K", cache.K, len(cache.K)}, {"cache.V", cache.V, len(cache.V)}},
		[]span{{"x", x, B * n * dm}}); err != nil {
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
	p, err := problem(sc.attn, sc.q, cache.K, cache.V, shape, &o, l.e.workers(&o))
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
		copy(cache.K[at*kw:(at+n)*kw], sc.k[b*n*kw:(b+1)*n*kw])
		copy(cache.V[at*vw:(at+n)*vw], sc.v[b*n*vw:(b+1)*n*vw])
	}
	cache.count = total
	l.e.attention(&p, o.Threads)
	l.project(out, sc.attn, l.w.WO, l.w.BO, m, cfg.Heads*cfg.ValueDim, dm, o.Threads)
	return nil
}
