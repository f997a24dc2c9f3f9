package kernels

import (
	"fmt"

	"github.com/fastattn/fastattn/fallback"
)

// The bfloat16 dot-product kernels of the bfloat16 compute mode. Their
// operands hold two bfloat16 terms in each uint32 (the first in the low
// half), as VDPBF16PS multiplies them: a bfloat16 row read in place (K),
// or float32 rows rounded and packed in pairs by PairBF16 (Qᵀ, the
// weights, V). A set has them where its CPU multiplies bfloat16 pairs
// (AVX-512 with AVX512_BF16: VDPBF16PS; NEON with FEAT_BF16: BFDOT, whose
// sums round to odd); elsewhere the mode runs on the float32 kernels (the
// tile package rounds the operands).

// amxBlock and amxPairs are GemmAMX's block of C (rows and columns) and
// k step in pairs; set where the kernels exist (amd64: asm's params).
var amxBlock, amxPairs int

// bf16Kernels are a set's bfloat16 kernels.
type bf16Kernels struct {
	gemm func(c []float32, ldc int, a []uint32, lda, lka int, b []uint32, ldb int, m, n, k int, accumulate bool)
	pair func(dst []uint32, ldd int, src []float32, lds int, rows, n int) // nil: fallback.PairBF16
	// softmaxPairs, when not nil, is the set's SoftmaxPairs on the CPU's
	// bfloat16 conversion (VCVTNE2PS2BF16), the same bits as its own.
	softmaxPairs func(s []float32, lds int, m, l, alpha []float32, nk, rows int, softcap float32, p []uint32, ldp int)
	peak         func(iters int) // nil: none
	chains       int             // independent VDPBF16PS of a peak iteration
	native       bool            // the CPU's instruction, not its emulation
	daz          bool            // not native, but denormals read as zero as the instruction does (fallback's model)
	roundsOdd    bool            // BFDOT's sums (fallback.GemmBF16Odd), not VDPBF16PS's (fallback.GemmBF16)
	// amx, when not nil, runs the bulk of a GemmBF16 whose A pairs run
	// along its rows (lka = 1) on AMX tiles: whole blocks of amxBlock rows
	// and columns and amxPairs pairs of k, the rest left to gemm (amx.go).
	amx     func(c []float32, ldc int, a []uint32, lda int, b []uint32, ldb int, mb, nb, kb int, accumulate bool)
	amxPeak func(iters int) // nil: none (no AMX, or its emulation)
	// slow marks a set whose CPU's bfloat16 instruction runs below its
	// float32 FMA rate (Intel's VDPBF16PS, half its FMA throughput, and no
	// AMX): the bfloat16 mode runs on the float32 kernels there
	// (BF16Preferred), with the same roundings.
	slow bool
}

// HasBF16 reports whether the set has bfloat16 dot-product kernels
// (GemmBF16).
func (ks *Set) HasBF16() bool { return ks.bf16 != nil }

// BF16Preferred reports whether the bfloat16 mode should run on the set's
// bfloat16 kernels: it has them, and they are not slower than its float32
// kernels — false on an Intel CPU with AVX512_BF16 but no AMX, whose
// VDPBF16PS runs at half the FMA rate (the mode then runs on the float32
// kernels with the same roundings, and is never slower than float32).
func (ks *Set) BF16Preferred() bool { return ks.bf16 != nil && !ks.bf16.slow }

// BF16ReadsDenormalsAsZero reports whether the set's GemmBF16 reads
// denormal bfloat16 operands as zero, as VDPBF16PS, TDPBF16PS and BFDOT
// do: the CPU's instruction, or fallback.GemmBF16's model of it (GoTiles);
// false for the Emu twins, which keep their value.
func (ks *Set) BF16ReadsDenormalsAsZero() bool {
	return ks.bf16 != nil && (ks.bf16.native || ks.bf16.daz)
}

// AMX reports whether the set's GemmBF16 runs on AMX tiles (the CPU's, or
// their emulation in a test set: EmulatedAMX).
func (ks *Set) AMX() bool { return ks.bf16 != nil && ks.bf16.amx != nil }

// AMXNative reports whether the set runs the CPU's AMX tiles.
func (ks *Set) AMXNative() bool { return ks.AMX() && ks.bf16.native }

// BF16Native reports whether the set's GemmBF16 runs the CPU's bfloat16
// instruction (false: none, or its emulation in float32 instructions, a
// set for the tests: EmulatedBF16).
func (ks *Set) BF16Native() bool { return ks.bf16 != nil && ks.bf16.native }

