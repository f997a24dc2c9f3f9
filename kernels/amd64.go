//go:build amd64 && !purego

package kernels

import (
	"github.com/fastattn/fastattn/asm"
	"github.com/fastattn/fastattn/fallback"
	"github.com/klauspost/cpuid/v2"
)

// The amd64 sets: the generated kernels of asm, behind the Set contract.
// Each requires every feature its code uses (avo's "// Requires:" lines in
// asm/*_amd64.s; TestRequires checks the lists against them; PREFETCHT0's
// "MMX+" is part of SSE); cpuid reports AVX, AVX2 and AVX-512 only where
// the OS saves their register state.
// Keyed literals: two kernels of one signature cannot be swapped
// unnoticed, and a new field is set by name.
var (
	// The avx2 set converts 16-bit floats with F16C.
	avx2 = x86Set("avx2", x86Params{
		lanes: asm.LanesAVX2, panelVecs: asm.PanelVecsAVX2, softmaxVecs: asm.SoftmaxVecsAVX2, dotRows: asm.DotRowsAVX2,
		peakChains: asm.PeakChainsAVX2, decodeKeys: asm.DecodeKeysAVX2, decodeScratch: asm.DecodeScratchAVX2,
		decodeScaleWidth: asm.DecodeScaleWidthAVX2, decodePairs: asm.DecodePairsAVX2,
		pvChunk: pvChunk,
	}, x86Kernels{
		gemm: asm.GemmAVX2, gemmPacked: asm.GemmPackedAVX2, gemmW16: [2]gemmW16Func{asm.GemmWF16AVX2, asm.GemmWBF16AVX2}, gemmWP: asm.GemmWPairsAVX2,
		gemmWPacked16: [2]gemmW16Func{asm.GemmWPackedF16AVX2, asm.GemmWPackedBF16AVX2}, gemmWPPacked: asm.GemmWPairsPackedAVX2,
		gemvWI8: asm.GemvWI8AVX2, gemvWI4: asm.GemvWI4AVX2, widenI4: asm.WidenWI4AVX2, widenI8: asm.WidenWI8AVX2,
		pv: asm.PVAVX2, softmax: asm.SoftmaxAVX2, softmaxPairs: asm.SoftmaxPairsAVX2, softmaxRound: asm.SoftmaxRoundAVX2, scaleCols: asm.ScaleColumnsAVX2, bias: asm.ScoreBiasAVX2, exp: asm.ExpAVX2, tr: asm.TransposeScaleAVX2, tr32: asm.Transpose32AVX2,
		dot: asm.DotAVX2, peak: asm.FMAPeakAVX2, prefetch: asm.PrefetchLinesAVX2,
		headScores: asm.HeadScoresF32AVX2, headScores16: [2]headScores16Func{asm.HeadScoresF16AVX2, asm.HeadScoresBF16AVX2},
		headPV: asm.HeadPVF32AVX2, headPV16: [2]headPV16Func{asm.HeadPVF16AVX2, asm.HeadPVBF16AVX2},
		headScoresI8: asm.HeadScoresI8AVX2, headPVI8: asm.HeadPVI8AVX2,
		decodeF32: asm.DecodeF32AVX2, decodeF16: asm.DecodeF16AVX2, decBF: asm.DecodeBF16AVX2,
		decodeI8: asm.DecodeI8AVX2, decodeI4: asm.DecodeI4AVX2,
		convert:   [2]convertFuncs{{asm.WidenF16AVX2, asm.NarrowF16AVX2}, {asm.WidenBF16AVX2, asm.NarrowBF16AVX2}},
		roundBF16: asm.RoundBF16AVX2,
		widenI4KV: asm.WidenI4KVAVX2, dequant: [2]dequantFunc{asm.DequantI8AVX2, asm.DequantI4AVX2},
	},
		cpuid.CMOV, cpuid.SSE, cpuid.AVX, cpuid.AVX2, cpuid.FMA3, cpuid.F16C)
	// The avx512 set's transpose and head kernels are ymm (AVX2, FMA, F16C)
	// code, but for its float32 head kernels over head dims of whole zmm
	// vectors; its 16-bit tails are loaded with VMOVDQU16 (AVX512BW).
	avx512 = x86Set("avx512", x86Params{
		lanes: asm.LanesAVX512, panelVecs: asm.PanelVecsAVX512, softmaxVecs: asm.SoftmaxVecsAVX512, dotRows: asm.DotRowsAVX512,
		peakChains: asm.PeakChainsAVX512, decodeKeys: asm.DecodeKeysAVX512, decodeScratch: asm.DecodeScratchAVX512,
		decodeScaleWidth: asm.DecodeScaleWidthAVX512, decodePairs: asm.DecodePairsAVX512,
		pvChunk: 0, // whole blocks (pvChunk's note)
	}, x86Kernels{
		gemm: asm.GemmAVX512, gemmPacked: asm.GemmPackedAVX512, gemmW16: [2]gemmW16Func{asm.GemmWF16AVX512, asm.GemmWBF16AVX512}, gemmWP: asm.GemmWPairsAVX512,
		gemmWPacked16: [2]gemmW16Func{asm.GemmWPackedF16AVX512, asm.GemmWPackedBF16AVX512}, gemmWPPacked: asm.GemmWPairsPackedAVX512,
		gemvWI8: asm.GemvWI8AVX512, gemvWI4: asm.GemvWI4AVX512, widenI4: asm.WidenWI4AVX512, widenI8: asm.WidenWI8AVX512,
		pv: asm.PVAVX512, softmax: asm.SoftmaxAVX512, softmaxPairs: asm.SoftmaxPairsAVX512, softmaxRound: asm.SoftmaxRoundAVX512, scaleCols: asm.ScaleColumnsAVX512, bias: asm.ScoreBiasAVX512, exp: asm.ExpAVX512, tr: asm.TransposeScaleAVX512, tr32: asm.Transpose32AVX512,
		dot: asm.DotAVX512, peak: asm.FMAPeakAVX512, prefetch: asm.PrefetchLinesAVX512,
		headScores: asm.HeadScoresF32AVX2, headScores16: [2]headScores16Func{asm.HeadScoresF16AVX2, asm.HeadScoresBF16AVX2},
		headPV: asm.HeadPVF32AVX2, headPV16: [2]headPV16Func{asm.HeadPVF16AVX2, asm.HeadPVBF16AVX2},
		headScoresI8: asm.HeadScoresI8AVX2, headPVI8: asm.HeadPVI8AVX2,
		headScoresZmm: asm.HeadScoresF32AVX512, headPVZmm: asm.HeadPVF32AVX512,
		decodeF32: asm.DecodeF32AVX512, decodeF16: asm.DecodeF16AVX512, decBF: asm.DecodeBF16AVX512,
		decodeI8: asm.DecodeI8AVX512, decodeI4: asm.DecodeI4AVX512,
		convert:   [2]convertFuncs{{asm.WidenF16AVX512, asm.NarrowF16AVX512}, {asm.WidenBF16AVX512, asm.NarrowBF16AVX512}},
		roundBF16: asm.RoundBF16AVX512,
		widenI4KV: asm.WidenI4KVAVX512, dequant: [2]dequantFunc{asm.DequantI8AVX512, asm.DequantI4AVX512},
	},
		cpuid.CMOV, cpuid.SSE, cpuid.AVX, cpuid.AVX2, cpuid.FMA3, cpuid.F16C, cpuid.AVX512F, cpuid.AVX512BW)
)

