package kernels

import (
	"fmt"

	"github.com/fastattn/fastattn/fallback"
)

// WeightRows is a block of a packed projection weight matrix of any
// storage type (float32, 16-bit floats, int8 with scales, int4 with
// scales and zero points per column and block of 32 rows).
type WeightRows = fallback.WeightRows

// gemmWKernel is the signature of a set's GemmW: GemmW's arguments,
// checked.
type gemmWKernel func(c []float32, ldc int, a []float32, lda int, b WeightRows, m, n, k int, accumulate bool)

// HasGemmW reports whether the set multiplies by weights of type t in
// registers (GemmW): the amd64 and NEON sets for float16 and bfloat16. The others,
// and int8 and int4 everywhere, widen a block of the weights to float32
// first (WidenWeights) and run Gemm on it, which gives the same bits:
// GemmW widens each value exactly as WidenWeights does and multiplies in
// Gemm's order.
func (ks *Set) HasGemmW(t KVType) bool {
	return ks.gemmW != nil && (t == fallback.KVFloat16 || t == fallback.KVBFloat16)
}

// GemmW is Gemm with B a block of a packed weight matrix of a 16-bit
// type (bfloat16 held in pairs, on a set that PairsWeights, for an even
// k):
//
//	c[i*ldc+j] = (accumulate ? c[i*ldc+j] : 0) + Σ_{p<k} a[i*lda+p] · w(p, j)
//
// w(p, j) the float32 value of b's element (p, j) (fallback.WidenWeights).
// b's rows hold b.Ld >= n elements, and the kernel reads them in whole
// vectors: the block must hold (k-1)·b.Ld plus n rounded up to Lanes
// elements (a panel of tile.PackWeights, padded to whole panels, does).
// Only sets that HasGemmW have it; calling it on another is a bug.
func (ks *Set) GemmW(c []float32, ldc int, a []float32, lda int, b WeightRows, m, n, k int, accumulate bool) {
	if !ks.HasGemmW(b.Type) {
		panic(fmt.Sprintf("kernels: GemmW: set %s has no GemmW for %v", ks.Name, b.Type))
	}
	ks.checkWeightPairs("GemmW", b, k)
	if ks.weightsCall("GemmW", c, ldc, a, lda, b, m, n, k, accumulate) {
		ks.gemmW(c, ldc, a, lda, b, m, n, k, accumulate)
	}
}

// checkWeightPairs panics unless the set reads b's bfloat16 pairs, if b
// holds them, and k (rows of b) is even: the rule of GemmW and its packed
// twin.
func (ks *Set) checkWeightPairs(kernel string, b WeightRows, k int) {
	if b.P != nil && (!ks.pairsW || k%2 != 0) {
		panic(fmt.Sprintf("kernels: %s: set %s: %d rows of bfloat16 pairs", kernel, ks.Name, k))
	}
}

// PairsWeights reports whether the set's GemmW reads bfloat16 weights
// held in pairs (WeightRows.P, rows 2q and 2q+1 interleaved): the amd64
// sets (GemmWPairs<ISA>), whose tiles and VDPBF16PS read that layout too,
// so tile.Packed holds their bfloat16 weights in it alone. On other sets
// GemmW reads rows, and paired weights are widened (WidenWeights) for
// Gemm.
func (ks *Set) PairsWeights() bool { return ks.gemmW != nil && ks.pairsW }

// GemvI8 is the projection of a few rows (a decode step's) through int8
// weights with each block's scales applied once to the block's sum, in
// fallback.GemvI8's order (the GemvWI8 kernels of the amd64 and NEON
// sets, the Go twin elsewhere): three vector operations per weight vector (extension,
// conversion, FMA), where dequantizing each weight takes four. b is int8,
// read as GemmW reads it.
func (ks *Set) GemvI8(c []float32, ldc int, a []float32, lda int, b WeightRows, m, n, k int, accumulate bool) {
	ks.gemv("GemvI8", fallback.KVInt8, ks.gemvI8, fallback.GemvI8, c, ldc, a, lda, b, m, n, k, accumulate)
}

// GemvI4 is the projection of a few rows (a decode step's) through int4
// weights in fallback.GemvI4's order: per block of 32 rows the nibbles'
// products summed unscaled, the zero points taken off through the block's
// sum of A, the scales applied once. The amd64 and NEON sets run it in
// registers (GemvWI4) on rows interleaved by Int4Half (tile.PackWeights'
// panels for the set); other rows, and other sets, take the Go twin. b
// is int4, read as GemmW reads it but in pairs of Half columns: its rows
// must hold n rounded up to 2·Half columns.
func (ks *Set) GemvI4(c []float32, ldc int, a []float32, lda int, b WeightRows, m, n, k int, accumulate bool) {
	kernel := ks.gemvI4
	if b.Half != ks.Int4Half() {
		kernel = nil
	}
	ks.gemv("GemvI4", fallback.KVInt4, kernel, fallback.GemvI4, c, ldc, a, lda, b, m, n, k, accumulate)
}

