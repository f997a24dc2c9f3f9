package mha

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// libraryAllocs runs f and returns how many objects the library's own
// code allocated during it, with the allocating sites, from the memory
// profile sampled at every allocation. Allocations the Go runtime makes
// for itself — the m and g structures of OS threads it starts when a
// worker is woken, which happens now and then and more under emulation —
// are not the library's and are not counted: a site is the first frame
// past the allocator's entry points, and it counts only when that frame
// is a non-test function of this module.
func libraryAllocs(t *testing.T, f func()) (int64, string) {
	t.Helper()
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	before := librarySites()
	f()
	after := librarySites()
	var n int64
	var where []string
	for site, count := range after {
		if d := count - before[site]; d > 0 {
			n += d
			where = append(where, fmt.Sprintf("%s ×%d", site, d))
		}
	}
	sort.Strings(where)
	return n, strings.Join(where, "; ")
}

// stepAllocs runs step once to warm up, then n times under libraryAllocs.
func stepAllocs(t *testing.T, n int, step func()) (int64, string) {
	t.Helper()
	step()
	return libraryAllocs(t, func() {
		for range n {
			step()
		}
	})
}

// librarySites returns the cumulative allocation count of each library
// site. The profile is published at the end of a GC cycle and holds the
// allocations of the cycle before: two cycles make it current.
func librarySites() map[string]int64 {
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+50)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	sites := map[string]int64{}
	for i := range recs {
		if site := allocSite(recs[i].Stack()); site != "" {
			sites[site] += recs[i].AllocObjects
		}
	}
	return sites
}

// allocSite returns "function file:line" of the innermost library frame
// of an allocation's stack, when the allocation is the library's, and ""
// otherwise. It is the runtime's own when a runtime function other than
// an allocator entry point sits between the allocator and the first frame
// outside the runtime (a thread start beneath a channel send, say); the
// standard library's frames in between (fmt.Errorf) count as the caller's.
func allocSite(stack []uintptr) string {
	frames := runtime.CallersFrames(stack)
	inRuntime := true
	for {
		fr, more := frames.Next()
		switch {
		case inRuntime && strings.HasPrefix(fr.Function, "runtime."):
			if !allocatorEntry(fr.Function) {
				return ""
			}
		case strings.HasPrefix(fr.Function, "github.com/fastattn/fastattn/"):
			if strings.HasSuffix(fr.File, "_test.go") {
				return ""
			}
			return fmt.Sprintf("%s %s:%d", fr.Function, fr.File[strings.LastIndex(fr.File, "/")+1:], fr.Line)
		default:
			inRuntime = false
		}
		if !more {
			return ""
		}
	}
}

// allocatorEntry reports whether a runtime function is one of the entry
// points compiled code calls to allocate (new, make, append, conversions
// to interfaces, closures, string building), or a helper beneath them.
func allocatorEntry(fn string) bool {
	for _, p := range []string{
		"runtime.mallocgc", "runtime.newobject", "runtime.newarray",
		"runtime.makeslice", "runtime.growslice", "runtime.makemap",
		"runtime.mapassign", "runtime.makechan", "runtime.convT",
		"runtime.concatstring", "runtime.rawstring", "runtime.rawbyteslice",
		"runtime.slicebytetostring", "runtime.stringtoslicebyte",
		"runtime.hashGrow", "runtime.growWork", "runtime.(*hmap)",
		"runtime.(*maptype)", "runtime.profilealloc", "runtime.mProf_Malloc",
	} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// TestLibraryAllocs: the counter sees an allocation made by the library
// (an engine's workers, a cache's storage) and not one made by a test.
var sinkBytes []byte

func TestLibraryAllocs(t *testing.T) {
	n, where := libraryAllocs(t, func() {
		e, err := NewEngine(Config{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		e.Close()
	})
	if n == 0 || !strings.Contains(where, "fastattn/mha.") {
		t.Errorf("New and Close allocated %d objects in the library (%q): want some", n, where)
	}
	if n, where := libraryAllocs(t, func() { sinkBytes = make([]byte, 1<<10) }); n != 0 {
		t.Errorf("a test's own allocation counted as the library's: %d, %s", n, where)
	}
}
