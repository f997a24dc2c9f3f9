package tile

import (
	"math"

	"github.com/fastattn/fastattn/kernels"
)

// Split is the plan of a decode step (few query rows per KV head): the keys
// are cut into chunks of Keys, one work item per (batch, KV head, chunk)
// holding all the query rows of the head, so each K and V byte is read
// once per step and the work spreads over the cores however few heads
// there are. With a fused decode kernel (kernels.Set.HasDecode) the keys
// every row sees go through it in one call per item, K and V streamed
// once. Each item leaves the running state (O, m, l) of its rows for its
// chunk in a partial buffer; merge combines the chunks of a row in chunk
// order. The chunking depends on the shape only, so results do not
// depend on the thread count.
//
// Over BSHD K/V an item takes a group of Group adjacent KV heads and runs
// them interleaved (headgroups.go).
type Split struct {
	Keys, Chunks, Group int
	call                uint64 // the plan's number (NewAttention), for the int8 mode's memo (q8.go)
}

// Split thresholds: at most splitRows query rows per KV head (one vector
// of AVX-512 lanes) and at least 2·splitMinKeys keys. Chunks have
// splitMaxKeys keys (a call's own cost is then small; longer chunks
// measured no better), halved down to splitMinKeys while
// there are fewer than splitItems items to spread over the cores (items
// of a group of KV heads count once). Flash
// blocks of the path without the fused kernel (and of the edges) have
// splitBlock keys.
const (
	splitRows    = 16
	splitMinKeys = 64
	splitMaxKeys = 512
	splitItems   = 16
	splitBlock   = 64
)

// DecodeRows reports whether p has at most splitRows query rows per KV
// head (Heads/KVHeads·QLen: a decode step's, or a few tokens'): the rows
// a split step takes, whose items are bound by reading K and V, not by
// arithmetic, so they run the float32 kernels (the fused decode) in
// every compute mode but the int8 one.
func DecodeRows(p *Problem) bool { return p.Heads/p.KVHeads*p.QLen <= splitRows }

// NewSplit returns the split plan of p, or false when p is not a decode
// step worth splitting. The chunks cover the longest key length of the
// batch (a KV cache's stride is its capacity, mostly empty early on).
func NewSplit(p *Problem) (Split, bool) {
	n := p.maxKeyLen()
	if !DecodeRows(p) || n < 2*splitMinKeys {
		return Split{}, false
	}
	g := headGroup(p)
	groups := (p.KVHeads + g - 1) / g
	keys := splitMaxKeys
	for keys > splitMinKeys && p.Batch*groups*((n+keys-1)/keys) < splitItems {
		keys /= 2
	}
	return Split{Keys: keys, Chunks: (n + keys - 1) / keys, Group: g}, true
}

// groups is the number of KV head groups of a batch.
func (sp Split) groups(p *Problem) int { return (p.KVHeads + sp.Group - 1) / sp.Group }

// Items is the number of chunk items.
func (sp Split) Items(p *Problem) int { return p.Batch * sp.groups(p) * sp.Chunks }

// partStride is the floats of one row's partial state: O, then m and l.
func partStride(p *Problem) int { return p.ValueDim + 2 }

// PartLen is the length of the partial buffer:
// [Batch][Chunks][Heads][QLen] rows of O, m, l.
func (sp Split) PartLen(p *Problem) int {
	return p.Batch * sp.Chunks * p.Heads * p.QLen * partStride(p)
}

// Fused reports whether the keys every row sees may run through ks's
// fused decode kernel (which adds ALiBi terms but no softcap; of a bias
// or mask, only the runs of keys they leave untouched do; no bfloat16
// mode: its arithmetic is float32's).
func (sp Split) Fused(ks *kernels.Set, p *Problem) bool {
	return ks.HasDecode(p.KVType, p.HeadDim, p.ValueDim) && p.Softcap == 0 && !p.BF16
}