// decodeF32Func and decode16Func are the fused decode kernels' signatures.
type (
	decodeF32Func func(q *float32, rows, kvec, ktail int, k *float32, ldk int, v *float32, ldv int, nk, vvec, vtail int, o, m, l, s, alibi *float32)
	decode16Func  func(q *float32, rows, kvec, ktail int, k *uint16, ldk int, v *uint16, ldv int, nk, vvec, vtail int, o, m, l, s, alibi *float32)
	decodeI8Func  func(q *float32, rows, kvec, ktail int, k *int8, ldk int, v *int8, ldv int, nk, vvec, vtail int, o, m, l, s, alibi *float32,
		ks *float32, ldks int, vs *float32, ldvs int)
)

// headScores16Func and headPV16Func are HeadScores' and HeadPV's
// kernels over 16-bit K/V (heads.go).
type (
	headScores16Func func(s *float32, lds int, q *float32, k *uint16, ldk int, nk, heads, nvec, ahead, pfn int)
	headPV16Func     func(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, alpha *float32, nk, heads, nvec, ahead, pfn int)
)

// gemmW16Func and gemmWI8Func are the signatures of the generated GemmW
// and GemvWI8 kernels: gemmFunc with B of 16-bit floats, or int8 with its
// scales.
type (
	gemmW16Func func(c *float32, ldc int, a *float32, lda int, b *uint16, ldb int, m, k, nv, tail, acc int)
	// gemmWPairsFunc: GemmWPairs, B bfloat16 held in pairs, k in pairs.
	gemmWPairsFunc func(c *float32, ldc int, a *float32, lda int, b *uint32, ldb int, m, k, nv, tail, acc int)
	gemmWI8Func    func(c *float32, ldc int, a *float32, lda int, b *int8, ldb int, m, k, nv, tail, acc int, s *float32)
)

