package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

// headRows returns nk rows of width w, ld apart, of type t against a guard
// page (at the end or the start), filled with random values in [-1, 1),
// and their float32 values.
func headRows(t *testing.T, rng *rand.Rand, typ KVType, nk, w, ld int, atEnd bool) (KVRows, []float32, func()) {
	n := span(nk, w, ld)
	vals := make([]float32, n)
	r := KVRows{Type: typ, Ld: ld}
	var free func()
	switch typ {
	case fallback.KVFloat32:
		r.F32, free = guarded(t, n, atEnd)
	case fallback.KVInt8: // ggml's q8_0: a scale per block of 32, the blocks' scales side by side
		r.I8, free = guarded8(t, n, atEnd)
		r.LdS = ld / fallback.Int8Block
		r.S = make([]float32, span(nk, w/fallback.Int8Block, r.LdS))
		for i := range r.S {
			r.S[i] = float32(rng.Float64()/64 + 1.0/256)
		}
		for i := range vals {
			r.I8[i] = int8(rng.IntN(255) - 127)
			vals[i] = float32(r.I8[i]) * r.S[i/ld*r.LdS+i%ld/fallback.Int8Block]
		}
		return r, vals, free
	default:
		r.U16, free = guarded16(t, n, atEnd)
	}
	for i := range vals {
		x := float32(rng.Float64()*2 - 1)
		if typ == fallback.KVFloat32 {
			r.F32[i] = x
		} else {
			fallback.Narrow(r.U16[i:i+1], []float32{x}, typ)
			fallback.Widen(vals[i:i+1], r.U16[i:i+1], typ)
			continue
		}
		vals[i] = x
	}
	return r, vals, free
}

