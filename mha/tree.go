package mha

import (
	"context"
	"fmt"
	"math"
)

// Tree is the shape of a DecodeTree call's draft tokens: one entry per
// new token, in x's packed order (sequence 0's new tokens, then sequence
// 1's, ...).
type Tree struct {
	// Parents holds the index, among its own sequence's new tokens, of
	// each token's parent, or -1 for a token that follows the cached
	// tokens directly. A parent comes before its children (so there is no
	// cycle). A token's depth is 0 for a root, its parent's plus one.
	Parents []int
	// Positions, when not nil, holds each token's position (rotary,
	// Window and ALiBi measure from it): at least its sequence's Len (the
	// cached tokens come first), above its parent's, at most MaxPosition.
	// nil means Len(seq) + depth: siblings share a position, a path's
	// tokens are consecutive.
	Positions []int
}

// MaxPosition is the largest position Tree.Positions may give.
const MaxPosition = math.MaxInt / 4

// DecodeTree is DecodeSeqs for a tree of draft tokens per sequence, as a
// speculative decoder verifies them (Medusa, EAGLE, llama.cpp's tree
// drafts): each new token attends to every cached token of its sequence,
// to its ancestors among the new tokens (tree.Parents), and to itself;
// never to a sibling or another branch. Rotary embeddings, Window and
// ALiBi use each token's position (tree.Positions).
//
// Every new token is appended to the cache in x's order (token i of the
// sequence at slot Len(seq) + i), so after choosing the accepted path,
// Keep(seq, Len(seq), its slots) commits it. With the default positions a
// path's tokens then sit at the positions they were rotated for, and the
// cache is, bit for bit, the cache that decoding the path alone leaves.
// The outputs of a path's tokens equal that decoding's within float32
// rounding (not bit for bit: each row's softmax runs over the cached
// tokens and the tree's in two parts, merged). A chain (parents -1, 0, 1,
// …) is DecodeSeqs.
//
// opts, errors and cancellation are DecodeSeqs'. Parents or positions
// that break the rules above are ErrOption naming the token, and so is,
// with ALiBi, a token whose position plus its sequence's cached length
// reaches MaxALiBiSpan − 1 (its distances must be exact float32 integers;
// the cache's capacity plays no part); a tree whose
// slices do not hold one entry per new token ErrBuffer; nothing changes.
func (l *Layer) DecodeTree(ctx context.Context, out, x []float32, cache *Cache, counts []int, tree Tree, opts *Options) error {
	if err := l.usable(); err != nil {
		return err
	}
	if tree.Parents == nil {
		return fmt.Errorf("%w: DecodeTree needs Tree.Parents (DecodeSeqs decodes chains)", ErrOption)
	}
	if err := cache.hold(); err != nil {
		return err
	}
	defer cache.release()
	return l.decode(ctx, out, x, cache, counts, &tree, opts)
}

// treeScratch holds the buffers a tree step needs beyond a chain's, per
// new token row (Σ counts rows, packed by sequence like x).
type treeScratch struct {
	parents []int        // the call's parents (read only)
	mo      int          // the next sequence's offset in mask (and /H in bias)
	span    []int        // per sequence: its largest position plus one
	at      []int        // each token's position (the per-row history problems' QueryOffset)
	lens    []int        // per row: its sequence's cached length (the history problems' KVLens)
	mask    []bool       // per sequence, [n][n]: token i sees token k of the tree
	bias    []float32    // per sequence with ALiBi, [H][n][n]: the tree keys' ALiBi terms
	o1, o2  []float32    // [rows][H][Dv]: the history's and the tree's outputs
	l1, l2  []float32    // per sequence [H][n]: their LSEs
	lrow    []float32    // [rows][H]: the per-row history problems' LSEs
	k, v    []float32    // per sequence [Hkv][n][dim]: the tree's stored K and V, float32
	k16     []uint16     // or 16-bit
	v16     []uint16     //
	k8, v8  []int8       // or int8 (int4: its bytes)
	ks, vs  []float32    // with their scales
	acc     []float64    // a merge's row
	outs    [2][]float32 // the two parts of the sequence being merged
	lses    [2][]float32
}

