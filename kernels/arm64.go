//go:build arm64 && !purego

package kernels

import (
	"github.com/fastattn/fastattn/asm"
	"github.com/fastattn/fastattn/fallback"
	"github.com/klauspost/cpuid/v2"
)

// The NEON set: the kernels gen/arm64 generates, with the parameters of
// asm/params_neon_arm64.go. NEON has no masked loads, so the kernels take
// whole vectors only: the generic code does the last n%Lanes columns of
// Gemm and PV and of the conversions, and Decode takes head dims that are
// multiples of 4 (HasDecode; other dims run the flash blocks).
var neon = &Set{
	Name: "neon", Lanes: asm.LanesNEON,
	gemm: func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int, accumulate bool) {
		whole := n / asm.LanesNEON * asm.LanesNEON
		if whole > 0 {
			gemmPanels(asm.GemmNEON, asm.LanesNEON, asm.PanelVecsNEON, 0, c, ldc, a, lda, b, ldb, m, whole, k, accumulate)
		}
		if whole < n {
			fallback.Gemm(c[whole:], ldc, a, lda, b[whole:], ldb, m, n-whole, k, accumulate)
		}
	},
	softmax: softmaxCalls(asm.SoftmaxNEON, asm.LanesNEON, asm.SoftmaxVecsNEON),
	bias:    biasCalls(asm.ScoreBiasNEON, asm.LanesNEON, asm.SoftmaxVecsNEON),
	pv: func(o []float32, ldo int, p []float32, ldp int, v []float32, ldv int, alpha []float32, rows, nk, dv int) {
		whole := dv / asm.LanesNEON * asm.LanesNEON
		if whole > 0 {
			pvPanels(asm.PVNEON, asm.LanesNEON, asm.PanelVecsNEON, pvChunk, o, ldo, p, ldp, v, ldv, alpha, rows, nk, whole)
		}
		if whole < dv {
			var vt []float32
			if nk > 0 {
				vt = v[whole:]
			}
			fallback.PV(o[whole:], ldo, p, ldp, vt, ldv, alpha, rows, nk, dv-whole)
		}
	},
	exp:        func(dst, src []float32) { expVectors(asm.ExpNEON, asm.LanesNEON, dst, src) },
	tr:         fallback.TransposeScale,
	peak:       asm.FMAPeakNEON,
	prefetch:   asm.PrefetchLinesNEON,
	peakChains: asm.PeakChainsNEON,
	panelCols:  asm.LanesNEON * asm.PanelVecsNEON,
	decode: func(q []float32, rows, dk int, kr, vr KVRows, nk, dv int, o, m, l, s, alibi []float32) {
		al := first(alibi)
		switch kr.Type {
		case fallback.KVFloat32:
			asm.DecodeF32NEON(&q[0], rows, dk, &kr.F32[0], kr.Ld, &vr.F32[0], vr.Ld, nk, dv, &o[0], &m[0], &l[0], al)
		case fallback.KVInt8:
			asm.DecodeI8NEON(&q[0], rows, dk, &kr.I8[0], kr.Ld, &vr.I8[0], vr.Ld, nk, dv, &o[0], &m[0], &l[0], al,
				&kr.S[0], kr.LdS, &vr.S[0], vr.LdS, &s[0])
		case fallback.KVFloat16:
			asm.DecodeF16NEON(&q[0], rows, dk, &kr.U16[0], kr.Ld, &vr.U16[0], vr.Ld, nk, dv, &o[0], &m[0], &l[0], al)
		default:
			asm.DecodeBF16NEON(&q[0], rows, dk, &kr.U16[0], kr.Ld, &vr.U16[0], vr.Ld, nk, dv, &o[0], &m[0], &l[0], al)
		}
	},
	decodeKeys:    asm.DecodeKeysNEON,
	decodeScratch: 1, // one float more than int8's block, so that a Decode call's s is a real slice
	decodeWhole:   true,
	decodeInt8:    true,
	decodeDequant: true,
	widen:         widenCalls(neonConvert),
	narrow:        narrowCalls(neonConvert),
	widenI4KV:     widenI4KVCall(asm.WidenI4KVNEON),
	dequant:       dequantCalls([2]dequantFunc{asm.DequantI8NEON, asm.DequantI4NEON}),
	gemmW:         neonWeights,
	gemvI8:        neonWeights,
	gemvI4:        neonWeights,
	int4Half:      neonWeightCols / 2,
	widenW:        neonWiden,
}

