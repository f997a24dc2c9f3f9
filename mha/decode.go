package mha

import (
	"context"
	"fmt"

	"github.com/fastattn/fastattn/fallback"
)

// Decode appends n new tokens to every sequence, x = [Batch][n][DModel],
// to the cache and writes their attention layer output, [Batch][n][DModel],
// to out: DecodeSeqs with n tokens for each sequence.
func (l *Layer) Decode(out, x []float32, cache *Cache, n int, opts *Options) error {
	return l.DecodeContext(context.Background(), out, x, cache, n, opts)
}

// DecodeContext is Decode that stops when ctx is done, as DecodeSeqs.
func (l *Layer) DecodeContext(ctx context.Context, out, x []float32, cache *Cache, n int, opts *Options) error {
	if err := l.usable(); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("%w: Decode of n = %d tokens, must be >= 1", ErrShape, n)
	}
	if err := cache.hold(); err != nil {
		return err
	}
	defer cache.release()
	for b := range cache.counts {
		cache.counts[b] = n
	}
	return l.decode(ctx, out, x, cache, cache.counts, nil, opts)
}

// DecodeSeqs appends counts[b] new tokens to sequence b of the cache (0:
// the sequence sits this call out) and writes their attention layer
// output. The batch is ragged and packed: x holds the new tokens of
// sequence 0, then of sequence 1, ..., [Σ counts][DModel], and so does
// out; no padding is computed. Each new token stands at its position in
// its own sequence (the sequence's length before the call, plus its
// index): it attends causally to its own sequence's cached tokens and to
// the new tokens before it, and rotary embeddings use that position, so
// decoding token by token gives the same result as Forward with Causal
// over the whole sequence, and a prompt can be fed in chunks (chunked
// prefill) while other sequences decode.
//
// opts (may be nil) may set Window, Softcap, Scale, ALiBi, Sinks, Threads
// and LSE: [Heads][counts[b]] for each sequence in turn, Heads·Σ counts
// values. Causal is implied; KVLens, Bias, Mask and QueryOffset are the
// cache's to decide (ErrOption if set).
//
// cache must be one l made (NewCache): another layer's is ErrOption, even
// of the same geometry. A sequence with no room for its tokens is
// ErrCacheFull and a token whose K or V is not finite in the cache's type
// is ErrNonFinite (NewCacheOf); then no sequence changes. A nil ctx is
// context.Background(). When ctx is done the call stops between work items and
// returns ctx.Err(): the cache is as it was before the call (no length
// changes; the slots past each length may hold the abandoned tokens,
// which later calls overwrite), and out and the LSE hold unspecified
// values.
func (l *Layer) DecodeSeqs(ctx context.Context, out, x []float32, cache *Cache, counts []int, opts *Options) error {
	if err := l.usable(); err != nil {
		return err
	}
	if err := cache.hold(); err != nil {
		return err
	}
	defer cache.release()
	return l.decode(ctx, out, x, cache, counts, nil, opts)
}

// decode runs DecodeSeqs (tree nil) or DecodeTree on a held cache.
func (l *Layer) decode(ctx context.Context, out, x []float32, cache *Cache, counts []int, tree *Tree, opts *Options) error {
	return l.step(ctx, out, x, cache, counts, tree, opts)
}

// The contiguous Cache as a step's store (stepCache): sequence b's rows
// at b's slots of the cache, one problem per stepping sequence.

func (c *Cache) begin(l *Layer, _ *layerScratch, _ *Options, counts []int) error {
	if c.layer != l {
		return fmt.Errorf("%w: cache was made by another layer (each Layer decodes only the caches it made; CopyTo moves tokens between layers' caches)", ErrOption)
	}
	if len(counts) != c.batch {
		return fmt.Errorf("%w: counts has %d entries, the cache %d sequences", ErrBuffer, len(counts), c.batch)
	}
	for b, n := range counts {
		have := c.cached(b)
		switch {
		case n < 0:
			return fmt.Errorf("%w: counts[%d] = %d, must be >= 0", ErrShape, b, n)
		case n > c.capa-have:
			return fmt.Errorf("%w: sequence %d: %d cached + %d new tokens > capacity %d", ErrCacheFull, b, have, n, c.capa)
		}
		c.kvlens[b] = have + n
	}
	return nil
}

func (c *Cache) spans(dst []span) []span {
	return append(dst, f32("cache.K", c.K, len(c.K)), f32("cache.V", c.V, len(c.V)),
		u16("cache.K16", c.K16, len(c.K16)), u16("cache.V16", c.V16, len(c.V16)),
		i8("cache.K8", c.K8, len(c.K8)), i8("cache.V8", c.V8, len(c.V8)),
		i8("cache.K4", fallback.Int4Carried(c.K4), len(c.K4)), i8("cache.V4", fallback.Int4Carried(c.V4), len(c.V4)),
		f32("cache.KScale", c.KScale, len(c.KScale)), f32("cache.VScale", c.VScale, len(c.VScale)))
}

func (c *Cache) fits(b, n int, k, v []float32) error { return c.storable(b, c.cached(b), n, k, v) }

func (c *Cache) put(l *Layer, b, n int, k, v []float32) {
	if n > 0 {
		c.store(l.e.ks, b, c.cached(b), n, k, v)
	}
}

// problems: each stepping sequence's new rows against its own slots,
// causal, its cached length and new tokens as KVLens.
func (c *Cache) problems(l *Layer, sc *layerScratch, counts []int, user *Options) ([]attnWork, error) {
	cfg := l.cfg
	H, Dk, Dv := cfg.Heads, cfg.HeadDim, cfg.ValueDim
	seqs := 0
	for _, n := range counts {
		if n > 0 {
			seqs++
		}
	}
	works := l.e.getWorks(seqs)
	o := *user
	o.Causal = true
	var err error
	for b, w, row := 0, 0, 0; b < c.batch; b++ {
		n := counts[b]
		if n == 0 {
			continue
		}
		o.KVLens = c.kvlens[b : b+1]
		if user.OutLSE != nil {
			o.OutLSE = user.OutLSE[row*H : (row+n)*H]
		}
		shape := cfg.shape(1, n, c.capa)
		if works[w].p, err = problem(sc.attn[row*H*Dv:(row+n)*H*Dv], sc.q[row*H*Dk:(row+n)*H*Dk], c.kv(b), shape, &o, l.e.workers(&o)); err != nil {
			return works, err
		}
		w, row = w+1, row+n
	}
	return works, nil
}

func (c *Cache) combine(*Layer, []float32, []float32, []int) {}

func (c *Cache) commit(counts []int) {
	for b, n := range counts {
		c.lens[b].Add(int64(n))
	}
}

// undo has nothing to take back: the rows past each length are free
// slots, which later calls overwrite.
func (c *Cache) undo() {}