// Int4Half is the nibble interleave (fallback.WeightRows.Half) of the int4
// rows the set's GemvI4 kernel reads: that of tile.PackWeights' panels for
// the set (Lanes; 8 on NEON, whose 16-column panel row is 8 bytes).
func (ks *Set) Int4Half() int {
	if ks.int4Half > 0 {
		return ks.int4Half
	}
	return ks.Lanes
}

// gemv checks a GemvI8 or GemvI4 call (b of type t) and runs it on the
// set's kernel, or on the Go twin when kernel is nil.
func (ks *Set) gemv(name string, t KVType, kernel, twin gemmWKernel, c []float32, ldc int, a []float32, lda int, b WeightRows, m, n, k int, accumulate bool) {
	if b.Type != t {
		panic(fmt.Sprintf("kernels: %s: %v weights", name, b.Type))
	}
	if !ks.weightsCall(name, c, ldc, a, lda, b, m, n, k, accumulate) {
		return
	}
	if kernel == nil {
		kernel = twin
	}
	kernel(c, ldc, a, lda, b, m, n, k, accumulate)
}

// weightsCall checks the contract of GemmW and GemvI8 and reports
// whether the kernel has work (k = 0 clears C, or leaves it).
func (ks *Set) weightsCall(kernel string, c []float32, ldc int, a []float32, lda int, b WeightRows, m, n, k int, accumulate bool) bool {
	if m <= 0 || n <= 0 {
		return false
	}
	if k <= 0 {
		ks.Gemm(c, ldc, a, lda, nil, b.Ld, m, n, 0, accumulate)
		return false
	}
	whole := (n + ks.Lanes - 1) / ks.Lanes * ks.Lanes
	if b.Ld < whole {
		panic(fmt.Sprintf("kernels: %s: row stride %d below %d columns in whole vectors", kernel, b.Ld, whole))
	}
	checkOut(kernel, "c", c, m, n, ldc)
	checkIn(kernel, "a", a, m, k, lda)
	checkScales(kernel, b, k, whole)
	checkWeights(kernel, "b", b, k, int4Whole(b, whole))
	return true
}

// int4Whole returns the columns of b a kernel reads for whole columns: for
// int4, whole rounded up to pairs of vectors (a kernel's load of nibbles
// makes two).
func int4Whole(b WeightRows, whole int) int {
	if b.Type != fallback.KVInt4 {
		return whole
	}
	return (whole + 2*b.Half - 1) / (2 * b.Half) * 2 * b.Half
}

// checkScales checks that the scales (and int4's zero points) of b cover
// k rows of n columns, and that int4 rows are whole groups of nibbles.
func checkScales(kernel string, b WeightRows, k, n int) {
	switch b.Type {
	case fallback.KVInt8:
		checkIn(kernel, "scales", b.S, fallback.Int8Blocks(k), n, b.Ld)
	case fallback.KVInt4:
		if b.Half <= 0 || b.Ld%(2*b.Half) != 0 {
			panic(fmt.Sprintf("kernels: %s: int4 row stride %d is not a multiple of 2·Half (Half %d)", kernel, b.Ld, b.Half))
		}
		checkIn(kernel, "scales", b.S, fallback.Int8Blocks(k), n, b.Ld)
		checkIn(kernel, "zero points", b.Z, fallback.Int8Blocks(k), n, b.Ld)
	}
}

// WidenWeights writes k rows of n elements of the weight block b as
// float32 at stride ldd in dst, exactly the values GemmW multiplies by:
// 16-bit rows through WidenRows, int8 ones as float32(q)·scale, int4 ones
// as float32(u-z)·scale (int8 and int4 on the amd64 and NEON sets by the
// WidenWI8 and WidenWI4 kernels, which read and write whole vectors: dst's rows
// must have room for n rounded up to Lanes, b's rows hold as many, int4's
// rounded up to pairs of vectors).
func (ks *Set) WidenWeights(dst []float32, ldd int, b WeightRows, k, n int) {
	if k <= 0 || n <= 0 {
		return
	}
	checkOut("WidenWeights", "dst", dst, k, n, ldd)
	checkWeights("WidenWeights", "b", b, k, n)
	if b.P != nil { // bfloat16 pairs: the Go twin (GemmW reads them in registers)
		fallback.WidenWeights(dst, ldd, b, k, n)
		return
	}
	switch b.Type {
	case fallback.KVFloat16, fallback.KVBFloat16:
		ks.WidenRows(dst, ldd, b.U16, b.Ld, k, n, b.Type)
	case fallback.KVInt8, fallback.KVInt4:
		if ks.widenW == nil || b.Type == fallback.KVInt4 && b.Half != ks.Int4Half() {
			checkScales("WidenWeights", b, k, n)
			fallback.WidenWeights(dst, ldd, b, k, n)
			return
		}
		whole := (n + ks.Lanes - 1) / ks.Lanes * ks.Lanes
		checkOut("WidenWeights", "dst", dst, k, whole, ldd)
		checkWeights("WidenWeights", "b", b, k, int4Whole(b, whole))
		checkScales("WidenWeights", b, k, whole)
		ks.widenW(dst, ldd, b, k, n)
	default:
		fallback.WidenWeights(dst, ldd, b, k, n)
	}
}
