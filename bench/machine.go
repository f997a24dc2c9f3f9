package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/klauspost/cpuid/v2"
)

// Machine is what the bench measured of the CPU it runs on.
type Machine struct {
	CPU      string `json:"cpu"`
	Cores    int    `json:"cores"`
	Threads  int    `json:"threads"` // GOMAXPROCS
	Selected string `json:"selected_isa"`
	// Peak GFLOP/s per kernel set, one thread and all threads.
	Peak1 map[string]float64 `json:"peak_gflops_1_thread"`
	PeakN map[string]float64 `json:"peak_gflops_all_threads"`
	// bfloat16 dot-product peak GFLOP/s of the sets that have one
	// (AVX512_BF16's VDPBF16PS), one thread and all threads.
	BF16Peak1 map[string]float64 `json:"bf16_peak_gflops_1_thread,omitempty"`
	BF16PeakN map[string]float64 `json:"bf16_peak_gflops_all_threads,omitempty"`
	// AMX bfloat16 tile peak GFLOP/s of the sets that run AMX (TDPBF16PS),
	// one thread and all threads, and why AMX is off where it is.
	AMXPeak1 map[string]float64 `json:"amx_peak_gflops_1_thread,omitempty"`
	AMXPeakN map[string]float64 `json:"amx_peak_gflops_all_threads,omitempty"`
	AMX      string             `json:"amx"` // "on", or why not
	// AMXInt8 is "on" where the int8 mode's flash-block scores run on
	// AMX-INT8 tiles (TDPBUSD), else why not.
	AMXInt8 string `json:"amx_int8"`
	// Memory read bandwidth, GB/s, one thread and all threads.
	BW1 float64 `json:"read_gbs_1_thread"`
	BWN float64 `json:"read_gbs_all_threads"`
	// L3Bytes is the last-level cache cpuid reports (0: unknown): decode
	// rows whose K/V fit in part of it read faster than the probe.
	L3Bytes int64 `json:"l3_bytes,omitempty"`
}

// bandwidthBytes is the streaming-read buffer: far larger than any
// last-level cache of today.
const bandwidthBytes = 512 << 20

// ReadGBs measures the memory read bandwidth with threads goroutines each
// summing its share of a bandwidthBytes buffer (8 independent sums, so the
// loads, not the adds, are the limit): the best of 3 passes.
func ReadGBs(buf []uint64, threads int) float64 {
	best := 0.0
	for pass := 0; pass < 3; pass++ {
		var wg sync.WaitGroup
		share := len(buf) / threads
		t0 := time.Now()
		for t := 0; t < threads; t++ {
			wg.Add(1)
			go func(part []uint64) {
				defer wg.Done()
				sink[0] += sum8(part)
			}(buf[t*share : (t+1)*share])
		}
		wg.Wait()
		best = max(best, float64(share*threads*8)/time.Since(t0).Seconds()/1e9)
	}
	return best
}

var sink [8]uint64

func sum8(x []uint64) uint64 {
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	for len(x) >= 8 {
		s0 += x[0]
		s1 += x[1]
		s2 += x[2]
		s3 += x[3]
		s4 += x[4]
		s5 += x[5]
		s6 += x[6]
		s7 += x[7]
		x = x[8:]
	}
	return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}

// ReadBW returns the read bandwidth the %bw of a row with threads threads
// is taken against: the better of the run's first probe and one taken now,
// right after the row. One probe can read low when the host is busy at
// that moment (a 2-thread probe has read below the 1-thread one), which
// would put rows above 100%; noise only ever lowers a probe. The probe is
// a plain Go summing loop, so a kernel that prefetches can still read a
// little faster than both probes: a row above 100% says so.
func (m Machine) ReadBW(buf []uint64, threads int) float64 {
	bw := m.BW1
	if threads > 1 {
		bw = m.BWN
	}
	return max(bw, ReadGBs(buf, threads))
}

// newBandwidthBuffer allocates and touches the buffer.
func newBandwidthBuffer() []uint64 {
	buf := make([]uint64, bandwidthBytes/int(unsafe.Sizeof(uint64(0))))
	for i := range buf {
		buf[i] = uint64(i)
	}
	return buf
}

// cpuModel is the CPU's brand string.
func cpuModel() string {
	if cpuid.CPU.BrandName != "" {
		return cpuid.CPU.BrandName
	}
	return runtime.GOARCH
}

// cpuTimes reads the machine's busy and total CPU time, in clock ticks,
// from /proc/stat (zero elsewhere), and this process's own from
// /proc/self/stat.
func cpuTimes() (busy, total, self uint64) {
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for i, x := range f[1:] {
			v, _ := strconv.ParseUint(x, 10, 64)
			total += v
			if i != 3 && i != 4 { // idle, iowait
				busy += v
			}
		}
	}
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			f := strings.Fields(s[i+1:])
			if len(f) > 12 {
				u, _ := strconv.ParseUint(f[11], 10, 64) // utime
				k, _ := strconv.ParseUint(f[12], 10, 64) // stime
				self = u + k
			}
		}
	}
	return busy, total, self
}

// Busy watches the CPU time other processes (and the hypervisor, as
// steal) take while the bench runs.
type Busy struct{ busy, total, self uint64 }

// StartBusy starts watching.
func StartBusy() Busy {
	b, t, s := cpuTimes()
	return Busy{b, t, s}
}

// Others returns the fraction of the machine's CPU time since StartBusy
// that was busy but not this process's: 0 when the bench had it alone.
func (w Busy) Others() float64 {
	b, t, s := cpuTimes()
	if t <= w.total {
		return 0
	}
	other := float64(b-w.busy) - float64(s-w.self)
	return max(0, other/float64(t-w.total))
}

// amxStatus is "on" where the avx512 set runs AMX tiles (status: its
// bfloat16 or its int8 tiles' kernels.AMXStatus, AMXInt8Status), else
// why not.
func amxStatus(status func() error) string {
	if err := status(); err != nil {
		return err.Error()
	}
	return "on"
}
