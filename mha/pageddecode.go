package mha

import (
	"context"
	"fmt"
)

// DecodePaged appends counts[i] new tokens to sequence seqs[i] of the
// paged cache (0: it sits the call out) and writes their attention layer
// output: DecodeSeqs's contract over the sequences named, x and out
// [Σ counts][DModel] packed in the order of seqs, the LSE (if asked)
// [Heads][counts[i]] for each in turn. A sequence must appear once.
//
// Sequences whose tables begin with the same full blocks, held before the
// call (a shared system prompt: Fork, Reuse), attend to those blocks as
// one problem: every query of every such sequence against the shared
// keys, read once, merged with each sequence's own part by log-sum-exp
// (cascade attention). Without a window or ALiBi this is automatic; the
// result is the same attention within float32's rounding (the merge is
// exact in float64; the shared part sums in another order).
//
// The pool must have room for every new token (a copy of a shared last
// block counts): otherwise ErrCacheFull and nothing changes; cached keyed
// blocks are evicted, least recently released first, before that. On a
// cache with a Window, opts must set the same Window. When ctx is done the
// call stops and returns ctx.Err(): no sequence's length changes and the
// blocks taken for it return to the pool.
func (l *Layer) DecodePaged(ctx context.Context, out, x []float32, cache *PagedCache, seqs []SeqID, counts []int, opts *Options) error {
	if err := l.usable(); err != nil {
		return err
	}
	if err := cache.hold(); err != nil {
		return err
	}
	defer cache.release()
	return l.decodePaged(ctx, out, x, cache, seqs, counts, nil, opts)
}

// decodePaged runs DecodePaged (tree nil) or DecodePagedTree on a held
// cache: the step pipeline with the cache's call state set for it.
func (l *Layer) decodePaged(ctx context.Context, out, x []float32, cache *PagedCache, seqs []SeqID, counts []int, tree *Tree, opts *Options) error {
	cache.ids, cache.tree = seqs, tree != nil
	defer func() { cache.ids, cache.ps = nil, nil }() // the caller's slice and the layer's scratch: not kept
	return l.step(ctx, out, x, cache, counts, tree, opts)
}

// DecodePagedTree is DecodeTree on a paged cache: each sequence seqs[i]
// takes a tree of counts[i] draft tokens (tree indexes the packed new
// tokens, as DecodeTree's), appended in x's order; PagedCache.Keep then
// commits the accepted path. Its outputs are DecodeTree's: every cached
// token and the token's ancestors, merged by LSE. A tree step runs no
// cascade, and a sliding window releases blocks at Keep, not here.
func (l *Layer) DecodePagedTree(ctx context.Context, out, x []float32, cache *PagedCache, seqs []SeqID, counts []int, tree Tree, opts *Options) error {
	if err := l.usable(); err != nil {
		return err
	}
	if tree.Parents == nil {
		return fmt.Errorf("%w: DecodePagedTree needs Tree.Parents (DecodePaged decodes chains)", ErrOption)
	}
	if err := cache.hold(); err != nil {
		return err
	}
	defer cache.release()
	return l.decodePaged(ctx, out, x, cache, seqs, counts, &tree, opts)
}

// The PagedCache as a step's store (stepCache) and a tree step's cache
// (treeCache): the call's sequences (ids, in the order of counts) and
// their state in ps, the layer's scratch, while the call holds the cache.

func (c *PagedCache) cached(b int) int { return c.ps.have[b] }
func (c *PagedCache) storage() DType   { return c.typ }

// history is the sequence's K/V: its block table (as grown by the call).
func (c *PagedCache) history(b int) (kvData, int) {
	kv := c.store
	kv.pageKeys, kv.pages = c.bt, c.ps.seqPages[b:b+1]
	return kv, len(c.ps.seqPages[b]) * c.bt
}

// newRows copies the sequence's tokens [have, have+n) from their blocks.
func (c *PagedCache) newRows(cfg LayerConfig, dst kvData, b, have, n int) {
	s, bt := c.ps.seqs[b], c.bt
	for i := 0; i < n; { // a run within one block at a time, every head
		pos := have + i
		m := min(n-i, bt-pos%bt)
		copyKV(cfg, dst, i, n, c.store, c.row(s.blocks[pos/bt], pos%bt), bt, m)
		i += m
	}
}

