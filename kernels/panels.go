//go:build (amd64 || arm64) && !purego

package kernels

import "github.com/fastattn/fastattn/fallback"

// The drivers shared by the assembly sets: they split columns into the
// register panels of a kernel, and hand the generic code what a kernel
// leaves (exp tails, transpose edges).

// gemmFunc is the signature of the generated GEMM kernels.
type gemmFunc func(c *float32, ldc int, a *float32, lda int, b *float32, ldb int, m, k, nv, tail, acc int)

// panel returns the vectors of panel j0 (in vectors) of n columns split
// into panels of at most maxNV vectors, as evenly as possible (16 vectors
// by 3: 3,3,3,3,2,2, not 3,3,3,3,3,1), and the lanes of its last vector.
func panel(j0, n, lanes, maxNV int) (nv, tail int) {
	vecs := (n + lanes - 1) / lanes
	panels := (vecs + maxNV - 1) / maxNV
	nv = vecs / panels
	if j0 < vecs%panels*(nv+1) {
		nv++
	}
	tail = lanes
	if j0+nv == vecs && n%lanes != 0 {
		tail = n % lanes
	}
	return nv, tail
}

// panels calls kernel(j0, nv, tail) on the column panels of n columns as
// panel splits them: j0 the panel's first column, nv its vectors, tail
// the lanes of its last one.
func panels(lanes, maxNV, n int, kernel func(j0, nv, tail int)) {
	for v0 := 0; v0*lanes < n; {
		nv, tail := panel(v0, n, lanes, maxNV)
		kernel(v0*lanes, nv, tail)
		v0 += nv
	}
}

// qkChunk is the most keys one QK kernel call takes when the score tile
// has several column panels (AVX2: 64 rows are 4 panels of 16): the calls
// for all panels run on one chunk of K before the next, so its rows, a page
// or more apart in memory, are fetched once, not once per panel. The
// projections, whose A block stays in L2 anyway and whose B panel should
// stay in L1 across the row groups, run unchunked (chunk = 0).
const qkChunk = 48

// gemmPanels runs a GEMM kernel over the column panels of C, in chunks of
// chunk rows of A (0: all).
func gemmPanels(kernel gemmFunc, lanes, maxNV, chunk int, c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int, accumulate bool) {
	acc := accFlag(accumulate)
	if chunk <= 0 || n <= lanes*maxNV {
		chunk = m
	}
	for i0 := 0; i0 < m; i0 += chunk {
		mc := min(chunk, m-i0)
		panels(lanes, maxNV, n, func(j0, nv, tail int) {
			kernel(&c[i0*ldc+j0], ldc, &a[i0*lda], lda, &b[j0], ldb, mc, k, nv, tail, acc)
		})
	}
}

// accFlag is a kernel's acc argument: 1 to add to C, 0 to overwrite it.
func accFlag(accumulate bool) int {
	if accumulate {
		return 1
	}
	return 0
}

// softmaxFunc and biasFunc are the signatures of the generated Softmax and
// ScoreBias kernels: nv vectors of rows per call.
type (
	softmaxFunc func(s *float32, lds int, m, l, alpha *float32, nk, nv int, softcap float32)
	biasFunc    func(s *float32, lds int, slope, dist, bias *float32, nk, nv int)
)

// softmaxCalls returns Set.softmax for a Softmax kernel taking at most
// maxVecs vectors of lanes rows per call.
func softmaxCalls(kernel softmaxFunc, lanes, maxVecs int) func(s []float32, lds int, m, l, alpha []float32, nk, rows int, softcap float32) {
	return func(s []float32, lds int, m, l, alpha []float32, nk, rows int, softcap float32) {
		for r0 := 0; r0 < rows; r0 += maxVecs * lanes {
			kernel(&s[r0], lds, &m[r0], &l[r0], &alpha[r0], nk, min(maxVecs, (rows-r0)/lanes), softcap)
		}
	}
}

// softmaxPairsFunc is the signature of the generated SoftmaxPairs kernels.
type softmaxPairsFunc func(s *float32, lds int, m, l, alpha *float32, nk, nv int, softcap float32, p *uint32, ldp int)

