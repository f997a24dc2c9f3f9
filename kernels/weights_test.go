package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

// TestGemmW checks GemmW on every set that has it: for float16 and
// bfloat16 weights (and bfloat16 held in pairs, on a set that
// PairsWeights), every row tile and column tail, the result equals, bit
// for bit, Gemm on the same weights widened by WidenWeights, with every
// operand against an unreadable page (B read in whole vectors up to the
// row stride, nothing past them); C past column n is never written.
func TestGemmW(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	types := []KVType{fallback.KVFloat16, fallback.KVBFloat16}
	for _, ks := range Available() {
		if !ks.HasGemmW(fallback.KVBFloat16) {
			continue
		}
		t.Run(ks.Name, func(t *testing.T) {
			for _, atEnd := range []bool{true, false} {
				for _, typ := range types {
					for _, m := range []int{1, 2, 3, 5, 6, 7, 13} {
						for _, n := range []int{1, 7, 8, 9, 16, 17, 33, 48, 64} {
							for _, k := range []int{1, 5, 31, 32, 33, 70} {
								gemmWCase(t, rng, ks, typ, m, n, k, atEnd, false)
								if typ == fallback.KVBFloat16 && k%2 == 0 && ks.PairsWeights() {
									gemmWCase(t, rng, ks, typ, m, n, k, atEnd, true)
								}
							}
						}
					}
				}
			}
		})
	}
}

// gemmWCase runs one GemmW case of TestGemmW.
func gemmWCase(t *testing.T, rng *rand.Rand, ks *Set, typ KVType, m, n, k int, atEnd, paired bool) {
	t.Helper()
	o := newWeightOperands(t, rng, ks, m, n, k, atEnd)
	defer o.free()
	whole, ld, ldc, lda, accumulate, c, a := o.whole, o.ld, o.ldc, o.lda, o.accumulate, o.c, o.a
	b := WeightRows{Type: typ, Ld: ld}
	var f3 func()
	b.U16, f3 = guarded16(t, span(k, whole, ld), atEnd)
	defer f3()
	for i := range b.U16 {
		b.U16[i] = fallback.F32ToF16(2*rng.Float32() - 1)
		if typ == fallback.KVBFloat16 {
			b.U16[i] = fallback.F32ToBF16(2*rng.Float32() - 1)
		}
	}
	wide := make([]float32, span(k, whole, ld))
	ks.WidenWeights(wide, ld, b, k, n)
	if paired {
		// The same weights held in pairs, against an unreadable page: the
		// Go twin widens them to the same values, and GemmW must give
		// Gemm's bits on them.
		pairs := fallback.PairRows(b.U16, ld, k, whole)
		var f4 func()
		b.P, f4 = guarded32(t, span(k/2, whole, ld), atEnd)
		defer f4()
		copy(b.P, pairs)
		b.U16 = nil
		again := make([]float32, len(wide))
		ks.WidenWeights(again, ld, b, k, n)
		for p := range k {
			for j := range n {
				if math.Float32bits(again[p*ld+j]) != math.Float32bits(wide[p*ld+j]) {
					t.Fatalf("WidenWeights of pairs, k=%d ld=%d: (%d, %d) = %v, of rows %v", k, ld, p, j, again[p*ld+j], wide[p*ld+j])
				}
			}
		}
	}
	want := append([]float32(nil), c...)
	packed := append([]float32(nil), c...)
	ks.Gemm(want, ldc, a, lda, wide, ld, m, n, k, accumulate)
	ks.GemmW(c, ldc, a, lda, b, m, n, k, accumulate)
	for i := range c {
		if math.Float32bits(c[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s GemmW %v (pairs %v) m=%d n=%d k=%d ld=%d acc=%v: c[%d][%d] = %v, Gemm on the widened weights %v",
				ks, typ, paired, m, n, k, ld, accumulate, i/ldc, i%ldc, c[i], want[i])
		}
	}
	if !ks.HasGemmWPacked(typ) {
		return
	}
	// Its packed twin on A packed (against an unreadable page): the same bits.
	ap, f5 := guarded(t, m*k, !atEnd)
	defer f5()
	PackA(ap, k, a, lda, m, k)
	ks.GemmWPacked(packed, ldc, ap, k, b, m, n, k, accumulate)
	for i := range packed {
		if math.Float32bits(packed[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s GemmWPacked %v (pairs %v) m=%d n=%d k=%d ld=%d acc=%v: c[%d][%d] = %v, Gemm on the widened weights %v",
				ks, typ, paired, m, n, k, ld, accumulate, i/ldc, i%ldc, packed[i], want[i])
		}
	}
}

// TestGemvI8 checks GemvI8 on every set against the float64 product
// through the dequantized weights (its block sums are float32 sums of up
// to 32 products, scaled once), and WidenWeights of int8 rows bit for bit
// against the Go twin's float32(q)·s, with every operand against an
// unreadable page.
func TestGemvI8(t *testing.T) {
	eachGemvCase(t, 8, []int{1, 7, 9, 16, 17, 48, 64, 65}, gemvCase)
}