// gemvWI4Func and widenWI4Func are the signatures of the generated int4
// kernels.
type (
	gemvWI4Func  func(c *float32, ldc int, a *float32, lda int, b *byte, ldb int, m, k, nv, tail, acc int, s *float32, z *uint8)
	widenWI4Func func(dst *float32, ldd int, b *byte, ldb int, k, nv int, s *float32, z *uint8)
	widenWI8Func func(dst *float32, ldd int, b *int8, ldb int, k, nv int, s *float32)
)

// evenPanels calls kernel(j0, nv, tail) on the column panels of n
// columns: maxNV vectors (an even number) each, the last holding the
// rest, so every panel but the last has whole pairs of vectors (int4:
// whole bytes of nibbles).
func evenPanels(lanes, maxNV, n int, kernel func(j0, nv, tail int)) {
	vecs := (n + lanes - 1) / lanes
	for v0 := 0; v0 < vecs; v0 += maxNV {
		nv, tail := min(maxNV, vecs-v0), lanes
		if v0+nv == vecs && n%lanes != 0 {
			tail = n % lanes
		}
		kernel(v0*lanes, nv, tail)
	}
}

// weightPanels runs a GemmW or GemvWI8 kernel over the column panels of
// C, split as gemmPanels splits them: kernels[t] for 16-bit weights of
// type t, pairs for bfloat16 held in pairs (k even), i8 for int8 ones.
func weightPanels(kernels [2]gemmW16Func, pairs gemmWPairsFunc, i8 gemmWI8Func, lanes, maxNV int, c []float32, ldc int, a []float32, lda int, b WeightRows, m, n, k int, accumulate bool) {
	acc := accFlag(accumulate)
	panels(lanes, maxNV, n, func(j0, nv, tail int) {
		switch {
		case b.Type == fallback.KVInt8:
			i8(&c[j0], ldc, &a[0], lda, &b.I8[j0], b.Ld, m, k, nv, tail, acc, &b.S[j0])
		case b.P != nil:
			pairs(&c[j0], ldc, &a[0], lda, &b.P[j0], b.Ld, m, k/2, nv, tail, acc)
		default:
			kernels[b.Type-fallback.KVFloat16](&c[j0], ldc, &a[0], lda, &b.U16[j0], b.Ld, m, k, nv, tail, acc)
		}
	})
}

// x86Params are the numbers one amd64 ISA's kernels were generated with
// (asm/params_<isa>_amd64.go), and the keys of one PV kernel call
// (pvChunk; 0: a whole block).
type x86Params struct {
	lanes, panelVecs, softmaxVecs, dotRows, peakChains int
	decodeKeys, decodeScratch, decodeScaleWidth        int
	decodePairs                                        bool
	pvChunk                                            int
}

