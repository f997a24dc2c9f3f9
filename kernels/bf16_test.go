package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

// bf16Sets returns the sets with bfloat16 kernels this CPU runs: those of
// Available that have them (native), and the emulated twin of the avx512
// set (EmulatedBF16) where there is AVX-512.
func bf16Sets() []*Set {
	var sets []*Set
	for _, ks := range Available() {
		if ks.HasBF16() {
			sets = append(sets, ks)
		}
	}
	if ks := EmulatedBF16(); ks != nil {
		sets = append(sets, ks)
	}
	if ks := EmulatedAMX(); ks != nil {
		sets = append(sets, ks)
	}
	return sets
}

// bf16SetsWhere is the sets of bf16Sets for which has holds.
func bf16SetsWhere(has func(*Set) bool) []*Set {
	var sets []*Set
	for _, ks := range bf16Sets() {
		if has(ks) {
			sets = append(sets, ks)
		}
	}
	return sets
}

// pairs returns n random uint32 of two bfloat16 each, normal numbers in
// (-1, 1) (the instruction reads denormals as 0; its twin does not).
func pairs(t *testing.T, rng *rand.Rand, n int, atEnd bool) ([]uint32, func()) {
	s, free := guarded32(t, n, atEnd)
	half := func() uint32 {
		for {
			h := fallback.F32ToBF16(2*rng.Float32() - 1)
			if h&0x7f80 != 0 { // normal (not 0, not denormal)
				return uint32(h)
			}
		}
	}
	for i := range s {
		s[i] = half() | half()<<16
	}
	return s, free
}

// TestGemmBF16 checks every set with bfloat16 kernels (natively, or the
// emulated twin) bit for bit against fallback.GemmBF16 (GemmBF16Odd for
// NEON's BFDOT): both operand
// layouts (QK's A rows, lka = 1; PV's A columns, lda = 1), every row-group
// tail, panels of 1..4 vectors and their masked tails, accumulate or not,
// operands ending at a guard page; nothing of C outside its block changes.
func TestGemmBF16(t *testing.T) {
	sets := bf16Sets()
	if len(sets) == 0 {
		t.Skip("no set with bfloat16 kernels on this CPU (AVX-512 needed, natively AVX512_BF16)")
	}
	rng := rand.New(rand.NewPCG(0xbf, 5))
	for _, ks := range sets {
		for _, atEnd := range []bool{true, false} {
			for m := 1; m <= 13; m++ {
				for _, n := range []int{1, 7, 16, 17, 33, 64, 65, 100} {
					for _, k := range []int{1, 2, 5, 33} {
						for _, rowsA := range []bool{true, false} {
							lda, lka := k+rng.IntN(3), 1 // QK: A's rows hold its pairs
							if !rowsA {
								lda, lka = 1, m+rng.IntN(3) // PV: A's columns do
							}
							ldc, ldb := n+rng.IntN(3), n+rng.IntN(3)
							accumulate := rng.IntN(2) == 0
							a, f1 := pairs(t, rng, (m-1)*lda+(k-1)*lka+1, atEnd)
							b, f2 := pairs(t, rng, span(k, n, ldb), atEnd)
							c, f3 := operand(t, rng, span(m, n, ldc), atEnd)
							want := slices.Clone(c)
							twin := fallback.GemmBF16
							if ks.BF16RoundsOdd() {
								twin = fallback.GemmBF16Odd
							}
							twin(want, ldc, a, lda, lka, b, ldb, m, n, k, accumulate)
							ks.GemmBF16(c, ldc, a, lda, lka, b, ldb, m, n, k, accumulate)
							for i := range want {
								if math.Float32bits(c[i]) != math.Float32bits(want[i]) {
									t.Fatalf("%s GemmBF16 m=%d n=%d k=%d lda=%d lka=%d acc=%v: c[%d] = %v, want %v",
										ks, m, n, k, lda, lka, accumulate, i, c[i], want[i])
								}
							}
							f1()
							f2()
							f3()
						}
					}
				}
			}
		}
	}
}

