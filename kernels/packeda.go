package kernels

import "fmt"

// PackRows is the tile height of the packed A layout (PackA): the rows of
// the amd64 kernels' register tile.
const PackRows = 6

// packTiles calls f for each tile of m rows in the packed A layout: tiles
// of PackRows rows, then the last m%PackRows in tiles of 4, 2 and 1 (each
// if m%PackRows has that bit), as the kernels' row loops cut them.
func packTiles(m int, f func(r0, mr int)) {
	r0 := 0
	for ; m-r0 >= PackRows; r0 += PackRows {
		f(r0, PackRows)
	}
	for mr := 4; mr >= 1; mr /= 2 {
		if (m-r0)&mr != 0 {
			f(r0, mr)
			r0 += mr
		}
	}
}

// PackA writes m rows of k columns of a (row stride lda) into dst in the
// layout GemmPacked reads, with row stride ldd >= k: the rows in tiles
// (PackRows, then 4, 2, 1), each tile of mr rows from row r0 as its k
// columns of mr floats, dst[r0*ldd + p*mr + i] = a[(r0+i)*lda + p]. It
// writes nothing else of dst, whose length must be at least m*ldd.
func PackA(dst []float32, ldd int, a []float32, lda, m, k int) {
	if m <= 0 || k <= 0 {
		return
	}
	if ldd < k {
		panic(fmt.Sprintf("kernels: PackA: row stride %d below %d columns", ldd, k))
	}
	checkOutN("PackA", "dst", dst, m*ldd)
	checkIn("PackA", "a", a, m, k, lda)
	packTiles(m, func(r0, mr int) {
		out := dst[r0*ldd : r0*ldd+k*mr]
		if mr == PackRows { // a column of the six rows a step: one run of stores
			a0, a1, a2 := a[r0*lda:][:k], a[(r0+1)*lda:][:k], a[(r0+2)*lda:][:k]
			a3, a4, a5 := a[(r0+3)*lda:][:k], a[(r0+4)*lda:][:k], a[(r0+5)*lda:][:k]
			for p := range a0 {
				o := out[p*6 : p*6+6 : p*6+6]
				o[0], o[1], o[2], o[3], o[4], o[5] = a0[p], a1[p], a2[p], a3[p], a4[p], a5[p]
			}
			return
		}
		for i := 0; i < mr; i++ {
			row := a[(r0+i)*lda : (r0+i)*lda+k]
			for p, x := range row {
				out[p*mr+i] = x
			}
		}
	})
}

// GemmPacked is Gemm with A in the layout PackA writes (row stride lda >=
// k): the same products in the same order, the same bits, with each step
// of k reading a tile's elements of A from one run of memory. Sets
// without the kernel (HasGemmPacked false) run it in Go.
func (ks *Set) GemmPacked(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int, accumulate bool) {
	if gemmEmpty(c, ldc, m, n, k, accumulate) {
		return
	}
	checkPacked("GemmPacked", a, lda, m, k)
	checkOut("GemmPacked", "c", c, m, n, ldc)
	checkIn("GemmPacked", "b", b, k, n, ldb)
	if ks.gemmPacked != nil {
		ks.gemmPacked(c, ldc, a, lda, b, ldb, m, n, k, accumulate)
		return
	}
	packTiles(m, func(r0, mr int) { // fallback.Gemm's loops, A read from its tile
		for i := 0; i < mr; i++ {
			ci := c[(r0+i)*ldc : (r0+i)*ldc+n]
			if !accumulate {
				clear(ci)
			}
			for p := 0; p < k; p++ {
				av := a[r0*lda+p*mr+i]
				for j, bv := range b[p*ldb : p*ldb+n] {
					ci[j] += av * bv
				}
			}
		}
	})
}

// HasGemmPacked reports whether ks runs GemmPacked on generated kernels,
// where packing A pays for itself; elsewhere it is a Go loop.
func (ks *Set) HasGemmPacked() bool { return ks.gemmPacked != nil }

// HasGemmWPacked reports whether ks has GemmWPacked for 16-bit weights of
// type t: the sets with GemmW's packed twins (amd64).
func (ks *Set) HasGemmWPacked(t KVType) bool { return ks.gemmWPacked != nil && ks.HasGemmW(t) }

// GemmWPacked is GemmW with A in the layout PackA writes (row stride lda
// >= k): the same products in the same order, the same bits. Only sets
// that HasGemmWPacked have it; calling it on another is a bug.
func (ks *Set) GemmWPacked(c []float32, ldc int, a []float32, lda int, b WeightRows, m, n, k int, accumulate bool) {
	if !ks.HasGemmWPacked(b.Type) {
		panic(fmt.Sprintf("kernels: GemmWPacked: set %s has none for %v", ks.Name, b.Type))
	}
	ks.checkWeightPairs("GemmWPacked", b, k)
	if ks.weightsCall("GemmWPacked", c, ldc, a, lda, b, m, n, k, accumulate) {
		checkPacked("GemmWPacked", a, lda, m, k)
		ks.gemmWPacked(c, ldc, a, lda, b, m, n, k, accumulate)
	}
}

// checkPacked checks a packed A operand of m rows of k columns: its row
// stride lda holds k, and a holds m·lda elements, which the kernel reads.
func checkPacked(kernel string, a []float32, lda, m, k int) {
	if lda < k {
		panic(fmt.Sprintf("kernels: %s: row stride %d below %d columns", kernel, lda, k))
	}
	checkInN(kernel, "a", a, m*lda)
}
