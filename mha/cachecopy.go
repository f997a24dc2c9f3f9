package mha

import (
	"fmt"
	"reflect"
)

// CopyTo copies the first n tokens of sequence src into sequence dst of
// cache to — c itself or another cache of a layer with the same K/V
// geometry (KVHeads, HeadDim, ValueDim), the same rotary embedding and the
// same storage type — and sets dst's length to n: prompt reuse, parallel
// sampling and beam search start several sequences from one prefix
// without recomputing it. Tokens are copied as stored (keys already
// rotated for their positions, 16-bit values bit for bit), so a sequence
// forked from a prefix and then decoded gives, bit for bit, the outputs of
// one that decoded the prefix itself.
//
// n must be in [0, Len(src)] (ErrOption) and at most to.Cap()
// (ErrCacheFull); sequences outside [0, Batch) and a mismatched cache are
// ErrOption; on any error nothing changes. CopyTo holds both caches for
// the call: either in use by another call is ErrBusy. dst may equal src
// in the same cache (the sequence is cut to n, as Truncate).
//
// The copy is the data, so that a later paged cache (blocks shared by
// reference, vLLM-style) can make CopyTo share the prefix's blocks and copy
// on write without changing callers (docs/DESIGN.md).
func (c *Cache) CopyTo(to *Cache, dst, src, n int) error {
	if err := c.hold(); err != nil {
		return err
	}
	defer c.release()
	if to != c {
		if err := to.hold(); err != nil {
			return err
		}
		defer to.release()
	}
	if err := c.compatible(to); err != nil {
		return err
	}
	if src < 0 || src >= c.batch || dst < 0 || dst >= to.batch {
		return fmt.Errorf("%w: CopyTo from sequence %d of %d to sequence %d of %d", ErrOption, src, c.batch, dst, to.batch)
	}
	if have := c.lens[src].Load(); n < 0 || int64(n) > have {
		return fmt.Errorf("%w: CopyTo of %d tokens from sequence %d, it holds %d", ErrOption, n, src, have)
	}
	if n > to.capa {
		return fmt.Errorf("%w: CopyTo of %d tokens into a cache of capacity %d", ErrCacheFull, n, to.capa)
	}
	if to != c || dst != src {
		c.copyRows(to, src, 0, dst, 0, n)
	}
	to.lens[dst].Store(int64(n))
	return nil
}

// Keep keeps, after the first from tokens of sequence seq, the tokens at
// slots (token indices, strictly increasing, each in [from, Len(seq))) in
// their order, and drops the rest: the sequence becomes its first from
// tokens followed by those, Len(seq) = from + len(slots). It commits the
// accepted path of a verified draft tree, or any subset of the newest
// tokens, without recomputing them. Tokens move as stored: a key keeps the
// rotation of the position it was decoded at, so a kept token should sit
// at that position afterwards (a tree's accepted path, whose depths
// follow from, does). Bad arguments are ErrOption and change nothing; a
// cache in use by another call is ErrBusy.
func (c *Cache) Keep(seq, from int, slots []int) error {
	if err := c.hold(); err != nil {
		return err
	}
	defer c.release()
	if seq < 0 || seq >= c.batch {
		return fmt.Errorf("%w: Keep on sequence %d, the cache has %d", ErrOption, seq, c.batch)
	}
	have := int(c.lens[seq].Load())
	if from < 0 || from > have {
		return fmt.Errorf("%w: Keep after %d tokens of sequence %d, it holds %d", ErrOption, from, seq, have)
	}
	for i, s := range slots {
		switch {
		case s < from || s >= have:
			return fmt.Errorf("%w: Keep of slot %d (slots[%d]) of sequence %d: must be in [%d, %d)", ErrOption, s, i, seq, from, have)
		case i > 0 && s <= slots[i-1]:
			return fmt.Errorf("%w: Keep: slots[%d] = %d after slots[%d] = %d: slots must increase", ErrOption, i, s, i-1, slots[i-1])
		}
	}
	// Slot slots[i] >= from+i moves down to from+i: increasing slots never
	// overwrite one still to move. Runs of consecutive slots move at once.
	for i := 0; i < len(slots); {
		n := 1
		for i+n < len(slots) && slots[i+n] == slots[i]+n {
			n++
		}
		if slots[i] != from+i {
			c.copyRows(c, seq, slots[i], seq, from+i, n)
		}
		i += n
	}
	c.lens[seq].Store(int64(from + len(slots)))
	return nil
}