// softmaxPairCalls returns Set.softmaxPairs for a SoftmaxPairs kernel
// taking at most maxVecs vectors of lanes rows per call.
func softmaxPairCalls(kernel softmaxPairsFunc, lanes, maxVecs int) func(s []float32, lds int, m, l, alpha []float32, nk, rows int, softcap float32, p []uint32, ldp int) {
	return func(s []float32, lds int, m, l, alpha []float32, nk, rows int, softcap float32, p []uint32, ldp int) {
		for r0 := 0; r0 < rows; r0 += maxVecs * lanes {
			kernel(&s[r0], lds, &m[r0], &l[r0], &alpha[r0], nk, min(maxVecs, (rows-r0)/lanes), softcap, &p[r0], ldp)
		}
	}
}

// scaleColumnsFunc is the signature of the generated ScaleColumns
// kernels: nv vectors of columns per call.
type scaleColumnsFunc func(x *float32, ldx int, f *float32, n, nv int)

// scaleColumnCalls returns Set.scaleCols for a ScaleColumns kernel taking
// at most maxVecs vectors of lanes columns per call; the columns past the
// last whole vector go to fallback.ScaleColumns.
func scaleColumnCalls(kernel scaleColumnsFunc, lanes, maxVecs int) func(x []float32, ldx int, f []float32, rows, n int) {
	return func(x []float32, ldx int, f []float32, rows, n int) {
		whole := rows / lanes * lanes
		for r0 := 0; r0 < whole; r0 += maxVecs * lanes {
			kernel(&x[r0], ldx, &f[r0], n, min(maxVecs, (whole-r0)/lanes))
		}
		if whole < rows {
			fallback.ScaleColumns(x[whole:], ldx, f[whole:], rows-whole, n)
		}
	}
}

// biasCalls returns Set.bias for a ScoreBias kernel taking at most
// maxVecs vectors of lanes rows per call.
func biasCalls(kernel biasFunc, lanes, maxVecs int) func(s []float32, lds int, slope, dist, bias []float32, nk, rows int) {
	return func(s []float32, lds int, slope, dist, bias []float32, nk, rows int) {
		bp := first(bias)
		for r0 := 0; r0 < rows; r0 += maxVecs * lanes {
			var sl, d *float32
			if slope != nil {
				sl, d = &slope[r0], &dist[r0]
			}
			kernel(&s[r0], lds, sl, d, bp, nk, min(maxVecs, (rows-r0)/lanes))
		}
	}
}

// first returns a pointer to x's first element, nil for a nil x.
func first(x []float32) *float32 {
	if x == nil {
		return nil
	}
	return &x[0]
}

// pvFunc is the signature of the generated PV kernels.
type pvFunc func(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, alpha *float32, rows, nk, nv, tail int)

// pvPanels runs a PV kernel over the column panels of o, in chunks of
// chunk keys (0: all).
func pvPanels(kernel pvFunc, lanes, maxNV, chunk int, o []float32, ldo int, p []float32, ldp int, v []float32, ldv int, alpha []float32, rows, nk, dv int) {
	if chunk <= 0 {
		chunk = max(nk, 1)
	}
	ap := first(alpha) // the first chunk's rescale; 1 for the later ones
	for c0 := 0; c0 == 0 || c0 < nk; c0 += chunk {
		kc := min(chunk, nk-c0)
		var pp *float32
		if kc > 0 {
			pp = &p[c0*ldp]
		}
		panels(lanes, maxNV, dv, func(j0, nv, tail int) {
			var vp *float32
			if kc > 0 {
				vp = &v[c0*ldv+j0]
			}
			kernel(&o[j0], ldo, pp, ldp, vp, ldv, ap, rows, kc, nv, tail)
		})
		ap = nil
	}
}

