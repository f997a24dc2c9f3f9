// Package kernels holds fastattn's micro-kernel sets, one per instruction
// set, behind one contract (Set), and picks the best one the CPU can run.
//
// The contract is built for register-blocked assembly: scores are kept
// transposed (keys major, query rows minor), so that
//   - QK broadcasts one element of a key row (read in place, any stride) and
//     multiplies it into vectors of consecutive query rows of a packed Qᵀ;
//   - Softmax reduces over keys with element-wise vector max and add: every
//     lane is one query row, no horizontal reduction;
//   - PV broadcasts P[c][r] for a few consecutive rows and multiplies it into
//     vectors of a value row (read in place, any stride).
//
// So the kernels need no copy or transpose of K and V, only of the Q block
// (once per work item); the flash loop copies a block only to widen 16-bit
// storage or, for V, when its rows alias in the caches (tile.packsV). QK
// is a GEMM C = A·B of row-major matrices whose A rows are read in place;
// with accumulation and any width it is Gemm, the kernel of the
// projections (B pre-packed in panels, A the activations in place).
//
// Kernels never allocate, never spawn goroutines, and never touch memory
// outside the slices they are given: the methods of Set check every length
// before the kernel runs and panic on a broken contract (a bug in the
// caller, never user input: the mha package validates that).
//
// This package is fastattn's machinery, not its API: its exported names
// carry no compatibility promise and change whenever the kernels do.
// Programs use package mha, which exposes none of its types.
package kernels

import (
	"fmt"

	"github.com/fastattn/fastattn/fallback"
	"github.com/klauspost/cpuid/v2"
)

