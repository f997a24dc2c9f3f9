package mha

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// Cache is a layer's KV cache for incremental decoding: the projected keys
// and values (rotated, with rotary embeddings) of every token seen so far,
// [Batch][KVHeads][Cap][dim] each (heads major, so that a decode step
// streams each KV head's keys contiguously), stored as float32 (K and V) or, from
// NewCacheOf, as 16-bit floats (K16 and V16, rounded to nearest even as
// tokens are appended: half the memory, and half the bytes a decode step
// reads).
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

	typ         KVType
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
	if err := checkAlloc("the cache", size+uint64(batch)*6); err != nil {
		return nil, err
	}
	c := &Cache{typ: t, layer: l, batch: batch, capa: capacity,
		lens: make([]atomic.Int64, batch), kvlens: make([]int, batch), counts: make([]int, batch)}
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

// kv returns the K and V of sequence b, [KVHeads][Cap][dim] each.
func (c *Cache) kv(b int) kvData {
	kw, vw := c.layer.cfg.KVHeads*c.layer.cfg.HeadDim, c.layer.cfg.KVHeads*c.layer.cfg.ValueDim
	kr, vr := b*c.capa*kw, b*c.capa*vw
	if c.typ.is16() {
		return kvData{t: c.typ, k16: c.K16[kr : kr+c.capa*kw], v16: c.V16[vr : vr+c.capa*vw], headsMajor: true}
	}
	return kvData{t: c.typ, k: c.K[kr : kr+c.capa*kw], v: c.V[vr : vr+c.capa*vw], headsMajor: true}
}

// store writes n new tokens of sequence b, from position at, into the
// cache: k and v are their projections, [n][KVHeads][dim] (BSHD rows), and
// each head's rows go to that head's run of the cache (rounded to the
// cache's 16-bit type if it has one).
func (c *Cache) store(ks *kernels.Set, b, at, n int, k, v []float32) {
	cfg := c.layer.cfg
	for _, t := range [2]struct {
		src []float32
		f32 []float32
		u16 []uint16
		dim int
	}{{k, c.K, c.K16, cfg.HeadDim}, {v, c.V, c.V16, cfg.ValueDim}} {
		for g := 0; g < cfg.KVHeads; g++ {
			base := ((b*cfg.KVHeads+g)*c.capa + at) * t.dim
			for i := 0; i < n; i++ {
				row := t.src[(i*cfg.KVHeads+g)*t.dim:][:t.dim]
				off := base + i*t.dim
				if c.typ.is16() {
					ks.Narrow(t.u16[off:off+t.dim], row, fallback.KVType(c.typ))
				} else {
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
