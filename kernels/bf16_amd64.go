//go:build amd64 && !purego

package kernels

import (
	"github.com/fastattn/fastattn/asm"
	"github.com/klauspost/cpuid/v2"
)

// gemmBF16Func and gemmWDotFunc are the signatures of the generated
// GemmBF16 and GemmWDot kernels.
type (
	gemmBF16Func func(c *float32, ldc int, a *uint32, lda, lka int, b *uint32, ldb int, m, k, nv, tail, acc int)
	gemmWDotFunc func(c *float32, ldc int, a *uint32, lda int, b *uint16, ldb int, m, k, nv, tail, acc int)
)

// x86BF16 wraps the avx512 set's bfloat16 kernels: gemm and gemmW
// (GemmBF16AVX512 and GemmWDotAVX512, or their Emu twins),
// PairBF16AVX512, and with native BF16PeakAVX512.
func x86BF16(gemm gemmBF16Func, gemmW gemmWDotFunc, native bool) *bf16Kernels {
	lanes, maxNV := asm.LanesAVX512, asm.PanelVecsAVX512
	k := &bf16Kernels{
		gemm: func(c []float32, ldc int, a []uint32, lda, lka int, b []uint32, ldb int, m, n, kk int, accumulate bool) {
			acc := accFlag(accumulate)
			panels(lanes, maxNV, n, func(j0, nv, tail int) {
				gemm(&c[j0], ldc, &a[0], lda, lka, &b[j0], ldb, m, kk, nv, tail, acc)
			})
		},
		gemmW: func(c []float32, ldc int, a []uint32, lda int, b []uint16, ldb int, m, n, kk int, accumulate bool) {
			// The kernel reads B in groups of two vectors: with even
			// panels only the last may read past n, up to n rounded up
			// to a group.
			acc := accFlag(accumulate)
			evenPanels(lanes, maxNV, n, func(j0, nv, tail int) {
				gemmW(&c[j0], ldc, &a[0], lda, &b[j0], ldb, m, kk, nv, tail, acc)
			})
		},
		pair: func(dst []uint32, ldd int, src []float32, lds int, rows, n int) {
			vecs := (n + lanes - 1) / lanes
			asm.PairBF16AVX512(&dst[0], ldd, &src[0], lds, rows, vecs, n-(vecs-1)*lanes)
		},
		native: native,
	}
	if native {
		k.peak, k.chains = asm.BF16PeakAVX512, asm.BF16PeakChainsAVX512
	}
	return k
}

func init() {
	avx512.optional = []cpuid.FeatureID{cpuid.AVX512BF16}
	if cpuid.CPU.Supports(cpuid.AVX512BF16) {
		avx512.bf16 = x86BF16(asm.GemmBF16AVX512, asm.GemmWDotAVX512, true)
	}
}

// EmulatedBF16 returns, for tests, a copy of the avx512 set (named
// "avx512-bf16emu") whose bfloat16 kernels are the generated Emu twins:
// VDPBF16PS computed by AVX-512F instructions, the same bits on normal
// numbers, slower than the float32 kernels. It lets the bfloat16 kernels'
// code (everything but the instruction itself, whose bytes TestEVEXObjdump
// checks) run on AVX-512 CPUs without AVX512_BF16. nil where the CPU has
// no AVX-512.
func EmulatedBF16() *Set {
	if !cpuid.CPU.Supports(avx512.requires...) {
		return nil
	}
	ks := *avx512
	ks.Name = "avx512-bf16emu"
	ks.bf16 = x86BF16(asm.GemmBF16EmuAVX512, asm.GemmWDotEmuAVX512, false)
	return &ks
}