// x86Kernels are one amd64 ISA's generated functions.
type x86Kernels struct {
	gemm          gemmFunc
	gemmPacked    gemmFunc
	gemmW16       [2]gemmW16Func // float16, bfloat16
	gemmWP        gemmWPairsFunc // bfloat16 held in pairs
	gemmWPacked16 [2]gemmW16Func // gemmW16 on packed A (kernels.PackA)
	gemmWPPacked  gemmWPairsFunc // gemmWP on packed A
	gemvWI8       gemmWI8Func
	gemvWI4       gemvWI4Func
	widenI4       widenWI4Func
	widenI8       widenWI8Func
	pv            pvFunc
	softmax       softmaxFunc
	scaleCols     scaleColumnsFunc
	softmaxPairs  softmaxPairsFunc
	softmaxRound  softmaxFunc
	bias          biasFunc
	exp           func(dst, src *float32, n int)
	tr            func(dst *float32, ldd int, src *float32, lds int, nr, nc int, scale float32)
	tr32          func(dst *uint32, ldd int, src *uint32, lds int, nr, nc int)
	dot           func(s *float32, lds int, k *float32, ldk int, q *float32, ldq, rows, nk, nvec, tail int)
	peak          func(iters int)
	prefetch      func(p *float32, ld, rows, n int)
	headScores    func(s *float32, lds int, q *float32, k *float32, ldk int, nk, heads, nvec, ahead, pfn int)
	headScores16  [2]headScores16Func // float16, bfloat16
	headPV        func(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, alpha *float32, nk, heads, nvec, ahead, pfn int)
	// headScoresZmm and headPVZmm (avx512 only) are the float32 head
	// kernels in zmm vectors, for head dims of whole zmm vectors
	// (asm.LanesAVX512); other dims take headScores and headPV.
	headScoresZmm func(s *float32, lds int, q *float32, k *float32, ldk int, nk, heads, nvec, ahead, pfn int)
	headPVZmm     func(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, alpha *float32, nk, heads, nvec, ahead, pfn int)
	headPV16      [2]headPV16Func
	headScoresI8  func(s *float32, lds int, q *float32, k *int8, ldk int, ks *float32, ldks int, nk, heads, nblk, ahead, pfn int)
	headPVI8      func(o *float32, ldo int, p *float32, ldp int, v *int8, ldv int, vs *float32, ldvs int, alpha *float32, nk, heads, nblk, ahead, pfn int)

	decodeF32        decodeF32Func
	decodeF16, decBF decode16Func
	decodeI8         decodeI8Func
	decodeI4         decodeI8Func    // int4 K/V as they are, dk whole blocks
	convert          [2]convertFuncs // float16, bfloat16
	roundBF16        func(dst, src *float32, n int)
	widenI4KV        widenI4KVFunc
	dequant          [2]dequantFunc // int8, int4 K/V rows to float32
}

