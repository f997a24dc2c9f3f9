package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

// TestScoreBias checks every set's ScoreBias bit for bit against the
// generic twin (the same fma, the distances exact integers), for the bias
// alone, ALiBi alone and both, every panel count, with -Inf scores and
// bias entries, against guard pages.
func TestScoreBias(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	negInf := float32(math.Inf(-1))
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, atEnd := range []bool{true, false} {
				for _, nk := range keyDims {
					for rm := 1; rm <= 9; rm++ {
						for mode := 1; mode <= 3; mode++ { // 1: bias, 2: ALiBi, 3: both
							rows := rm * ks.Lanes
							lds := rows + rng.IntN(2)*ks.Lanes
							s, f1 := operand(t, rng, span(nk, rows, lds), atEnd)
							var slope, dist, bias []float32
							var frees []func()
							if mode&2 != 0 {
								var f func()
								slope, f = operand(t, rng, rows, atEnd)
								frees = append(frees, f)
								dist, f = guarded(t, rows, atEnd)
								frees = append(frees, f)
								for r := range dist {
									dist[r] = float32(rng.IntN(4001) - 3000)
								}
							}
							if mode&1 != 0 {
								var f func()
								bias, f = operand(t, rng, nk, atEnd)
								frees = append(frees, f)
								bias[rng.IntN(nk)] = negInf
							}
							s[rng.IntN(len(s))] = negInf
							want := append([]float32(nil), s...)
							fallback.ScoreBias(want, lds, slope, dist, bias, nk, rows)
							ks.ScoreBias(s, lds, slope, dist, bias, nk, rows)
							for i := range s {
								if math.Float32bits(s[i]) != math.Float32bits(want[i]) {
									t.Fatalf("%s ScoreBias mode %d nk=%d rows=%d: s[%d] = %v, want %v", ks, mode, nk, rows, i, s[i], want[i])
								}
							}
							f1()
							for _, f := range frees {
								f()
							}
						}
					}
				}
			}
		})
	}
}