// Set is one instruction set's micro-kernels. The zero value is not usable;
// sets come from Available, Best and Lookup.
type Set struct {
	// Name is the set's name for FASTATTN_ISA: generic, avx2, avx512, neon.
	Name string
	// Lanes is the float32 vector width. QK and Softmax take a row count
	// that is a multiple of Lanes (callers pad the query block).
	Lanes int

	gemm      func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int, accumulate bool)
	qk        func(s []float32, lds int, k []float32, ldk int, qt []float32, ldq int, nk, rows, dk int) // nil: gemm
	softmax   func(s []float32, lds int, m, l, alpha []float32, nk, rows int, softcap float32)
	pv        func(o []float32, ldo int, p []float32, ldp int, v []float32, ldv int, alpha []float32, rows, nk, dv int)
	exp       func(dst, src []float32)
	tr        func(dst []float32, ldd int, src []float32, lds int, nr, nc int, scale float32)
	tr32      func(dst []uint32, ldd int, src []uint32, lds int, nr, nc int) // nil: fallback.Transpose32
	scaleCols func(x []float32, ldx int, f []float32, rows, n int)           // nil: fallback.ScaleColumns
	// softmaxPairs is nil where Softmax and PairBF16 run one after the other.
	softmaxPairs func(s []float32, lds int, m, l, alpha []float32, nk, rows int, softcap float32, p []uint32, ldp int)
	softmaxRound func(s []float32, lds int, m, l, alpha []float32, nk, rows int, softcap float32)         // nil: Softmax, then the rounding
	dot          func(s []float32, lds int, k []float32, ldk int, q []float32, ldq int, nk, rows, dk int) // nil: generic
	bias         func(s []float32, lds int, slope, dist, bias []float32, nk, rows int)                    // nil: generic
	peak         func(iters int)                                                                          // nil for generic
	prefetch     func(p *float32, ld, rows, n int)                                                        // nil: no prefetch (generic)
	decode       decodeKernel                                                                             // nil: no fused decode
	decodeQ8     decodeQ8Kernel                                                                           // nil: no int8 K on integer dot products
	scoresQ8     scoresQ8Kernel                                                                           // nil: the int8 mode's flash blocks on float32 QK
	packKeysQ8   packKeysQ8Func                                                                           // nil: fallback.PackKeysQ8
	quantQ8      quantQ8Func                                                                              // nil: fallback.QuantizeQuery
	// decodeQ8I4 is DecodeQ8 over int4 K/V as they are (decodeQ8I4Rows
	// gives it its q8 rows) for calls of up to decodeQ8I4Max rows; nil,
	// or more rows: int4 widened to int8 (int4kv.go).
	decodeQ8I4    decodeQ8Kernel
	decodeQ8I4Max int
	widen         func(dst []float32, ldd int, src []uint16, lds int, rows, n int, t KVType)                           // rows of whole vectors; nil: Go
	narrow        func(dst []uint16, src []float32, t KVType)                                                          // whole vectors; nil: Go
	roundBF16     func(dst, src *float32, n int)                                                                       // whole vectors; nil: Go
	gemmPacked    func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int, accumulate bool) // nil: GemmPacked in Go
	gemmWPacked   gemmWKernel                                                                                          // GemmW on packed A; nil: none (HasGemmWPacked)
	gemmW         gemmWKernel                                                                                          // nil: WidenWeights + Gemm
	pairsW        bool                                                                                                 // gemmW reads bfloat16 weights held in pairs (WeightRows.P)
	gemvI8        gemmWKernel                                                                                          // nil: fallback.GemvI8
	gemvI4        gemmWKernel                                                                                          // rows of Half = int4Half; nil: fallback.GemvI4
	widenW        func(dst []float32, ldd int, b WeightRows, k, n int)                                                 // int8, int4 (Half = Lanes) in whole vectors; nil: Go
	bf16          *bf16Kernels                                                                                         // nil: no bfloat16 dot products (bf16.go)
	heads         *headKernels                                                                                         // nil: no key-major decode of BSHD heads (heads.go)

	panelCols     int  // columns of one register panel of Gemm, QK and PV (0: all at once)
	stridedKV     bool // ReadsStridedKV
	int4Half      int  // the nibble interleave of GemvI4's int4 rows (0: Lanes)
	decodeKeys    int  // fewest keys of a Decode call
	decodeScratch int  // Decode's scratch floats (0: fallback.DecodeScratch)
	decodePairs   bool // 16-bit rows' last vector loaded as dword pairs (even dims only), int8 rows' as dwords
	decodeInt8    bool // the fused decode takes int8 K/V
	decodeInt4Max int  // the most rows the fused decode takes int4 K/V as they are for, dk whole blocks (decodeInt4Rows pads q); 0: none
	// widenI4KV widens int4 K/V rows to int8 (WidenInt4Rows), with
	// ahead > 0 prefetching each row's lines ahead bytes on; nil: Go.
	widenI4KV func(dst []int8, ldd int, src []int8, lds, rows, blocks, ahead int)
	// dequant writes the first blocks whole blocks of 32 elements of rows
	// int8 or int4 rows as float32 (DequantRows); nil: Go.
	dequant       func(dst []float32, ldd int, src KVRows, rows, blocks int)
	decodeScales  int  // floats per int8 scale in Decode's scale scratch (0: 1)
	decodeWhole   bool // whole vectors only: head dims multiples of Lanes (NEON: no masked loads)
	decodeDequant bool // int8 blocks dequantized into the scratch: decodeKeys rows of dk and of dv floats

	dotRows    int               // the most query rows of a Dot call (0: no Dot)
	peakChains int               // independent vector FMAs per iteration of peak
	requires   []cpuid.FeatureID // the CPU features the set's code uses
	optional   []cpuid.FeatureID // features of kernels it calls only where the CPU has them (AVX512_BF16)
}

// String returns the set's name.
func (ks *Set) String() string { return ks.Name }

// span is the number of elements a strided 2-D operand of n rows of width
// w at stride ld covers.
func span(n, w, ld int) int { return (n-1)*ld + w }

func check(kernel, operand string, have, need int) {
	if have < need {
		panic(fmt.Sprintf("kernels: %s: %s has %d elements, needs %d", kernel, operand, have, need))
	}
}

// checkIn checks that x holds rows rows of cols elements, ld apart, and
// tells the race detector (race.go) that the kernel reads them; checkOut
// likewise for rows it writes.
func checkIn[T any](kernel, operand string, x []T, rows, cols, ld int) {
	check(kernel, operand, len(x), span(rows, cols, ld))
	raceReadRows(x, rows, cols, ld)
}

func checkOut[T any](kernel, operand string, x []T, rows, cols, ld int) {
	check(kernel, operand, len(x), span(rows, cols, ld))
	raceWriteRows(x, rows, cols, ld)
}

// checkInN and checkOutN are checkIn and checkOut of n contiguous elements.
func checkInN[T any](kernel, operand string, x []T, n int) {
	check(kernel, operand, len(x), n)
	raceRead(x, n)
}

func checkOutN[T any](kernel, operand string, x []T, n int) {
	check(kernel, operand, len(x), n)
	raceWrite(x, n)
}