func (c *PagedCache) begin(l *Layer, sc *layerScratch, o *Options, counts []int) error {
	if c.layer != l {
		return fmt.Errorf("%w: paged cache was made by another layer (each Layer decodes only the caches it made)", ErrOption)
	}
	if c.window > 0 && o.Window != c.window {
		return fmt.Errorf("%w: Window = %d, the paged cache releases blocks outside a window of %d", ErrOption, o.Window, c.window)
	}
	if len(c.ids) != len(counts) {
		return fmt.Errorf("%w: counts has %d entries, seqs %d", ErrBuffer, len(counts), len(c.ids))
	}
	if sc.paged == nil {
		sc.paged = new(pagedScratch)
	}
	ps := sc.paged
	c.ps = ps
	ps.seqs, ps.have = ps.seqs[:0], ps.have[:0]
	c.calls++ // marks this call's sequences, to find one named twice
	need := 0
	for i, id := range c.ids {
		s, err := c.seq(id)
		if err != nil {
			return err
		}
		n := counts[i]
		switch {
		case n < 0:
			return fmt.Errorf("%w: counts[%d] = %d, must be >= 0", ErrShape, i, n)
		case n > maxCoord-s.n:
			return fmt.Errorf("%w: sequence %d: %d cached + %d new tokens, more than %d", ErrCacheFull, id, s.n, n, maxCoord)
		}
		if s.call == c.calls {
			return fmt.Errorf("%w: sequence %d appears twice in seqs", ErrOption, id)
		}
		s.call = c.calls
		ps.seqs, ps.have = append(ps.seqs, s), append(ps.have, s.n)
		need += c.appendNeeds(s, n)
	}
	if need > c.available() {
		return fmt.Errorf("%w: the call needs %d blocks, the pool has %d free (of %d)", ErrCacheFull, need, c.available(), c.blocks)
	}
	ps.seqPages, ps.copied = sized(ps.seqPages, len(counts)), sized(ps.copied, len(counts))
	return nil
}

func (c *PagedCache) spans(dst []span) []span {
	st := &c.store
	return append(dst, f32("cache K", st.k, len(st.k)), f32("cache V", st.v, len(st.v)),
		u16("cache K", st.k16, len(st.k16)), u16("cache V", st.v16, len(st.v16)),
		i8("cache K", st.k8, len(st.k8)), i8("cache V", st.v8, len(st.v8)),
		f32("cache K scales", st.ks, len(st.ks)), f32("cache V scales", st.vs, len(st.vs)))
}

func (c *PagedCache) fits(b, n int, k, v []float32) error {
	return c.storable(int(c.ids[b]), c.ps.have[b], n, k, v)
}

// put makes room (grow: new blocks, a copy of a shared last block) and
// writes the rows into their blocks.
func (c *PagedCache) put(l *Layer, b, n int, k, v []float32) {
	ps, s := c.ps, c.ps.seqs[b]
	ps.copied[b] = c.grow(s, n)
	c.write(l.e.ks, s, ps.have[b], n, k, v)
	ps.seqPages[b] = s.blocks
}

// problems: the cascade's shared problems (sequences sharing leading
// blocks, without a window or ALiBi), then each sequence's own.
func (c *PagedCache) problems(l *Layer, sc *layerScratch, counts []int, o *Options) ([]attnWork, error) {
	return l.pagedProblems(c, c.ps, sc, counts, o, o.Window == 0 && o.ALiBi == nil)
}

func (c *PagedCache) combine(l *Layer, attn, lse []float32, counts []int) {
	l.mergeCascade(c.ps, attn, lse, counts)
}

// commit drops the shared blocks the call copied and lengthens the
// sequences; a chain step then releases blocks past the window (a tree
// step leaves that to Keep).
func (c *PagedCache) commit(counts []int) {
	for i, s := range c.ps.seqs {
		c.commitGrow(c.ps.copied[i])
		s.setLen(s.n + counts[i])
		if !c.tree {
			c.releaseOutside(s)
		}
	}
}

// undo returns the call's blocks to the pool: no length changes.
func (c *PagedCache) undo() {
	for i, s := range c.ps.seqs {
		c.undoGrow(s, c.ps.copied[i])
	}
}

