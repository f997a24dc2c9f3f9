package main

import (
	"sync"
	"time"

	"github.com/fastattn/fastattn/kernels"
)

// PeakGFLOPS measures a kernel set's FMA throughput with its generated
// register-only FMA loop on threads goroutines at once: the best of 3 runs
// of about 50 ms each, in GFLOP/s. It returns 0 for a set without a loop
// (generic). On a shared machine, measure it right next to what it is
// compared with (see Around).
func PeakGFLOPS(ks *kernels.Set, threads int) float64 {
	if !ks.HasPeak() {
		return 0
	}
	flopsPerIter := float64(ks.PeakFLOPsPerIter())
	// Calibrate: iterations for ~50 ms on one thread.
	iters := 1 << 16
	for {
		t0 := time.Now()
		ks.FMAPeak(iters)
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
				ks.FMAPeak(iters)
			}()
		}
		wg.Wait()
		best = max(best, float64(threads)*float64(iters)*flopsPerIter/time.Since(t0).Seconds()/1e9)
	}
	return best
}

// Around runs measure between two peak measurements and returns the higher
// of the two peaks, so that a ratio of what measure measured to it is taken
// under the conditions of the moment (a noisy neighbour slows both); the
// higher, because disturbance only ever lowers a throughput measurement.
func Around(ks *kernels.Set, threads int, measure func()) (peak float64) {
	before := PeakGFLOPS(ks, threads)
	measure()
	return max(before, PeakGFLOPS(ks, threads))
}
