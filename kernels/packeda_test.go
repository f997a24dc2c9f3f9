package kernels

import (
	"math/rand/v2"
	"testing"
)

// TestPackA: PackA puts each element where GemmPacked's layout says, and
// writes nothing of dst past its tiles' k columns of each row's stride.
func TestPackA(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 3))
	for m := 1; m <= 20; m++ {
		for _, k := range []int{1, 2, 7, 16} {
			lda, ldd := k+rng.IntN(3), k+rng.IntN(3)
			a := make([]float32, span(m, k, lda))
			for i := range a {
				a[i] = rng.Float32()
			}
			dst := make([]float32, m*ldd)
			for i := range dst {
				dst[i] = -1
			}
			PackA(dst, ldd, a, lda, m, k)
			seen := 0
			packTiles(m, func(r0, mr int) {
				for i := 0; i < mr; i++ {
					for p := 0; p < k; p++ {
						if got, want := dst[r0*ldd+p*mr+i], a[(r0+i)*lda+p]; got != want {
							t.Fatalf("PackA m=%d k=%d: tile at %d row %d col %d = %v, want %v", m, k, r0, i, p, got, want)
						}
					}
				}
				for x := r0*ldd + k*mr; x < (r0+mr)*ldd; x++ {
					if dst[x] != -1 {
						t.Fatalf("PackA m=%d k=%d ldd=%d wrote dst[%d] past tile %d", m, k, ldd, x, r0)
					}
				}
				seen += mr
			})
			if seen != m {
				t.Fatalf("packTiles(%d) covered %d rows", m, seen)
			}
		}
	}
}

// TestGemmPacked holds GemmPacked on every set to Gemm on the unpacked A,
// bit for bit (the same products summed in the same order), over every
// row tail, the panels' column tails and every step count around the
// k loop's unrolling, with every operand against guard pages, and checks
// that nothing of C past n changes.
func TestGemmPacked(t *testing.T) {
	rng := rand.New(rand.NewPCG(72, 5))
	ns := []int{1, 7, 8, 9, 16, 17, 33, 64, 65, 130}
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, atEnd := range []bool{true, false} {
				for m := 1; m <= 14; m++ {
					for _, n := range ns {
						for _, k := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 33} {
							accumulate := rng.IntN(2) == 0
							ldc, lda, ldb := n+rng.IntN(3), k+rng.IntN(3), n+rng.IntN(3)
							c, f1 := operand(t, rng, span(m, n, ldc), atEnd)
							a, f2 := operand(t, rng, span(m, k, lda), !atEnd)
							b, f3 := operand(t, rng, span(k, n, ldb), atEnd)
							ap, f4 := guarded(t, m*lda, atEnd)
							PackA(ap, lda, a, lda, m, k)
							want := append([]float32(nil), c...)
							ks.Gemm(want, ldc, a, lda, b, ldb, m, n, k, accumulate)
							ks.GemmPacked(c, ldc, ap, lda, b, ldb, m, n, k, accumulate)
							for i := range c {
								if c[i] != want[i] {
									t.Fatalf("%s GemmPacked m=%d n=%d k=%d acc=%v: c[%d] = %v, Gemm gives %v", ks, m, n, k, accumulate, i, c[i], want[i])
								}
							}
							f1()
							f2()
							f3()
							f4()
						}
					}
				}
			}
		})
	}
}