// x86Set wraps one ISA's kernels, generated with the parameters pr.
func x86Set(name string, pr x86Params, k x86Kernels, requires ...cpuid.FeatureID) *Set {
	lanes, maxNV := pr.lanes, pr.panelVecs
	return &Set{
		Name: name, Lanes: lanes, requires: requires,
		gemm: func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, kk int, accumulate bool) {
			gemmPanels(k.gemm, lanes, maxNV, 0, c, ldc, a, lda, b, ldb, m, n, kk, accumulate)
		},
		gemmPacked: func(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, kk int, accumulate bool) {
			gemmPanels(k.gemmPacked, lanes, maxNV, 0, c, ldc, a, lda, b, ldb, m, n, kk, accumulate)
		},
		gemmW: func(c []float32, ldc int, a []float32, lda int, b WeightRows, m, n, kk int, accumulate bool) {
			weightPanels(k.gemmW16, k.gemmWP, nil, lanes, maxNV, c, ldc, a, lda, b, m, n, kk, accumulate)
		},
		gemmWPacked: func(c []float32, ldc int, a []float32, lda int, b WeightRows, m, n, kk int, accumulate bool) {
			weightPanels(k.gemmWPacked16, k.gemmWPPacked, nil, lanes, maxNV, c, ldc, a, lda, b, m, n, kk, accumulate)
		},
		pairsW: true,
		gemvI8: func(c []float32, ldc int, a []float32, lda int, b WeightRows, m, n, kk int, accumulate bool) {
			weightPanels(k.gemmW16, nil, k.gemvWI8, lanes, maxNV, c, ldc, a, lda, b, m, n, kk, accumulate)
		},
		gemvI4: func(c []float32, ldc int, a []float32, lda int, b WeightRows, m, n, kk int, accumulate bool) {
			acc := accFlag(accumulate)
			evenPanels(lanes, maxNV, n, func(j0, nv, tail int) {
				k.gemvWI4(&c[j0], ldc, &a[0], lda, &b.I4[j0/2], b.Ld, m, kk, nv, tail, acc, &b.S[j0], &b.Z[j0])
			})
		},
		widenW: func(dst []float32, ldd int, b WeightRows, kk, n int) {
			evenPanels(lanes, maxNV, n, func(j0, nv, _ int) {
				if b.Type == fallback.KVInt8 {
					k.widenI8(&dst[j0], ldd, &b.I8[j0], b.Ld, kk, nv, &b.S[j0])
				} else {
					k.widenI4(&dst[j0], ldd, &b.I4[j0/2], b.Ld, kk, nv, &b.S[j0], &b.Z[j0])
				}
			})
		},
		qk: func(s []float32, lds int, kr []float32, ldk int, qt []float32, ldq int, nk, rows, dk int) {
			gemmPanels(k.gemm, lanes, maxNV, qkChunk, s, lds, kr, ldk, qt, ldq, nk, rows, dk, false)
		},
		softmax:      softmaxCalls(k.softmax, lanes, pr.softmaxVecs),
		scaleCols:    scaleColumnCalls(k.scaleCols, lanes, pr.softmaxVecs),
		softmaxPairs: softmaxPairCalls(k.softmaxPairs, lanes, pr.softmaxVecs),
		softmaxRound: softmaxCalls(k.softmaxRound, lanes, pr.softmaxVecs),
		bias:         biasCalls(k.bias, lanes, pr.softmaxVecs),
		pv: func(o []float32, ldo int, p []float32, ldp int, v []float32, ldv int, alpha []float32, rows, nk, dv int) {
			pvPanels(k.pv, lanes, maxNV, pr.pvChunk, o, ldo, p, ldp, v, ldv, alpha, rows, nk, dv)
		},
		exp: func(dst, src []float32) { expVectors(k.exp, lanes, dst, src) },
		tr: func(dst []float32, ldd int, src []float32, lds int, nr, nc int, scale float32) {
			transposeBlocks(k.tr, dst, ldd, src, lds, nr, nc, scale)
		},
		tr32: func(dst []uint32, ldd int, src []uint32, lds int, nr, nc int) {
			transpose32Blocks(k.tr32, dst, ldd, src, lds, nr, nc)
		},
		dot: func(s []float32, lds int, kr []float32, ldk int, q []float32, ldq int, nk, rows, dk int) {
			nvec := (dk + lanes - 1) / lanes
			k.dot(&s[0], lds, &kr[0], ldk, &q[0], ldq, rows, nk, nvec, dk-(nvec-1)*lanes)
		},
		dotRows: pr.dotRows,
		peak:    k.peak, peakChains: pr.peakChains,
		prefetch:  k.prefetch,
		panelCols: lanes * maxNV,
		decode: func(q []float32, rows, dk int, kr, vr KVRows, nk, dv int, o, m, l, s, alibi []float32) {
			al := first(alibi)
			kvec, vvec := (dk+lanes-1)/lanes, (dv+lanes-1)/lanes
			kt, vt := dk-(kvec-1)*lanes, dv-(vvec-1)*lanes
			switch kr.Type {
			case fallback.KVFloat32:
				k.decodeF32(&q[0], rows, kvec, kt, &kr.F32[0], kr.Ld, &vr.F32[0], vr.Ld, nk, vvec, vt, &o[0], &m[0], &l[0], &s[0], al)
			case fallback.KVInt8:
				k.decodeI8(&q[0], rows, kvec, kt, &kr.I8[0], kr.Ld, &vr.I8[0], vr.Ld, nk, vvec, vt, &o[0], &m[0], &l[0], &s[0], al,
					&kr.S[0], kr.LdS, &vr.S[0], vr.LdS)
			case fallback.KVInt4:
				k.decodeI4(&q[0], rows, kvec, kt, &kr.I8[0], kr.Ld, &vr.I8[0], vr.Ld, nk, vvec, vt, &o[0], &m[0], &l[0], &s[0], al,
					&kr.S[0], kr.LdS, &vr.S[0], vr.LdS)
			case fallback.KVFloat16:
				k.decodeF16(&q[0], rows, kvec, kt, &kr.U16[0], kr.Ld, &vr.U16[0], vr.Ld, nk, vvec, vt, &o[0], &m[0], &l[0], &s[0], al)
			default:
				k.decBF(&q[0], rows, kvec, kt, &kr.U16[0], kr.Ld, &vr.U16[0], vr.Ld, nk, vvec, vt, &o[0], &m[0], &l[0], &s[0], al)
			}
		},
		heads: &headKernels{
			scores: func(s []float32, lds int, q []float32, kr KVRows, nk, heads, dk int) {
				ahead, pfn := headAhead(kr.Len(), kr.Ld, heads*dk, kr.Type.Bytes(), nk)
				switch kr.Type {
				case fallback.KVFloat32:
					if k.headScoresZmm != nil && dk%asm.LanesAVX512 == 0 {
						k.headScoresZmm(&s[0], lds, &q[0], &kr.F32[0], kr.Ld, nk, heads, dk/asm.LanesAVX512, ahead, pfn)
						return
					}
					k.headScores(&s[0], lds, &q[0], &kr.F32[0], kr.Ld, nk, heads, dk/headVector, ahead, pfn)
				case fallback.KVInt8:
					k.headScoresI8(&s[0], lds, &q[0], &kr.I8[0], kr.Ld, &kr.S[0], kr.LdS, nk, heads, dk/fallback.Int8Block, ahead, pfn)
				default:
					k.headScores16[kr.Type-1](&s[0], lds, &q[0], &kr.U16[0], kr.Ld, nk, heads, dk/headVector, ahead, pfn)
				}
			},
			pv: func(o []float32, ldo int, p []float32, ldp int, vr KVRows, alpha []float32, nk, heads, dv int) {
				ahead, pfn := headAhead(vr.Len(), vr.Ld, heads*dv, vr.Type.Bytes(), nk)
				switch vr.Type {
				case fallback.KVFloat32:
					if k.headPVZmm != nil && dv%asm.LanesAVX512 == 0 {
						k.headPVZmm(&o[0], ldo, &p[0], ldp, &vr.F32[0], vr.Ld, &alpha[0], nk, heads, dv/asm.LanesAVX512, ahead, pfn)
						return
					}
					k.headPV(&o[0], ldo, &p[0], ldp, &vr.F32[0], vr.Ld, &alpha[0], nk, heads, dv/headVector, ahead, pfn)
				case fallback.KVInt8:
					k.headPVI8(&o[0], ldo, &p[0], ldp, &vr.I8[0], vr.Ld, &vr.S[0], vr.LdS, &alpha[0], nk, heads, dv/fallback.Int8Block, ahead, pfn)
				default:
					k.headPV16[vr.Type-1](&o[0], ldo, &p[0], ldp, &vr.U16[0], vr.Ld, &alpha[0], nk, heads, dv/headVector, ahead, pfn)
				}
			},
		},
		decodeKeys:    pr.decodeKeys,
		decodeScratch: pr.decodeScratch,
		decodePairs:   pr.decodePairs,
		decodeInt8:    true,
		decodeInt4Max: int4DirectRows,
		decodeScales:  pr.decodeScaleWidth,
		widen:         widenCalls(k.convert),
		narrow:        narrowCalls(k.convert),
		roundBF16:     k.roundBF16,
		widenI4KV:     widenI4KVCall(k.widenI4KV),
		dequant:       dequantCalls(k.dequant),
	}
}

