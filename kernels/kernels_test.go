package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

// Every set in Available() is checked here kernel by kernel, against float64
// sums or the generic twin, with every operand placed against an unreadable
// page (before it, then after it) so any access past a slice faults.

// operand is a test operand: random data of n elements in a guarded slice.
func operand(t *testing.T, rng *rand.Rand, n int, atEnd bool) ([]float32, func()) {
	s, free := guarded(t, n, atEnd)
	for i := range s {
		s[i] = 2*rng.Float32() - 1
	}
	return s, free
}

// dotTol is the error bound of a float32 sum of k products whose absolute
// values add up to abs: k·2^-24·abs, doubled, plus a floor.
func dotTol(k int, abs float64) float64 { return 2*float64(k+1)*0x1p-24*abs + 1e-30 }

var (
	qkDims   = []int{1, 2, 3, 5, 8, 9, 16, 17, 33, 64, 65, 128, 130}
	keyDims  = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 15, 16, 17, 31, 33}
	rowMults = []int{1, 2, 3, 4, 5}
)

func TestQK(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, atEnd := range []bool{true, false} {
				for _, nk := range keyDims {
					for _, rm := range rowMults {
						for _, dk := range qkDims {
							rows := rm * ks.Lanes
							lds, ldk, ldq := rows+rng.IntN(2)*ks.Lanes, dk+rng.IntN(3), rows+rng.IntN(2)*3
							s, f1 := guarded(t, span(nk, rows, lds), atEnd)
							k, f2 := operand(t, rng, span(nk, dk, ldk), atEnd)
							qt, f3 := operand(t, rng, span(dk, rows, ldq), atEnd)
							ks.QK(s, lds, k, ldk, qt, ldq, nk, rows, dk)
							for c := 0; c < nk; c++ {
								for r := 0; r < rows; r++ {
									want, abs := 0.0, 0.0
									for d := 0; d < dk; d++ {
										x := float64(k[c*ldk+d]) * float64(qt[d*ldq+r])
										want += x
										abs += math.Abs(x)
									}
									if got := float64(s[c*lds+r]); !(math.Abs(got-want) <= dotTol(dk, abs)) {
										t.Fatalf("%s QK nk=%d rows=%d dk=%d: s[%d][%d] = %v, want %v", ks, nk, rows, dk, c, r, got, want)
									}
								}
							}
							f1()
							f2()
							f3()
						}
					}
				}
			}
		})
	}
}

func TestPV(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	dvs := []int{1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 127, 128, 130}
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, atEnd := range []bool{true, false} {
				for rows := 1; rows <= 14; rows++ {
					// The keys around pvChunk's multiples: a call split in chunks.
					for _, nk := range append([]int{0, pvChunk - 1, pvChunk, pvChunk + 1, 2*pvChunk + 5}, keyDims...) {
						for di, dv := range dvs {
							if !longTests() && (di+rows+nk+boolInt(atEnd))%3 != 0 {
								continue // a third of the cases, each tail still met
							}
							ldo, ldp, ldv := dv+rng.IntN(3), rows+rng.IntN(3), dv+rng.IntN(3)
							o, f1 := operand(t, rng, span(rows, dv, ldo), atEnd)
							p, f2 := operand(t, rng, max(span(nk, rows, ldp), 0), atEnd)
							v, f3 := operand(t, rng, max(span(nk, dv, ldv), 0), atEnd)
							var alpha []float32
							var f4 func()
							if rng.IntN(2) == 0 {
								alpha, f4 = operand(t, rng, rows, atEnd)
							}
							before := append([]float32(nil), o...)
							ks.PV(o, ldo, p, ldp, v, ldv, alpha, rows, nk, dv)
							for r := 0; r < rows; r++ {
								for j := 0; j < dv; j++ {
									a := 1.0
									if alpha != nil {
										a = float64(alpha[r])
									}
									want := a * float64(before[r*ldo+j])
									abs := math.Abs(want)
									for c := 0; c < nk; c++ {
										x := float64(p[c*ldp+r]) * float64(v[c*ldv+j])
										want += x
										abs += math.Abs(x)
									}
									if got := float64(o[r*ldo+j]); !(math.Abs(got-want) <= dotTol(nk+1, abs)) {
										t.Fatalf("%s PV rows=%d nk=%d dv=%d alpha=%v: o[%d][%d] = %v, want %v", ks, rows, nk, dv, alpha != nil, r, j, got, want)
									}
								}
								// Padding between rows is not touched.
								for j := dv; j < ldo && r < rows-1; j++ {
									if o[r*ldo+j] != before[r*ldo+j] {
										t.Fatalf("%s PV wrote o[%d][%d] past dv=%d", ks, r, j, dv)
									}
								}
							}
							f1()
							f2()
							f3()
							if f4 != nil {
								f4()
							}
						}
					}
				}
			}
		})
	}
}

