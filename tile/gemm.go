package tile

import "github.com/fastattn/fastattn/kernels"

// Projection GEMM blocking. B (a weight matrix, constant for a layer) is
// packed once into panels of PanelCols columns, each K×PanelCols
// contiguous, so the kernel streams it linearly whatever N is. An item
// computes a gemmRows×gemmCols block of C, walking K in steps of gemmDepth:
// the A rows it broadcasts (gemmRows·gemmDepth floats, 72 KiB, read in
// place) and the B panel block (gemmDepth·PanelCols floats, 64 KiB) stay in
// L2 while the kernel sweeps them. gemmRows is a multiple of the kernels'
// 6-row tile.
const (
	PanelCols = 64
	gemmRows  = 72
	gemmCols  = 4 * PanelCols
	gemmDepth = 256
)

// PackB returns b, [k][n] row-major, packed for Gemm: panel p holds
// columns [p·PanelCols, (p+1)·PanelCols) of every row, k rows of PanelCols
// floats (the last panel zero-padded).
func PackB(b []float32, k, n int) []float32 { return PackStrided(b, k, n, n, 1) }

// PackStrided is PackB of the k×n matrix whose element (r, c) is
// b[r·rowStride + c·colStride]: a block of a wider [k][N] matrix
// (rowStride N, colStride 1) or a matrix stored transposed, [n][k], as
// PyTorch's nn.Linear keeps its weights (rowStride 1, colStride k).
func PackStrided(b []float32, k, n, rowStride, colStride int) []float32 {
	panels := (n + PanelCols - 1) / PanelCols
	out := make([]float32, panels*k*PanelCols)
	for p := 0; p < panels; p++ {
		w := min(PanelCols, n-p*PanelCols)
		for r := 0; r < k; r++ {
			dst, src := out[(p*k+r)*PanelCols:][:w], b[r*rowStride+p*PanelCols*colStride:]
			if colStride == 1 {
				copy(dst, src)
				continue
			}
			for c := range dst {
				dst[c] = src[c*colStride]
			}
		}
	}
	return out
}

// Gemm is one projection, C = A·B + bias, in row-major float32: A is
// [M][K] with row stride LDA, B is PackB of a [K][N] matrix (the [in][out]
// weight layout), C is [M][N] with LDC, Bias is [N] or nil. Each item
// writes its own block of C and walks K in a fixed order, so results do not
// depend on the thread count.
type Gemm struct {
	A         []float32
	LDA       int
	B         []float32 // packed
	C         []float32
	LDC       int
	Bias      []float32
	M, N, K   int
	blockCols int // column blocks
}

// Items returns the number of work items, and fixes the split.
func (g *Gemm) Items() int {
	g.blockCols = (g.N + gemmCols - 1) / gemmCols
	return (g.M + gemmRows - 1) / gemmRows * g.blockCols
}

// Run computes work item n with kernel set ks.
func (g *Gemm) Run(ks *kernels.Set, n int, ws *Workspace) {
	m0 := n / g.blockCols * gemmRows
	n0 := n % g.blockCols * gemmCols
	mc := min(gemmRows, g.M-m0)
	nc := min(gemmCols, g.N-n0)
	c := g.C[m0*g.LDC+n0:]
	accumulate := g.Bias != nil
	if accumulate {
		for r := 0; r < mc; r++ {
			copy(c[r*g.LDC:r*g.LDC+nc], g.Bias[n0:n0+nc])
		}
	}
	for k0 := 0; k0 < g.K; k0 += gemmDepth {
		kc := min(gemmDepth, g.K-k0)
		a := g.A[m0*g.LDA+k0:]
		for j := 0; j < nc; j += PanelCols {
			panel := (n0 + j) / PanelCols
			b := g.B[(panel*g.K+k0)*PanelCols:]
			ks.Gemm(c[j:], g.LDC, a, g.LDA, b, PanelCols, mc, min(PanelCols, nc-j), kc, accumulate)
		}
		accumulate = true
	}
}
