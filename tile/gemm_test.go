package tile

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// TestGemm checks the projection GEMM on every kernel set against a
// float64 product: M, N and K across the item, panel and depth edges
// (K over two depth steps of every panel width), with and without a bias,
// B packed from both layouts.
func TestGemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := []struct{ m, n, k int }{
		{1, 1, 1}, {5, 17, 3}, {72, 256, 256}, {73, 257, 257}, {13, 70, 513}, {150, 300, 1100}, {7, 16, 1030},
		{600, 2100, 70}, // row blocks of 200 (tile.Gemm.rowBlock)
	}
	for _, ks := range kernels.Available() {
		t.Run(ks.Name, func(t *testing.T) {
			t.Run(ks.Name, func(t *testing.T) {
				cols := PanelCols(ks)
				for _, s := range shapes {
					for _, outIn := range []bool{false, true} {
						a, b := randoms(rng, s.m*s.k), randoms(rng, s.k*s.n) // b: [k][n], or [n][k] with outIn
						var bias []float32
						if rng.IntN(2) == 0 {
							bias = randoms(rng, s.n)
						}
						packed := PackB(b, s.k, s.n, cols)
						if outIn {
							packed = PackWeights(Matrix{F32: b, RowStride: 1, ColStride: s.k}, s.k, s.n, cols, fallback.KVFloat32)
						}
						c := make([]float32, s.m*s.n)
						g := Gemm{A: a, LDA: s.k, B: packed, C: c, LDC: s.n, Bias: bias, M: s.m}
						var ws Workspace
						for it := 0; it < g.Items(); it++ {
							g.Run(ks, it, &ws)
						}
						for i := 0; i < s.m; i++ {
							for j := 0; j < s.n; j++ {
								want, mag := 0.0, 0.0
								if bias != nil {
									want, mag = float64(bias[j]), math.Abs(float64(bias[j]))
								}
								for p := 0; p < s.k; p++ {
									bv := b[p*s.n+j]
									if outIn {
										bv = b[j*s.k+p]
									}
									want += float64(a[i*s.k+p]) * float64(bv)
									mag += math.Abs(float64(a[i*s.k+p]) * float64(bv))
								}
								if got := float64(c[i*s.n+j]); !(math.Abs(got-want) <= 1e-6*mag+1e-30) { // a NaN fails too
									t.Fatalf("%+v outIn=%v: c[%d][%d] = %v, want %v", s, outIn, i, j, got, want)
								}
							}
						}
					}
				}
			})
		})
	}
}

// blockRows returns the rows of g's row block that holds row i.
func blockRows(g *Gemm, i int) int {
	for b := 0; ; b++ {
		if m0, mc := g.rowSpan(b); i < m0+mc {
			return mc
		}
	}
}

// randoms returns n values uniform in [-1, 1).
func randoms(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.Float64()*2 - 1)
	}
	return x
}

// TestGemmWeights checks projections through 16-bit and int8 weights on
// every kernel set: the result equals, bit for bit, the float32 Gemm
// through the widened (dequantized) weights, for M, N and K across the
// item, panel, depth and int8-block edges and both layouts; and a matrix
// given as the stored bits packs to the same panels as one rounded or
// quantized from float32.
func TestGemmWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	shapes := []struct{ m, n, k int }{
		{1, 1, 1}, {1, 17, 33}, {2, 70, 31}, {3, 64, 96}, {6, 16, 513}, {7, 300, 1030}, {73, 257, 257}, {13, 40, 600},
	}
	types := []fallback.KVType{fallback.KVBFloat16, fallback.KVFloat16, fallback.KVInt8, fallback.KVInt4}
	for _, ks := range kernels.Available() {
		t.Run(ks.Name, func(t *testing.T) {
			cols := PanelCols(ks)
			for _, s := range shapes {
				for _, typ := range types {
					for _, outIn := range []bool{false, true} {
						src := Matrix{F32: randoms(rng, s.k*s.n), RowStride: s.n, ColStride: 1}
						if outIn {
							src.RowStride, src.ColStride = 1, s.k
						}
						w := PackWeights(src, s.k, s.n, cols, typ)
						checkRepack(t, w, src, s.k, s.n, cols)
						// The float32 panels of the same values.
						wide := Packed{WeightRows: fallback.WeightRows{Type: fallback.KVFloat32, F32: make([]float32, w.Len()), Ld: cols}, K: s.k, N: s.n}
						for p := 0; p*cols < s.n; p++ {
							fallback.WidenWeights(wide.F32[p*s.k*cols:], cols, w.rows(p, 0), s.k, cols)
						}
						a := randoms(rng, s.m*s.k)
						var bias []float32
						if rng.IntN(2) == 0 {
							bias = randoms(rng, s.n)
						}
						got, want := make([]float32, s.m*s.n), make([]float32, s.m*s.n)
						var ws Workspace
						for _, run := range []struct {
							c []float32
							b Packed
						}{{got, w}, {want, wide}} {
							g := Gemm{A: a, LDA: s.k, B: run.b, C: run.c, LDC: s.n, Bias: bias, M: s.m}
							for it := 0; it < g.Items(); it++ {
								g.Run(ks, it, &ws)
							}
						}
						for i := 0; i < s.m; i++ {
							row := got[i*s.n : (i+1)*s.n]
							if typ >= fallback.KVInt8 && blockRows(&Gemm{M: s.m, B: w}, i) <= gemvRows {
								// An item of a few rows runs GemvI8 or
								// GemvI4, which scale block sums (and
								// take int4's zero points off through the
								// block's sum of a): within float32
								// rounding of the float64 product, the
								// larger for int4's cancellation.
								checkProduct(t, row, a[i*s.k:], wide, bias, 1, s.n, s.k, cols, map[bool]float64{false: 1e-6, true: 1e-5}[typ == fallback.KVInt4])
								continue
							}
							for j, x := range row {
								if math.Float32bits(x) != math.Float32bits(want[i*s.n+j]) {
									t.Fatalf("%+v %v outIn=%v: c[%d][%d] = %v, float32 Gemm on the widened weights %v", s, typ, outIn, i, j, x, want[i*s.n+j])
								}
							}
						}
					}
				}
			}
		})
	}
}