// runningState makes m and l (random in [-1, 1)) a softmax's running
// state: a third of the rows with nothing seen yet (m -Inf, l 0), a third
// with a large maximum, every sum positive.
func runningState(rng *rand.Rand, m, l []float32) {
	for r := range m {
		l[r] = 3 * (l[r] + 1)
		switch rng.IntN(3) {
		case 0:
			m[r], l[r] = float32(math.Inf(-1)), 0 // nothing seen yet
		case 1:
			m[r] *= 30
		}
	}
}

// TestSoftmaxPairs holds every set's SoftmaxPairs to its own Softmax
// followed by PairBF16, bit for bit (the weights, m, l, alpha and the
// pairs), and its SoftmaxRound to Softmax followed by the weights'
// rounding, over odd and even key counts, softcap, -Inf and NaN scores,
// rows nothing has been seen for, and large ones, against guard pages.
func TestSoftmaxPairs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	negInf := float32(math.Inf(-1))
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, atEnd := range []bool{true, false} {
				for _, nk := range []int{1, 2, 3, 4, 7, 16, 33, 64} {
					for _, rm := range rowMults {
						for _, softcap := range []float32{0, 2.5} {
							rows := rm * ks.Lanes
							lds, ldp := rows+rng.IntN(2)*ks.Lanes, rows+rng.IntN(3)
							s, f1 := operand(t, rng, span(nk, rows, lds), atEnd)
							m, f2 := operand(t, rng, rows, atEnd)
							l, f3 := operand(t, rng, rows, atEnd)
							al, f4 := guarded(t, rows, atEnd)
							p, f5 := guarded32(t, span((nk+1)/2, rows, ldp), atEnd)
							for i := range s {
								s[i] *= 20
								switch rng.IntN(40) {
								case 0, 1, 2, 3, 4, 5, 6, 7:
									s[i] = negInf
								case 8:
									s[i] = float32(math.NaN())
								case 9:
									s[i] = 3e38
								}
							}
							runningState(rng, m, l)
							ws, wm, wl, wal := append([]float32(nil), s...), append([]float32(nil), m...), append([]float32(nil), l...), make([]float32, rows)
							wp := make([]uint32, len(p))
							rs, f6 := guarded(t, len(s), !atEnd) // SoftmaxRound's tile, against a guard page too
							copy(rs, s)
							rm, rl, ral := append([]float32(nil), m...), append([]float32(nil), l...), make([]float32, rows)
							ks.SoftmaxRound(rs, lds, rm, rl, ral, nk, rows, softcap)
							ks.Softmax(ws, lds, wm, wl, wal, nk, rows, softcap)
							ks.PairBF16(wp, ldp, ws, lds, nk, rows)
							ks.SoftmaxPairs(s, lds, m, l, al, nk, rows, softcap, p, ldp)
							what := fmt.Sprintf("%s SoftmaxPairs nk=%d rows=%d softcap=%v", ks, nk, rows, softcap)
							sameBits(t, what+" weights", s, ws)
							sameBits(t, what+" m", m, wm)
							sameBits(t, what+" l", l, wl)
							sameBits(t, what+" alpha", al, wal)
							sameBits(t, what+" SoftmaxRound m", rm, wm)
							sameBits(t, what+" SoftmaxRound l", rl, wl)
							sameBits(t, what+" SoftmaxRound alpha", ral, wal)
							for c := range nk {
								for r := range rows {
									w := fallback.BF16ToF32(fallback.F32ToBF16(ws[c*lds+r]))
									if got := rs[c*lds+r]; math.Float32bits(got) != math.Float32bits(w) {
										t.Fatalf("%s SoftmaxRound: weight [%d][%d] = %v, want %v", what, c, r, got, w)
									}
								}
							}
							for i := range p {
								if p[i] != wp[i] {
									t.Fatalf("%s: p[%d] = %#08x, want %#08x", what, i, p[i], wp[i])
								}
							}
							f1()
							f2()
							f3()
							f4()
							f5()
							f6()
						}
					}
				}
			}
		})
	}
}

