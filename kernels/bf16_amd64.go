//go:build amd64 && !purego

package kernels

import (
	"errors"

	"github.com/fastattn/fastattn/asm"
	"github.com/klauspost/cpuid/v2"
)

// gemmBF16Func is the signature of the generated GemmBF16 kernels.
type gemmBF16Func func(c *float32, ldc int, a *uint32, lda, lka int, b *uint32, ldb int, m, k, nv, tail, acc int)

// x86BF16 wraps the avx512 set's bfloat16 kernels: gemm (GemmBF16AVX512,
// or its Emu twin), PairBF16AVX512, and with native BF16PeakAVX512 and
// SoftmaxPairsBF16AVX512.
func x86BF16(gemm gemmBF16Func, native bool) *bf16Kernels {
	lanes, maxNV := asm.LanesAVX512, asm.PanelVecsAVX512
	k := &bf16Kernels{
		gemm: func(c []float32, ldc int, a []uint32, lda, lka int, b []uint32, ldb int, m, n, kk int, accumulate bool) {
			acc := accFlag(accumulate)
			panels(lanes, maxNV, n, func(j0, nv, tail int) {
				gemm(&c[j0], ldc, &a[0], lda, lka, &b[j0], ldb, m, kk, nv, tail, acc)
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
		k.softmaxPairs = softmaxPairCalls(asm.SoftmaxPairsBF16AVX512, lanes, asm.SoftmaxVecsAVX512)
	}
	return k
}

// amxTileFile is the uint32s of the Emu twin's tile file: 8 tiles of 16
// rows × 64 bytes.
const amxTileFile = 8 * 16 * 16

// withAMX adds GemmAMX to k: the native kernel, or (emu) its Emu twin,
// which computes on a tile file on the caller's stack.
func withAMX(k *bf16Kernels, emu bool) {
	if emu {
		k.amx = func(c []float32, ldc int, a []uint32, lda int, b []uint32, ldb int, mb, nb, kb int, accumulate bool) {
			var tiles [amxTileFile]uint32
			asm.GemmAMXEmuAVX512(&c[0], ldc, &a[0], lda, &b[0], ldb, mb, nb, kb, accFlag(accumulate), &tiles[0])
		}
		return
	}
	k.amx = func(c []float32, ldc int, a []uint32, lda int, b []uint32, ldb int, mb, nb, kb int, accumulate bool) {
		asm.GemmAMXAVX512(&c[0], ldc, &a[0], lda, &b[0], ldb, mb, nb, kb, accFlag(accumulate), nil)
	}
	k.amxPeak = asm.AMXPeakAVX512
}

func init() {
	amxBlock, amxPairs = asm.AMXBlockAVX512, asm.AMXPairsAVX512
	avx512.optional = append(avx512.optional, cpuid.AVX512BF16, cpuid.AMXTILE, cpuid.AMXBF16)
	if cpuid.CPU.Supports(cpuid.AVX512BF16) {
		avx512.bf16 = x86BF16(asm.GemmBF16AVX512, true)
		switch amxState = amxUsable(); {
		case amxState == nil:
			withAMX(avx512.bf16, false)
		case cpuid.CPU.VendorID == cpuid.Intel:
			// VDPBF16PS issues on one port where FMAs issue on two: half
			// the float32 rate (0.49× measured on a Xeon model 207).
			avx512.bf16.slow = true
		}
	} else {
		amxState = errors.New("the CPU reports no AVX512_BF16 (the AMX path's tails need it)")
	}
}

// EmulatedAMX returns, for tests, a copy of the avx512 set (named
// "avx512-amxemu") whose GemmBF16 runs its bulk on the Emu twin of
// GemmAMX (tile instructions computed by AVX-512F on a tile file) and
// the rest on the Emu twin of GemmBF16: the AMX drivers' code on any
// AVX-512 CPU, bit for bit fallback.GemmBF16. Where the CPU has
// AVX512_VNNI its ScoresQ8 runs the Emu twin of ScoresQ8AMX (AMX-INT8's
// TDPBUSD by VPDPBUSD), bit for bit fallback.ScoresQ8. nil where the CPU
// has no AVX-512.
func EmulatedAMX() *Set {
	ks := EmulatedBF16()
	if ks == nil {
		return nil
	}
	ks.Name = "avx512-amxemu"
	withAMX(ks.bf16, true)
	withAMXInt8Emu(ks)
	return ks
}

// GoTiles returns, for tests, the avx2 set with GemmBF16 in Go, its bulk
// in GemmAMX's blocks (goTiles): the tile package's AMX paths on any AVX2
// CPU. nil where the CPU has no AVX2.
func GoTiles() *Set {
	if !cpuid.CPU.Supports(avx2.requires...) {
		return nil
	}
	return goTiles(avx2)
}

// GoPairs returns, for tests, GoTiles' set without its tiles (goPairs):
// the tile package's VDPBF16PS paths on any AVX2 CPU, the sums of each
// product in GoTiles' order. nil where the CPU has no AVX2.
func GoPairs() *Set {
	if !cpuid.CPU.Supports(avx2.requires...) {
		return nil
	}
	return goPairs(avx2)
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
	ks.bf16 = x86BF16(asm.GemmBF16EmuAVX512, false)
	return &ks
}
