package main

import (
	"sync"
	"time"

	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/mha"
)

// PeakGFLOPS measures a kernel set's FMA throughput with its generated
// register-only FMA loop (with bf16, its bfloat16 dot-product loop) on
// threads goroutines at once: the best of 3 runs of about 50 ms each, in
// GFLOP/s. It returns 0 for a set without that loop (generic; bf16 on a
// CPU without AVX512_BF16). On a shared machine, measure it right next to
// what it is compared with (see Around).
func PeakGFLOPS(ks *kernels.Set, threads int, bf16 bool) float64 {
	loop, flops := ks.FMAPeak, ks.PeakFLOPsPerIter()
	if bf16 {
		loop, flops = ks.BF16Peak, ks.BF16PeakFLOPsPerIter()
		if !ks.HasBF16Peak() {
			return 0
		}
	} else if !ks.HasPeak() {
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

// Around runs measure between two peak measurements (of the bfloat16
// peak with bf16) and returns the higher of the two peaks, so that a ratio
// of what measure measured to it is taken under the conditions of the
// moment (a noisy neighbour slows both); the higher, because disturbance
// only ever lowers a throughput measurement.
func Around(ks *kernels.Set, threads int, bf16 bool, measure func()) (peak float64) {
	before := PeakGFLOPS(ks, threads, bf16)
	measure()
	return max(before, PeakGFLOPS(ks, threads, bf16))
}

// nativeBF16 reports whether rows of arithmetic c on set ks run on the
// CPU's bfloat16 dot-product instruction, whose peak their %peak is then
// taken against (on other sets the bfloat16 mode runs on the float32
// kernels: the FMA peak).
func nativeBF16(ks *kernels.Set, c mha.Compute) bool {
	return c == mha.ComputeBF16 && ks.BF16Native() && ks.HasBF16Peak()
}