// neonWiden is WidenWeights of int8 and int4 rows on the NEON kernels, in
// groups of neonWeightCols columns, whole vectors.
func neonWiden(dst []float32, ldd int, b WeightRows, k, n int) {
	for j0 := 0; j0 < n; j0 += neonWeightCols {
		nv := (min(neonWeightCols, n-j0) + asm.LanesNEON - 1) / asm.LanesNEON
		if b.Type == fallback.KVInt8 {
			asm.WidenWI8NEON(&dst[j0], ldd, &b.I8[j0], b.Ld, k, nv, &b.S[j0])
		} else {
			asm.WidenWI4NEON(&dst[j0], ldd, &b.I4[j0/2], b.Ld, k, nv, &b.S[j0], &b.Z[j0])
		}
	}
}

// neonWeightCols is the width of a column group of the NEON weight
// kernels: a register tile's 4 vectors, the 8 bytes of an int4 row.
const neonWeightCols = asm.LanesNEON * asm.PanelVecsNEON

// neonWeights is GemmW (16-bit b), GemvI8 and GemvI4 on the NEON kernels,
// which read and write whole vectors: C's columns in groups of
// neonWeightCols, nv vectors straight into C, a group that ends in a
// partial vector through a tile on the stack, 6 rows at a time (B, its
// scales and zero points are read in whole vectors, as the contract
// allows).
func neonWeights(c []float32, ldc int, a []float32, lda int, b WeightRows, m, n, k int, accumulate bool) {
	acc := accFlag(accumulate)
	for j0 := 0; j0 < n; j0 += neonWeightCols {
		w := min(neonWeightCols, n-j0)
		nv := (w + asm.LanesNEON - 1) / asm.LanesNEON
		if w == nv*asm.LanesNEON {
			neonWeightCall(&c[j0], ldc, a, lda, b, 0, m, j0, nv, k, acc)
			continue
		}
		const tileRows = 6
		var tile [tileRows * neonWeightCols]float32
		for i0 := 0; i0 < m; i0 += tileRows {
			mc := min(tileRows, m-i0)
			if accumulate {
				for i := range mc {
					copy(tile[i*neonWeightCols:i*neonWeightCols+w], c[(i0+i)*ldc+j0:])
				}
			}
			neonWeightCall(&tile[0], neonWeightCols, a, lda, b, i0, mc, j0, nv, k, acc)
			for i := range mc {
				copy(c[(i0+i)*ldc+j0:(i0+i)*ldc+j0+w], tile[i*neonWeightCols:])
			}
		}
	}
}

// neonWeightCall runs the kernel of b's type on rows i0..i0+mc of A and
// the nv vectors of columns from j0 (a multiple of neonWeightCols), into c.
func neonWeightCall(c *float32, ldc int, a []float32, lda int, b WeightRows, i0, mc, j0, nv, k, acc int) {
	ap := &a[i0*lda]
	switch b.Type {
	case fallback.KVInt8:
		asm.GemvWI8NEON(c, ldc, ap, lda, &b.I8[j0], b.Ld, mc, k, nv, asm.LanesNEON, acc, &b.S[j0])
	case fallback.KVInt4:
		asm.GemvWI4NEON(c, ldc, ap, lda, &b.I4[j0/2], b.Ld, mc, k, nv, asm.LanesNEON, acc, &b.S[j0], &b.Z[j0])
	case fallback.KVFloat16:
		asm.GemmWF16NEON(c, ldc, ap, lda, &b.U16[j0], b.Ld, mc, k, nv, asm.LanesNEON, acc)
	default:
		asm.GemmWBF16NEON(c, ldc, ap, lda, &b.U16[j0], b.Ld, mc, k, nv, asm.LanesNEON, acc)
	}
}

// neonConvert are the NEON conversion kernels, float16 then bfloat16.
var neonConvert = [2]convertFuncs{{asm.WidenF16NEON, asm.NarrowF16NEON}, {asm.WidenBF16NEON, asm.NarrowBF16NEON}}

// neonDecodeQ8 is DecodeQ8 on SDOT (DecodeQ8NEON), for CPUs with
// FEAT_DotProd (Arm v8.2 cores from Cortex-A55/A75 and Neoverse N1 on,
// Apple M1 on).
func neonDecodeQ8(q QueryQ8, rows, dk int, kr, vr KVRows, nk, dv int, o, m, l, s, alibi []float32) {
	asm.DecodeQ8NEON(nil, rows, dk, &kr.I8[0], kr.Ld, &vr.I8[0], vr.Ld, nk, dv, &o[0], &m[0], &l[0], first(alibi),
		&kr.S[0], kr.LdS, &vr.S[0], vr.LdS, &s[0], &q.Q[0], q.Ld, &q.S[0])
}

func init() {
	neon.optional = append(neon.optional, cpuid.ASIMDDP)
	if cpuid.CPU.Supports(cpuid.ASIMDDP) {
		neon.decodeQ8 = neonDecodeQ8
	}
	if cpuid.CPU.Supports(cpuid.ASIMD) {
		available = append([]*Set{neon}, available...)
	}
}