// pagedScratch is DecodePaged's own scratch, kept in the layer's.
type pagedScratch struct {
	seqs     []*pagedSeq
	have     []int     // per sequence: its length before the call
	group    []int     // per sequence: its cascade group, or -1
	lens     []int     // per problem: its KVLens entry
	offsets  []int     // per suffix problem: its QueryOffset
	pages    [][]int32 // per problem: its block table
	groups   []cascadeGroup
	next     []int     // per group, while merging: its next member's first row
	gq, go1  []float32 // the groups' gathered queries and shared outputs, [H][rows][dim] each
	gl       []float32 // the groups' shared LSEs, [H][rows] each
	o2, l2   []float32 // the members' own parts: [rows][H][Dv], per sequence [H][n]
	acc      []float64
	outs     [2][]float32
	lses     [2][]float32
	seqPages [][]int32 // per sequence: its block table, grown by the call
	copied   []int32   // per sequence: the shared block its grow copied, or -1
}

// cascadeGroup is sequences sharing their first blocks: the shared part's
// problem covers every member's new rows.
type cascadeGroup struct {
	blocks int // shared leading blocks
	first  int // the first member (its table holds the shared blocks)
	row    int // its first row in gq, go1; rows in gl
	rows   int
}

// storable is Cache.storable's check for a paged cache's sequence (named
// by its ID in the error).
func (c *PagedCache) storable(id, at, n int, k, v []float32) error {
	return storableRows(c.layer.cfg, c.typ, id, at, n, k, v)
}

// pagedProblems groups the stepping sequences that share leading blocks
// (cascade) and returns the call's problems: per group its shared part,
// then per sequence its own part (a member's past the shared blocks,
// another's whole).
func (l *Layer) pagedProblems(cache *PagedCache, ps *pagedScratch, sc *layerScratch, counts []int, o *Options, cascade bool) ([]attnWork, error) {
	cfg := l.cfg
	H, Dk, Dv := cfg.Heads, cfg.HeadDim, cfg.ValueDim
	ps.groups = ps.groups[:0]
	ps.group = sized(ps.group, len(ps.seqs))
	for i := range ps.group {
		ps.group[i] = -1
	}
	rows := 0
	for i, s := range ps.seqs {
		if !cascade || counts[i] == 0 || ps.group[i] >= 0 || ps.have[i] < cache.bt {
			continue
		}
		// The blocks i shares with every later sequence that starts with
		// its first block: full, and before each one's new tokens.
		g := cascadeGroup{blocks: ps.have[i] / cache.bt, first: i, row: rows}
		members := 0
		for j := i + 1; j < len(ps.seqs); j++ {
			t := ps.seqs[j]
			if counts[j] == 0 || ps.group[j] >= 0 || ps.have[j] < cache.bt || t.blocks[0] != s.blocks[0] {
				continue
			}
			common := 1
			for common < min(g.blocks, ps.have[j]/cache.bt) && t.blocks[common] == s.blocks[common] {
				common++
			}
			g.blocks = common
			ps.group[j] = len(ps.groups)
			members++
		}
		if members == 0 {
			continue
		}
		ps.group[i] = len(ps.groups)
		for j := i; j < len(ps.seqs); j++ {
			if ps.group[j] == len(ps.groups) {
				g.rows += counts[j]
			}
		}
		rows += g.rows
		ps.groups = append(ps.groups, g)
	}
	nw := len(ps.groups)
	for i := range ps.seqs {
		if counts[i] > 0 {
			nw++
		}
	}
	ps.gq, ps.go1 = sized(ps.gq, rows*H*Dk), sized(ps.go1, rows*H*Dv)
	ps.gl = sized(ps.gl, rows*H)
	total := len(sc.q) / (H * Dk)
	if rows > 0 {
		ps.o2, ps.l2 = sized(ps.o2, total*H*Dv), sized(ps.l2, total*H)
	}
	ps.lens, ps.offsets = sized(ps.lens, nw), sized(ps.offsets, nw)
	ps.pages = sized(ps.pages, nw)
	works := l.e.getWorks(nw)
	w := 0
	kv := cache.store
	kv.pageKeys = cache.bt
	add := func(out, q []float32, pages []int32, layout Layout, po *Options) error {
		ps.pages[w] = pages
		kv.pages = ps.pages[w : w+1] // the problem's table of one batch
		shape := cfg.shape(1, len(q)/(H*Dk), len(pages)*cache.bt)
		shape.Layout = layout
		var err error
		if works[w].p, err = problem(out, q, kv, shape, po, l.e.workers(po)); err != nil {
			return err
		}
		w++
		return nil
	}
	shared := *o
	shared.Causal, shared.Sinks, shared.KVLens = false, nil, nil // the sinks count once: in the own parts
	for gi := range ps.groups {
		g := &ps.groups[gi]
		// The members' queries heads-major ([H][rows][Dk]): each head's rows
		// one run, as the flash items pack them (BSHD rows ran the same
		// problem 10–13% slower on Zen 4).
		gq := ps.gq[g.row*H*Dk : (g.row+g.rows)*H*Dk]
		for j, row, r := 0, 0, 0; j < len(ps.seqs); j++ {
			if ps.group[j] == gi {
				for i := 0; i < counts[j]; i++ {
					for h := 0; h < H; h++ {
						copy(gq[(h*g.rows+r+i)*Dk:][:Dk], sc.q[((row+i)*H+h)*Dk:][:Dk])
					}
				}
				r += counts[j]
			}
			row += counts[j]
		}
		shared.OutLSE = ps.gl[g.row*H : (g.row+g.rows)*H]
		first := ps.seqs[g.first]
		if err := add(ps.go1[g.row*H*Dv:(g.row+g.rows)*H*Dv], gq, first.blocks[:g.blocks], BHSD, &shared); err != nil {
			return works, err
		}
	}
	own := *o
	own.Causal = true
	lse := o.OutLSE
	for i, row := 0, 0; i < len(ps.seqs); i++ {
		n := counts[i]
		if n == 0 {
			continue
		}
		s, q, out := ps.seqs[i], sc.q[row*H*Dk:(row+n)*H*Dk], sc.attn[row*H*Dv:(row+n)*H*Dv]
		skip := 0
		own.QueryOffset, own.OutLSE = nil, nil
		if lse != nil {
			own.OutLSE = lse[row*H : (row+n)*H]
		}
		if gi := ps.group[i]; gi >= 0 { // past the shared blocks; the offset of its first new token
			skip = ps.groups[gi].blocks * cache.bt
			ps.offsets[w] = ps.have[i] - skip
			own.QueryOffset = &ps.offsets[w]
			out, own.OutLSE = ps.o2[row*H*Dv:(row+n)*H*Dv], ps.l2[row*H:(row+n)*H]
		}
		ps.lens[w] = ps.have[i] + n - skip
		own.KVLens = ps.lens[w : w+1]
		if err := add(out, q, s.blocks[skip/cache.bt:], BSHD, &own); err != nil {
			return works, err
		}
		row += n
	}
	return works[:w], nil
}