// checkKV is checkIn of K or V rows of any storage type.
func checkKV(kernel, operand string, kv KVRows, rows, cols int) {
	check(kernel, operand, kv.Len(), span(rows, cols, kv.Ld))
	raceKV(kv, rows, cols)
}

// checkWeights is checkIn of the rows of a weight block (int4: nibbles).
func checkWeights(kernel, operand string, b WeightRows, rows, cols int) {
	if b.P != nil { // pair rows: rows rounded up to pairs
		check(kernel, operand, len(b.P), span((rows+1)/2, cols, b.Ld))
	} else {
		check(kernel, operand, b.Len(), span(rows, cols, b.Ld))
	}
	raceWeights(b, rows, cols)
}

func (ks *Set) checkRows(kernel string, rows int) {
	if rows%ks.Lanes != 0 {
		panic(fmt.Sprintf("kernels: %s: rows %d not a multiple of %d lanes", kernel, rows, ks.Lanes))
	}
}

// QK computes a transposed score tile, keys major:
//
//	s[c*lds+r] = Σ_{d<dk} k[c*ldk+d] · qt[d*ldq+r]   for c < nk, r < rows
//
// rows is a multiple of Lanes; qt is the packed, pre-scaled Qᵀ block.
func (ks *Set) QK(s []float32, lds int, k []float32, ldk int, qt []float32, ldq int, nk, rows, dk int) {
	if nk <= 0 || rows <= 0 || dk <= 0 {
		return
	}
	ks.checkRows("QK", rows)
	checkOut("QK", "s", s, nk, rows, lds)
	checkIn("QK", "k", k, nk, dk, ldk)
	checkIn("QK", "qt", qt, dk, rows, ldq)
	if ks.qk != nil {
		ks.qk(s, lds, k, ldk, qt, ldq, nk, rows, dk)
		return
	}
	ks.gemm(s, lds, k, ldk, qt, ldq, nk, rows, dk, false)
}

// Gemm multiplies row-major matrices, adding to C or overwriting it:
//
//	c[i*ldc+j] = (accumulate ? c[i*ldc+j] : 0) + Σ_{p<k} a[i*lda+p] · b[p*ldb+j]   for i < m, j < n
//
// Any m, n, k >= 1; nothing of c outside its m×n block is touched. The
// projections call it with B in the panels of tile.PackB (PanelCols wide).
func (ks *Set) Gemm(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int, accumulate bool) {
	if gemmEmpty(c, ldc, m, n, k, accumulate) {
		return
	}
	checkOut("Gemm", "c", c, m, n, ldc)
	checkIn("Gemm", "a", a, m, k, lda)
	checkIn("Gemm", "b", b, k, n, ldb)
	ks.gemm(c, ldc, a, lda, b, ldb, m, n, k, accumulate)
}

// gemmEmpty does a Gemm-shaped call with no products (m, n or k below 1:
// C cleared, unless accumulating, for k below 1) and reports whether the
// call was that.
func gemmEmpty(c []float32, ldc int, m, n, k int, accumulate bool) bool {
	if m <= 0 || n <= 0 {
		return true
	}
	if k > 0 {
		return false
	}
	if !accumulate {
		for i := 0; i < m; i++ {
			clear(c[i*ldc : i*ldc+n])
		}
	}
	return true
}

// Softmax applies one online-softmax step to a transposed tile of nk keys by
// rows and overwrites the scores with the weights:
//
//	x[c]       = softcap>0 ? softcap·tanh(s[c*lds+r]/softcap) : s[c*lds+r]   (-Inf stays -Inf)
//	mNew       = max(m[r], max_c x[c]);  base = mNew, or 0 if mNew = -Inf
//	s[c*lds+r] = exp(x[c] - base)
//	alpha[r]   = exp(m[r] - base);  l[r] = l[r]·alpha[r] + Σ_c s[c*lds+r];  m[r] = mNew
//
// rows is a multiple of Lanes; m, l and alpha hold at least rows values.
func (ks *Set) Softmax(s []float32, lds int, m, l, alpha []float32, nk, rows int, softcap float32) {
	if nk <= 0 || rows <= 0 {
		return
	}
	ks.checkSoftmax("Softmax", s, lds, m, l, alpha, nk, rows)
	ks.softmax(s, lds, m, l, alpha, nk, rows, softcap)
}

