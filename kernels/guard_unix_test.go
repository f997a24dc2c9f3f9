//go:build unix

package kernels

import (
	"os"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// guarded returns a slice of n float32 that ends exactly where an
// unreadable page begins (atEnd) or begins exactly where one ends, so any
// access past the slice faults. free releases it.
//
// FASTATTN_GUARD_PAGES=off turns the guard pages off (plain slices): for
// runs under qemu-user, whose emulation of VMASKMOVPS touches masked-off
// lanes and so faults where the CPU does not. Native runs keep them.
func guarded(t *testing.T, n int, atEnd bool) (s []float32, free func()) {
	t.Helper()
	b, free := guardedBytes(t, 4*n, atEnd)
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), n), free
}

// guarded16 is guarded for n uint16 values.
func guarded16(t *testing.T, n int, atEnd bool) (s []uint16, free func()) {
	t.Helper()
	b, free := guardedBytes(t, 2*n, atEnd)
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), n), free
}

// guarded32 is guarded for n uint32 values.
func guarded32(t *testing.T, n int, atEnd bool) (s []uint32, free func()) {
	t.Helper()
	b, free := guardedBytes(t, 4*n, atEnd)
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), n), free
}

// guarded8 is guarded for n int8 values.
func guarded8(t *testing.T, n int, atEnd bool) (s []int8, free func()) {
	t.Helper()
	b, free := guardedBytes(t, n, atEnd)
	return unsafe.Slice((*int8)(unsafe.Pointer(unsafe.SliceData(b))), n), free
}

// guardedBytes is guarded for n bytes. The mappings are kept for reuse
// (free returns one to spare, keyed by its size): a sweep makes tens of
// thousands of operands, and an mmap, two mprotects and an munmap each
// were most of its time. A reused slice is cleared, as a new mapping is.
func guardedBytes(t *testing.T, n int, atEnd bool) (s []byte, free func()) {
	t.Helper()
	if os.Getenv("FASTATTN_GUARD_PAGES") == "off" {
		return make([]byte, n+4)[:n], func() {}
	}
	page := unix.Getpagesize()
	size := (n+page-1)/page*page + 2*page
	mem := spare.get(size)
	if mem == nil {
		var err error
		mem, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			t.Fatalf("mmap: %v", err)
		}
		if err := unix.Mprotect(mem[:page], unix.PROT_NONE); err != nil {
			t.Fatalf("mprotect: %v", err)
		}
		if err := unix.Mprotect(mem[size-page:], unix.PROT_NONE); err != nil {
			t.Fatalf("mprotect: %v", err)
		}
	}
	start := page
	if atEnd {
		start = size - page - n
	}
	s = mem[start : start+n : start+n]
	clear(s)
	return s, func() { spare.put(mem) }
}

// spare holds guarded mappings freed for reuse, by size.
var spare = spareMappings{bySize: map[int][][]byte{}}

// spareMappings is a mutex-guarded free list of mappings per size.
type spareMappings struct {
	mu     sync.Mutex
	bySize map[int][][]byte
}

// get returns a spare mapping of size bytes, or nil.
func (m *spareMappings) get(size int) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.bySize[size]
	if len(l) == 0 {
		return nil
	}
	mem := l[len(l)-1]
	m.bySize[size] = l[:len(l)-1]
	return mem
}

// put keeps mem for a later get.
func (m *spareMappings) put(mem []byte) {
	m.mu.Lock()
	m.bySize[len(mem)] = append(m.bySize[len(mem)], mem)
	m.mu.Unlock()
}