// int4DirectRows is the most rows of a Decode call the amd64 sets run on
// their int4 kernel (DecodeI4<ISA>); more are widened to int8 first
// (decodeInt4Widened). The int4 kernel turns each K vector into float32
// once per pass of 4 rows (four operations, int8's two), so more passes
// cost more than the widening, which unpacks each row once: on Zen 4,
// one thread, the best of four alternated runs, AVX-512 went 1.68×
// (one row, 2^17 keys from memory) and 1.31× (four rows) as fast as
// widening but 0.88× in L2 at 16 rows; AVX2 1.45× and 1.08× from
// memory, 0.80× at 16 rows in L2.
const int4DirectRows = 4

// decodeQ8Func is the signature of the x86 DecodeQ8 kernels (DecodeQ8AVX512,
// DecodeQ8AVX2, DecodeQ8VNNIAVX2 and its Emu twin) and of their int4
// forms (…I4<ISA>).
type decodeQ8Func func(q *float32, rows, kvec, ktail int, k *int8, ldk int, v *int8, ldv int, nk, vvec, vtail int, o, m, l, s, alibi *float32,
	ks *float32, ldks int, vs *float32, ldvs int, q8 *int8, ldq8 int, qs *float32, qc *int32)

// x86DecodeQ8 wraps a DecodeQ8 kernel of lanes-wide vectors.
func x86DecodeQ8(kernel decodeQ8Func, lanes int) decodeQ8Kernel {
	return func(q QueryQ8, rows, dk int, kr, vr KVRows, nk, dv int, o, m, l, s, alibi []float32) {
		kvec, vvec := (dk+lanes-1)/lanes, (dv+lanes-1)/lanes
		kt, vt := dk-(kvec-1)*lanes, dv-(vvec-1)*lanes
		kernel(nil, rows, kvec, kt, &kr.I8[0], kr.Ld, &vr.I8[0], vr.Ld, nk, vvec, vt, &o[0], &m[0], &l[0], &s[0], first(alibi),
			&kr.S[0], kr.LdS, &vr.S[0], vr.LdS, &q.Q[0], q.Ld, &q.S[0], &q.Corr[0])
	}
}