// mergeCascade merges each cascade member's shared and own parts into its
// rows of attn (and of the caller's LSE, if asked).
func (l *Layer) mergeCascade(ps *pagedScratch, attn, lse []float32, counts []int) {
	if len(ps.groups) == 0 {
		return
	}
	H, Dv := l.cfg.Heads, l.cfg.ValueDim
	ps.acc = sized(ps.acc, Dv)
	r := ps.next[:0] // per group: its next member's first row in the group
	for _, g := range ps.groups {
		r = append(r, g.row)
	}
	ps.next = r
	for i, row := 0, 0; i < len(ps.seqs); i++ {
		n, gi := counts[i], ps.group[i]
		if gi < 0 {
			row += n
			continue
		}
		g := ps.groups[gi]
		for j := 0; j < n; j++ {
			for h := 0; h < H; h++ {
				gr, at := r[gi]+j, (row+j)*H*Dv+h*Dv
				ps.outs = [2][]float32{ps.go1[(g.row*H+h*g.rows+gr-g.row)*Dv:][:Dv], ps.o2[at:][:Dv]}
				ps.lses = [2][]float32{ps.gl[g.row*H+h*g.rows+gr-g.row:], ps.l2[row*H+h*n+j:]}
				m := mergeRow(attn[at:][:Dv], ps.acc, ps.outs[:], ps.lses[:], 0, 0)
				if lse != nil {
					lse[row*H+h*n+j] = m
				}
			}
		}
		r[gi] += n
		row += n
	}
}
