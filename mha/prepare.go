package mha

import (
	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/tile"
)

// prepRows is the rows (tokens) of one prepare item: enough to amortize
// the item's dispatch, few enough to spread a decode batch.
const prepRows = 16

// prepWork applies the layer's QK-norm and rotary embedding to projected
// queries and keys, in place, prepRows tokens per item.
type prepWork struct {
	l            *Layer
	q, k         []float32 // [qRows][Heads][HeadDim], [kRows][KVHeads][HeadDim]; either may be empty
	qRows, kRows int
	pos          []int     // position of each row (q and k rows alike), nil: no rotary
	seqLen       []int     // the length of each row's sequence once the call's tokens are in (for rope.table)
	cs           []float32 // [rows][2][half]: the angles' cosines and sines, per row
}

// Items returns the number of blocks of prepRows tokens.
func (t *prepWork) Items() int { return (max(t.qRows, t.kRows) + prepRows - 1) / prepRows }

// Run prepares block n of tokens.
func (t *prepWork) Run(_ *kernels.Set, n int, _ *tile.Workspace) {
	l, dk := t.l, t.l.cfg.HeadDim
	H, Hkv, half := l.cfg.Heads, l.cfg.KVHeads, l.rope.half
	// The frequencies of the rows' sequence lengths (one table while the
	// length stays the same: the rows of a sequence are consecutive).
	var buf []float64
	if l.rope.lengthDependent() { // the stack array is zeroed only here
		var stack [maxRopeStack]float64
		buf = stack[:min(half, maxRopeStack)]
		if half > maxRopeStack {
			buf = make([]float64, half)
		}
	}
	freq, tableLen := l.rope.freq, -1
	for r := n * prepRows; r < min((n+1)*prepRows, max(t.qRows, t.kRows)); r++ {
		var cs []float32
		if t.pos != nil {
			if buf != nil && t.seqLen[r] != tableLen {
				freq, tableLen = l.rope.table(t.seqLen[r], buf), t.seqLen[r]
			}
			cs = t.cs[r*2*half : (r+1)*2*half]
			l.rope.angles(cs, t.pos[r], freq)
		}
		switch {
		case l.mla != nil: // one KV head: the latent normed, the rotary values rotated
			if r < t.qRows {
				l.mla.transformQ(&l.rope, t.q[r*H*dk:(r+1)*H*dk], H, dk, cs)
			}
			if r < t.kRows {
				l.mla.transformK(&l.rope, t.k[r*dk:(r+1)*dk], cs)
			}
		default:
			if r < t.qRows {
				l.qNorm.transform(&l.rope, t.q[r*H*dk:(r+1)*H*dk], H, dk, cs)
			}
			if r < t.kRows {
				l.kNorm.transform(&l.rope, t.k[r*Hkv*dk:(r+1)*Hkv*dk], Hkv, dk, cs)
			}
		}
	}
}

// prepares reports whether the layer changes q or k after projection.
func (l *Layer) prepares() bool {
	return l.rope.half > 0 || l.qNorm.w != nil || l.kNorm.w != nil || l.mla != nil
}

// prepare runs t on the pool (nothing when the layer has neither QK-norm
// nor rotary); it reports whether it ran to the end.
func (l *Layer) prepare(t prepWork, c call) bool {
	if !l.prepares() {
		return true
	}
	t.l = l
	return prepWorks.run(l.e.pool, t, l.e.ks, c)
}
