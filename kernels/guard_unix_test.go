//go:build unix

package kernels

import (
	"os"
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
	if os.Getenv("FASTATTN_GUARD_PAGES") == "off" {
		return make([]float32, n), func() {}
	}
	page := unix.Getpagesize()
	size := (n*4+page-1)/page*page + 2*page
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	if err := unix.Mprotect(mem[:page], unix.PROT_NONE); err != nil {
		t.Fatalf("mprotect: %v", err)
	}
	if err := unix.Mprotect(mem[size-page:], unix.PROT_NONE); err != nil {
		t.Fatalf("mprotect: %v", err)
	}
	start := page
	if atEnd {
		start = size - page - n*4
	}
	s = unsafe.Slice((*float32)(unsafe.Pointer(&mem[start])), n)
	return s, func() { unix.Munmap(mem) }
}