// GemmBF16 multiplies operands of bfloat16 pairs (strides in uint32):
//
//	c[i*ldc+j] = (accumulate ? c[i*ldc+j] : 0) ⊕_{p<k} (a[i*lda+p*lka], b[p*ldb+j])   for i < m, j < n
//
// each term adding the product of the pair's high halves, then of its low
// halves, as fallback.GemmBF16 (its twin, bit for bit on normal numbers:
// the instruction reads denormals as zero); on a set whose sums round to
// odd (NEON's BFDOT: BF16RoundsOdd), as fallback.GemmBF16Odd. QK is this
// with A the bfloat16 K rows (lda = ldk/2, lka = 1) and B the paired Qᵀ;
// PV with A the paired weights (lda = 1, lka = their stride) and B the
// paired V. Only sets that HasBF16 have it; calling it on another is a
// bug.
func (ks *Set) GemmBF16(c []float32, ldc int, a []uint32, lda, lka int, b []uint32, ldb int, m, n, k int, accumulate bool) {
	if m <= 0 || n <= 0 || k <= 0 {
		return
	}
	if ks.bf16 == nil {
		panic("kernels: GemmBF16: set " + ks.Name + " has no bfloat16 kernels")
	}
	if lda < 0 || lka < 0 {
		panic(fmt.Sprintf("kernels: GemmBF16: strides %d, %d", lda, lka))
	}
	checkOut("GemmBF16", "c", c, m, n, ldc)
	checkIn("GemmBF16", "a", a, 1, (m-1)*lda+(k-1)*lka+1, 1)
	checkIn("GemmBF16", "b", b, k, n, ldb)
	x := ks.bf16
	if x.amx == nil || lka != 1 || m < amxBlock || n < amxBlock || k < amxPairs {
		x.gemm(c, ldc, a, lda, lka, b, ldb, m, n, k, accumulate)
		return
	}
	// The bulk on tiles, then the k tail of the bulk's block (the pairs in
	// order, as GemmBF16 sums them), its right columns and bottom rows.
	mb, nb, kb := m/amxBlock, n/amxBlock, k/amxPairs
	m0, n0, k0 := mb*amxBlock, nb*amxBlock, kb*amxPairs
	x.amx(c, ldc, a, lda, b, ldb, mb, nb, kb, accumulate)
	if k0 < k {
		x.gemm(c, ldc, a[k0:], lda, 1, b[k0*ldb:], ldb, m0, n0, k-k0, true)
	}
	if n0 < n {
		x.gemm(c[n0:], ldc, a, lda, 1, b[n0:], ldb, m0, n-n0, k, accumulate)
	}
	if m0 < m {
		x.gemm(c[m0*ldc:], ldc, a[m0*lda:], lda, 1, b, ldb, m-m0, n, k, accumulate)
	}
}

// BF16RoundsOdd reports whether the set's GemmBF16 sums as Arm's BFDOT
// does (fallback.GemmBF16Odd) rather than as x86's VDPBF16PS
// (fallback.GemmBF16).
func (ks *Set) BF16RoundsOdd() bool { return ks.bf16 != nil && ks.bf16.roundsOdd }

// PairBF16 rounds rows rows of n float32 elements (stride lds) to
// bfloat16 and packs them in pairs of rows, (rows+1)/2 rows of n uint32 at
// stride ldd in dst, as fallback.PairBF16 (bit for bit). Every set has it.
func (ks *Set) PairBF16(dst []uint32, ldd int, src []float32, lds int, rows, n int) {
	if rows <= 0 || n <= 0 {
		return
	}
	checkOut("PairBF16", "dst", dst, (rows+1)/2, n, ldd)
	checkIn("PairBF16", "src", src, rows, n, lds)
	if ks.bf16 == nil || ks.bf16.pair == nil {
		fallback.PairBF16(dst, ldd, src, lds, rows, n)
		return
	}
	ks.bf16.pair(dst, ldd, src, lds, rows, n)
}

// HasAMXPeak reports whether the set has a generated AMX throughput loop
// (AMXPeak): a set running the CPU's AMX tiles.
func (ks *Set) HasAMXPeak() bool { return ks.bf16 != nil && ks.bf16.amxPeak != nil }

// AMXPeakFLOPsPerIter is the floating-point operations one iteration of
// AMXPeak computes: 4 TDPBF16PS of 16×16 outputs over 32 terms, two
// operations a term.
func (ks *Set) AMXPeakFLOPsPerIter() int {
	if !ks.HasAMXPeak() {
		return 0
	}
	return 4 * amxBlock / 2 * amxBlock / 2 * 2 * amxPairs * 2
}

// AMXPeak runs iters iterations of independent TDPBF16PS on tiles,
// iters·AMXPeakFLOPsPerIter() operations at the tile unit's bfloat16 peak
// (the tiles configured and released in the call). It does nothing on a
// set without one.
func (ks *Set) AMXPeak(iters int) {
	if ks.HasAMXPeak() && iters > 0 {
		ks.bf16.amxPeak(iters)
	}
}

// HasBF16Peak reports whether the set has a generated bfloat16
// dot-product throughput loop (BF16Peak): a set whose CPU has the
// instruction.
func (ks *Set) HasBF16Peak() bool { return ks.bf16 != nil && ks.bf16.peak != nil }

// BF16PeakFLOPsPerIter is the floating-point operations one iteration of
// BF16Peak computes: independent VDPBF16PS × lanes × 4 (two products and
// two sums a lane).
func (ks *Set) BF16PeakFLOPsPerIter() int {
	if !ks.HasBF16Peak() {
		return 0
	}
	return ks.bf16.chains * ks.Lanes * 4
}

// BF16Peak runs iters iterations of independent register-only bfloat16
// dot products, iters·BF16PeakFLOPsPerIter() operations at the machine's
// bfloat16 peak. It does nothing on a set without one.
func (ks *Set) BF16Peak(iters int) {
	if ks.HasBF16Peak() && iters > 0 {
		ks.bf16.peak(iters)
	}
}
