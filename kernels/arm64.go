//go:build arm64 && !purego

package kernels

import (
	"github.com/fastattn/fastattn/asm"
	"github.com/fastattn/fastattn/fallback"
	"github.com/klauspost/cpuid/v2"
)

// The NEON set: the kernels gen/arm64 generates. NEON has no masked loads,
// so the kernels take whole vectors only and the generic code does the
// last n%4 columns of Gemm and PV.
var neon = &Set{
	Name: "neon", Lanes: 4,
	gemm: func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int, accumulate bool) {
		n4 := n &^ 3
		if n4 > 0 {
			gemmPanels(asm.GemmNEON, 4, 4, 0, c, ldc, a, lda, b, ldb, m, n4, k, accumulate)
		}
		if n4 < n {
			fallback.Gemm(c[n4:], ldc, a, lda, b[n4:], ldb, m, n-n4, k, accumulate)
		}
	},
	softmax: func(s []float32, lds int, m, l, alpha []float32, nk, rows int, softcap float32) {
		for r0 := 0; r0 < rows; r0 += 16 {
			asm.SoftmaxNEON(&s[r0], lds, &m[r0], &l[r0], &alpha[r0], nk, min(4, (rows-r0)/4), softcap)
		}
	},
	bias: func(s []float32, lds int, slope, dist, bias []float32, nk, rows int) {
		var bp *float32
		if bias != nil {
			bp = &bias[0]
		}
		for r0 := 0; r0 < rows; r0 += 16 {
			var sl, d *float32
			if slope != nil {
				sl, d = &slope[r0], &dist[r0]
			}
			asm.ScoreBiasNEON(&s[r0], lds, sl, d, bp, nk, min(4, (rows-r0)/4))
		}
	},
	pv: func(o []float32, ldo int, p []float32, ldp int, v []float32, ldv int, alpha []float32, rows, nk, dv int) {
		dv4 := dv &^ 3
		if dv4 > 0 {
			pvPanels(asm.PVNEON, 4, 4, o, ldo, p, ldp, v, ldv, alpha, rows, nk, dv4)
		}
		if dv4 < dv {
			var vt []float32
			if nk > 0 {
				vt = v[dv4:]
			}
			fallback.PV(o[dv4:], ldo, p, ldp, vt, ldv, alpha, rows, nk, dv-dv4)
		}
	},
	exp:        func(dst, src []float32) { expVectors(asm.ExpNEON, 4, dst, src) },
	tr:         fallback.TransposeScale,
	peak:       asm.FMAPeakNEON,
	peakChains: 24,
	panelCols:  16,
}

func init() {
	if cpuid.CPU.Supports(cpuid.ASIMD) {
		available = append([]*Set{neon}, available...)
	}
}