// resolve checks tree against counts and the cache's lengths, and fills
// t.at with each token's position and t.span with each sequence's
// length for rotary (its largest position plus one).
func (t *treeScratch) resolve(tree *Tree, counts []int, cache treeCache, total int, alibi bool) error {
	if len(tree.Parents) != total || (tree.Positions != nil && len(tree.Positions) != total) {
		return fmt.Errorf("%w: Tree has %d parents and %d positions for %d new tokens", ErrBuffer, len(tree.Parents), len(tree.Positions), total)
	}
	t.parents = tree.Parents
	t.at, t.span = sized(t.at, total), sized(t.span, len(counts))
	for b, row := 0, 0; b < len(counts); b++ {
		have := cache.cached(b)
		t.span[b] = 0
		for i := 0; i < counts[b]; i++ {
			p := t.parents[row+i]
			if p < -1 || p >= i {
				return fmt.Errorf("%w: Tree.Parents[%d] = %d: token %d of sequence %d needs a parent in [-1, %d), one of its sequence's earlier new tokens",
					ErrOption, row+i, p, i, b, i)
			}
			at := have // a root's default position
			if p >= 0 {
				at = t.at[row+p] + 1
			}
			if tree.Positions != nil {
				at = tree.Positions[row+i]
				switch {
				case at < have || at > MaxPosition:
					return fmt.Errorf("%w: Tree.Positions[%d] = %d: token %d of sequence %d must stand in [%d, %d] (after its %d cached tokens)",
						ErrOption, row+i, at, i, b, have, MaxPosition, have)
				case p >= 0 && at <= t.at[row+p]:
					return fmt.Errorf("%w: Tree.Positions[%d] = %d: token %d of sequence %d must stand after its parent, at %d",
						ErrOption, row+i, at, i, b, t.at[row+p])
				}
			}
			if alibi && have+at+1 >= MaxALiBiSpan { // the history problem's span: 1 row, have keys, offset at
				return fmt.Errorf("%w: Tree token %d (token %d of sequence %d) at position %d after %d cached tokens: with ALiBi, position + cached tokens + 1 must stay below MaxALiBiSpan = %d",
					ErrOption, row+i, i, b, at, have, MaxALiBiSpan)
			}
			t.at[row+i] = at
			t.span[b] = max(t.span[b], at+1)
		}
		row += counts[b]
	}
	return nil
}

// treeWorks is how many attention problems a tree step runs: per stepping
// sequence its tree's, and its history's — one, or one per row when
// Window or ALiBi make each position's view of the history its own.
func treeWorks(counts []int, o *Options) int {
	n := 0
	for _, c := range counts {
		switch {
		case c == 0:
		case historyPerRow(o):
			n += 1 + c
		default:
			n += 2
		}
	}
	return n
}

// historyPerRow reports whether a tree step runs the history as one
// problem per row: Window and ALiBi depend on each token's position.
func historyPerRow(o *Options) bool { return o.Window > 0 || o.ALiBi != nil }

// size readies the buffers of a step of rows new tokens in sequences
// holding counts of them.
func (t *treeScratch) size(l *Layer, counts []int, rows int, typ DType, alibi bool) {
	cfg := l.cfg
	H, Hkv, Dk, Dv := cfg.Heads, cfg.KVHeads, cfg.HeadDim, cfg.ValueDim
	sq := 0
	for _, n := range counts {
		sq += n * n
	}
	t.mo = 0
	t.lens = sized(t.lens, rows)
	t.mask = sized(t.mask, sq)
	if alibi {
		t.bias = sized(t.bias, H*sq)
	}
	t.o1, t.o2 = sized(t.o1, rows*H*Dv), sized(t.o2, rows*H*Dv)
	t.l1, t.l2, t.lrow = sized(t.l1, rows*H), sized(t.l2, rows*H), sized(t.lrow, rows*H)
	t.acc = sized(t.acc, Dv)
	sv := cfg.storedV() // the tree's V rows: none inside K
	switch {
	case typ.is16():
		t.k16, t.v16 = sized(t.k16, rows*Hkv*Dk), sized(t.v16, rows*Hkv*sv)
	case typ.quantized():
		t.k8, t.v8 = sized(t.k8, rows*Hkv*typ.width(Dk)), sized(t.v8, rows*Hkv*typ.width(sv))
		t.ks, t.vs = sized(t.ks, rows*Hkv*QuantBlocks(Dk)), sized(t.vs, rows*Hkv*QuantBlocks(sv))
	default:
		t.k, t.v = sized(t.k, rows*Hkv*Dk), sized(t.v, rows*Hkv*sv)
	}
}

