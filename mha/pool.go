package mha

import (
	"sync"
	"sync/atomic"

	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/tile"
)

// job is one call's tile.Work, its items handed to up to `workers`
// workers who take them from a shared counter until none is left. Jobs are
// recycled through a free list, so a steady stream of calls allocates
// nothing.
type job struct {
	w       tile.Work
	ks      *kernels.Set
	items   int64
	workers int          // the workers the job was handed to
	next    atomic.Int64 // next item to take
	active  atomic.Int32 // workers still holding the job
	done    chan struct{}
	cancel  <-chan struct{} // a context's Done channel, or nil
	halted  atomic.Bool     // cancel fired: the items left were skipped
}

// pool is a fixed set of worker goroutines, each with its own workspace.
// Concurrent callers share it: their jobs interleave on the workers.
type pool struct {
	size int
	jobs chan *job
	quit chan struct{}
	once sync.Once
	ws   []tile.Workspace // worker i's scratch; only Engine.reserve touches it from outside, while no call runs

	free freeList[*job]
}

func newPool(size int) *pool {
	p := &pool{size: size, jobs: make(chan *job, size), quit: make(chan struct{}), ws: make([]tile.Workspace, size)}
	for i := 0; i < size; i++ {
		go p.worker(&p.ws[i])
	}
	return p
}

func (p *pool) worker(ws *tile.Workspace) {
	for {
		select {
		case j := <-p.jobs:
			ws.Stride = j.workers
			for {
				n := j.next.Add(1) - 1
				if n < j.items && itemHook != nil {
					itemHook(j.cancel)
				}
				if n >= j.items || j.stopped() {
					break
				}
				j.w.Run(j.ks, int(n), ws)
			}
			if j.active.Add(-1) == 0 {
				j.done <- struct{}{}
			}
		case <-p.quit:
			return
		}
	}
}

// itemHook, when set (by tests only, before any engine runs), is called
// with a job's cancel channel before each of its items: the soak test
// cancels calls at chosen work-item boundaries through it.
var itemHook func(cancel <-chan struct{})

// stopped reports whether the job's context is done; the first worker to
// see it marks the job halted. A nil channel (context.Background) is never
// done, and the check is one non-blocking receive between items.
func (j *job) stopped() bool {
	if j.cancel == nil {
		return false
	}
	select {
	case <-j.cancel:
		j.halted.Store(true)
		return true
	default:
		return false
	}
}

// get returns a cleared job from the free list.
func (p *pool) get() *job {
	if j, ok := p.free.get(); ok {
		return j
	}
	return &job{done: make(chan struct{}, 1)}
}

// run executes the items of j.w on at most threads workers (0: all) and
// returns when all are done, or, once cancel is closed, when the items in
// progress are; it reports whether every item ran. It recycles j.
func (p *pool) run(j *job, ks *kernels.Set, threads int, cancel <-chan struct{}) bool {
	j.cancel = cancel
	j.halted.Store(false)
	if items := j.w.Items(); items > 0 {
		workers := p.size
		if threads > 0 {
			workers = min(workers, threads)
		}
		workers = min(workers, items)
		j.ks, j.items, j.workers = ks, int64(items), workers
		j.next.Store(0)
		j.active.Store(int32(workers))
		for i := 0; i < workers; i++ {
			p.jobs <- j
		}
		<-j.done
	}
	complete := !j.halted.Load()
	j.w, j.ks, j.cancel = nil, nil, nil
	p.free.put(j)
	return complete
}

// works recycles the values of one kind of tile.Work (W, run through its
// pointer P), so that handing a value to the pool allocates nothing: a
// job holds the Work only through its interface, which would box a W
// anew on every call.
type works[W any, P interface {
	*W
	tile.Work
}] struct {
	free freeList[P]
}

// run runs w's items on p (see pool.run) from a recycled copy, cleared
// afterwards so that it holds no caller's buffers.
func (s *works[W, P]) run(p *pool, w W, ks *kernels.Set, c call) bool {
	held, ok := s.free.get()
	if !ok {
		held = P(new(W))
	}
	*held = w
	j := p.get()
	j.w = held
	complete := p.run(j, ks, c.threads, c.cancel)
	var zero W
	*held = zero
	s.free.put(held)
	return complete
}

// The kinds of work calls hand the pool, each recycled on its own.
var (
	batchWorks works[attnBatch, *attnBatch]
	gemmWorks  works[tile.Gemm, *tile.Gemm]
	prepWorks  works[prepWork, *prepWork]
	regroups   works[tile.Regroup, *tile.Regroup]
	packWorks  works[tile.APack, *tile.APack]
)

// close stops the workers once; jobs already taken finish first.
func (p *pool) close() {
	p.once.Do(func() { close(p.quit) })
}