// transposeBlocks runs a transpose kernel over the whole 8×8 blocks and
// the generic code over the edges.
func transposeBlocks(kernel func(dst *float32, ldd int, src *float32, lds int, nr, nc int, scale float32),
	dst []float32, ldd int, src []float32, lds int, nr, nc int, scale float32) {
	r8, c8 := nr&^7, nc&^7
	if r8 > 0 && c8 > 0 {
		kernel(&dst[0], ldd, &src[0], lds, r8, c8, scale)
	}
	if c8 < nc { // right edge, every row
		fallback.TransposeScale(dst[c8*ldd:], ldd, src[c8:], lds, nr, nc-c8, scale)
	}
	if r8 < nr { // bottom edge, the block columns
		fallback.TransposeScale(dst[r8:], ldd, src[r8*lds:], lds, nr-r8, c8, scale)
	}
}

// transpose32Blocks runs a Transpose32 kernel over the whole 8×8 blocks
// and the generic code over the edges.
func transpose32Blocks(kernel func(dst *uint32, ldd int, src *uint32, lds int, nr, nc int),
	dst []uint32, ldd int, src []uint32, lds int, nr, nc int) {
	r8, c8 := nr&^7, nc&^7
	if r8 > 0 && c8 > 0 {
		kernel(&dst[0], ldd, &src[0], lds, r8, c8)
	}
	if c8 < nc {
		fallback.Transpose32(dst[c8*ldd:], ldd, src[c8:], lds, nr, nc-c8)
	}
	if r8 < nr {
		fallback.Transpose32(dst[r8:], ldd, src[r8*lds:], lds, nr-r8, c8)
	}
}

// expVectors runs an exp kernel over the whole vectors of src and the
// generic exp over the rest.
func expVectors(kernel func(dst, src *float32, n int), lanes int, dst, src []float32) {
	n := len(dst) / lanes * lanes
	if n > 0 {
		kernel(&dst[0], &src[0], n)
	}
	for i := n; i < len(dst); i++ {
		dst[i] = fallback.Exp32(src[i])
	}
}

// convertFuncs are one 16-bit type's conversion kernels, whole vectors.
type convertFuncs struct {
	widen  func(dst *float32, ldd int, src *uint16, lds int, rows, n int)
	narrow func(dst *uint16, src *float32, n int)
}

// widenCalls returns Set.widen for conversion kernels indexed by type
// (float16, bfloat16).
func widenCalls(k [2]convertFuncs) func(dst []float32, ldd int, src []uint16, lds int, rows, n int, t KVType) {
	return func(dst []float32, ldd int, src []uint16, lds int, rows, n int, t KVType) {
		k[t-1].widen(&dst[0], ldd, &src[0], lds, rows, n)
	}
}

// widenI4KVFunc and dequantFunc are the signatures of the generated
// WidenI4KV and DequantI8/DequantI4 kernels (amd64 and NEON alike).
type (
	widenI4KVFunc func(dst *int8, ldd int, src *int8, lds int, rows, blocks, ahead int)
	dequantFunc   func(dst *float32, ldd int, src *int8, lds int, s *float32, ldsc int, rows, blocks int)
)

// widenI4KVCall returns Set.widenI4KV for a WidenI4KV kernel.
func widenI4KVCall(k widenI4KVFunc) func(dst []int8, ldd int, src []int8, lds, rows, blocks, ahead int) {
	return func(dst []int8, ldd int, src []int8, lds, rows, blocks, ahead int) {
		k(&dst[0], ldd, &src[0], lds, rows, blocks, ahead)
	}
}

// dequantCalls returns Set.dequant for the int8 and int4 kernels.
func dequantCalls(k [2]dequantFunc) func(dst []float32, ldd int, src KVRows, rows, blocks int) {
	return func(dst []float32, ldd int, src KVRows, rows, blocks int) {
		kernel := k[0]
		if src.Type == fallback.KVInt4 {
			kernel = k[1]
		}
		kernel(&dst[0], ldd, &src.I8[0], src.Ld, &src.S[0], src.LdS, rows, blocks)
	}
}

// narrowCalls returns Set.narrow for conversion kernels indexed by type.
func narrowCalls(k [2]convertFuncs) func(dst []uint16, src []float32, t KVType) {
	return func(dst []uint16, src []float32, t KVType) {
		k[t-1].narrow(&dst[0], &src[0], len(src))
	}
}