// kv returns the tree keys of the sequence whose rows start at row, n of
// them: [1][Hkv][n][dim] in the cache's type, filled by fill.
func (t *treeScratch) kv(cfg LayerConfig, typ DType, row, n int) kvData {
	Hkv, Dk, Dv := cfg.KVHeads, cfg.HeadDim, cfg.storedV()
	wk, wv := typ.width(Dk), typ.width(Dv)
	kr, vr := [2]int{row * Hkv * wk, (row + n) * Hkv * wk}, [2]int{row * Hkv * wv, (row + n) * Hkv * wv}
	d := kvData{t: typ, headsMajor: true}
	switch {
	case typ.is16():
		d.k16, d.v16 = t.k16[kr[0]:kr[1]], t.v16[vr[0]:vr[1]]
	case typ.quantized():
		bk, bv := QuantBlocks(Dk), QuantBlocks(Dv)
		d.k8, d.v8 = t.k8[kr[0]:kr[1]], t.v8[vr[0]:vr[1]]
		d.ks, d.vs = t.ks[row*Hkv*bk:(row+n)*Hkv*bk], t.vs[row*Hkv*bv:(row+n)*Hkv*bv]
	default:
		d.k, d.v = t.k[kr[0]:kr[1]], t.v[vr[0]:vr[1]]
	}
	return d
}

// problems appends sequence b's problems to works from w on — its
// history's and its tree's — and fills the tree's mask (and ALiBi terms);
// it returns the next free work. rows [row, row+n) are the sequence's new
// tokens, have its cached length, o the caller's options.
func (t *treeScratch) problems(l *Layer, works []attnWork, w int, sc *layerScratch, cache treeCache, b, row, n int, o *Options) (int, error) {
	cfg := l.cfg
	H, Dk, Dv := cfg.Heads, cfg.HeadDim, cfg.ValueDim
	have := cache.cached(b)
	kv, kvLen := cache.history(b)
	workers := l.e.workers(o)
	for i := 0; i < n; i++ {
		t.lens[row+i] = have
	}
	// The history: every cached key, seen by every new token.
	hist := cfg.shape(1, n, kvLen)
	oh := Options{Scale: o.Scale, Softcap: o.Softcap, Sinks: o.Sinks, KVLens: t.lens[row : row+1], OutLSE: t.l1[row*H : (row+n)*H]}
	var err error
	if !historyPerRow(o) {
		if works[w].p, err = problem(t.o1[row*H*Dv:(row+n)*H*Dv], sc.q[row*H*Dk:(row+n)*H*Dk], kv, hist, &oh, workers); err != nil {
			return w, err
		}
		w++
	} else { // each token at its own position: causal there, with its window and distances
		hist.QLen = 1
		oh.Causal, oh.Window, oh.ALiBi = true, o.Window, o.ALiBi
		for i := row; i < row+n; i++ {
			oh.QueryOffset, oh.KVLens, oh.OutLSE = &t.at[i], t.lens[i:i+1], t.lrow[i*H:(i+1)*H]
			if works[w].p, err = problem(t.o1[i*H*Dv:(i+1)*H*Dv], sc.q[i*H*Dk:(i+1)*H*Dk], kv, hist, &oh, workers); err != nil {
				return w, err
			}
			w++
		}
	}
	// The tree: token i sees token k if k is i or one of its ancestors
	// (and, with a window, close enough); ALiBi as the bias of those keys.
	mo := t.mo
	t.mo += n * n
	mask := t.mask[mo : mo+n*n]
	clear(mask)
	for i := 0; i < n; i++ {
		for k := i; k >= 0; k = t.parents[row+k] {
			if o.Window > 0 && t.at[row+i]-t.at[row+k] >= o.Window {
				break // and every ancestor further up
			}
			mask[i*n+k] = true
		}
	}
	ot := Options{Scale: o.Scale, Softcap: o.Softcap, Mask: mask, MaskQLen: n, OutLSE: t.l2[row*H : (row+n)*H]}
	if o.ALiBi != nil {
		ot.Bias, ot.BiasHeads, ot.BiasQLen = t.bias[H*mo:H*(mo+n*n)], H, n
		for h := 0; h < H; h++ {
			for i := 0; i < n; i++ {
				for k := 0; k < n; k++ {
					ot.Bias[(h*n+i)*n+k] = o.ALiBi[h] * float32(t.at[row+k]-t.at[row+i])
				}
			}
		}
	}
	tree := cfg.shape(1, n, n)
	if works[w].p, err = problem(t.o2[row*H*Dv:(row+n)*H*Dv], sc.q[row*H*Dk:(row+n)*H*Dk], t.kv(cfg, cache.storage(), row, n), tree, &ot, workers); err != nil {
		return w, err
	}
	return w + 1, nil
}