// TestHeads holds every set's HeadScores and HeadPV to float64 sums of
// the same (widened) operands over float32, float16, bfloat16 and int8
// rows (int8: head dims of whole blocks, one to five, scaled), head dims
// of one vector to 20 (the four-vector steps and the single ones after
// them), 1–33 heads and keys, padded strides, against guard pages; and
// checks that nothing outside the outputs' rows changes and that every
// set with the kernels has them for every type and head dim it should.
func TestHeads(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 12))
	for _, ks := range Available() {
		if !ks.HasHeads(fallback.KVFloat32, 8, 8) {
			continue
		}
		for _, typ := range []KVType{fallback.KVFloat32, fallback.KVFloat16, fallback.KVBFloat16, fallback.KVInt8} {
			for _, c := range []struct{ nk, heads, d int }{
				{1, 1, 8}, {2, 3, 16}, {7, 5, 24}, {33, 32, 128}, {16, 8, 40}, {5, 2, 64}, {3, 33, 56}, {9, 4, 72},
				{4, 3, 32}, {6, 5, 96}, {2, 1, 160},
			} {
				if !ks.HasHeads(typ, c.d, c.d) {
					if typ != fallback.KVInt8 || c.d%fallback.Int8Block == 0 {
						t.Fatalf("%s: no head kernels for %v, d %d", ks, typ, c.d)
					}
					continue
				}
				where := fmt.Sprintf("%s %v nk=%d heads=%d d=%d", ks, typ, c.nk, c.heads, c.d)
				w := c.heads * c.d
				atEnd := c.nk%2 == 0
				k, kv, f1 := headRows(t, rng, typ, c.nk, w, w+rng.IntN(3)*32, atEnd)
				v, vv, f2 := headRows(t, rng, typ, c.nk, w, w+rng.IntN(3)*32, !atEnd)
				q := make([]float32, w)
				for i := range q {
					q[i] = float32(rng.Float64()*2 - 1)
				}
				lds := c.heads + 3
				s, f3 := guarded(t, span(c.nk, c.heads, lds), atEnd)
				for i := range s {
					s[i] = -7
				}
				ks.HeadScores(s, lds, q, k, c.nk, c.heads, c.d)
				for j := 0; j < c.nk; j++ {
					for h := 0; h < lds && j*lds+h < len(s); h++ {
						if h >= c.heads {
							if s[j*lds+h] != -7 {
								t.Fatalf("%s: HeadScores wrote s[%d][%d]", where, j, h)
							}
							continue
						}
						var want float64
						for d := 0; d < c.d; d++ {
							want += float64(q[h*c.d+d]) * float64(kv[j*k.Ld+h*c.d+d])
						}
						if got := float64(s[j*lds+h]); math.Abs(got-want) > 2e-5*float64(c.d) {
							t.Fatalf("%s: score [%d][%d] = %g, want %g", where, j, h, got, want)
						}
					}
				}
				// PV with the scores as weights (any values do), after a rescale.
				ldo := c.d + 8
				o, f4 := guarded(t, span(c.heads, c.d, ldo), !atEnd)
				o0 := make([]float32, len(o))
				alpha := make([]float32, c.heads)
				for i := range o {
					o[i] = float32(rng.Float64()*2 - 1)
					o0[i] = o[i]
				}
				for h := range alpha {
					alpha[h] = float32(rng.Float64())
				}
				ks.HeadPV(o, ldo, s, lds, v, alpha, c.nk, c.heads, c.d)
				for h := 0; h < c.heads; h++ {
					for d := 0; d < ldo && h*ldo+d < len(o); d++ {
						i := h*ldo + d
						if d >= c.d {
							if o[i] != o0[i] {
								t.Fatalf("%s: HeadPV wrote o[%d][%d]", where, h, d)
							}
							continue
						}
						want := float64(alpha[h]) * float64(o0[i])
						for j := 0; j < c.nk; j++ {
							want += float64(s[j*lds+h]) * float64(vv[j*v.Ld+h*c.d+d])
						}
						if got := float64(o[i]); math.Abs(got-want) > 1e-4*float64(c.d) {
							t.Fatalf("%s: o[%d][%d] = %g, want %g", where, h, d, got, want)
						}
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

// TestHeadsFallback holds the Go definitions to the same float64 sums, so
// the tests of the sets without the kernels still check what they define.
func TestHeadsFallback(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 13))
	for _, typ := range []KVType{fallback.KVFloat32, fallback.KVFloat16, fallback.KVBFloat16, fallback.KVInt8} {
		nk, heads, d := 5, 3, 32
		k, kv, f1 := headRows(t, rng, typ, nk, heads*d, heads*d+32, true)
		q := make([]float32, heads*d)
		for i := range q {
			q[i] = float32(rng.Float64())
		}
		s := make([]float32, nk*heads)
		fallback.HeadScores(s, heads, q, k, nk, heads, d)
		o, alpha := make([]float32, heads*d), []float32{1, 0.5, 0}
		for i := range o {
			o[i] = 1
		}
		fallback.HeadPV(o, d, s, heads, k, alpha, nk, heads, d)
		for h := 0; h < heads; h++ {
			for dd := 0; dd < d; dd++ {
				want := float64(alpha[h])
				for j := 0; j < nk; j++ {
					var sc float64
					for e := 0; e < d; e++ {
						sc += float64(q[h*d+e]) * float64(kv[j*k.Ld+h*d+e])
					}
					want += sc * float64(kv[j*k.Ld+h*d+dd])
				}
				if got := float64(o[h*d+dd]); math.Abs(got-want) > 1e-4 {
					t.Fatalf("%v: o[%d][%d] = %g, want %g", typ, h, dd, got, want)
				}
			}
		}
		f1()
	}
}

// TestHeadAhead holds headAhead to its contract: the rows it lets the
// head kernels prefetch lie inside the slice, the fewest whole rows
// covering headAheadBytes and headPassKeys rows on, and no row whose
// prefetched row fits is left out.
func TestHeadAhead(t *testing.T) {
	for _, size := range []int{1, 2, 4} {
		for _, w := range []int{8, 64, 128, 4096} {
			for _, pad := range []int{0, 1, 40} {
				ld := w + pad
				for _, nk := range []int{1, 3, 64, 128} {
					for _, extra := range []int{0, 1, 2, 5, 100, 5000} {
						n := (nk+extra-1)*ld + w // the call's rows, then extra whole rows
						ahead, pfn := headAhead(n, ld, w, size, nk)
						row := ld * size
						least := max((headAheadBytes+row-1)/row, headPassKeys) * row
						if ahead != least {
							t.Fatalf("size %d, ld %d: ahead %d bytes, not the fewest whole rows of %d covering %d and %d rows (%d)", size, ld, ahead, row, headAheadBytes, headPassKeys, least)
						}
						keys := ahead / row
						for j := 0; j < pfn; j++ {
							if (j+keys)*ld+w > n {
								t.Fatalf("size %d, w %d, ld %d, nk %d, n %d: row %d prefetches row %d past the slice", size, w, ld, nk, n, j, j+keys)
							}
						}
						if pfn < nk && (pfn+keys)*ld+w <= n {
							t.Fatalf("size %d, w %d, ld %d, nk %d, n %d: pfn %d leaves out row %d, whose row %d fits", size, w, ld, nk, n, pfn, pfn, pfn+keys)
						}
						if pfn < 0 || pfn > nk {
							t.Fatalf("pfn %d outside [0, %d]", pfn, nk)
						}
					}
				}
			}
		}
	}
}

// TestHeadScoresKeyOrder checks that HeadScores gives each key the same
// bits whether it runs in a pair or a four of keys or alone (a call of
// one key), on every set with the kernels and every float type: a row's
// sums do not depend on which keys share its pass.
func TestHeadScoresKeyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 5))
	for _, ks := range Available() {
		for _, typ := range []KVType{fallback.KVFloat32, fallback.KVFloat16, fallback.KVBFloat16} {
			// nine vectors a row (of 8 floats, or of 16 on the avx512 set's
			// float32 kernels at 144): two four-vector steps and a single;
			// seven keys: a run of four (AVX-512 float32), a pair, one.
			const heads, nk = 5, 7
			for _, d := range []int{72, 144} {
				if !ks.HasHeads(typ, d, d) {
					continue
				}
				ld := heads*d + 8
				k, _, free := headRows(t, rng, typ, nk, heads*d, ld, true)
				q := make([]float32, heads*d)
				for i := range q {
					q[i] = float32(rng.Float64()*2 - 1)
				}
				all := make([]float32, nk*heads)
				ks.HeadScores(all, heads, q, k, nk, heads, d)
				one := make([]float32, heads)
				for j := 0; j < nk; j++ {
					ks.HeadScores(one, heads, q, k.From(j), 1, heads, d)
					for h, x := range one {
						if math.Float32bits(x) != math.Float32bits(all[j*heads+h]) {
							t.Fatalf("%s %v: key %d head %d: %v alone, %v in the call of %d keys", ks.Name, typ, j, h, x, all[j*heads+h], nk)
						}
					}
				}
				free()
			}
		}
	}
}