// sameBits fails t where got and want differ in any bit.
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: [%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

func TestSoftmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	negInf := float32(math.Inf(-1))
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, atEnd := range []bool{true, false} {
				for _, nk := range keyDims {
					for _, rm := range rowMults {
						for _, softcap := range []float32{0, 2.5} {
							rows := rm * ks.Lanes
							lds := rows + rng.IntN(2)*ks.Lanes
							s, f1 := operand(t, rng, span(nk, rows, lds), atEnd)
							m, f2 := operand(t, rng, rows, atEnd)
							l, f3 := operand(t, rng, rows, atEnd)
							al, f4 := guarded(t, rows, atEnd)
							for i := range s {
								s[i] *= 20
								if rng.IntN(5) == 0 {
									s[i] = negInf
								}
							}
							runningState(rng, m, l)
							// The generic twin on copies is the reference.
							ws, wm, wl, wal := append([]float32(nil), s...), append([]float32(nil), m...), append([]float32(nil), l...), make([]float32, rows)
							fallback.Softmax(ws, lds, wm, wl, wal, nk, rows, softcap)
							ks.Softmax(s, lds, m, l, al, nk, rows, softcap)
							for r := 0; r < rows; r++ {
								if m[r] != wm[r] && !(math.Abs(float64(m[r]-wm[r])) <= 1e-6*math.Abs(float64(wm[r]))) {
									t.Fatalf("%s Softmax nk=%d rows=%d: m[%d] = %v, want %v", ks, nk, rows, r, m[r], wm[r])
								}
								near(t, ks.Name+" Softmax l", l[r], wl[r], 1e-5)
								near(t, ks.Name+" Softmax alpha", al[r], wal[r], 1e-5)
								for c := 0; c < nk; c++ {
									near(t, ks.Name+" Softmax p", s[c*lds+r], ws[c*lds+r], 1e-5)
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

// near fails unless got is within tol of want, relative to max(1, |want|).
func near(t *testing.T, what string, got, want float32, tol float64) {
	t.Helper()
	if got == want {
		return
	}
	if err := math.Abs(float64(got-want)) / math.Max(1, math.Abs(float64(want))); !(err <= tol) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// TestExp checks every set's exp over the whole float32 range against
// float64 exp: at most 2 ulp where the result is normal, exactly 0 below
// ExpMin (and for -Inf), NaN for NaN.
func TestExp(t *testing.T) {
	var xs []float32
	step := uint32(997)
	if !longTests() {
		step = 9973
	}
	for b := uint32(0); b < 1<<31; b += step { // positive and negative patterns of the whole range
		xs = append(xs, math.Float32frombits(b), -math.Float32frombits(b))
	}
	xs = append(xs, 0, float32(math.Inf(-1)), fallback.ExpMin, fallback.ExpMax, -87.3, 88.3, 1e-30, -1e-30)
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			got := make([]float32, len(xs))
			ks.Exp(got, xs)
			top := make([]float32, 1)
			ks.Exp(top, []float32{fallback.ExpMax})
			worst := 0.0
			for i, x := range xs {
				g := got[i]
				switch {
				case x != x:
					if g == g {
						t.Fatalf("%s: exp(NaN) = %v", ks, g)
					}
				case x < fallback.ExpMin:
					if g != 0 {
						t.Fatalf("%s: exp(%v) = %v, want 0", ks, x, g)
					}
				case x > fallback.ExpMax:
					if g != top[0] { // clamped
						t.Fatalf("%s: exp(%v) = %v, want exp(ExpMax)", ks, x, g)
					}
				default:
					want := math.Exp(float64(x))
					ulp := math.Abs(float64(g)-want) / ulpOf(want)
					worst = max(worst, ulp)
					if ulp > 2 {
						t.Fatalf("%s: exp(%v) = %v, want %v (%.2f ulp)", ks, x, g, want, ulp)
					}
				}
			}
			t.Logf("%s: exp worst error %.2f ulp over %d inputs", ks, worst, len(xs))
		})
	}
}

// TestWeightExp checks every set's Softmax weights, one key against a
// running maximum of 0 so that each weight is e^d of its score d, against
// float64 exp within fallback.WeightExp32's bound (2 ulp plus a relative
// |y|·2^-23·ln2, y = d·log2e), exactly 0 below WeightExpMin and for -Inf,
// alpha exactly 1.
func TestWeightExp(t *testing.T) {
	var ds []float32
	step := uint32(61)
	if !longTests() {
		step = 4999
	}
	for b := uint32(0); ; b += step {
		d := -math.Float32frombits(b)
		if d < fallback.WeightExpMin {
			break
		}
		ds = append(ds, d)
	}
	ds = append(ds, float32(math.Inf(-1)), fallback.WeightExpMin, fallback.WeightExpMin-1e-3, -100, -1e30, -0.5, -0x1p-30)
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			rows := 4 * ks.Lanes
			worst := 0.0
			for i0 := 0; i0 < len(ds); i0 += rows {
				s, m, l, al := make([]float32, rows), make([]float32, rows), make([]float32, rows), make([]float32, rows)
				n := copy(s, ds[i0:])
				ks.Softmax(s, rows, m, l, al, 1, rows, 0)
				for r := 0; r < n; r++ {
					d, got := ds[i0+r], float64(s[r])
					if al[r] != 1 {
						t.Fatalf("%s: alpha = %v with the maximum unchanged, want 1", ks, al[r])
					}
					if d < fallback.WeightExpMin {
						if got != 0 {
							t.Fatalf("%s: weight exp(%v) = %v, want 0", ks, d, got)
						}
						continue
					}
					want := math.Exp(float64(d))
					y := math.Abs(float64(d) * math.Log2E)
					if err := math.Abs(got - want); !(err <= 2*ulpOf(want)+want*y*math.Ln2/(1<<23)) {
						t.Fatalf("%s: weight exp(%v) = %v, want %v (%.2f ulp)", ks, d, got, want, err/ulpOf(want))
					}
					if y <= 1 {
						worst = max(worst, math.Abs(got-want)/ulpOf(want))
					}
				}
			}
			t.Logf("%s: weights' exp worst error %.2f ulp for |d·log2e| <= 1, over %d inputs", ks, worst, len(ds))
		})
	}
}

// ulpOf returns the float32 ulp at x.
func ulpOf(x float64) float64 {
	f := float32(x)
	return float64(math.Nextafter32(f, float32(math.Inf(1))) - f)
}

// TestExpGuard: the exp kernel reads and writes nothing past its slices.
func TestExpGuard(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, atEnd := range []bool{true, false} {
				for n := 1; n <= 70; n++ {
					src, f1 := operand(t, rng, n, atEnd)
					dst, f2 := guarded(t, n, atEnd)
					ks.Exp(dst, src)
					for i := range dst {
						if dst[i] != fallback.Exp32(src[i]) && math.Abs(float64(dst[i]-fallback.Exp32(src[i]))) > 1e-6 {
							t.Fatalf("%s: exp(%v) = %v, want %v", ks, src[i], dst[i], fallback.Exp32(src[i]))
						}
					}
					f1()
					f2()
				}
			}
		})
	}
}

