package mha

import (
	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/tile"
)

// call is what a running call passes down: its thread cap and the Done
// channel of its context (nil: never cancelled).
type call struct {
	threads int
	cancel  <-chan struct{}
	bf16    bool // Options.Compute is ComputeBF16: bfloat16 weights' projections round their inputs too
}

// attnWork is one validated attention problem and its plan (a
// tile.Attention: flash items, or a split decode step's chunk items then
// merge items). A call runs one (Engine.Attention) or several
// (Layer.Decode, a problem per sequence) in the same two pool jobs.
type attnWork struct {
	p     tile.Problem
	a     tile.Attention // planned from p
	first int            // its first run item in the batch's numbering
	merge int            // its first merge item
	copy  *tile.KVCopy   // its heads-major K/V copy, if it has one (returned by attend)
}

// attnBatch is the tile.Work of a list of problems, their items numbered
// one after the other: their run items, or (merge) their merge items.
type attnBatch struct {
	works []attnWork
	merge bool
}

// work returns the Work of attnWork i in the batch's phase.
func (t *attnBatch) work(i int) tile.Work {
	if t.merge {
		return t.works[i].a.Merging()
	}
	return &t.works[i].a
}

// start returns the batch number of attnWork i's first item.
func (t *attnBatch) start(i int) int {
	if t.merge {
		return t.works[i].merge
	}
	return t.works[i].first
}

// Items returns the items of every problem of the batch.
func (t *attnBatch) Items() int {
	last := len(t.works) - 1
	if last < 0 {
		return 0
	}
	return t.start(last) + t.work(last).Items()
}

// Run runs item n of the batch: the problem holding it is the last whose
// first item is at most n (binary search; works are in item order).
func (t *attnBatch) Run(ks *kernels.Set, n int, ws *tile.Workspace) {
	lo, hi := 0, len(t.works)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if t.start(mid) <= n {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	t.work(lo).Run(ks, n-t.start(lo), ws)
}

// attend runs the problems of works (p set; plans are made here) on the
// pool: every run item in one job, then every merge item in another. It
// reports whether the call ran to the end (false: c.cancel fired).
func (e *Engine) attend(works []attnWork, c call) bool {
	defer e.putCopies(works) // one defer, not one per copy: a defer in a loop allocates its record
	for i := range works {   // BSHD K/V whose rows alias (or the bfloat16 mode's): copied heads-major first
		p := &works[i].p
		tile.PairValues(e.ks, p)
		if tile.Regroups(e.ks, p) && regroupFits(p) {
			kv, ok := e.copies.get()
			if !ok {
				kv = new(tile.KVCopy)
			}
			works[i].copy = kv
			rg := tile.NewRegroup(p, kv)
			if !regroups.run(e.pool, rg, e.ks, c) {
				return false
			}
			rg.Use()
		}
	}
	parts, runs, merges := 0, 0, 0
	for i := range works {
		w := &works[i]
		w.a = tile.NewAttention(&w.p)
		w.first, w.merge = runs, merges
		runs += w.a.Items()
		merges += w.a.Merging().Items()
		parts += w.a.PartLen()
	}
	buf := e.getPart(parts)
	defer e.putPart(buf)
	at := 0
	for i := range works {
		w := &works[i]
		n := w.a.PartLen()
		w.a.Part = buf[at : at+n]
		at += n
	}
	if !e.runBatch(attnBatch{works: works}, c) {
		return false
	}
	return merges == 0 || e.runBatch(attnBatch{works: works, merge: true}, c)
}

// putCopies returns the heads-major copies attend took for works to the
// engine's free list.
func (e *Engine) putCopies(works []attnWork) {
	for i := range works {
		if works[i].copy != nil {
			e.copies.put(works[i].copy)
			works[i].copy = nil
		}
	}
}

// regroupFits reports whether a heads-major copy of p's K and V stays
// within a quarter of what fastattn may allocate at once (memoryLimit);
// a larger one is not made and the flash items walk the strided rows.
func regroupFits(p *tile.Problem) bool {
	return tile.CopyBytes(p) <= float64(memoryLimit)/4
}

// runBatch runs t's items on the pool.
func (e *Engine) runBatch(t attnBatch, c call) bool {
	return batchWorks.run(e.pool, t, e.ks, c)
}