// EmulatedVNNI returns, for tests, a copy of the avx2 set (named
// "avx2-vnniemu") whose DecodeQ8 is DecodeQ8VNNIEmuAVX2: the AVX-VNNI
// kernel's code with VPDPBUSD in its EVEX ymm form, the same instruction
// on AVX512_VNNI CPUs, so that the kernel runs where AVX-VNNI does not
// (TestEVEXObjdump checks the VEX bytes). nil where the CPU has no
// AVX2 set or no AVX512_VNNI with AVX512VL.
func EmulatedVNNI() *Set {
	if !cpuid.CPU.Supports(append(avx2.requires, cpuid.AVX512VNNI, cpuid.AVX512VL)...) {
		return nil
	}
	ks := *avx2
	ks.Name = "avx2-vnniemu"
	ks.decodeQ8 = x86DecodeQ8(asm.DecodeQ8VNNIEmuAVX2, asm.LanesAVX2)
	ks.decodeQ8I4 = x86DecodeQ8(asm.DecodeQ8VNNIEmuI4AVX2, asm.LanesAVX2)
	return &ks
}

func init() {
	avx512.stridedKV = cpuid.CPU.VendorID == cpuid.AMD // ReadsStridedKV
	// VPDPBUSD (AVX512_VNNI): Intel from Ice Lake and Cascade Lake, AMD
	// from Zen 4.
	avx512.optional = append(avx512.optional, cpuid.AVX512VNNI)
	if cpuid.CPU.Supports(cpuid.AVX512VNNI) {
		avx512.decodeQ8 = x86DecodeQ8(asm.DecodeQ8AVX512, asm.LanesAVX512)
		avx512.decodeQ8I4 = x86DecodeQ8(asm.DecodeQ8I4AVX512, asm.LanesAVX512)
		avx512.decodeQ8I4Max = DecodeRows
		avx512.scoresQ8 = x86ScoresQ8(asm.ScoresQ8AVX512, asm.LanesAVX512)
		avx512.packKeysQ8 = asm.PackKeysQ8AVX512
	}
	withAMXInt8() // ScoresQ8 on AMX-INT8 tiles where the CPU has them
	avx512.quantQ8, avx2.quantQ8 = x86QuantizeQ8(asm.QuantizeQ8AVX512), x86QuantizeQ8(asm.QuantizeQ8AVX2)
	// VPSIGNB, VPMADDUBSW and VPMADDWD on every AVX2 core, AVX-VNNI's
	// VPDPBUSD where the CPU has it (Intel from Alder Lake and Sapphire
	// Rapids, AMD from Zen 5); the AVX-512 features are EmulatedVNNI's.
	avx2.optional = append(avx2.optional, cpuid.AVXVNNI, cpuid.AVX512VNNI, cpuid.AVX512VL)
	avx2.decodeQ8 = x86DecodeQ8(asm.DecodeQ8AVX2, asm.LanesAVX2)
	avx2.decodeQ8I4 = x86DecodeQ8(asm.DecodeQ8I4AVX2, asm.LanesAVX2)
	// AVX2 runs it for one row only. Several rows ran it no faster than
	// widening from memory and 20–40% slower in L2 (Zen 4, 2^17 keys
	// and 512, four and 16 rows): each V vector of 8 takes four
	// operations from its nibbles to float32 where an int8 one takes
	// two, and the unpack before the transpose costs what the rows
	// then save. One row: 28–37% faster in L2.
	avx2.decodeQ8I4Max = 1
	if cpuid.CPU.Supports(cpuid.AVXVNNI) {
		avx2.decodeQ8 = x86DecodeQ8(asm.DecodeQ8VNNIAVX2, asm.LanesAVX2)
		avx2.decodeQ8I4 = x86DecodeQ8(asm.DecodeQ8VNNII4AVX2, asm.LanesAVX2)
	}
	for _, ks := range []*Set{avx2, avx512} {
		if cpuid.CPU.Supports(ks.requires...) {
			available = append([]*Set{ks}, available...)
		}
	}
}