// copyRows copies n stored tokens of sequence src from token a on into
// sequence dst of cache to from token b on, K and V, every KV head, as
// stored (to has c's geometry and type; when the ranges overlap in one
// sequence, b <= a: copy moves them as memmove does).
func (c *Cache) copyRows(to *Cache, src, a, dst, b, n int) {
	copyKV(c.layer.cfg, to.kv(dst), b, to.capa, c.kv(src), a, c.capa, n)
}

// copyKV copies n stored rows of K and V of every KV head g, from row
// srcAt + g·srcStride of from to row dstAt + g·dstStride of to: rows of
// HeadDim (K) and ValueDim (V) elements of from's type (to's too), int8's
// and int4's scales along. Overlapping runs move as memmove moves them.
func copyKV(cfg LayerConfig, to kvData, dstAt, dstStride int, from kvData, srcAt, srcStride, n int) {
	dk, dv := cfg.HeadDim, cfg.storedV()
	for g := 0; g < cfg.KVHeads; g++ {
		j, i := dstAt+g*dstStride, srcAt+g*srcStride
		switch {
		case from.t.is16():
			copyRun(to.k16, from.k16, j, i, n, dk)
			copyRun(to.v16, from.v16, j, i, n, dv)
		case from.t.quantized():
			copyRun(to.k8, from.k8, j, i, n, from.t.width(dk))
			copyRun(to.v8, from.v8, j, i, n, from.t.width(dv))
			copyRun(to.ks, from.ks, j, i, n, QuantBlocks(dk))
			copyRun(to.vs, from.vs, j, i, n, QuantBlocks(dv))
		default:
			copyRun(to.k, from.k, j, i, n, dk)
			copyRun(to.v, from.v, j, i, n, dv)
		}
	}
}

// copyRun copies rows [i, i+n) of src to rows [j, j+n) of dst, rows of d.
func copyRun[T any](dst, src []T, j, i, n, d int) {
	copy(dst[j*d:(j+n)*d], src[i*d:(i+n)*d])
}

// compatible reports, as an ErrOption naming the difference, whether to
// holds K and V that c's tokens can be copied into.
func (c *Cache) compatible(to *Cache) error {
	a, b := c.layer.cfg, to.layer.cfg
	switch {
	case c.typ != to.typ:
		return fmt.Errorf("%w: CopyTo between caches of types %v and %v", ErrOption, c.typ, to.typ)
	case a.KVHeads != b.KVHeads || a.HeadDim != b.HeadDim || a.ValueDim != b.ValueDim || a.ValueInKey != b.ValueInKey:
		return fmt.Errorf("%w: CopyTo between layers of KVHeads, HeadDim, ValueDim, ValueInKey %d, %d, %d, %v and %d, %d, %d, %v",
			ErrOption, a.KVHeads, a.HeadDim, a.ValueDim, a.ValueInKey, b.KVHeads, b.HeadDim, b.ValueDim, b.ValueInKey)
	case !sameRotary(a.Rotary, b.Rotary):
		return fmt.Errorf("%w: CopyTo between layers with different rotary embeddings (their keys are rotated differently)", ErrOption)
	}
	return nil
}

// sameRotary reports whether two rotary settings rotate keys alike (the
// scaling rules compared field by field, factor lists element-wise).
func sameRotary(a, b Rotary) bool { return reflect.DeepEqual(a, b) }
