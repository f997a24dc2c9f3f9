package tile

import (
	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// A Gemm whose items run GemmPacked reads A from a copy packed once for
// all of them (PackA), in slabs of an item's depth step (gemmPackedDepth): the
// slab of columns k0.. holds every row, kernels.PackA's tiles at a row
// stride of the slab's width, so an item's depth step reads its rows'
// tiles as one contiguous run. Read in place, a 6-row tile's rows lie lda
// apart (16 KiB at K = 4096: one L1 set for all six) and a step of k
// touches six streams; packed, one. On Zen 3 (one thread, the GEMM row
// 512 × 6144 × 4096, six alternated rounds) the packed items ran at
// 71–76% of the FMA peak where the same unrolled kernel on A in place
// ran at 68–72%, PackA's copy included (1.3 ms of the call's ~300 for
// 512 × 4096 at one thread, spread over the pool's workers).

// gemmPackCols is the fewest columns of C for which packing A pays: each
// element copied once serves 2·N FLOPs.
const gemmPackCols = 256

// packItemRows is the rows of A one item of APack packs: 8 tiles.
const packItemRows = 8 * kernels.PackRows

// PackedA holds a Gemm's A packed for GemmPacked (Gemm.PackA); a caller
// keeps one per concurrent call and reuses it.
type PackedA struct {
	buf []float32
}

// packs reports whether g's items read A packed on ks: a set with the
// GemmPacked kernel, float32 arithmetic on weights the items multiply
// with Gemm (float32, or int8 and int4 widened a block at a time) or
// with GemmW where the set has its packed twin (16-bit), more rows than a
// GEMV's and enough columns to pay for the copy.
func (g *Gemm) packs(ks *kernels.Set) bool {
	switch g.B.Type {
	case fallback.KVFloat32, fallback.KVInt8, fallback.KVInt4:
	case fallback.KVFloat16, fallback.KVBFloat16:
		if !ks.HasGemmWPacked(g.B.Type) || (g.B.P != nil && !ks.PairsWeights()) {
			return false
		}
	default:
		return false
	}
	return ks.HasGemmPacked() && !g.BF16 && g.M > gemvRows && g.B.N >= gemmPackCols && g.B.K > 0
}

// PackA readies g to read A packed for its items on ks, into buf, and
// returns the work that packs it: run every item of that (on any number
// of workers) before any of g's, and call PackA before running any of
// g's items. Packed items cut taller row blocks (gemmPackedRowsMul), so
// g.Items is best taken after it: a count taken before is larger, and
// its extra items do nothing (Run). Where the items read A in place
// (packs), the work has no items and g is unchanged. Keep buf and A
// unchanged until g's items are done; the bits are the same either way.
func (g *Gemm) PackA(ks *kernels.Set, buf *PackedA) APack {
	if !g.packs(ks) {
		return APack{}
	}
	buf.buf = grow(buf.buf, g.M*g.B.K)
	g.pa = buf.buf
	return APack{A: g.A, LDA: g.LDA, M: g.M, K: g.B.K, Depth: gemmPackedDepth, Dst: g.pa}
}

// APack is the work of packing a Gemm's A (Gemm.PackA): Dst takes the
// slabs of Depth columns of the M×K matrix A, each kernels.PackA's
// layout of every row at a stride of its width; item n packs rows
// packItemRows·n on of every slab.
type APack struct {
	A     []float32
	LDA   int
	M, K  int
	Depth int
	Dst   []float32
}

// Items returns the number of row blocks (0: nothing to pack).
func (w *APack) Items() int {
	if w.Dst == nil {
		return 0
	}
	return ceilDiv(w.M, packItemRows)
}

// Run packs row block n of every slab. A block starts on a tile
// boundary (packItemRows is whole tiles), so its tiles are the matrix's.
func (w *APack) Run(ks *kernels.Set, n int, _ *Workspace) {
	r0 := n * packItemRows
	rows := min(packItemRows, w.M-r0)
	for k0 := 0; k0 < w.K; k0 += w.Depth {
		kc := min(w.Depth, w.K-k0)
		kernels.PackA(w.Dst[k0*w.M+r0*kc:k0*w.M+(r0+rows)*kc], kc, w.A[r0*w.LDA+k0:], w.LDA, rows, kc)
	}
}

// RunAll runs every item on the calling goroutine.
func (w *APack) RunAll(ks *kernels.Set) {
	for n := range w.Items() {
		w.Run(ks, n, nil)
	}
}

// packedSlab returns the packed rows from m0 of the slab of columns k0..
// (kc wide) and their stride, for an item of g.
func (g *Gemm) packedSlab(m0, k0, kc int) ([]float32, int) {
	return g.pa[k0*g.M+m0*kc:], kc
}
