package mha

import "sync"

// freeList is a mutex-guarded stack of values to reuse (the pool's jobs, a
// layer's scratch, an engine's problem lists), so that a steady stream of
// calls allocates nothing. The zero value is an empty list.
type freeList[T any] struct {
	mu    sync.Mutex
	items []T
}

// get pops the value put last; ok is false when the list is empty.
func (f *freeList[T]) get() (x T, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.items)
	if n == 0 {
		return x, false
	}
	x = f.items[n-1]
	f.items = f.items[:n-1]
	return x, true
}

// put pushes x for a later get.
func (f *freeList[T]) put(x T) {
	f.mu.Lock()
	f.items = append(f.items, x)
	f.mu.Unlock()
}