// TestContractChecks: a kernel called with a short slice panics with a
// message instead of touching memory.
func TestContractChecks(t *testing.T) {
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s: QK with a short s did not panic", ks)
					}
				}()
				ks.QK(make([]float32, 3), ks.Lanes, make([]float32, 8), 2, make([]float32, 2*ks.Lanes), ks.Lanes, 4, ks.Lanes, 2)
			}()
		})
	}
}

func TestGemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	ns := []int{1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 48, 63, 64, 65, 100, 130}
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, atEnd := range []bool{true, false} {
				for m := 1; m <= 14; m++ {
					for _, n := range ns {
						for _, k := range []int{1, 2, 3, 4, 5, 6, 7, 9, 16, 33} {
							accumulate := rng.IntN(2) == 0
							ldc, lda, ldb := n+rng.IntN(3), k+rng.IntN(3), n+rng.IntN(3)
							c, f1 := operand(t, rng, span(m, n, ldc), atEnd)
							a, f2 := operand(t, rng, span(m, k, lda), atEnd)
							b, f3 := operand(t, rng, span(k, n, ldb), atEnd)
							before := append([]float32(nil), c...)
							ks.Gemm(c, ldc, a, lda, b, ldb, m, n, k, accumulate)
							for i := 0; i < m; i++ {
								for j := 0; j < ldc && i*ldc+j < len(c); j++ {
									if j >= n {
										if c[i*ldc+j] != before[i*ldc+j] {
											t.Fatalf("%s Gemm m=%d n=%d k=%d wrote c[%d][%d] past n", ks, m, n, k, i, j)
										}
										continue
									}
									want, abs := 0.0, 0.0
									if accumulate {
										want = float64(before[i*ldc+j])
										abs = math.Abs(want)
									}
									for p := 0; p < k; p++ {
										x := float64(a[i*lda+p]) * float64(b[p*ldb+j])
										want += x
										abs += math.Abs(x)
									}
									if got := float64(c[i*ldc+j]); !(math.Abs(got-want) <= dotTol(k+1, abs)) {
										t.Fatalf("%s Gemm m=%d n=%d k=%d acc=%v: c[%d][%d] = %v, want %v", ks, m, n, k, accumulate, i, j, got, want)
									}
								}
							}
							f1()
							f2()
							f3()
						}
					}
				}
			}
		})
	}
}