// checkRepack checks that w, packed from the float32 matrix src, packs
// again to the same panels from its own stored values given in src's
// layout (16-bit bits, or int8 with scales).
func checkRepack(t *testing.T, w Packed, src Matrix, k, n, cols int) {
	t.Helper()
	raw := Matrix{Type: w.Type, RowStride: src.RowStride, ColStride: src.ColStride}
	nb := fallback.Int8Blocks(k)
	raw.SRowStride, raw.SColStride = n, 1
	if src.ColStride != 1 {
		raw.SRowStride, raw.SColStride = 1, nb
	}
	raw.ZRowStride, raw.ZColStride = raw.SRowStride, raw.SColStride
	switch w.Type {
	case fallback.KVInt8:
		raw.I8, raw.S = make([]int8, k*n), make([]float32, nb*n)
	case fallback.KVInt4:
		raw.I4, raw.S, raw.Z = make([]byte, (k*n+1)/2), make([]float32, nb*n), make([]byte, (nb*n+1)/2)
	default:
		raw.U16 = make([]uint16, k*n)
	}
	setNibble := func(x []byte, e int, u uint8) { x[e/2] |= u << (4 * (e & 1)) }
	for j := 0; j < n; j++ {
		p, c := j/cols, j%cols
		for r := 0; r < k; r++ {
			at, from := r*src.RowStride+j*src.ColStride, (p*k+r)*cols+c
			sat, sfrom := r/32*raw.SRowStride+j*raw.SColStride, (p*nb+r/32)*cols+c
			switch w.Type {
			case fallback.KVInt8:
				raw.I8[at] = w.I8[from]
				raw.S[sat] = w.S[sfrom]
			case fallback.KVInt4:
				setNibble(raw.I4, at, fallback.Int4At(w.I4[(p*k+r)*cols/2:], c, w.Half))
				raw.S[sat] = w.S[sfrom]
				if r%32 == 0 {
					setNibble(raw.Z, sat, w.Z[sfrom])
				}
			default:
				raw.U16[at] = w.U16[from]
			}
		}
	}
	again := PackWeights(raw, k, n, cols, w.Type)
	if !slices.Equal(again.U16, w.U16) || !slices.Equal(again.I8, w.I8) || !slices.Equal(again.S, w.S) ||
		!slices.Equal(again.I4, w.I4) || !slices.Equal(again.Z, w.Z) {
		t.Fatalf("%v k=%d n=%d: the stored values packed again differ from the packing of the float32 matrix", w.Type, k, n)
	}
}

// checkProduct checks c, [m][n], against the float64 product of a, [m][k],
// and the packed float32 panels w (cols wide), plus bias, within tol of
// the sum of the products' magnitudes.
func checkProduct(t *testing.T, c, a []float32, w Packed, bias []float32, m, n, k, cols int, tol float64) {
	t.Helper()
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			want, mag := 0.0, 0.0
			if bias != nil {
				want, mag = float64(bias[j]), math.Abs(float64(bias[j]))
			}
			for p := 0; p < k; p++ {
				x := float64(a[i*k+p]) * float64(w.F32[(j/cols*k+p)*cols+j%cols])
				want, mag = want+x, mag+math.Abs(x)
			}
			if got := float64(c[i*n+j]); !(math.Abs(got-want) <= tol*mag+1e-30) { // a NaN fails too
				t.Fatalf("m=%d n=%d k=%d: c[%d][%d] = %v, want %v", m, n, k, i, j, got, want)
			}
		}
	}
}

