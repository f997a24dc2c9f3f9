package mha

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// pagedModel is the reference a paged scenario is checked against: each
// live sequence's tokens.
type pagedModel map[SeqID][]float32

// prefixKeys returns the keys of the first n full blocks of a history
// (rows of dm, blocks of bt tokens): block k's key hashes every token up
// to its end, as vLLM chains a block's hash with its parent's.
func prefixKeys(h []float32, dm, bt, n int) []uint64 {
	keys := make([]uint64, n)
	hash := uint64(14695981039346656037) // FNV-1a
	for k := 0; k < n; k++ {
		for _, v := range h[k*bt*dm : (k+1)*bt*dm] {
			hash = (hash ^ uint64(math.Float32bits(v))) * 1099511628211
		}
		keys[k] = hash
	}
	return keys
}

// FuzzPagedOps decodes a sequence of paged-cache operations from the
// input — NewSeq, DecodePaged over a random subset (past the pool
// included, and on a cancelled context), Fork at any length, Truncate,
// Free, SetKeys and Reuse — on a pool of 12 blocks of 16 tokens, and
// checks the pool's accounting after every operation (PagedCache.Check:
// no block leaked, none held twice or freed twice), every sequence's
// length against a model, and the outputs of every successful step
// against a recomputation from the sequence's history on a contiguous
// cache (sequences that share blocks run as a cascade).
func FuzzPagedOps(f *testing.F) {
	f.Add(uint8(0), []byte{0, 0, 1, 1, 40, 2, 0, 35, 0, 1, 1, 1, 3, 3, 1, 1, 1, 4, 1, 5, 0, 6, 0})
	f.Add(uint8(1), []byte{0, 1, 0, 90, 2, 0, 16, 2, 0, 33, 1, 7, 2, 2, 2, 5, 0, 1, 6, 0, 2, 1, 3})
	f.Add(uint8(2), []byte{0, 1, 0, 64, 5, 0, 6, 1, 1, 2, 2, 200, 200, 4, 0, 7, 0, 1})
	f.Add(uint8(3), []byte{0, 1, 0, 20, 7, 0, 1, 9, 9, 1, 2, 4, 1, 0})
	f.Fuzz(func(t *testing.T, kind uint8, ops []byte) {
		if len(ops) > 96 {
			ops = ops[:96]
		}
		const dm, bt, blocks = 16, 16, 12
		e := engines[int(kind)%len(engines)]
		rng := rand.New(rand.NewPCG(uint64(kind), uint64(len(ops))))
		l, _ := testLayer(t, e, rng, LayerConfig{DModel: dm, Heads: 4, KVHeads: 1, HeadDim: 8,
			Rotary: Rotary{Dims: 8}}, true)
		typ := pagedTypes[int(kind/4)%len(pagedTypes)]
		probe, err := l.NewPagedCache(PagedConfig{Type: typ, BlockTokens: bt, Bytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		pc, err := l.NewPagedCache(PagedConfig{Type: typ, BlockTokens: bt, Bytes: blocks * probe.BlockBytes()})
		if err != nil {
			t.Fatal(err)
		}
		ref, err := l.NewCacheOf(1, blocks*bt, typ)
		if err != nil {
			t.Fatal(err)
		}
		model := pagedModel{}
		var ids []SeqID // the live sequences, in creation order
		next := func() int {
			if len(ops) == 0 {
				return 0
			}
			b := int(ops[0])
			ops = ops[1:]
			return b
		}
		pick := func() (SeqID, bool) {
			if len(ids) == 0 {
				return 0, false
			}
			return ids[next()%len(ids)], true
		}
		cancelled, stop := context.WithCancel(context.Background())
		stop()
		var seen [][]float32 // histories whose blocks were keyed
		for len(ops) > 0 {
			switch next() % 8 {
			case 0: // NewSeq
				id, err := pc.NewSeq()
				if err != nil {
					t.Fatal(err)
				}
				ids, model[id] = append(ids, id), nil
			case 1, 2: // DecodePaged over the first few sequences; case 2 on a cancelled context
				var seqs []SeqID
				var counts []int
				for _, id := range ids {
					if next()%3 != 0 {
						seqs, counts = append(seqs, id), append(counts, next()%40)
					}
				}
				n := sum(counts)
				x, out := random(rng, n*dm), make([]float32, n*dm)
				ctx := context.Background()
				if len(ops)%2 == 1 && n > 0 {
					ctx = cancelled
				}
				free := pc.FreeBlocks()
				err := l.DecodePaged(ctx, out, x, pc, seqs, counts, nil)
				switch {
				case ctx == cancelled || errors.Is(err, ErrCacheFull):
					if err == nil || !(errors.Is(err, context.Canceled) || errors.Is(err, ErrCacheFull)) {
						t.Fatalf("a cancelled or oversized DecodePaged %v: %v", counts, err)
					}
					if pc.FreeBlocks() != free {
						t.Fatalf("a refused DecodePaged took %d blocks", free-pc.FreeBlocks())
					}
				case err != nil:
					t.Fatalf("DecodePaged %v: %v", counts, err)
				default:
					for i, row := 0, 0; i < len(seqs); i++ {
						if counts[i] == 0 {
							continue
						}
						h := append(model[seqs[i]], x[row*dm:(row+counts[i])*dm]...)
						model[seqs[i]] = h
						if d := recompute(l, ref, h, out[row*dm:(row+counts[i])*dm], nil); !(d <= 2e-4) {
							t.Fatalf("%v pool, sequence %d at %d tokens: outputs differ from the recomputation by %.3g", typ, seqs[i], len(h)/dm, d)
						}
						row += counts[i]
					}
				}
			case 3: // Fork, sometimes past the length
				src, ok := pick()
				if !ok {
					continue
				}
				n := next() % 60
				id, err := pc.Fork(src, n)
				if n > len(model[src])/dm {
					if !errors.Is(err, ErrOption) {
						t.Fatalf("Fork of %d tokens of %d: %v", n, len(model[src])/dm, err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				ids, model[id] = append(ids, id), append([]float32(nil), model[src][:n*dm]...)
			case 4: // Truncate
				id, ok := pick()
				if !ok {
					continue
				}
				n := next() % 60
				err := pc.Truncate(id, n)
				if n > len(model[id])/dm {
					if !errors.Is(err, ErrOption) {
						t.Fatalf("Truncate to %d of %d: %v", n, len(model[id])/dm, err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				model[id] = model[id][:n*dm]
			case 5: // Free
				id, ok := pick()
				if !ok {
					continue
				}
				if err := pc.Free(id); err != nil {
					t.Fatal(err)
				}
				delete(model, id)
				for i := range ids {
					if ids[i] == id {
						ids = append(ids[:i], ids[i+1:]...)
						break
					}
				}
			case 6: // SetKeys: each full block keyed by the hash of its tokens and all before it
				id, ok := pick()
				if !ok {
					continue
				}
				h := model[id]
				if err := pc.SetKeys(id, prefixKeys(h, dm, bt, len(h)/dm/bt)); err != nil {
					t.Fatal(err)
				}
				seen = append(seen, h)
			case 7: // Reuse the keys of a history keyed before (its sequence live or not)
				if len(seen) == 0 {
					continue
				}
				h := seen[next()%len(seen)]
				id, n, err := pc.Reuse(prefixKeys(h, dm, bt, len(h)/dm/bt))
				if err != nil {
					t.Fatal(err)
				}
				if n%bt != 0 || n*dm > len(h) {
					t.Fatalf("Reuse gave %d tokens of a %d-token history", n, len(h)/dm)
				}
				ids, model[id] = append(ids, id), append([]float32(nil), h[:n*dm]...)
			}
			if err := pc.Check(); err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				if n, err := pc.Len(id); err != nil || n != len(model[id])/dm {
					t.Fatalf("sequence %d holds %d tokens, the model %d (%v)", id, n, len(model[id])/dm, err)
				}
			}
			if pc.Seqs() != len(ids) {
				t.Fatalf("%d sequences, the model %d", pc.Seqs(), len(ids))
			}
		}
	})
}
