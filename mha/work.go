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
}

// attnWork is one validated attention problem and its plan: a split
// decode step (chunk items, then merge items) or flash items over query
// blocks. A call runs one (Engine.Attention) or several (Layer.Decode, a
// problem per sequence) in the same two pool jobs.
type attnWork struct {
	p     tile.Problem
	plan  tile.Plan  // flash
	sp    tile.Split // split decode, when split
	split bool
	part  []float32 // the split's partial rows, a slice of the call's buffer
	first int       // its first item in the batch's numbering (run phase)
	merge int       // its first merge item (merge phase)
}

// resolve plans w and returns the floats of partial state it needs.
func (w *attnWork) resolve() int {
	if sp, ok := tile.NewSplit(&w.p); ok {
		w.sp, w.split = sp, true
		return sp.PartLen(&w.p)
	}
	w.split = false
	w.plan = tile.NewPlan(&w.p, tile.BlocksFor(w.p.HeadDim, w.p.ValueDim))
	return 0
}

// items returns w's run-phase items.
func (w *attnWork) items() int {
	if w.split {
		return w.sp.Items(&w.p)
	}
	return w.plan.Items(&w.p)
}

// workTask runs the items of a list of problems, numbered one after the
// other: their run items, or (merge) the merge items of the split ones.
type workTask struct {
	works []attnWork
	merge bool
}

// find returns the index of the work holding item n: the last whose first
// item is at most n (binary search; works are in item order).
func (t *workTask) find(n int) int {
	lo, hi := 0, len(t.works)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if t.start(mid) <= n {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

func (t *workTask) start(i int) int {
	if t.merge {
		return t.works[i].merge
	}
	return t.works[i].first
}

func (t *workTask) run(ks *kernels.Set, n int, ws *tile.Workspace) {
	i := t.find(n)
	w := &t.works[i]
	n -= t.start(i)
	switch {
	case t.merge:
		w.sp.Merge(&w.p, n, w.part)
	case w.split:
		w.sp.Run(ks, &w.p, n, ws, w.part)
	default:
		tile.Flash(ks, &w.p, &w.plan, n, ws)
	}
}

// attend runs the problems of works (p set; plans are made here) on the
// pool: every run item in one job, then every merge item in another. It
// reports whether the call ran to the end (false: c.cancel fired).
func (e *Engine) attend(works []attnWork, c call) bool {
	parts, runs, merges := 0, 0, 0
	for i := range works {
		w := &works[i]
		n := w.resolve()
		w.first, w.merge = runs, merges
		runs += w.items()
		if w.split {
			merges += w.sp.MergeItems(&w.p)
		}
		parts += n
	}
	buf := e.getPart(parts)
	defer e.putPart(buf)
	at := 0
	for i := range works {
		if w := &works[i]; w.split {
			n := w.sp.PartLen(&w.p)
			w.part = buf[at : at+n]
			at += n
		}
	}
	if !e.runTask(workTask{works: works}, runs, c) {
		return false
	}
	return merges == 0 || e.runTask(workTask{works: works, merge: true}, merges, c)
}

// runTask runs t's items on the pool.
func (e *Engine) runTask(t workTask, items int, c call) bool {
	j := e.pool.get()
	j.work = t
	j.t = &j.work
	return e.pool.run(j, e.ks, items, c.threads, c.cancel)
}