// checkSoftmax checks the operands of a softmax kernel: a tile of nk keys
// by rows (a multiple of Lanes) and each row's running state.
func (ks *Set) checkSoftmax(kernel string, s []float32, lds int, m, l, alpha []float32, nk, rows int) {
	ks.checkRows(kernel, rows)
	checkOut(kernel, "s", s, nk, rows, lds)
	checkOutN(kernel, "m", m, rows)
	checkOutN(kernel, "l", l, rows)
	checkOutN(kernel, "alpha", alpha, rows)
}

// SoftmaxRound is Softmax whose stored weights are rounded to bfloat16
// (their float32 values, fallback.BF16ToF32(fallback.F32ToBF16(w))) while
// l sums them unrounded: the bfloat16 mode's weights on the float32
// kernels, bit for bit Softmax and then that rounding of the tile's rows
// (on the generated sets in the same pass). Every set has it.
func (ks *Set) SoftmaxRound(s []float32, lds int, m, l, alpha []float32, nk, rows int, softcap float32) {
	if nk <= 0 || rows <= 0 {
		return
	}
	if ks.softmaxRound == nil {
		ks.Softmax(s, lds, m, l, alpha, nk, rows, softcap)
		for c := range nk {
			row := s[c*lds:][:rows]
			ks.RoundBF16(row, row)
		}
		return
	}
	ks.checkSoftmax("SoftmaxRound", s, lds, m, l, alpha, nk, rows)
	ks.softmaxRound(s, lds, m, l, alpha, nk, rows, softcap)
}

// SoftmaxPairs is Softmax that also writes the weights it stores rounded
// to bfloat16 and paired over keys into p, as PairBF16(p, ldp, s, lds,
// nk, rows) would after it, bit for bit ((nk+1)/2 rows of rows uint32 at
// stride ldp; 0 in the high half of an odd last pair): on the generated
// sets in the same pass, the pairs written as the weights are (where the
// CPU converts to bfloat16, by its instruction). The
// bfloat16 kernels' B operand of a flash block's PV. Every set has it.
func (ks *Set) SoftmaxPairs(s []float32, lds int, m, l, alpha []float32, nk, rows int, softcap float32, p []uint32, ldp int) {
	if nk <= 0 || rows <= 0 {
		return
	}
	kernel := ks.softmaxPairs
	if ks.bf16 != nil && ks.bf16.softmaxPairs != nil {
		kernel = ks.bf16.softmaxPairs
	}
	if kernel == nil {
		ks.Softmax(s, lds, m, l, alpha, nk, rows, softcap)
		ks.PairBF16(p, ldp, s, lds, nk, rows)
		return
	}
	ks.checkSoftmax("SoftmaxPairs", s, lds, m, l, alpha, nk, rows)
	checkOut("SoftmaxPairs", "p", p, (nk+1)/2, rows, ldp)
	kernel(s, lds, m, l, alpha, nk, rows, softcap, p, ldp)
}

// PV rescales an output tile and adds weights times values:
//
//	o[r*ldo+j] = alpha[r]·o[r*ldo+j] + Σ_{c<nk} p[c*ldp+r] · v[c*ldv+j]   for r < rows, j < dv
//
// alpha == nil means 1: then PV is the GEMM micro-kernel C += Aᵀ·B (A
// stored k-major with stride ldp) that the projections run on. Any rows and
// dv >= 1 are allowed; nk may be 0 (only the rescale happens).
func (ks *Set) PV(o []float32, ldo int, p []float32, ldp int, v []float32, ldv int, alpha []float32, rows, nk, dv int) {
	if rows <= 0 || dv <= 0 {
		return
	}
	checkOut("PV", "o", o, rows, dv, ldo)
	if alpha != nil {
		checkInN("PV", "alpha", alpha, rows)
	}
	if nk > 0 {
		checkIn("PV", "p", p, nk, rows, ldp)
		checkIn("PV", "v", v, nk, dv, ldv)
	} else {
		nk = 0
	}
	ks.pv(o, ldo, p, ldp, v, ldv, alpha, rows, nk, dv)
}