// run computes chunk item n: the query rows of a group of KV heads over
// the chunk's keys, saved to part unnormalized.
func (sp Split) run(ks *kernels.Set, p *Problem, n int, ws *Workspace, part []float32) {
	// KV head groups vary fastest: in BSHD the heads of a key position
	// share its pages, so consecutive items (and the workers side by
	// side) read neighbouring pages. Measured for MHA BSHD before the
	// groups: 61–70% → 80–89% of the read bandwidth in two runs of three;
	// huge pages changed nothing, so the gain is not TLB reach.
	groups := sp.groups(p)
	gi := n % groups
	n /= groups
	chunk, b := n%sp.Chunks, n/sp.Chunks
	k0, k1 := chunk*sp.Keys, min((chunk+1)*sp.Keys, p.KVLen)
	g0, g1 := gi*sp.Group, min((gi+1)*sp.Group, p.KVHeads)
	sp.runGroup(ks, p, b, g0, g1, chunk, k0, k1, ws, part)
}

// runHead runs the rows of KV head g of batch b over chunk's keys
// [k0, k1) and saves their partial state.
func (sp Split) runHead(ks *kernels.Set, p *Problem, b, g, chunk, k0, k1 int, ws *Workspace, part []float32) {
	it := sp.headItem(p, b, g)
	fused := sp.Fused(ks, p)
	ws.q8key = q8Key{call: sp.call, b: b, g: g}
	r := begin(ks, p, it, splitBlock, ws, fused)
	r.keys(k0, k1, fused)
	r.rowsO()
	sp.save(p, it, chunk, ws, part)
}

// save copies the running state of item it's rows in ws to their chunk's
// rows of part.
func (sp Split) save(p *Problem, it item, chunk int, ws *Workspace, part []float32) {
	dv, st := p.ValueDim, partStride(p)
	for hh := 0; hh < it.nh; hh++ {
		for ii := 0; ii < it.nq; ii++ {
			r := hh*it.nq + ii
			dst := part[(((it.b*sp.Chunks+chunk)*p.Heads+it.h0+hh)*p.QLen+ii)*st:][:st]
			copy(dst, ws.o[r*dv:(r+1)*dv])
			dst[dv], dst[dv+1] = ws.m[r], ws.l[r]
		}
	}
}

// MergeItems is the number of merge items: one per (batch, head).
func (sp Split) MergeItems(p *Problem) int { return p.Batch * p.Heads }

// merge combines the chunks of merge item n (batch, head) by MergeParts,
// in chunk order, and writes the output rows and the LSE (m + ln l, or
// with the head's sink). A row whose sums are all 0 is decided by
// rowResult, as in the flash path. acc is the row's float64 scratch.
func (sp Split) merge(p *Problem, n int, part []float32, acc []float64) {
	b, h := n/p.Heads, n%p.Heads
	dv, st := p.ValueDim, partStride(p)
	for i := 0; i < p.QLen; i++ {
		chunk := func(c int) Part {
			pc := part[(((b*sp.Chunks+c)*p.Heads+h)*p.QLen+i)*st:][:st]
			return Part{M: pc[dv], L: pc[dv+1], O: pc[:dv]}
		}
		m, l, nan := MergeParts(acc, sp.Chunks, chunk)
		off, _ := p.row(b, i, h, p.Heads, p.QLen, dv)
		out := p.Out[off : off+dv]
		var lse float32
		switch {
		case nan:
			lse = float32(math.NaN())
			fill(out, lse)
		case math.IsInf(m, -1): // every sum is 0: zeros, or NaN if the row saw keys
			var scale float32
			scale, lse = rowResult(p, b, h, i, 0, 0)
			clear(out)
			if scale != 0 {
				fill(out, scale) // NaN
			}
		default:
			inv := 1 / l
			if p.Sinks != nil {
				var s float32
				s, lse = sunk(p, h, m, l)
				inv = float64(s)
			} else {
				lse = float32(m + math.Log(l))
			}
			for j, a := range acc {
				out[j] = float32(a * inv)
			}
		}
		if p.LSE != nil {
			p.LSE[(b*p.Heads+h)*p.QLen+i] = lse
		}
	}
}
