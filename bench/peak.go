package main

import (
	"sync"
	"time"

	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/mha"
)

// Engine is the arithmetic unit a row runs its products on, whose peak
// its %peak is taken against.
type Engine int

const (
	FMA     Engine = iota // float32 FMAs (every set with a peak loop)
	BF16Dot               // the bfloat16 dot-product instruction (VDPBF16PS)
	AMX                   // AMX tiles (TDPBF16PS)
)

// PeakGFLOPS measures a kernel set's throughput on engine u with its
// generated register-only loop (FMAs, bfloat16 dot products, or tile
// products) on threads goroutines at once: the best of 3 runs of about
// 50 ms each, in GFLOP/s. It returns 0 for a set without that loop
// (generic; bf16 on a CPU without AVX512_BF16; AMX without AMX). On a
// shared machine, measure it right next to what it is compared with (see
// Around).
func PeakGFLOPS(ks *kernels.Set, threads int, u Engine) float64 {
	loop, flops := ks.FMAPeak, ks.PeakFLOPsPerIter()
	switch {
	case u == BF16Dot && ks.HasBF16Peak():
		loop, flops = ks.BF16Peak, ks.BF16PeakFLOPsPerIter()
	case u == AMX && ks.HasAMXPeak():
		loop, flops = ks.AMXPeak, ks.AMXPeakFLOPsPerIter()
	case u != FMA || !ks.HasPeak():
		return 0
	}
	flopsPerIter := float64(flops)
	// Calibrate: iterations for ~50 ms on one thread.
	iters := 1 << 16
	for {
		t0 := time.Now()
		loop(iters)
		if d := time.Since(t0); d > 10*time.Millisecond {
			iters = int(float64(iters) * float64(50*time.Millisecond) / float64(d))
			break
		}
		iters *= 4
	}
	best := 0.0
	for run := 0; run < 3; run++ {
		var wg sync.WaitGroup
		t0 := time.Now()
		for t := 0; t < threads; t++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				loop(iters)
			}()
		}
		wg.Wait()
		best = max(best, float64(threads)*float64(iters)*flopsPerIter/time.Since(t0).Seconds()/1e9)
	}
	return best
}

// Around runs measure between two peak measurements of engine u and
// returns the higher of the two peaks, so that a ratio of what measure
// measured to it is taken under the conditions of the moment (a noisy
// neighbour slows both); the higher, because disturbance only ever lowers
// a throughput measurement.
func Around(ks *kernels.Set, threads int, u Engine, measure func()) (peak float64) {
	before := PeakGFLOPS(ks, threads, u)
	measure()
	return max(before, PeakGFLOPS(ks, threads, u))
}

// engineOf returns the engine rows of arithmetic c on set ks run their
// products on: AMX tiles where the set runs them natively, the bfloat16
// instruction where the mode prefers it (kernels.Set.BF16Preferred), else
// the FMAs (the float32 mode, and the bfloat16 mode on the float32
// kernels).
func engineOf(ks *kernels.Set, c mha.Compute) Engine {
	switch {
	case c != mha.ComputeBF16:
		return FMA
	case ks.AMXNative() && ks.HasAMXPeak():
		return AMX
	case ks.BF16Native() && ks.BF16Preferred() && ks.HasBF16Peak():
		return BF16Dot
	}
	return FMA
}

// mark is the compute column's mark of a row on engine u: "*" on the
// bfloat16 instruction, "+" on AMX tiles.
func (u Engine) mark() string {
	return [...]string{"", "*", "+"}[u]
}

// String names the engine in the JSON records.
func (u Engine) String() string {
	return [...]string{"fma", "bf16dot", "amx"}[u]
}