// eachGemvCase runs run on every set for every row count m (1..7), n of
// ns, k across int8 blocks and both guard-page sides, drawing from a
// generator seeded with seed.
func eachGemvCase(t *testing.T, seed uint64, ns []int, run func(t *testing.T, rng *rand.Rand, ks *Set, m, n, k int, atEnd bool)) {
	rng := rand.New(rand.NewPCG(seed, seed))
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, atEnd := range []bool{true, false} {
				for _, m := range []int{1, 2, 3, 4, 7} {
					for _, n := range ns {
						for _, k := range []int{1, 5, 31, 32, 33, 64, 70, 100, 128, 130} {
							run(t, rng, ks, m, n, k, atEnd)
						}
					}
				}
			}
		})
	}
}

// gemvCase runs one case of TestGemvI8.
func gemvCase(t *testing.T, rng *rand.Rand, ks *Set, m, n, k int, atEnd bool) {
	t.Helper()
	o := newWeightOperands(t, rng, ks, m, n, k, atEnd)
	defer o.free()
	whole, ld, ldc, lda, accumulate, c, a := o.whole, o.ld, o.ldc, o.lda, o.accumulate, o.c, o.a
	b, free := int8Weights(t, rng, k, whole, ld, atEnd)
	defer free()
	before := append([]float32(nil), c...)
	ks.GemvI8(c, ldc, a, lda, b, m, n, k, accumulate)
	checkRowAlone(t, "GemvI8", ks.GemvI8, o, b, c, before, m, n, k)
	checkGemv(t, "GemvI8", ks, o, c, before, m, n, k, func(p, j int) (float64, float64) {
		w := float64(b.I8[p*ld+j]) * float64(b.S[p/32*ld+j])
		return w, math.Abs(w)
	})
	checkWiden(t, ks, b, k, n, whole)
}

// checkRowAlone checks that the first row of a GEMV of m rows (c; before:
// C on entry) is, bit for bit, that row computed alone: a one-row tile
// (which sums two blocks at a time on amd64) adds each block in the order
// the taller tiles do.
func checkRowAlone(t *testing.T, kernel string, gemv func(c []float32, ldc int, a []float32, lda int, b WeightRows, m, n, k int, accumulate bool),
	o weightOperands, b WeightRows, c, before []float32, m, n, k int) {
	t.Helper()
	if m < 2 {
		return
	}
	row := append([]float32(nil), before[:n]...)
	gemv(row, n, o.a, o.lda, b, 1, n, k, o.accumulate)
	for j, x := range row {
		if got := c[j]; math.Float32bits(got) != math.Float32bits(x) {
			t.Fatalf("%s m=%d n=%d k=%d: row 0 column %d = %v in a tile, %v alone", kernel, m, n, k, j, got, x)
		}
	}
}

// checkGemv checks the GEMV result c (before: C on entry) of the operands
// o against the float64 product through the weights value(p, j) gives
// (the value and the magnitude its rounding error scales with), within
// float32 rounding; C past column n must be untouched.
func checkGemv(t *testing.T, kernel string, ks *Set, o weightOperands, c, before []float32, m, n, k int, value func(p, j int) (float64, float64)) {
	t.Helper()
	for i := 0; i < m; i++ {
		for j := 0; j < o.ldc && i*o.ldc+j < len(c); j++ {
			at := i*o.ldc + j
			if j >= n {
				if c[at] != before[at] {
					t.Fatalf("%s %s m=%d n=%d k=%d wrote c[%d][%d] past n", ks, kernel, m, n, k, i, j)
				}
				continue
			}
			want, abs := 0.0, 0.0
			if o.accumulate {
				want, abs = float64(before[at]), math.Abs(float64(before[at]))
			}
			for p := 0; p < k; p++ {
				w, mag := value(p, j)
				x := float64(o.a[i*o.lda+p])
				want, abs = want+x*w, abs+math.Abs(x)*mag
			}
			if got := float64(c[at]); !(math.Abs(got-want) <= dotTol(k+2, abs)) {
				t.Fatalf("%s %s m=%d n=%d k=%d acc=%v: c[%d][%d] = %v, want %v", ks, kernel, m, n, k, o.accumulate, i, j, got, want)
			}
		}
	}
}

// checkWiden checks the set's WidenWeights of the rows b against the Go
// twin's, bit for bit (dst rows of whole columns, written in whole
// vectors).
func checkWiden(t *testing.T, ks *Set, b WeightRows, k, n, whole int) {
	t.Helper()
	wide, twin := make([]float32, span(k, whole, b.Ld)), make([]float32, span(k, n, b.Ld))
	ks.WidenWeights(wide, b.Ld, b, k, n)
	fallback.WidenWeights(twin, b.Ld, b, k, n)
	for p := 0; p < k; p++ {
		for j := 0; j < n; j++ {
			if got, want := wide[p*b.Ld+j], twin[p*b.Ld+j]; math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%s WidenWeights %v n=%d k=%d: (%d, %d) = %v, want %v", ks, b.Type, n, k, p, j, got, want)
			}
		}
	}
}

