package tile

import (
	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// Projection GEMM blocking. B (a weight matrix, constant for a layer) is
// packed once into panels of cols columns (PanelCols: the kernel set's
// register panel), each K×cols contiguous, so a kernel call streams its
// panel linearly whatever N is. An item computes a block of C of up to
// gemmCols columns (a multiple of every panel width) and a row block
// (rowSpan: whole 6-row tiles of the kernels, but M's last), walking K in
// steps of gemmDepth(cols) (gemmPackedDepth on packed A): the A rows it
// broadcasts (rows·depth floats) stay in L2 and the B panel block
// (depth·cols floats) in L1 or L2 while the kernel sweeps it once per
// 6-row group.
const (
	gemmCols = 128
	// gemmABlock is the most floats of A an item's depth step reads (288
	// KiB: 288 rows at AVX-512's depth of 256, 144 at AVX2's 512), and
	// gemmRowsMin the fewest rows a row block is cut to while M has them.
	// Every item streams its columns of B over the whole of K from memory,
	// so each row block of C reads all of B once: 72-row blocks read the
	// 64 MiB of a 4096×4096 float32 matrix 7 times for M = 512, 258-row
	// ones twice, which took the bench's GEMM row from 95–102 to 105–109
	// GFLOP/s and the layer forward (dm 4096, L 512) from 96–103 to
	// 103–106 (Zen 4, one thread, three alternated runs; 128-column
	// blocks measured level with 256 there and keep the items as many).
	gemmABlock  = 288 * 256
	gemmRowsMin = 72
	// gemmItems is how many items the row blocks are cut for at least
	// (down to gemmRowsMin rows), so that a small layer's projection still
	// spreads over the workers.
	gemmItems = 16
	// On AMX tiles (Gemm.tiles) an item is a block of up to
	// gemmRowsTiles rows (whole 32-row tile blocks) by gemmColsTiles
	// columns (gemmCols where that leaves fewer than gemmItems items),
	// walking K in steps of gemmDepthTiles: the step's A block (256 rows ×
	// 1024 bfloat16, 512 KiB) and B block (1024 × 256, 512 KiB) stay in L2
	// (2 MiB on the Xeons with tiles) while each 32×32 block of C keeps
	// its four accumulator tiles over the step's 32 tile products. An
	// M = 512 GEMM so reads B from memory twice and A (a 4 MiB copy,
	// likely in L3) 16 times; 64-row items read B eight times, which
	// bounded the bench's GEMM row at 13% of the tile peak (0.53× oneDNN
	// on a Xeon model 207).
	gemmRowsTiles  = 256
	gemmColsTiles  = 256
	gemmDepthTiles = 1024
	// gemmTileRows is the rows of one tile block of C (kernels' AMX block).
	gemmTileRows = 32
)

// gemmPackedRowsMul is how many times taller a row block may be when the
// items read A packed (PackA): its tiles stream in address order from
// wherever the slab is, so taller blocks read B fewer times at no cost
// to A. On Zen 3 (512 KiB L2, one thread, four alternated rounds) the
// GEMM row 512 × 6144 × 4096 ran at 77–82% of the FMA peak in one
// 512-row block against 72–77% in four of 128 rows (the A slab from L3).
const gemmPackedRowsMul = 4

// rowBlocks returns how C's rows are cut into items' row blocks: blocks
// runs of whole units of unit rows, as equal as whole units allow
// (rowSpan). On AMX tiles (onTiles) a unit is a 32-row tile block and
// the blocks as few as keep each within gemmRowsTiles rows; else a unit
// is the kernels' 6-row tile and the blocks are as few as keep each
// within gemmABlock/depth rows (gemmPackedRowsMul times that on packed
// A: set by PackA before Items), more of them, down to gemmRowsMin rows,
// if there would be fewer than gemmItems items.
// It depends on the shapes only, never on the thread count. Float32 and
// 16-bit weights give the same bits whatever the blocks (each element's
// sums keep their order); int8 and int4 weights run the GEMV kernels in a
// block of at most gemvRows rows, which blocks of whole units, at least
// gemmRowsMin rows on average, leave only to an M that small (fixed
// 72-row blocks also left one to M = 73–78, 145–150, …).
func (g *Gemm) rowBlocks() (blocks, unit int) {
	m := max(g.M, 1)
	if g.onTiles() {
		return ceilDiv(m, gemmRowsTiles), gemmTileRows
	}
	block, depth := gemmABlock, gemmDepth(max(g.B.Ld, 1))
	if g.pa != nil {
		block, depth = block*gemmPackedRowsMul, gemmPackedDepth
	}
	most := max(gemmRowsMin, block/depth/6*6)
	return max(ceilDiv(m, most), min(ceilDiv(m, gemmRowsMin), ceilDiv(gemmItems, max(g.colBlocks(), 1)))), 6
}

// rowSpan returns the first row of C and the rows of row block i: the
// blocks take ⌊units/blocks⌋ or ⌈units/blocks⌉ of the ⌈M/unit⌉ units
// each, the last unit cut at M.
func (g *Gemm) rowSpan(i int) (m0, mc int) {
	blocks, unit := g.rowBlocks()
	units := ceilDiv(g.M, unit)
	m0 = min(g.M, unit*(i*units/blocks))
	return m0, min(g.M, unit*((i+1)*units/blocks)) - m0
}

// ceilDiv is ⌈a/b⌉ for a >= 0, b > 0.
func ceilDiv(a, b int) int { return (a + b - 1) / b }

// PanelCols returns the width of the panels PackB packs B into for kernel
// set ks: its register panel (16 columns on AVX2 and NEON, 64 on AVX-512;
// 64 for the generic set). With 64-column panels an AVX2 kernel call read
// a quarter of every 256-byte B row: its 16 KiB block spread over a
// quarter of L1's sets and was re-read from L2 by every row group (the
// GEMM at K=4096 ran at 64–70% of the ymm peak, at 77–83% with 16).
func PanelCols(ks *kernels.Set) int {
	if c := ks.PanelCols(); c > 0 {
		return c
	}
	return 64
}

// gemvRows is the most rows of A for which an item walks K in one step:
// a decode step's projection (GEMV-shaped) keeps its few A rows in L1
// whatever the depth, and the kernel then streams each panel of B, K·cols
// elements, as one run in address order, which the prefetchers follow.
// Cut into depth steps, the four panels of an AVX-512 item were read in
// interleaved runs of 16–64 KiB: on Zen 4 a 4096×4096 GEMV at one thread
// read 18.0 GB/s of float32 weights that way and 20.2 in whole panels
// (bf16 24.3 → 28.9, int8 16.7 → 21.4), and the layer's decode step took
// 10.5 ms instead of 7.9.
const gemvRows = 6

// gemmDepth is the K step of an item for panels of cols columns: the B
// block one kernel call sweeps is depth·cols floats, 32 KiB (L1-resident)
// for 16-column panels; 64-column panels stay at 256 (64 KiB, from L2),
// where 512 measured no better.
func gemmDepth(cols int) int {
	return min(512, max(256, 8192/cols))
}

// gemmPackedDepth is the K step of an item whose A is packed (PackA's
// slabs): 512 whatever the panels. With C accumulated in the scratch
// where its rows alias (gemmScratchPad), 64-column panels ran the GEMM row
// 512×4096×4096 at 111.6–112.4 GFLOP/s against 110.6–111.9 at 256, and
// M = 2048 at 111.7–112.4 against 110.3–111.7 (Zen 4, one thread, 11
// alternated rounds in one process, medians of two runs each); row
// blocks cut to 288 rows at that depth (B read twice for M = 512) ran
// 111.3–111.8.
const gemmPackedDepth = 512

// PackB returns b, [k][n] row-major float32, packed for Gemm in panels
// of cols columns (PackWeights of the [in][out] layout).
func PackB(b []float32, k, n, cols int) Packed {
	return PackWeights(Matrix{F32: b, RowStride: n, ColStride: 1}, k, n, cols, fallback.KVFloat32)
}

// Gemm is one projection, C = A·B + bias, in row-major float32: A is
// [M][K] with row stride LDA, B a [K][N] weight matrix (the [in][out]
// layout) packed by PackWeights in panels of PanelCols(ks) columns, ks the
// set that runs it, of any storage type; C is [M][N] with LDC, Bias is
// [N] or nil. Each item writes its own block of C and walks K in a fixed
// order, so results do not depend on the thread count.
type Gemm struct {
	A    []float32
	LDA  int
	B    Packed
	C    []float32
	LDC  int
	Bias []float32
	M    int
	// BF16 rounds A's elements to bfloat16 (nearest, ties to even) before
	// they multiply B, block by block in the worker's scratch: the
	// bfloat16 compute mode, for B of bfloat16 weights, whose products
	// are then exact in float32 and only the sums round. On a set with
	// bfloat16 kernels, B held in pairs (Packed.PairRows), the rounded
	// rows are bfloat16 pairs and GemmBF16 multiplies them by B's (dots;
	// on AMX tiles where the set has them).
	BF16 bool
	// Tiles cuts C's rows for AMX tiles (gemmRowsTiles): set it when the
	// set that runs the bfloat16 mode has them (kernels.Set.AMX). The
	// bits do not depend on it.
	Tiles bool

	ap      []uint32  // RoundA: A as bfloat16 pairs, [M][K/2] at stride ldp
	ldp     int       // ap's row stride in uint32
	rounded bool      // RoundA: A holds bfloat16 values (the float32 kernels' path)
	pa      []float32 // PackA: A packed for GemmPacked, in slabs (packeda.go)
}

// BF16A holds a Gemm's A rounded once for the bfloat16 mode (RoundA); a
// caller keeps one per concurrent call and reuses it.
type BF16A struct {
	pairs []uint32
	rows  []float32
	h     []uint16 // bfloat16 bits on the way to rows
}

// RoundA rounds A to bfloat16 once for every item of g on ks, into buf:
// as pairs where ks multiplies them on its bfloat16 kernels or tiles,
// else as float32 rows of bfloat16 values; g then reads them. Without
// it each item rounds its own block, once per column block of C (32
// times over for N = 4096). The bits are the same. Nothing unless
// g.BF16.
func (g *Gemm) RoundA(ks *kernels.Set, buf *BF16A) {
	if !g.BF16 || g.M <= 0 || g.B.K <= 0 {
		return
	}
	k := g.B.K
	if g.tiles(ks) || g.dots(ks) {
		g.ldp = k / 2
		if g.tiles(ks) {
			g.ldp += tilePad
		}
		g.ap = pairsInto(ks, &buf.pairs, g.A, g.LDA, g.M, k, g.ldp)
		return
	}
	g.A, g.LDA, g.rounded = rowsInto(ks, &buf.rows, &buf.h, g.A, g.LDA, g.M, k), k, true
}

// tilePad is the uint32s a row of A's pairs is padded by on AMX tiles: a
// tile's 16 rows at a stride of K/2 uint32 (8 KiB at K = 4096) would all
// fall in one set of the 12-way L1; one more cache line a row spreads
// them over 16.
const tilePad = 16

// onTiles reports whether g's items are cut for AMX tiles: Tiles set, the
// bfloat16 mode, B held in pairs, more rows than a GEMV's.
func (g *Gemm) onTiles() bool { return g.Tiles && g.BF16 && g.B.P != nil && g.M > gemvRows }

// tiles reports whether g runs on ks's AMX tiles: the bfloat16 mode, B
// held in pairs (Packed.PairRows), more rows than a GEMV's. The sums are
// GemmBF16's pair by pair (the Emu twin gives its bits).
func (g *Gemm) tiles(ks *kernels.Set) bool {
	return g.BF16 && ks.AMX() && g.B.P != nil && g.M > gemvRows
}

// dots reports whether g runs on ks's bfloat16 kernels: GemmBF16 on B
// held in pairs.
func (g *Gemm) dots(ks *kernels.Set) bool {
	return g.BF16 && ks.BF16Preferred() && g.B.P != nil
}

// colWidth returns the columns of an item's block of C: gemmColsTiles
// on AMX tiles where that still gives gemmItems items, else gemmCols.
func (g *Gemm) colWidth() int {
	if g.onTiles() && ceilDiv(g.M, gemmRowsTiles)*ceilDiv(g.B.N, gemmColsTiles) >= gemmItems {
		return gemmColsTiles
	}
	return gemmCols
}

// colBlocks returns the number of colWidth-wide column blocks of C.
func (g *Gemm) colBlocks() int { return ceilDiv(g.B.N, g.colWidth()) }

// Items returns the number of work items: each row block of C (rowSpan)
// times each colWidth-wide column block. PackA, if called, makes the row
// blocks taller and so the items fewer: a count taken before it is at
// least the packed one, and Run does nothing for the items past that.
func (g *Gemm) Items() int {
	if g.M <= 0 {
		return 0
	}
	blocks, _ := g.rowBlocks()
	return blocks * g.colBlocks()
}

// Run computes work item n, a block of C, with kernel set ks; an n
// outside [0, Items()) does nothing.
func (g *Gemm) Run(ks *kernels.Set, n int, ws *Workspace) {
	if n < 0 || n >= g.Items() {
		return
	}
	blocks := g.colBlocks()
	m0, mc := g.rowSpan(n / blocks)
	width := g.colWidth()
	n0 := n % blocks * width
	nc := min(width, g.B.N-n0)
	c, ldc := g.C[m0*g.LDC+n0:], g.LDC
	packed := g.pa != nil && mc > gemvRows // slabs of gemmPackedDepth columns (PackA)
	// Packed items run the float32 kernels (PackA packs nothing for the
	// bfloat16 mode's tiles and dots).
	scratch := packed && g.LDC*4%aliasBytes == 0
	if scratch { // the block of C in the worker's scratch, copied out at the end
		ldc = nc + gemmScratchPad
		ws.cb = grow(ws.cb, mc*ldc)
		c = ws.cb
	}
	accumulate := g.Bias != nil
	if accumulate {
		for r := 0; r < mc; r++ {
			copy(c[r*ldc:r*ldc+nc], g.Bias[n0:n0+nc])
		}
	}

	cols := g.B.Ld
	depth := gemmDepth(cols)
	switch {
	case g.tiles(ks):
		depth = gemmDepthTiles
	case packed:
		depth = gemmPackedDepth
	}
	if mc <= gemvRows {
		depth = g.B.K
	}
	for k0 := 0; k0 < g.B.K; k0 += depth {
		kc := min(depth, g.B.K-k0)
		a, lda := g.A[m0*g.LDA+k0:], g.LDA
		switch {
		case g.tiles(ks) || g.dots(ks):
			ap, ldp := g.ap, g.ldp // rounded once (RoundA), else here
			if ap != nil {
				ap = ap[m0*ldp+k0/2:]
			} else {
				ap, ldp = roundedPairs(ks, ws, a, lda, mc, kc), kc/2
			}
			for j := 0; j < nc; j += cols {
				ks.GemmBF16(c[j:], ldc, ap, ldp, 1, g.B.pairRows((n0+j)/cols, k0), cols, mc, min(cols, nc-j), kc/2, accumulate)
			}
			accumulate = true
			continue
		case g.BF16 && !g.rounded:
			a, lda = roundedRows(ks, ws, a, lda, mc, kc), kc
		case packed:
			a, lda = g.packedSlab(m0, k0, kc)
		}
		for j := 0; j < nc; j += cols {
			g.gemmPanel(ks, ws, c[j:], ldc, a, lda, (n0+j)/cols, k0, kc, mc, min(cols, nc-j), accumulate, packed)
		}
		accumulate = true
	}
	if scratch {
		for r := 0; r < mc; r++ {
			copy(g.C[(m0+r)*g.LDC+n0:][:nc], c[r*ldc:][:nc])
		}
	}
}

// gemmScratchPad is the floats a row of an item's block of C is padded by
// in the worker's scratch (a cache line), where C's own rows lie a
// multiple of 4 KiB apart (aliasBytes: LDC 1024·n floats, a 4096-wide
// projection's output): there a kernel tile's six rows of C fall in the
// same L1 sets, and each step of K reloads them from L2. The item then
// accumulates its block in the scratch and copies it out once (the same
// sums, the same bits). Zen 4, one thread, GemmPacked alone (512 rows,
// 64 columns, K 256): 96.2–97.1% of the FMA peak at LDC 4096 against
// 98.6–99.1% at 4160; the GEMM row 512×4096×4096, in one process (11
// alternated rounds, medians, PackA included): 108.3 → 109.8 and 108.9
// → 110.1 GFLOP/s.
const gemmScratchPad = 16

// gemmScratchFloats bounds an item's C scratch: its tallest row block on
// packed A (gemmABlock·gemmPackedRowsMul floats of A a depth step) by
// gemmCols padded columns.
const gemmScratchFloats = gemmABlock * gemmPackedRowsMul / gemmPackedDepth * (gemmCols + gemmScratchPad)

// GemmScratchBytes is the memory ReserveGemm adds to a Workspace at most.
const GemmScratchBytes = 4 * gemmScratchFloats