// fill copies the tree tokens of sequence b, stored at slots [have,
// have+n) of the cache, into the tree's K and V (rows from row on).
func (t *treeScratch) fill(cfg LayerConfig, cache treeCache, b, row, have, n int) {
	cache.newRows(cfg, t.kv(cfg, cache.storage(), row, n), b, have, n)
}

// treeCache is what a tree step reads of the cache it decodes into: a
// Cache, or the sequences of a DecodePagedTree call (pagedTree), b
// indexing the call's sequences.
type treeCache interface {
	cached(b int) int                                    // sequence b's tokens before the call
	history(b int) (kvData, int)                         // its K/V as a problem reads them, and the shape's KVLen
	storage() DType                                      // the storage type of K and V
	newRows(cfg LayerConfig, dst kvData, b, have, n int) // its tokens [have, have+n) into dst ([KVHeads][n][dim])
}

func (c *Cache) cached(b int) int            { return int(c.lens[b].Load()) }
func (c *Cache) history(b int) (kvData, int) { return c.kv(b), c.capa }
func (c *Cache) storage() DType              { return c.typ }
func (c *Cache) newRows(cfg LayerConfig, dst kvData, b, have, n int) {
	copyKV(cfg, dst, 0, n, c.kv(b), have, c.capa, n)
}

// merge combines the history's and the tree's results of the sequence
// whose rows start at row into attn ([rows][H][Dv]) and, if lse is not
// nil, its [H][n] LSEs; perRow says the history ran one problem per row
// (its LSEs in lrow, [row][H]).
func (t *treeScratch) merge(cfg LayerConfig, attn, lse []float32, row, n int, perRow bool) {
	H, Dv := cfg.Heads, cfg.ValueDim
	l1, l2 := t.l1[row*H:(row+n)*H], t.l2[row*H:(row+n)*H]
	if perRow {
		for i := 0; i < n; i++ {
			for h := 0; h < H; h++ {
				l1[h*n+i] = t.lrow[(row+i)*H+h]
			}
		}
	}
	t.outs = [2][]float32{t.o1[row*H*Dv : (row+n)*H*Dv], t.o2[row*H*Dv : (row+n)*H*Dv]}
	t.lses = [2][]float32{l1, l2}
	for i := 0; i < n; i++ {
		for h := 0; h < H; h++ {
			o := (i*H + h) * Dv
			m := mergeRow(attn[row*H*Dv+o:][:Dv], t.acc, t.outs[:], t.lses[:], h*n+i, o)
			if lse != nil {
				lse[h*n+i] = m
			}
		}
	}
}
