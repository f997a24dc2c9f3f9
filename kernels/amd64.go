//go:build amd64 && !purego

package kernels

import (
	"github.com/fastattn/fastattn/asm"
	"github.com/klauspost/cpuid/v2"
)

// The amd64 sets: the generated kernels of asm, behind the Set contract.
// Each requires exactly the features its code uses; cpuid reports AVX2 and
// AVX-512 only where the OS saves their register state.
var (
	avx2 = &Set{
		Name: "avx2", Lanes: 8,
		gemm: func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int, accumulate bool) {
			gemmPanels(asm.GemmAVX2, 8, 2, c, ldc, a, lda, b, ldb, m, n, k, accumulate)
		},
		softmax: func(s []float32, lds int, m, l, alpha []float32, nk, rows int, softcap float32) {
			for r0 := 0; r0 < rows; r0 += 32 {
				asm.SoftmaxAVX2(&s[r0], lds, &m[r0], &l[r0], &alpha[r0], nk, min(4, (rows-r0)/8), softcap)
			}
		},
		pv: func(o []float32, ldo int, p []float32, ldp int, v []float32, ldv int, alpha []float32, rows, nk, dv int) {
			pvPanels(asm.PVAVX2, 8, 2, o, ldo, p, ldp, v, ldv, alpha, rows, nk, dv)
		},
		exp: func(dst, src []float32) { expVectors(asm.ExpAVX2, 8, dst, src) },
		tr: func(dst []float32, ldd int, src []float32, lds int, nr, nc int, scale float32) {
			transposeBlocks(asm.TransposeScaleAVX2, dst, ldd, src, lds, nr, nc, scale)
		},
		dot: func(s []float32, lds int, k []float32, ldk int, q []float32, nk, dk int) {
			dotVectors(asm.DotAVX2, 8, s, lds, k, ldk, q, nk, dk)
		},
		peak: asm.FMAPeakAVX2, peakChains: 12,
	}
	avx512 = &Set{
		Name: "avx512", Lanes: 16,
		gemm: func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int, accumulate bool) {
			gemmPanels(asm.GemmAVX512, 16, 4, c, ldc, a, lda, b, ldb, m, n, k, accumulate)
		},
		softmax: func(s []float32, lds int, m, l, alpha []float32, nk, rows int, softcap float32) {
			for r0 := 0; r0 < rows; r0 += 64 {
				asm.SoftmaxAVX512(&s[r0], lds, &m[r0], &l[r0], &alpha[r0], nk, min(4, (rows-r0)/16), softcap)
			}
		},
		pv: func(o []float32, ldo int, p []float32, ldp int, v []float32, ldv int, alpha []float32, rows, nk, dv int) {
			pvPanels(asm.PVAVX512, 16, 4, o, ldo, p, ldp, v, ldv, alpha, rows, nk, dv)
		},
		exp: func(dst, src []float32) { expVectors(asm.ExpAVX512, 16, dst, src) },
		tr: func(dst []float32, ldd int, src []float32, lds int, nr, nc int, scale float32) {
			transposeBlocks(asm.TransposeScaleAVX512, dst, ldd, src, lds, nr, nc, scale)
		},
		dot: func(s []float32, lds int, k []float32, ldk int, q []float32, nk, dk int) {
			dotVectors(asm.DotAVX512, 16, s, lds, k, ldk, q, nk, dk)
		},
		peak: asm.FMAPeakAVX512, peakChains: 12,
	}
)

func init() {
	if cpuid.CPU.Supports(cpuid.AVX2, cpuid.FMA3) {
		available = append([]*Set{avx2}, available...)
	}
	// The avx512 set's transpose is ymm (AVX2) code.
	if cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX2) {
		available = append([]*Set{avx512}, available...)
	}
}