// TestScaleColumns holds every set's ScaleColumns to fallback's, bit for
// bit, over every column count around the vectors and the calls' panels,
// with the operands against guard pages, and checks that nothing past the
// columns of a row changes.
func TestScaleColumns(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 7))
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, atEnd := range []bool{true, false} {
				for rows := 1; rows <= 8*ks.Lanes+3; rows++ {
					for _, n := range []int{1, 2, 5} {
						ldx := rows + rng.IntN(3)
						x, f1 := operand(t, rng, span(n, rows, ldx), atEnd)
						f, f2 := operand(t, rng, rows, !atEnd)
						f[0], f[rows-1] = 1, float32(math.Inf(1)) // exact and non-finite factors too
						want := append([]float32(nil), x...)
						fallback.ScaleColumns(want, ldx, f, rows, n)
						ks.ScaleColumns(x, ldx, f, rows, n)
						for i := range x {
							if math.Float32bits(x[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%s ScaleColumns rows=%d n=%d: x[%d] = %v, want %v", ks, rows, n, i, x[i], want[i])
							}
						}
						f1()
						f2()
					}
				}
			}
		})
	}
}

// TestTranspose32 holds every set's Transpose32 to the definition, bit
// for bit, over random bits (signalling NaNs as float32 among them) and
// every edge around the 8×8 blocks, against guard pages, and checks that
// nothing past the columns of a row changes.
func TestTranspose32(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 8))
	dims := []int{1, 2, 7, 8, 9, 15, 16, 17, 31, 64, 65}
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, atEnd := range []bool{true, false} {
				for _, nr := range dims {
					for _, nc := range dims {
						ldd, lds := nr+rng.IntN(3), nc+rng.IntN(3)
						dst, f1 := guarded32(t, span(nc, nr, ldd), atEnd)
						src, f2 := guarded32(t, span(nr, nc, lds), !atEnd)
						for i := range src {
							src[i] = rng.Uint32()
							if i%5 == 0 {
								src[i] = 0x7f800001 | src[i]&0x8000ffff // a signalling NaN's bits
							}
						}
						for i := range dst {
							dst[i] = rng.Uint32()
						}
						before := append([]uint32(nil), dst...)
						ks.Transpose32(dst, ldd, src, lds, nr, nc)
						for c := 0; c < nc; c++ {
							for r := 0; r < ldd && c*ldd+r < len(dst); r++ {
								want := before[c*ldd+r]
								if r < nr {
									want = src[r*lds+c]
								}
								if dst[c*ldd+r] != want {
									t.Fatalf("%s Transpose32 nr=%d nc=%d: dst[%d][%d] = %#x, want %#x", ks, nr, nc, c, r, dst[c*ldd+r], want)
								}
							}
						}
						f1()
						f2()
					}
				}
			}
		})
	}
}

