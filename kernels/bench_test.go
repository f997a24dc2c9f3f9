package kernels

import (
	"fmt"
	"testing"
	"time"
)

// peakGFLOPS measures ks's register-only FMA rate on one thread.
func peakGFLOPS(ks *Set) float64 {
	const iters = 1 << 22
	best := 0.0
	for run := 0; run < 3; run++ {
		t0 := time.Now()
		ks.FMAPeak(iters)
		best = max(best, float64(iters*ks.PeakFLOPsPerIter())/time.Since(t0).Seconds()/1e9)
	}
	return best
}

// The kernels alone, on data that stays in cache: what the flash loop can
// reach at best. Reported as GFLOP/s and % of the FMA peak of the same run.
func BenchmarkKernels(b *testing.B) {
	for _, ks := range Available() {
		if !ks.HasPeak() {
			continue
		}
		peak := peakGFLOPS(ks)
		report := func(b *testing.B, flops float64) {
			g := flops * float64(b.N) / b.Elapsed().Seconds() / 1e9
			b.ReportMetric(g, "GFLOP/s")
			b.ReportMetric(100*g/peak, "%peak")
		}
		for _, d := range []int{64, 128} {
			rows, nk := 64, 256
			b.Run(fmt.Sprintf("isa=%s/QK/rows=%d,keys=%d,dk=%d", ks.Name, rows, nk, d), func(b *testing.B) {
				s, k, qt := make([]float32, nk*rows), make([]float32, nk*d), make([]float32, d*rows)
				for i := 0; i < b.N; i++ {
					ks.QK(s, rows, k, d, qt, rows, nk, rows, d)
				}
				report(b, float64(2*rows*nk*d))
			})
			b.Run(fmt.Sprintf("isa=%s/PV/rows=%d,keys=%d,dv=%d", ks.Name, rows, nk, d), func(b *testing.B) {
				o, p, v, al := make([]float32, rows*d), make([]float32, nk*rows), make([]float32, nk*d), make([]float32, rows)
				for i := 0; i < b.N; i++ {
					ks.PV(o, d, p, rows, v, d, al, rows, nk, d)
				}
				report(b, float64(2*rows*nk*d))
			})
		}
		b.Run(fmt.Sprintf("isa=%s/Softmax/rows=64,keys=256", ks.Name), func(b *testing.B) {
			s, m, l, al := make([]float32, 256*64), make([]float32, 64), make([]float32, 64), make([]float32, 64)
			for i := 0; i < b.N; i++ {
				ks.Softmax(s, 64, m, l, al, 256, 64, 0)
			}
			b.ReportMetric(float64(256*64*b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
	}
}
