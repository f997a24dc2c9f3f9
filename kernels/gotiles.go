package kernels

import "github.com/fastattn/fastattn/fallback"

// goTiles returns, for tests, a copy of base (named base's name +
// "-gotiles") whose GemmBF16 runs as the AMX sets' does: its bulk in
// blocks of GemmAMX's shape (amxBlock rows and columns, amxPairs pairs of
// k a step, the accumulators through C between calls) and the rest on
// the bfloat16 kernel, both in Go (fallback.GemmBF16, pair by pair, whose
// sums keep their order whatever the blocks). It lets the tile package's
// AMX paths (the GEMM items cut for tiles, the flash loop's tile layouts)
// run on any CPU that runs base: only the kernels' code needs AVX-512
// (EmulatedAMX) or the tiles. base must pair bfloat16 weights (PairsWeights) as the AMX
// sets do, and amxBlock be set.
func goTiles(base *Set) *Set {
	ks := *base
	ks.Name = base.Name + "-gotiles"
	ks.bf16 = &bf16Kernels{gemm: fallback.GemmBF16, amx: goTileBlocks, daz: true}
	return &ks
}

// goPairs is goTiles(base) without the tiles (named base's name +
// "-gopairs"): GemmBF16 wholly on the bfloat16 kernel's model, the
// VDPBF16PS path of the tile package, which sums every product in the
// order goTiles does.
func goPairs(base *Set) *Set {
	ks := goTiles(base)
	ks.Name = base.Name + "-gopairs"
	ks.bf16.amx = nil
	return ks
}

// goTileBlocks is GemmAMX in Go: mb × nb blocks of amxBlock × amxBlock of
// C, each over kb steps of amxPairs pairs.
func goTileBlocks(c []float32, ldc int, a []uint32, lda int, b []uint32, ldb int, mb, nb, kb int, accumulate bool) {
	for i := range mb {
		for j := range nb {
			fallback.GemmBF16(c[i*amxBlock*ldc+j*amxBlock:], ldc, a[i*amxBlock*lda:], lda, 1, b[j*amxBlock:], ldb, amxBlock, amxBlock, kb*amxPairs, accumulate)
		}
	}
}
