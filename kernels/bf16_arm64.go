//go:build arm64 && !purego

package kernels

import (
	"github.com/fastattn/fastattn/asm"
	"github.com/fastattn/fastattn/fallback"
	"github.com/klauspost/cpuid/v2"
)

// neonBF16 is the NEON set's GemmBF16 on FEAT_BF16 (HWCAP2_BF16): BFDOT,
// whole vectors by GemmBF16NEON, the last n%4 columns by its Go twin
// fallback.GemmBF16Odd (BFDOT rounds its sums to odd). PairBF16 is Go's;
// the projections take the float32 path (weights held as rows) and no peak
// loop.
var neonBF16 = &bf16Kernels{
	gemm: func(c []float32, ldc int, a []uint32, lda, lka int, b []uint32, ldb int, m, n, k int, accumulate bool) {
		lanes, maxNV := asm.LanesNEON, asm.PanelVecsNEON
		whole := n / lanes * lanes
		acc := accFlag(accumulate)
		panels(lanes, maxNV, whole, func(j0, nv, _ int) {
			asm.GemmBF16NEON(&c[j0], ldc, &a[0], lda, lka, &b[j0], ldb, m, k, nv, lanes, acc)
		})
		if whole < n {
			fallback.GemmBF16Odd(c[whole:], ldc, a, lda, lka, b[whole:], ldb, m, n-whole, k, accumulate)
		}
	},
	native:    true,
	roundsOdd: true,
}

func init() {
	neon.optional = append(neon.optional, cpuid.BF16)
	if cpuid.CPU.Supports(cpuid.BF16) {
		neon.bf16 = neonBF16
	}
}
