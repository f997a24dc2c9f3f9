package tile

import "github.com/fastattn/fastattn/kernels"

// Work is a unit of parallel work: Items independent items, each run by
// Run on a worker's Workspace, in any order and on any worker. Neither
// method changes the work, so Items may be asked any number of times and
// items may run concurrently; each item writes only its own part of the
// output, in an order fixed by the shape, so results are bit for bit the
// same whichever worker runs which item. Gemm, Attention and Merging are
// Works; the mha package runs them on its pool.
type Work interface {
	Items() int
	Run(ks *kernels.Set, item int, ws *Workspace)
}

// Attention is one attention problem, planned: flash items over blocks of
// query rows (Plan), or, for a decode step worth splitting (Split), chunk
// items that leave partial results in Part for the Merging pass to
// combine. Make one with NewAttention.
type Attention struct {
	P *Problem
	// Part is the split's partial state, PartLen floats; the caller
	// provides it before Run (nil when PartLen is 0).
	Part []float32

	plan   Plan
	split  Split
	splits bool
}

// NewAttention plans p.
func NewAttention(p *Problem) Attention {
	if sp, ok := NewSplit(p); ok {
		sp.call = splitCalls.Add(1)
		return Attention{P: p, split: sp, splits: true}
	}
	return Attention{P: p, plan: NewPlan(p, BlocksFor(p.HeadDim, p.ValueDim))}
}

// PartLen returns the floats of partial state the work needs (0 for
// flash items).
func (a *Attention) PartLen() int {
	if !a.splits {
		return 0
	}
	return a.split.PartLen(a.P)
}

// Items returns the number of flash or chunk items.
func (a *Attention) Items() int {
	if a.splits {
		return a.split.Items(a.P)
	}
	return a.plan.Items(a.P)
}

// Run runs item n: a block of query rows over all its keys (flash, the
// output written), or a chunk of keys for the rows of one KV head (split,
// the partial state written to Part).
func (a *Attention) Run(ks *kernels.Set, n int, ws *Workspace) {
	if a.splits {
		a.split.run(ks, a.P, n, ws, a.Part)
		return
	}
	it := a.plan.item(a.P, n)
	prefetchItem(ks, a.P, &a.plan, it, n, ws)
	flashItem(ks, a.P, it, a.plan.Blocks.Keys, ws)
}

// Merging returns the pass that combines a split attention's chunks into
// the output; it has no items for flash work. It runs after every item of
// a.
func (a *Attention) Merging() *Merging { return (*Merging)(a) }

// Merging is the merge pass of a split Attention (see Attention.Merging):
// one item per (batch, query head).
type Merging Attention

// Items returns the number of merge items (0 for flash work).
func (m *Merging) Items() int {
	if !m.splits {
		return 0
	}
	return m.split.MergeItems(m.P)
}

// Run merges the chunks of item n's rows and writes their output.
func (m *Merging) Run(_ *kernels.Set, n int, ws *Workspace) {
	ws.acc = grow(ws.acc, m.P.ValueDim)
	m.split.merge(m.P, n, m.Part, ws.acc)
}

// The three kinds of work.
var (
	_ Work = (*Gemm)(nil)
	_ Work = (*Attention)(nil)
	_ Work = (*Merging)(nil)
)