// scoresQ8Vecs is the most row vectors of one ScoresQ8<ISA> call.
const scoresQ8Vecs = 2

// x86ScoresQ8 wraps a ScoresQ8 kernel of lanes-wide vectors: one call per
// panel of up to scoresQ8Vecs vectors of rows.
func x86ScoresQ8(kernel func(s *float32, lds int, k *uint8, ldk int, q *int8, qs *float32, qc *int32, ldq, nk, nv, nb int), lanes int) scoresQ8Kernel {
	return func(s []float32, lds int, k []byte, ldk int, q QuadsQ8, nk, rows, nb int) {
		for r0 := 0; r0 < rows; r0 += scoresQ8Vecs * lanes {
			nv := min(scoresQ8Vecs, (rows-r0)/lanes)
			kernel(&s[r0], lds, &k[0], ldk/4, &q.Q[4*r0], &q.S[r0], &q.C[r0], q.Ld, nk, nv, nb)
		}
	}
}

// x86QuantizeQ8 wraps a QuantizeQ8 kernel (whole blocks) as
// Set.QuantizeRowQ8. A partial last block runs first, from a copy padded
// with zeros, so that a NaN or ±Inf in it leaves the row unwritten.
// (Inlined where kernel is a named function, the closure calls it
// directly, and the copy stays on the stack.)
func x86QuantizeQ8(kernel func(q *int8, s *float32, c *int32, src *float32, nb, values int) int) quantQ8Func {
	return func(q QueryQ8, src []float32, dk int, values bool) bool {
		vals := 0
		if values {
			vals = 1
		}
		whole := dk / fallback.Int8Block
		var tail [fallback.Int8Block]float32
		n := copy(tail[:], src[whole*fallback.Int8Block:dk])
		if n > 0 && kernel(&q.Q[whole*fallback.Int8Block], &q.S[whole], &q.Corr[whole], &tail[0], 1, vals) == 0 {
			return false
		}
		if whole > 0 && kernel(&q.Q[0], &q.S[0], &q.Corr[0], &src[0], whole, vals) == 0 {
			return false
		}
		if values {
			copy(src[whole*fallback.Int8Block:dk], tail[:n])
		}
		return true
	}
}