// ScoreBias adds ALiBi terms (one per row) and a bias (one per key) to a
// transposed score tile, before Softmax:
//
//	s[c*lds+r] += fma(slope[r], dist[r] + c, bias[c])   for c < nk, r < rows
//
// dist[r] is the signed distance from row r's query position to the
// tile's first key, a whole number. The formula holds exactly while
// |dist[r]| + nk <= 2^24 (every dist[r] + c a float32 integer); beyond
// that each set rounds dist[r] + c its own way (the assembly steps it
// by 1 a key, the generic set adds c once). slope and dist are
// both nil (no ALiBi term) or hold rows values; bias is nil (no key term)
// or holds nk. rows is a multiple of Lanes.
func (ks *Set) ScoreBias(s []float32, lds int, slope, dist, bias []float32, nk, rows int) {
	if nk <= 0 || rows <= 0 || (slope == nil && bias == nil) {
		return
	}
	ks.checkRows("ScoreBias", rows)
	checkOut("ScoreBias", "s", s, nk, rows, lds)
	if (slope == nil) != (dist == nil) {
		panic("kernels: ScoreBias: slope and dist must both be nil or both be set")
	}
	if slope != nil {
		checkInN("ScoreBias", "slope", slope, rows)
		checkInN("ScoreBias", "dist", dist, rows)
	}
	if bias != nil {
		checkInN("ScoreBias", "bias", bias, nk)
	}
	if ks.bias == nil {
		fallback.ScoreBias(s, lds, slope, dist, bias, nk, rows)
		return
	}
	ks.bias(s, lds, slope, dist, bias, nk, rows)
}

// ReadsStridedKV reports whether the set's flash loop reads K/V rows a
// head's stride apart (BSHD) as fast as heads-major ones on this CPU, so
// that a prefill reads them in place rather than copy them heads-major
// first (tile.Regroups), and a float32 MHA decode step runs its heads in
// interleaved groups rather than key by key (tile's stridedFloat32): the
// avx512 set on AMD cores. There QK and PV
// pass over a block once per item (panels of 64 rows and of 64 columns)
// and the walk is followed by the core's prefetchers: on Zen 4 (32 KiB
// L1, 1 MiB L2), one thread, three alternated rounds, float32 BSHD in
// place against the copy: 1,8,8,512,512,64 full 82.9–86.1% of the FMA
// peak against 81.6–83.0, causal 74.5–75.0 against 61.0–71.3;
// 1,16,16,1024,1024,128 full 86.8–89.5 against 83.1–87.6, causal
// 80.0–82.2 against 74.8–78.4; 1,8,8,2048,2048,64 level; float16 K/V
// level. Elsewhere the copy stays: AVX2's panels of 16 rows pass over a
// block four times (Zen 4: 1,8,8,2048,2048,64 full 66.6–71.8% in place
// against 80.9–81.4 copied), and on an Intel Xeon (model 207) AVX-512 ran
// 1,16,16,1024,1024,128 BSHD at 35–37% in place, 58–61% copied.
func (ks *Set) ReadsStridedKV() bool { return ks.stridedKV }

// HasDot reports whether the set has a Dot kernel worth using for a few
// query rows (the vector sets; the generic QK wastes no lanes).
func (ks *Set) HasDot() bool { return ks.dot != nil }

// DotRows returns the most query rows one Dot call takes (0 for a set
// without Dot).
func (ks *Set) DotRows() int { return ks.dotRows }

// Dot writes the scores of 1..DotRows() query rows (q not transposed,
// pre-scaled, rows at stride ldq) against nk keys, as dot products along d:
//
//	s[c*lds+r] = Σ_{d<dk} k[c*ldk+d] · q[r*ldq+d]   for c < nk, r < rows
//
// For a decode step it replaces QK, whose row vectors would be mostly
// padding. Only sets that HasDot have it; calling it on another is a bug.
func (ks *Set) Dot(s []float32, lds int, k []float32, ldk int, q []float32, ldq int, nk, rows, dk int) {
	if nk <= 0 || dk <= 0 || rows <= 0 {
		return
	}
	if ks.dot == nil {
		panic("kernels: Dot: set " + ks.Name + " has no Dot kernel")
	}
	if rows > ks.dotRows {
		panic(fmt.Sprintf("kernels: Dot: %d rows, at most %d", rows, ks.dotRows))
	}
	checkOut("Dot", "s", s, nk, rows, lds)
	checkIn("Dot", "k", k, nk, dk, ldk)
	checkIn("Dot", "q", q, rows, dk, ldq)
	ks.dot(s, lds, k, ldk, q, ldq, nk, rows, dk)
}

// TransposeScale writes a scaled transpose, the packing of a Q block:
//
//	dst[c*ldd+r] = scale · src[r*lds+c]   for r < nr, c < nc
func (ks *Set) TransposeScale(dst []float32, ldd int, src []float32, lds int, nr, nc int, scale float32) {
	if nr <= 0 || nc <= 0 {
		return
	}
	checkOut("TransposeScale", "dst", dst, nc, nr, ldd)
	checkIn("TransposeScale", "src", src, nr, nc, lds)
	ks.tr(dst, ldd, src, lds, nr, nc, scale)
}

