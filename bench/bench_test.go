package main

import (
	"fmt"
	"testing"

	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/mha"
)

// BenchmarkAttention runs the default cases on every kernel set, one and
// two threads, reporting GFLOP/s and % of the FMA peak measured for that
// set and thread count in the same run. Names suit benchstat:
// BenchmarkAttention/isa=avx512/B=1,H=16,L=1024,D=128/causal=false/threads=1.
func BenchmarkAttention(b *testing.B) {
	for _, ks := range kernels.Available() {
		e, err := mha.New(mha.Config{ISA: ks.Name})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		peaks := map[int]float64{}
		for _, c := range defaultCases {
			for _, causal := range []bool{false, true} {
				if causal && c.Lq == 1 {
					continue
				}
				c.Causal = causal
				for _, th := range []int{1, e.Threads()} {
					name := fmt.Sprintf("isa=%s/%s/causal=%v/threads=%d", ks.Name, c.Short(), causal, th)
					b.Run(name, func(b *testing.B) {
						if _, ok := peaks[th]; !ok {
							peaks[th] = PeakGFLOPS(ks, th)
						}
						bn := NewBench(c, th)
						if err := bn.Run(e); err != nil {
							b.Fatal(err)
						}
						b.ResetTimer()
						for i := 0; i < b.N; i++ {
							bn.Run(e)
						}
						gflops := c.FLOPs() * float64(b.N) / b.Elapsed().Seconds() / 1e9
						b.ReportMetric(gflops, "GFLOP/s")
						if p := peaks[th]; p > 0 {
							b.ReportMetric(100*gflops/p, "%peak")
						}
					})
				}
			}
		}
	}
}