// TestGemmBF16 checks the bfloat16 mode of the projection GEMM on every
// kernel set: with BF16 set, a product through bfloat16 weights equals,
// bit for bit, the same product of A rounded to bfloat16 beforehand (on a
// set with bfloat16 kernels and the weights held in pairs:
// fallback.GemmBF16 of the rounded rows by the pairs, summed as
// VDPBF16PS sums them, over every depth step), at
// GEMM and GEMV row counts, K across the depth steps, with a bias and an
// A stride wider than K; A itself is left as it was. On AMX tiles
// (EmulatedAMX where there is AVX-512, GoTiles everywhere on amd64) the
// items are cut for them
// (Tiles): row blocks of 32-row tile blocks, K in gemmDepthTiles steps,
// A's pairs padded.
func TestGemmBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(0xbf, 3))
	sets := kernels.Available()
	for _, ks := range []*kernels.Set{kernels.EmulatedBF16(), kernels.EmulatedAMX(), kernels.GoTiles()} {
		if ks != nil {
			sets = append(sets, ks)
		}
	}
	for _, ks := range sets {
		cols := PanelCols(ks)
		shapes := []struct{ m, n, k int }{{1, 70, 33}, {73, 257, 600}, {2, 40, 34}, {6, 300, 1100}, {80, 300, 1040}, {300, 140, 2100}}
		if !longTests() {
			shapes = shapes[:3] // the others cross two depth steps: slow under emulation
		}
		for _, s := range shapes {
			lda := s.k + 3
			a, b, bias := randoms(rng, s.m*lda), randoms(rng, s.k*s.n), randoms(rng, s.n)
			packed := PackWeights(Matrix{Type: fallback.KVFloat32, F32: b, RowStride: s.n, ColStride: 1}, s.k, s.n, cols, fallback.KVBFloat16)
			packed.PairRows(ks) // as a layer holds them
			rounded := make([]float32, len(a))
			for i, x := range a {
				rounded[i] = fallback.BF16ToF32(fallback.F32ToBF16(x))
			}
			kept := slices.Clone(a)
			var once BF16A
			run := func(a []float32, bf16 bool, roundOnce ...bool) []float32 {
				c := make([]float32, s.m*s.n)
				g := Gemm{A: a, LDA: lda, B: packed, C: c, LDC: s.n, Bias: bias, M: s.m, BF16: bf16, Tiles: ks.AMX()}
				if len(roundOnce) > 0 {
					g.RoundA(ks, &once)
				}
				var ws Workspace
				for it := 0; it < g.Items(); it++ {
					g.Run(ks, it, &ws)
				}
				return c
			}
			got, want := run(a, true), run(rounded, false)
			if ks.BF16Preferred() && packed.P != nil { // GemmBF16: rows of bfloat16 pairs by the weights' pairs
				ap := make([]uint32, s.m*s.k/2)
				for i := range s.m {
					for p := range s.k / 2 {
						ap[i*s.k/2+p] = uint32(fallback.F32ToBF16(a[i*lda+2*p])) | uint32(fallback.F32ToBF16(a[i*lda+2*p+1]))<<16
					}
				}
				w := make([]uint16, len(b))
				fallback.Narrow(w, b, fallback.KVBFloat16)
				for i := range s.m {
					copy(want[i*s.n:(i+1)*s.n], bias)
				}
				fallback.GemmBF16(want, s.n, ap, s.k/2, 1, fallback.PairRows(w, s.n, s.k, s.n), s.n, s.m, s.n, s.k/2, true)
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s %+v: c[%d] = %v, want %v (A rounded first)", ks.Name, s, i, got[i], want[i])
				}
			}
			if !slices.Equal(a, kept) {
				t.Fatalf("%s %+v: the bfloat16 mode wrote to A", ks.Name, s)
			}
			if d := firstDiffBits(run(a, true, true), got); d >= 0 { // A rounded once for every item
				t.Fatalf("%s %+v: with A rounded once (RoundA), c[%d] differs", ks.Name, s, d)
			}
			if slices.Equal(got, run(a, false)) {
				t.Fatalf("%s %+v: rounding A changed nothing", ks.Name, s)
			}
		}
	}
}

// firstDiffBits returns the first index where a and b differ in bits, or -1.
func firstDiffBits(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}
