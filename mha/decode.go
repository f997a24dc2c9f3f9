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
	c, err := callOf(ctx, opts)
	if err != nil {
		return err
	}
	if cache.layer != l {
		return fmt.Errorf("%w: cache was made by another layer (each Layer decodes only the caches it made; CopyTo moves tokens between layers' caches)", ErrOption)
	}
	o, err := l.stepOptions(opts)
	if err != nil {
		return err
	}
	if len(counts) != cache.batch {
		return fmt.Errorf("%w: counts has %d entries, the cache %d sequences", ErrBuffer, len(counts), cache.batch)
	}
	total, seqs := 0, 0
	for b, n := range counts {
		have := int(cache.lens[b].Load())
		switch {
		case n < 0:
			return fmt.Errorf("%w: counts[%d] = %d, must be >= 0", ErrShape, b, n)
		case n > cache.capa-have:
			return fmt.Errorf("%w: sequence %d: %d cached + %d new tokens > capacity %d", ErrCacheFull, b, have, n, cache.capa)
		case n > 0:
			seqs++
		}
		cache.kvlens[b] = have + n
		total += n // <= Batch·Cap, which fit in memory
	}
	cfg, dm := l.cfg, l.cfg.DModel
	H, Dk, Dv := cfg.Heads, cfg.HeadDim, cfg.ValueDim
	if err := l.stepBuffers(out, x, &o, total); err != nil {
		return err
	}
	if seqs == 0 {
		return nil
	}
	oi := optionInputs(&o) // ALiBi and Sinks: Decode takes no Bias, Mask or KVLens
	if err := noOverlap([]span{f32("out", out, total*dm), f32("LSE", o.LSE, total*H),
		f32("cache.K", cache.K, len(cache.K)), f32("cache.V", cache.V, len(cache.V)),
		u16("cache.K16", cache.K16, len(cache.K16)), u16("cache.V16", cache.V16, len(cache.V16)),
		i8("cache.K8", cache.K8, len(cache.K8)), i8("cache.V8", cache.V8, len(cache.V8)),
		i8("cache.K4", fallback.Int4Carried(cache.K4), len(cache.K4)), i8("cache.V4", fallback.Int4Carried(cache.V4), len(cache.V4)),
		f32("cache.KScale", cache.KScale, len(cache.KScale)), f32("cache.VScale", cache.VScale, len(cache.VScale))},
		[]span{f32("x", x, total*dm), oi[0], oi[1], oi[2], oi[3], oi[4]}); err != nil {
		return err
	}
	sc := l.getScratch()
	defer l.putScratch(sc)
	if err := sc.size(cfg.shape(1, total, total), true); err != nil {
		return err
	}
	// One problem per stepping sequence: its new rows of the packed
	// projections against its own cache rows (a tree: its history's and
	// its tree's, tree.go).
	var tr *treeScratch
	nw := seqs
	if tree != nil {
		if sc.tree == nil {
			sc.tree = new(treeScratch)
		}
		tr = sc.tree
		if err := tr.resolve(tree, counts, cache, total, o.ALiBi != nil); err != nil {
			return err
		}
		tr.size(l, counts, total, cache.typ, o.ALiBi != nil)
		nw = treeWorks(counts, &o)
	}
	works := l.e.getWorks(nw)
	defer l.e.putWorks(works)
	user := o
	o.Causal = true
	lse := o.LSE
	for b, w, row := 0, 0, 0; b < cache.batch; b++ {
		n := counts[b]
		if n == 0 {
			continue
		}
		if tr != nil {
			if w, err = tr.problems(l, works, w, sc, cache, b, row, n, &user); err != nil {
				return err
			}
			row += n
			continue
		}
		o.KVLens = cache.kvlens[b : b+1]
		if lse != nil {
			o.LSE = lse[row*H : (row+n)*H]
		}
		shape := cfg.shape(1, n, cache.capa)
		if works[w].p, err = problem(sc.attn[row*H*Dv:(row+n)*H*Dv], sc.q[row*H*Dk:(row+n)*H*Dk], cache.kv(b), shape, &o, l.e.workers(&o)); err != nil {
			return err
		}
		w, row = w+1, row+n
	}
	if tr != nil {
		tr.parents = nil // the caller's slice: read by the masks above, not kept
	}
	l.reserve(&o)
	if err := l.e.acquire(); err != nil {
		return err
	}
	defer l.e.release()
	kw, vw := cfg.KVHeads*Dk, cfg.KVHeads*cfg.storedV()
	prep := prepWork{q: sc.q, k: sc.k, qRows: total, kRows: total}
	if l.rope.half > 0 {
		prep.pos, prep.seqLen, prep.cs = sc.positions(total, l.rope.half)
		for b, row := 0, 0; b < cache.batch; b++ {
			at := int(cache.lens[b].Load())
			for i := 0; i < counts[b]; i++ {
				if tr != nil { // at its tree position; the sequence reaches its largest
					prep.pos[row+i], prep.seqLen[row+i] = tr.at[row+i], tr.span[b]
				} else {
					prep.pos[row+i], prep.seqLen[row+i] = at+i, at+counts[b]
				}
			}
			row += counts[b]
		}
	}
	if !(l.projectQ(sc, x, total, c) &&
		l.projectKV(sc.k, sc.v, x, total, c) &&
		l.prepare(prep, c)) {
		return ctx.Err()
	}
	for b, row := 0, 0; b < cache.batch; b++ { // nothing is stored unless every row can be
		if err := cache.storable(b, int(cache.lens[b].Load()), counts[b], sc.k[row*kw:], sc.v[row*vw:]); err != nil {
			return err
		}
		row += counts[b]
	}
	for b, row := 0, 0; b < cache.batch; b++ {
		n := counts[b]
		if n == 0 {
			continue
		}
		cache.store(l.e.ks, b, int(cache.lens[b].Load()), n, sc.k[row*kw:(row+n)*kw], sc.v[row*vw:(row+n)*vw])
		if tr != nil {
			tr.fill(cfg, cache, b, row, int(cache.lens[b].Load()), n)
		}
		row += n
	}
	if !l.e.attend(works, c) {
		return ctx.Err()
	}
	if tr != nil {
		for b, row := 0, 0; b < cache.batch; b++ {
			n := counts[b]
			var seqLSE []float32
			if lse != nil {
				seqLSE = lse[row*H : (row+n)*H]
			}
			tr.merge(cfg, sc.attn, seqLSE, row, n, historyPerRow(&user))
			row += n
		}
	}
	if !l.project(out, sc.attn, &l.w.o, l.w.bo, total, c) {
		return ctx.Err()
	}
	for b, n := range counts {
		cache.lens[b].Add(int64(n))
	}
	return nil
}

// stepOptions copies a decoding call's options (nil: the defaults),
// refusing those the cache decides (KVLens, Bias, Mask, QueryOffset), with
// an MLA layer's scale.
func (l *Layer) stepOptions(opts *Options) (Options, error) {
	var o Options
	if opts != nil {
		o = *opts
		if o.KVLens != nil || o.Bias != nil || o.Mask != nil || o.QueryOffset != nil {
			return o, fmt.Errorf("%w: Decode sets KVLens, Bias, Mask and QueryOffset itself", ErrOption)
		}
	}
	if l.mla != nil && o.Scale == 0 {
		o.Scale = l.mla.scale
	}
	return o, nil
}

// stepBuffers checks the lengths of a decoding call's x, out and LSE for
// total new tokens.
func (l *Layer) stepBuffers(out, x []float32, o *Options, total int) error {
	if err := needLen("x", len(x), total, l.cfg.DModel); err != nil {
		return err
	}
	if err := needLen("out", len(out), total, l.cfg.DModel); err != nil {
		return err
	}
	if o.LSE != nil {
		return needLen("LSE", len(o.LSE), total, l.cfg.Heads)
	}
	return nil
}
