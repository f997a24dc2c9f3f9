package mha

import (
	"context"
	"fmt"
)

// stepCache is where a decoding step's tokens go and its keys come from:
// the contiguous Cache's sequences (cacheStep) or a PagedCache's
// (PagedCache). The step itself (Layer.step) is one pipeline for both:
// options, positions, projections, the storable check, the store, the
// attention, the tree merge and the output projection; the caches differ
// only in where a token's row lies, which problems read them, and how a
// finished or abandoned call leaves them.
type stepCache interface {
	treeCache
	// begin checks the call's counts against the cache (room, sequences
	// named) for options o, before anything changes, and readies the
	// call's state (in sc).
	begin(l *Layer, sc *layerScratch, o *Options, counts []int) error
	// spans appends the cache's storage, which no input or output may
	// overlap, to dst.
	spans(dst []span) []span
	// fits checks that sequence b's n new rows k and v can be stored
	// (storableRows), put stores them at its end (making room).
	fits(b, n int, k, v []float32) error
	put(l *Layer, b, n int, k, v []float32)
	// problems returns a chain step's problems (not a tree's) over the
	// stored rows: q, attn and the LSE as the step packs them.
	problems(l *Layer, sc *layerScratch, counts []int, o *Options) ([]attnWork, error)
	// combine finishes the attention of problems' outputs in attn (a
	// cascade's merge); commit makes the call's tokens part of the
	// sequences, undo takes back what put took (no length changes).
	combine(l *Layer, attn, lse []float32, counts []int)
	commit(counts []int)
	undo()
}

// step runs one decoding call (tree nil: chains of tokens, else a tree
// step) on a held cache st: counts[b] new tokens of its sequence b, x and
// out packed in that order.
func (l *Layer) step(ctx context.Context, out, x []float32, st stepCache, counts []int, tree *Tree, opts *Options) error {
	c, err := callOf(ctx, opts)
	if err != nil {
		return err
	}
	sc := l.getScratch()
	defer l.putScratch(sc)
	// The options live in the scratch: the stepCache calls take them by
	// pointer, which would move a local to the heap.
	o := &sc.step
	defer func() { *o = Options{} }() // the caller's slices: not kept
	if *o, err = l.stepOptions(opts); err != nil {
		return err
	}
	if err := st.begin(l, sc, o, counts); err != nil {
		return err
	}
	total := 0
	for _, n := range counts {
		total += n // checked by begin: each within a cache that fits in memory
	}
	cfg, dm := l.cfg, l.cfg.DModel
	H, Dk := cfg.Heads, cfg.HeadDim
	if err := l.stepBuffers(out, x, o, total); err != nil {
		return err
	}
	if total == 0 {
		return nil
	}
	oi := optionInputs(o) // ALiBi and Sinks: a step takes no Bias, Mask or KVLens
	sc.spans = st.spans(append(sc.spans[:0], f32("out", out, total*dm), f32("OutLSE", o.OutLSE, total*H)))
	if err := noOverlap(sc.spans, []span{f32("x", x, total*dm), oi[0], oi[1], oi[2], oi[3], oi[4]}); err != nil {
		return err
	}
	if err := sc.size(cfg.shape(1, total, total), true); err != nil {
		return err
	}
	var tr *treeScratch
	if tree != nil {
		if sc.tree == nil {
			sc.tree = new(treeScratch)
		}
		tr = sc.tree
		defer func() { tr.parents = nil }() // the caller's slice: read by the masks, not kept
		if err := tr.resolve(tree, counts, st, total, o.ALiBi != nil); err != nil {
			return err
		}
		tr.size(l, counts, total, st.storage(), o.ALiBi != nil)
	}
	l.reserve(o)
	if err := l.e.acquire(); err != nil {
		return err
	}
	defer l.e.release()
	kw, vw := cfg.KVHeads*Dk, cfg.KVHeads*cfg.storedV()
	prep := prepWork{q: sc.q, k: sc.k, qRows: total, kRows: total}
	if l.rope.half > 0 {
		prep.pos, prep.seqLen, prep.cs = sc.positions(total, l.rope.half)
		for b, row := 0, 0; b < len(counts); b++ {
			at := st.cached(b)
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
		l.projectKV(sc, sc.k, sc.v, x, total, c) &&
		l.prepare(prep, c)) {
		return ctx.Err()
	}
	for b, row := 0, 0; b < len(counts); b++ { // nothing is stored unless every row can be
		if err := st.fits(b, counts[b], sc.k[row*kw:], sc.v[row*vw:]); err != nil {
			return err
		}
		row += counts[b]
	}
	for b, row := 0, 0; b < len(counts); b++ {
		n := counts[b]
		st.put(l, b, n, sc.k[row*kw:(row+n)*kw], sc.v[row*vw:(row+n)*vw])
		if tr != nil && n > 0 {
			tr.fill(cfg, st, b, row, st.cached(b), n)
		}
		row += n
	}
	var works []attnWork
	if tr != nil {
		works, err = l.treeProblems(sc, tr, st, counts, o)
	} else {
		works, err = st.problems(l, sc, counts, o)
	}
	defer l.e.putWorks(works)
	if err != nil {
		st.undo()
		return err
	}
	if !l.e.attend(works, c) {
		st.undo()
		return ctx.Err()
	}
	if tr != nil {
		for b, row := 0, 0; b < len(counts); b++ {
			n := counts[b]
			if n > 0 {
				var seqLSE []float32
				if o.OutLSE != nil {
					seqLSE = o.OutLSE[row*H : (row+n)*H]
				}
				tr.merge(cfg, sc.attn, seqLSE, row, n, historyPerRow(o))
			}
			row += n
		}
	} else {
		st.combine(l, sc.attn, o.OutLSE, counts)
	}
	if !l.project(sc, out, sc.attn, &l.w.o, l.w.bo, total, c) {
		st.undo()
		return ctx.Err()
	}
	st.commit(counts)
	return nil
}

// treeProblems returns a tree step's problems: per stepping sequence its
// history's and its tree's (treeScratch.problems).
func (l *Layer) treeProblems(sc *layerScratch, tr *treeScratch, src treeCache, counts []int, o *Options) ([]attnWork, error) {
	works := l.e.getWorks(treeWorks(counts, o))
	w := 0
	var err error
	for b, row := 0, 0; b < len(counts); b++ {
		if n := counts[b]; n > 0 {
			if w, err = tr.problems(l, works, w, sc, src, b, row, n, o); err != nil {
				return works, err
			}
			row += n
		}
	}
	return works, nil
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
	if o.OutLSE != nil {
		return needLen("LSE", len(o.OutLSE), total, l.cfg.Heads)
	}
	return nil
}