// int8Weights returns k random int8 weight rows of whole columns at
// stride ld with their scales, each slice against an unreadable page.
func int8Weights(t *testing.T, rng *rand.Rand, k, whole, ld int, atEnd bool) (WeightRows, func()) {
	t.Helper()
	b := WeightRows{Type: fallback.KVInt8, Ld: ld}
	var f1, f2 func()
	b.I8, f1 = guarded8(t, span(k, whole, ld), atEnd)
	b.S, f2 = guarded(t, span(fallback.Int8Blocks(k), whole, ld), atEnd)
	for i := range b.I8 {
		b.I8[i] = int8(rng.IntN(255) - 127)
	}
	for i := range b.S {
		b.S[i] = rng.Float32() / 64
	}
	return b, func() { f1(); f2() }
}

// weightOperands are the operands of a GemmW or GemvI8 case but B: the
// columns in whole vectors, a random B row stride of whole vectors, random
// strides of C and A and their guarded random contents.
type weightOperands struct {
	whole, ld, ldc, lda int
	accumulate          bool
	c, a                []float32
	free                func()
}

func newWeightOperands(t *testing.T, rng *rand.Rand, ks *Set, m, n, k int, atEnd bool) weightOperands {
	t.Helper()
	o := weightOperands{whole: (n + ks.Lanes - 1) / ks.Lanes * ks.Lanes}
	o.ld = o.whole + rng.IntN(2)*ks.Lanes
	o.ldc, o.lda = n+rng.IntN(3), k+rng.IntN(3)
	o.accumulate = rng.IntN(2) == 0
	var f1, f2 func()
	o.c, f1 = operand(t, rng, span(m, n, o.ldc), atEnd)
	o.a, f2 = operand(t, rng, span(m, k, o.lda), atEnd)
	o.free = func() { f1(); f2() }
	return o
}

// TestGemvI4 checks GemvI4 on every set against the float64 product
// through the dequantized weights, (u-z)·s (its block sums are float32
// sums of up to 32 products, the zero points taken off through the sum of
// A's block, scaled once: within float32 rounding of the products' and
// the zero-point terms' magnitudes), and WidenWeights of int4 rows bit
// for bit against the Go twin's float32(u-z)·s; every operand against an
// unreadable page, nibble rows interleaved by the set's lanes.
func TestGemvI4(t *testing.T) {
	eachGemvCase(t, 9, []int{1, 7, 9, 16, 17, 33, 48, 64, 65, 100}, gemv4Case)
}

// gemv4Case runs one case of TestGemvI4.
func gemv4Case(t *testing.T, rng *rand.Rand, ks *Set, m, n, k int, atEnd bool) {
	t.Helper()
	o := newWeightOperands(t, rng, ks, m, n, k, atEnd)
	defer o.free()
	whole, ldc, lda, accumulate, c, a := o.whole, o.ldc, o.lda, o.accumulate, o.c, o.a
	half := max(2, ks.Int4Half())
	ld := (whole+2*half-1)/(2*half)*2*half + rng.IntN(2)*2*half
	b, free := int4Weights(t, rng, k, whole, ld, half, atEnd)
	defer free()
	value := func(p, j int) (float64, float64) { // (u-z)·s and (u+z)·s
		u := float64(fallback.Int4At(b.I4[p*ld/2:], j, half))
		z, s := float64(b.Z[p/32*ld+j]), float64(b.S[p/32*ld+j])
		return (u - z) * s, (u + z) * s
	}
	before := append([]float32(nil), c...)
	ks.GemvI4(c, ldc, a, lda, b, m, n, k, accumulate)
	checkRowAlone(t, "GemvI4", ks.GemvI4, o, b, c, before, m, n, k)
	checkGemv(t, "GemvI4", ks, o, c, before, m, n, k, value)
	checkWiden(t, ks, b, k, n, whole)
}

// int4Weights returns k random int4 weight rows of whole columns at
// stride ld (nibbles interleaved by half), with their scales and zero
// points, each slice against an unreadable page.
func int4Weights(t *testing.T, rng *rand.Rand, k, whole, ld, half int, atEnd bool) (WeightRows, func()) {
	t.Helper()
	b := WeightRows{Type: fallback.KVInt4, Ld: ld, Half: half}
	pairs := (whole + 2*half - 1) / (2 * half) * 2 * half
	var f1, f2, f3 func()
	b.I4, f1 = guardedBytes(t, span(k, pairs, ld)/2, atEnd)
	b.S, f2 = guarded(t, span(fallback.Int8Blocks(k), whole, ld), atEnd)
	b.Z, f3 = guardedBytes(t, span(fallback.Int8Blocks(k), whole, ld), atEnd)
	for i := range b.I4 {
		b.I4[i] = byte(rng.IntN(256))
	}
	for i := range b.S {
		b.S[i] = rng.Float32() / 8
		b.Z[i] = uint8(rng.IntN(16))
	}
	return b, func() { f1(); f2(); f3() }
}