func TestTransposeScale(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	dims := []int{1, 2, 7, 8, 9, 15, 16, 17, 24, 31, 64, 65}
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, atEnd := range []bool{true, false} {
				for _, nr := range dims {
					for _, nc := range dims {
						ldd, lds := nr+rng.IntN(3), nc+rng.IntN(3)
						dst, f1 := operand(t, rng, span(nc, nr, ldd), atEnd)
						src, f2 := operand(t, rng, span(nr, nc, lds), atEnd)
						before := append([]float32(nil), dst...)
						ks.TransposeScale(dst, ldd, src, lds, nr, nc, 0.5)
						for c := 0; c < nc; c++ {
							for r := 0; r < ldd && c*ldd+r < len(dst); r++ {
								want := before[c*ldd+r]
								if r < nr {
									want = 0.5 * src[r*lds+c]
								}
								if dst[c*ldd+r] != want {
									t.Fatalf("%s TransposeScale nr=%d nc=%d: dst[%d][%d] = %v, want %v", ks, nr, nc, c, r, dst[c*ldd+r], want)
								}
							}
						}
						f1()
						f2()
					}
				}
			}
		})
	}
}

func TestDot(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			if !ks.HasDot() {
				t.Skip("the set has no Dot kernel")
			}
			for _, atEnd := range []bool{true, false} {
				for rows := 1; rows <= ks.DotRows(); rows++ {
					for _, nk := range keyDims {
						for _, dk := range qkDims {
							lds, ldk, ldq := rows+rng.IntN(5), dk+rng.IntN(3), dk+rng.IntN(3)
							s, f1 := operand(t, rng, span(nk, rows, lds), atEnd)
							k, f2 := operand(t, rng, span(nk, dk, ldk), atEnd)
							q, f3 := operand(t, rng, span(rows, dk, ldq), atEnd)
							before := append([]float32(nil), s...)
							ks.Dot(s, lds, k, ldk, q, ldq, nk, rows, dk)
							for i := range s {
								c, r := i/lds, i%lds
								if r >= rows {
									if s[i] != before[i] {
										t.Fatalf("%s Dot wrote s[%d][%d] past rows %d", ks, c, r, rows)
									}
									continue
								}
								want, abs := 0.0, 0.0
								for d := 0; d < dk; d++ {
									x := float64(k[c*ldk+d]) * float64(q[r*ldq+d])
									want += x
									abs += math.Abs(x)
								}
								if got := float64(s[i]); !(math.Abs(got-want) <= dotTol(dk, abs)) {
									t.Fatalf("%s Dot rows=%d nk=%d dk=%d: s[%d][%d] = %v, want %v", ks, rows, nk, dk, c, r, got, want)
								}
							}
							f1()
							f2()
							f3()
						}
					}
				}
			}
		})
	}
}