// TestGemmAMX checks GemmBF16 on the sets whose bulk runs on AMX tiles:
// shapes of whole 32×32 blocks and 16-pair steps and of every tail around
// them (rows, columns, pairs), strides wider than the rows, accumulate or
// not, operands at guard pages. The Emu twin must give fallback.GemmBF16's
// bits (it sums pair by pair in order); the native tiles, whose order of
// summation Intel does not document, the float64 sums within float32's
// bound.
func TestGemmAMX(t *testing.T) {
	sets := bf16SetsWhere((*Set).AMX)
	if len(sets) == 0 {
		t.Skip("no AMX set, native or emulated (AVX-512 needed)")
	}
	rng := rand.New(rand.NewPCG(0xa3, 1))
	for _, ks := range sets {
		for _, atEnd := range []bool{true, false} {
			for _, m := range []int{32, 33, 47, 64, 96} {
				for _, n := range []int{32, 40, 64, 65} {
					for _, k := range []int{16, 17, 32, 40} {
						if !longTests() && (m+n+k+boolInt(atEnd))%2 != 0 {
							continue
						}
						lda, ldb, ldc := k+rng.IntN(3), n+rng.IntN(3), n+rng.IntN(3)
						accumulate := rng.IntN(2) == 0
						a, f1 := pairs(t, rng, (m-1)*lda+k, atEnd)
						b, f2 := pairs(t, rng, span(k, n, ldb), atEnd)
						c, f3 := operand(t, rng, span(m, n, ldc), atEnd)
						before := slices.Clone(c)
						want := slices.Clone(c)
						fallback.GemmBF16(want, ldc, a, lda, 1, b, ldb, m, n, k, accumulate)
						ks.GemmBF16(c, ldc, a, lda, 1, b, ldb, m, n, k, accumulate)
						for i := 0; i < m; i++ {
							for j := 0; j < ldc && i*ldc+j < len(c); j++ {
								at := i*ldc + j
								if j >= n {
									if math.Float32bits(c[at]) != math.Float32bits(before[at]) {
										t.Fatalf("%s m=%d n=%d k=%d: wrote c[%d][%d] past n", ks, m, n, k, i, j)
									}
									continue
								}
								if !ks.AMXNative() {
									if math.Float32bits(c[at]) != math.Float32bits(want[at]) {
										t.Fatalf("%s m=%d n=%d k=%d acc=%v: c[%d][%d] = %v, want %v", ks, m, n, k, accumulate, i, j, c[at], want[at])
									}
									continue
								}
								exact, abs := 0.0, 0.0
								if accumulate {
									exact, abs = float64(before[at]), math.Abs(float64(before[at]))
								}
								for p := 0; p < k; p++ {
									x, y := a[i*lda+p], b[p*ldb+j]
									for _, sh := range []uint{0, 16} {
										v := float64(fallback.BF16ToF32(uint16(x>>sh))) * float64(fallback.BF16ToF32(uint16(y>>sh)))
										exact, abs = exact+v, abs+math.Abs(v)
									}
								}
								if d := math.Abs(float64(c[at]) - exact); d > dotTol(2*k+1, abs) {
									t.Fatalf("%s m=%d n=%d k=%d: c[%d][%d] = %v, exact %v", ks, m, n, k, i, j, c[at], exact)
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
	}
}

// TestAMXSelection: the avx512 set runs AMX exactly where AMXStatus says
// it may, and natively only with the CPU's bfloat16 instruction.
func TestAMXSelection(t *testing.T) {
	for _, ks := range Available() {
		if ks.AMX() != (ks.Name == "avx512" && AMXStatus() == nil) {
			t.Errorf("%s: AMX %v, AMXStatus %v", ks, ks.AMX(), AMXStatus())
		}
		if ks.AMX() && !ks.AMXNative() {
			t.Errorf("%s: the selected set runs emulated tiles", ks)
		}
	}
	t.Logf("AMX: %v", AMXStatus())
	t.Logf("AMX-INT8: %v", AMXInt8Status())
	for _, ks := range Available() {
		if ks.Name == "avx512" && AMXInt8Status() == nil && !ks.HasScoresQ8() {
			t.Error("AMX-INT8 is on but the avx512 set has no ScoresQ8")
		}
	}
}

// TestPairBF16 checks PairBF16 on every set (the kernel where a set has
// bfloat16 kernels, else Go) bit for bit against fallback.PairBF16, on
// values that hit every rounding case (ties both ways, NaN, infinities,
// overflow to infinity, denormals), odd and even row counts, every
// vector tail, strides wider than the rows, at guard pages.
func TestPairBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(0xbf, 6))
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.Float32frombits(0x7f800001), math.Float32frombits(0xff812345), math.MaxFloat32,
		math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), math.Float32frombits(0x00008000), 1e-40}
	for _, ks := range append(Available(), bf16Sets()...) {
		for _, atEnd := range []bool{true, false} {
			for _, rows := range []int{1, 2, 3, 6, 7} {
				for _, n := range []int{1, 5, 16, 17, 31, 64, 70} {
					lds, ldd := n+rng.IntN(3), n+rng.IntN(3)
					src, f1 := guarded(t, span(rows, n, lds), atEnd)
					for i := range src {
						src[i] = 4*rng.Float32() - 2
						if rng.IntN(4) == 0 {
							src[i] = special[rng.IntN(len(special))]
						}
					}
					dst, f2 := guarded32(t, span((rows+1)/2, n, ldd), atEnd)
					for i := range dst {
						dst[i] = 0xdeadbeef
					}
					want := slices.Clone(dst)
					fallback.PairBF16(want, ldd, src, lds, rows, n)
					ks.PairBF16(dst, ldd, src, lds, rows, n)
					if i := slices.Compare(dst, want); i != 0 {
						for j := range want {
							if dst[j] != want[j] {
								t.Fatalf("%s PairBF16 rows=%d n=%d: dst[%d] = %#x, want %#x", ks, rows, n, j, dst[j], want[j])
							}
						}
					}
					f1()
					f2()
				}
			}
		}
	}
}

// TestBF16Peak runs the bfloat16 throughput loop where the CPU has it and
// checks its operation count.
func TestBF16Peak(t *testing.T) {
	for _, ks := range Available() {
		if !ks.HasBF16Peak() {
			if ks.BF16PeakFLOPsPerIter() != 0 {
				t.Fatalf("%s: no BF16Peak but %d flops an iteration", ks, ks.BF16PeakFLOPsPerIter())
			}
			ks.BF16Peak(10) // does nothing
			continue
		}
		ks.BF16Peak(1000)
		if got := ks.BF16PeakFLOPsPerIter(); got != 12*ks.Lanes*4 {
			t.Fatalf("%s: %d flops an iteration", ks, got)
		}
	}
}
