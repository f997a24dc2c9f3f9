package mha

import (
	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/tile"
)

// prepRows is the rows (tokens) of one prepare item: enough to amortize
// the item's dispatch, few enough to spread a decode batch.
const prepRows = 16

// prepTask applies the layer's QK-norm and rotary embedding to projected
// queries and keys, in place, a block of tokens per item.
type prepTask struct {
	l            *Layer
	q, k         []float32 // [qRows][Heads][HeadDim], [kRows][KVHeads][HeadDim]; either may be empty
	qRows, kRows int
	pos          []int     // position of each row (q and k rows alike), nil: no rotary
	cs           []float32 // [rows][2][half]: the angles' cosines and sines, per row
}

func (t *prepTask) run(_ *kernels.Set, n int, _ *tile.Workspace) {
	l, dk := t.l, t.l.cfg.HeadDim
	H, Hkv, half := l.cfg.Heads, l.cfg.KVHeads, l.rope.half
	for r := n * prepRows; r < min((n+1)*prepRows, max(t.qRows, t.kRows)); r++ {
		var cs []float32
		if t.pos != nil {
			cs = t.cs[r*2*half : (r+1)*2*half]
			l.rope.angles(cs, t.pos[r])
		}
		if r < t.qRows {
			l.qNorm.transform(&l.rope, t.q[r*H*dk:(r+1)*H*dk], H, dk, cs)
		}
		if r < t.kRows {
			l.kNorm.transform(&l.rope, t.k[r*Hkv*dk:(r+1)*Hkv*dk], Hkv, dk, cs)
		}
	}
}

// prepares reports whether the layer changes q or k after projection.
func (l *Layer) prepares() bool {
	return l.rope.half > 0 || l.qNorm.w != nil || l.kNorm.w != nil
}

// prepare runs t on the pool (nothing when the layer has neither QK-norm
// nor rotary); it reports whether it ran to the end.
func (l *Layer) prepare(t prepTask, c call) bool {
	if !l.prepares() {
		return true
	}
	t.l = l
	rows := max(t.qRows, t.kRows)
	j := l.e.pool.get()
	j.prep = t
	j.t = &j.prep
	return l.e.pool.run(j, l.e.ks, (rows+prepRows-1)/prepRows, c.threads, c.cancel)
}
