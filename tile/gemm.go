package tile

import "github.com/fastattn/fastattn/kernels"

// GEMM block sizes: an item computes a gemmRows×gemmCols block of C,
// walking K in steps of gemmDepth. The packed Aᵀ block (gemmDepth·gemmRows
// floats, 64 KiB) and the B block it multiplies (gemmDepth·gemmCols
// floats, 256 KiB) stay in L2 while the kernel sweeps them.
const (
	gemmRows  = 64
	gemmCols  = 256
	gemmDepth = 256
)

// Gemm is one projection, C = A·B + bias, in row-major float32: A is
// [M][K] with row stride LDA, B is [K][N] (the [in][out] weight layout)
// with LDB, C is [M][N] with LDC, Bias is [N] or nil. Each item writes its
// own block of C and walks K in a fixed order, so results do not depend on
// the thread count.
type Gemm struct {
	A         []float32
	LDA       int
	B         []float32
	LDB       int
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
	for r := 0; r < mc; r++ {
		row := c[r*g.LDC : r*g.LDC+nc]
		if g.Bias != nil {
			copy(row, g.Bias[n0:n0+nc])
		} else {
			clear(row)
		}
	}
	ws.at = grow(ws.at, gemmDepth*mc)
	for k0 := 0; k0 < g.K; k0 += gemmDepth {
		kc := min(gemmDepth, g.K-k0)
		// Aᵀ block, k-major: the kernel broadcasts consecutive rows of it.
		at := ws.at[:kc*mc]
		for r := 0; r < mc; r++ {
			a := g.A[(m0+r)*g.LDA+k0:][:kc]
			for k, x := range a {
				at[k*mc+r] = x
			}
		}
		ks.PV(c, g.LDC, at, mc, g.B[k0*g.LDB+n0:], g.LDB, nil, mc, kc, nc)
	}
}