// ScaleColumns scales each of n rows of x (stride ldx) by the factors f
// of its first rows columns, as fallback.ScaleColumns (bit for bit: one
// multiply an element):
//
//	x[i*ldx+r] *= f[r]   for i < n, r < rows
//
// the rescale of a transposed output accumulator (Oᵀ, [dv][rows]) by each
// row's alpha. Every set has it.
func (ks *Set) ScaleColumns(x []float32, ldx int, f []float32, rows, n int) {
	if rows <= 0 || n <= 0 {
		return
	}
	checkOut("ScaleColumns", "x", x, n, rows, ldx)
	checkInN("ScaleColumns", "f", f, rows)
	if ks.scaleCols == nil {
		fallback.ScaleColumns(x, ldx, f, rows, n)
		return
	}
	ks.scaleCols(x, ldx, f, rows, n)
}

// Transpose32 writes a transpose of 4-byte elements, bit for bit (pairs
// of bfloat16, float32 of any bits):
//
//	dst[c*ldd+r] = src[r*lds+c]   for r < nr, c < nc
//
// Every set has it (amd64: TransposeScale's shuffles without the
// multiply; elsewhere fallback.Transpose32).
func (ks *Set) Transpose32(dst []uint32, ldd int, src []uint32, lds int, nr, nc int) {
	if nr <= 0 || nc <= 0 {
		return
	}
	checkOut("Transpose32", "dst", dst, nc, nr, ldd)
	checkIn("Transpose32", "src", src, nr, nc, lds)
	if ks.tr32 == nil {
		fallback.Transpose32(dst, ldd, src, lds, nr, nc)
		return
	}
	ks.tr32(dst, ldd, src, lds, nr, nc)
}

// PrefetchLines asks for every cache line of rows rows of n elements of
// x, ld apart, to be brought into L2 (PREFETCHT1; PRFM PLDL2KEEP): a hint,
// for rows the caller reads or writes tens of microseconds later, that
// reads nothing and changes nothing (the generic set has no kernel and
// does nothing). Like the kernels, it panics if x does not hold the rows.
func (ks *Set) PrefetchLines(x []float32, ld, rows, n int) {
	if rows <= 0 || n <= 0 {
		return
	}
	check("PrefetchLines", "x", len(x), span(rows, n, ld))
	if ks.prefetch != nil {
		ks.prefetch(&x[0], ld, rows, n)
	}
}

// Panels returns the number of column panels Gemm, QK and PV split n
// columns into: each panel is its own pass over the rows of the shared
// operand (QK's K, PV's V), so that operand is read Panels times.
func (ks *Set) Panels(n int) int {
	if ks.panelCols == 0 || n <= ks.panelCols {
		return 1
	}
	return (n + ks.panelCols - 1) / ks.panelCols
}

// PanelCols returns the width of the set's register panel, the columns
// one pass of Gemm, QK or PV covers (0 for the generic set: no panels).
func (ks *Set) PanelCols() int { return ks.panelCols }

// PeakFLOPsPerIter is the number of floating-point operations one
// iteration of FMAPeak computes: independent vector FMAs × lanes × 2.
func (ks *Set) PeakFLOPsPerIter() int { return ks.peakChains * ks.Lanes * 2 }

// HasPeak reports whether the set has a generated FMA-throughput loop.
func (ks *Set) HasPeak() bool { return ks.peak != nil }

// FMAPeak runs iters iterations of independent register-only vector FMAs,
// iters·PeakFLOPsPerIter() floating-point operations at the machine's peak
// rate. It does nothing for a set without one (generic).
func (ks *Set) FMAPeak(iters int) {
	if ks.peak != nil && iters > 0 {
		ks.peak(iters)
	}
}

// Exp writes exp(src[i]) to dst[i] for i < len(dst), with the algorithm and
// error bound of fallback.Exp32: exactly 0 below fallback.ExpMin, and
// saturated at exp(fallback.ExpMax) ≈ 2.4e38 above ExpMax (never +Inf).
func (ks *Set) Exp(dst, src []float32) {
	check("Exp", "src", len(src), len(dst))
	raceWrite(dst, len(dst))
	raceRead(src, len(dst))
	if len(dst) == 0 {
		return
	}
	ks.exp(dst, src)
}
