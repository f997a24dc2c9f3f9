package tile

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// TestGemm checks the projection GEMM on every kernel set against a
// float64 product: M, N and K across the item, panel and depth edges
// (K over two depth steps of every panel width), with and without a bias,
// B packed from both layouts.
func TestGemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := []struct{ m, n, k int }{
		{1, 1, 1}, {5, 17, 3}, {72, 256, 256}, {73, 257, 257}, {13, 70, 513}, {150, 300, 1100}, {7, 16, 1030},
	}
	for _, ks := range kernels.Available() {
		t.Run(ks.Name, func(t *testing.T) {
			t.Run(ks.Name, func(t *testing.T) {
				cols := PanelCols(ks)
				for _, s := range shapes {
					for _, outIn := range []bool{false, true} {
						a, b := randoms(rng, s.m*s.k), randoms(rng, s.k*s.n) // b: [k][n], or [n][k] with outIn
						var bias []float32
						if rng.IntN(2) == 0 {
							bias = randoms(rng, s.n)
						}
						packed := PackB(b, s.k, s.n, cols)
						if outIn {
							packed = PackWeights(Matrix{F32: b, RowStride: 1, ColStride: s.k}, s.k, s.n, cols, fallback.KVFloat32)
						}
						c := make([]float32, s.m*s.n)
						g := Gemm{A: a, LDA: s.k, B: packed, C: c, LDC: s.n, Bias: bias, M: s.m}
						var ws Workspace
						for it := 0; it < g.Items(); it++ {
							g.Run(ks, it, &ws)
						}
						for i := 0; i < s.m; i++ {
							for j := 0; j < s.n; j++ {
								want, mag := 0.0, 0.0
								if bias != nil {
									want, mag = float64(bias[j]), math.Abs(float64(bias[j]))
								}
								for p := 0; p < s.k; p++ {
									bv := b[p*s.n+j]
									if outIn {
										bv = b[j*s.k+p]
									}
									want += float64(a[i*s.k+p]) * float64(bv)
									mag += math.Abs(float64(a[i*s.k+p]) * float64(bv))
								}
								if got := float64(c[i*s.n+j]); math.Abs(got-want) > 1e-6*mag+1e-30 {
									t.Fatalf("%+v outIn=%v: c[%d][%d] = %v, want %v", s, outIn, i, j, got, want)
								}
							}
						}
					}
				}
			})
		})
	}
}

// randoms returns n values uniform in [-1, 1).
func randoms(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.Float64()*2 - 1)
	}
	return x
}
