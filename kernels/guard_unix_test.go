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

// guardedBytes is guarded for n bytes.
func guardedBytes(t *testing.T, n int, atEnd bool) (s []byte, free func()) {
	t.Helper()
	if os.Getenv("FASTATTN_GUARD_PAGES") == "off" {
		return make([]byte, n+4)[:n], func() {}
	}
	page := unix.Getpagesize()
	size := (n+page-1)/page*page + 2*page
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
		start = size - page - n
	}
	return mem[start : start+n : start+n], func() { unix.Munmap(mem) }
}
