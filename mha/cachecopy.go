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
		cfg := c.layer.cfg
		for _, t := range [2]struct {
			dim                int
			from, into         []float32
			from16, to16       []uint16
			from8, to8         []int8
			fromScale, toScale []float32
		}{{cfg.HeadDim, c.K, to.K, c.K16, to.K16, c.K8, to.K8, c.KScale, to.KScale},
			{cfg.ValueDim, c.V, to.V, c.V16, to.V16, c.V8, to.V8, c.VScale, to.VScale}} {
			nb := Int8Blocks(t.dim)
			for g := 0; g < cfg.KVHeads; g++ {
				a := (src*cfg.KVHeads + g) * c.capa  // src's first row of head g
				b := (dst*cfg.KVHeads + g) * to.capa // dst's
				switch {
				case c.typ.is16():
					copy(t.to16[b*t.dim:(b+n)*t.dim], t.from16[a*t.dim:(a+n)*t.dim])
				case c.typ == Int8:
					copy(t.to8[b*t.dim:(b+n)*t.dim], t.from8[a*t.dim:(a+n)*t.dim])
					copy(t.toScale[b*nb:(b+n)*nb], t.fromScale[a*nb:(a+n)*nb])
				default:
					copy(t.into[b*t.dim:(b+n)*t.dim], t.from[a*t.dim:(a+n)*t.dim])
				}
			}
		}
	}
	to.lens[dst].Store(int64(n))
	return nil
}

// compatible reports, as an ErrOption naming the difference, whether to
// holds K and V that c's tokens can be copied into.
func (c *Cache) compatible(to *Cache) error {
	a, b := c.layer.cfg, to.layer.cfg
	switch {
	case c.typ != to.typ:
		return fmt.Errorf("%w: CopyTo between caches of types %v and %v", ErrOption, c.typ, to.typ)
	case a.KVHeads != b.KVHeads || a.HeadDim != b.HeadDim || a.ValueDim != b.ValueDim:
		return fmt.Errorf("%w: CopyTo between layers of KVHeads, HeadDim, ValueDim %d, %d, %d and %d, %d, %d",
			ErrOption, a.KVHeads, a.HeadDim, a.ValueDim, b.KVHeads, b.HeadDim, b.ValueDim)
	case !sameRotary(a.Rotary, b.Rotary):
		return fmt.Errorf("%w: CopyTo between layers with different rotary embeddings (their keys are rotated differently)", ErrOption)
	}
	return nil
}

// sameRotary reports whether two rotary settings rotate keys alike (the
// scaling rules compared field by field, factor lists element-wise).
func sameRotary(a, b Rotary) bool { return reflect.DeepEqual(a, b) }
