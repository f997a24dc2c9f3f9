package main

import (
	"fmt"
	"testing"

	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/mha"
	"github.com/fastattn/fastattn/tile"
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
		for _, c := range defaultCases {
			for _, causal := range []bool{false, true} {
				if causal && c.Lq == 1 {
					continue
				}
				c.Causal = causal
				for _, th := range []int{1, e.Threads()} {
					name := fmt.Sprintf("isa=%s/%s/causal=%v/threads=%d", ks.Name, c.Short(), causal, th)
					b.Run(name, func(b *testing.B) {
						bn := NewBench(c, th)
						if err := bn.Run(e); err != nil {
							b.Fatal(err)
						}
						gflops, peak := Around(ks, th, func() float64 {
							b.ResetTimer()
							for i := 0; i < b.N; i++ {
								bn.Run(e)
							}
							b.StopTimer()
							return c.FLOPs() * float64(b.N) / b.Elapsed().Seconds() / 1e9
						})
						b.ReportMetric(gflops, "GFLOP/s")
						if peak > 0 {
							b.ReportMetric(100*gflops/peak, "%peak")
						}
					})
				}
			}
		}
	}
}

// BenchmarkGEMM runs the projection GEMM (tile.Gemm on the PV kernel) on
// one thread: C[M][N] = A[M][K]·B[K][N], 2·M·N·K FLOPs.
func BenchmarkGEMM(b *testing.B) {
	for _, ks := range kernels.Available() {
		for _, s := range []struct{ m, n, k int }{{512, 512, 512}, {512, 1536, 512}, {64, 4096, 4096}} {
			b.Run(fmt.Sprintf("isa=%s/M=%d,N=%d,K=%d", ks.Name, s.m, s.n, s.k), func(b *testing.B) {
				g := tile.Gemm{A: fill(s.m * s.k), LDA: s.k, B: tile.PackB(fill(s.k*s.n), s.k, s.n),
					C: make([]float32, s.m*s.n), LDC: s.n, M: s.m, N: s.n, K: s.k}
				var ws tile.Workspace
				items := g.Items()
				gflops, peak := Around(ks, 1, func() float64 {
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						for it := 0; it < items; it++ {
							g.Run(ks, it, &ws)
						}
					}
					b.StopTimer()
					return 2 * float64(s.m*s.n*s.k) * float64(b.N) / b.Elapsed().Seconds() / 1e9
				})
				b.ReportMetric(gflops, "GFLOP/s")
				if peak > 0 {
					b.ReportMetric(100*gflops/peak, "%peak")
				}
			})
		}
	}
}