// TestTanh checks every set's softcap tanh over the whole float32 range
// against float64 tanh: at most 4 ulp (the measured worst is printed),
// ±1 at ±Inf, NaN for NaN, and -Inf kept (a masked score). The tanh lives
// inside Softmax: with softcap 1 (so x/c and c·t are exact), one key and
// m = -Inf, the new running max of each row is the capped score itself.
func TestTanh(t *testing.T) {
	var xs []float32
	step := uint32(499)
	if !longTests() {
		step = 4999
	}
	for b := uint32(0); b < 0x7f800000; b += step {
		xs = append(xs, math.Float32frombits(b), -math.Float32frombits(b))
	}
	inf := float32(math.Inf(1))
	xs = append(xs, inf, -inf, float32(math.NaN()), fallback.TanhSmall, -fallback.TanhSmall,
		math.Nextafter32(fallback.TanhSmall, 0), 1e-40, -1e-45, math.MaxFloat32)
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			rows := len(xs) / ks.Lanes * ks.Lanes
			m, l, alpha := make([]float32, rows), make([]float32, rows), make([]float32, rows)
			for i := range m {
				m[i] = -inf
			}
			s := append([]float32(nil), xs[:rows]...)
			ks.Softmax(s, rows, m, l, alpha, 1, rows, 1)
			worst := 0.0
			for i, x := range xs[:rows] {
				g := m[i]
				switch {
				case x != x: // the max may skip a NaN (generic); the weight may not
					if s[i] == s[i] {
						t.Fatalf("%s: the weight of a NaN score is %v", ks, s[i])
					}
				case x == -inf:
					if g != -inf {
						t.Fatalf("%s: softcap(-Inf) = %v, want -Inf (masked)", ks, g)
					}
				case x == inf:
					if g != 1 {
						t.Fatalf("%s: tanh(+Inf) = %v, want 1", ks, g)
					}
				default:
					want := math.Tanh(float64(x))
					ulp := 0.0
					if want != 0 {
						ulp = math.Abs(float64(g)-want) / ulpOf(want)
					} else if g != 0 {
						ulp = math.Inf(1)
					}
					worst = max(worst, ulp)
					if ulp > 4 {
						t.Fatalf("%s: tanh(%v) = %v, want %v (%.2f ulp)", ks, x, g, want, ulp)
					}
				}
			}
			t.Logf("%s: tanh worst error %.2f ulp over %d inputs", ks, worst, rows)
		})
	}
}

// TestPrefetchLines: the prefetch hint changes nothing, on guarded slices
// (whose neighbour pages would fault a load; a prefetch never faults, so
// what this shows is that the call is safe and inert at every row shape,
// misaligned starts included), and a short slice panics as the kernels
// do. Where a prefetch lands is not observable; the kernel's addresses are
// its doc comment's, read in the generated code.
func TestPrefetchLines(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, atEnd := range []bool{true, false} {
				for _, c := range []struct{ rows, n, ld int }{{1, 1, 1}, {1, 17, 17}, {3, 15, 40}, {64, 64, 512}, {5, 129, 130}, {0, 8, 8}} {
					for skew := 0; skew < 16; skew += 5 { // row starts off a line
						size := skew + max(0, (c.rows-1)*c.ld+c.n)
						x, free := guarded(t, max(size, 1), atEnd)
						for i := range x {
							x[i] = rng.Float32()
						}
						want := slices.Clone(x)
						ks.PrefetchLines(x[skew:], c.ld, c.rows, c.n)
						if !slices.Equal(x, want) {
							t.Fatalf("%s: PrefetchLines rows=%d n=%d ld=%d changed memory", ks, c.rows, c.n, c.ld)
						}
						free()
					}
				}
			}
			defer func() {
				if recover() == nil {
					t.Errorf("%s: PrefetchLines past its slice did not panic", ks)
				}
			}()
			ks.PrefetchLines(make([]float32, 20), 10, 2, 11)
		})
	}
}
