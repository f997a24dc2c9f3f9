package tile

import (
	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// Packed is a [K][N] weight matrix packed for Gemm in panels of Ld
// columns, as PackB lays out float32 (panel p holds columns
// [p·Ld, (p+1)·Ld) of every row: K rows of Ld elements, the last panel
// zero-padded): the panels one after the other as the rows of a
// fallback.WeightRows of stride Ld, so panel p's row r is its row p·K + r,
// in its type (float32, 16-bit floats, int8 with scales, int4 with scales
// and zero points interleaved by Half); panel p's block b of 32 rows has
// its row of Ld scales (and int4 zero points) at (p·⌈K/32⌉ + b)·Ld. A
// panel's rows stream in address order whatever the type. Bfloat16
// weights of even K for a set that PairsWeights are held in pairs instead
// (WeightRows.P, PairRows): panel q's pair row p (rows 2p and 2p+1) at
// (q·K/2 + p)·Ld, the one copy that the set's GemmW, its bfloat16 kernels
// and its AMX tiles all read.
type Packed struct {
	fallback.WeightRows
	K, N int
}

// PairRows holds w's bfloat16 weights in pairs (WeightRows.P) in place of
// rows when ks reads that layout (ks.PairsWeights: the amd64 sets) and K
// is even, and does nothing otherwise. The weights' bytes stay the same:
// one copy serves the float32 mode's GemmW and decode's GEMVs as well as
// the bfloat16 mode's VDPBF16PS and AMX tiles.
func (w *Packed) PairRows(ks *kernels.Set) {
	if !ks.PairsWeights() || w.Type != fallback.KVBFloat16 || w.K%2 != 0 || w.P != nil {
		return
	}
	// The panels' rows follow each other and K is even, so pairing every
	// two rows of the whole array pairs each panel's rows 2p and 2p+1.
	w.P, w.U16 = fallback.PairRows(w.U16, w.Ld, len(w.U16)/w.Ld, w.Ld), nil
}

// pairRows returns panel q's pairs from row k0 (even) on, at stride Ld.
func (w *Packed) pairRows(q, k0 int) []uint32 {
	return w.P[(q*w.K+k0)/2*w.Ld:]
}

// Bytes returns the memory the packed matrix holds: K·Ld elements per
// panel, and for int8 a float32 scale per column and block of 32 rows
// (int4: half a byte per element, a scale and a byte of zero point per
// column and block).
func (w *Packed) Bytes() int64 {
	if w.Type == fallback.KVInt4 {
		return int64(len(w.I4)) + 4*int64(len(w.S)) + int64(len(w.Z))
	}
	return int64(w.Type.Bytes())*int64(w.Len()) + 4*int64(len(w.S))
}

// Int4Half returns the nibble interleave of int4 panels of cols columns:
// the vector width of the kernel set whose panels they are (16 lanes for
// AVX-512's 64 columns, 8 for the 16 of AVX2 and NEON).
func Int4Half(cols int) int { return min(16, cols/2) }

// rows returns the rows of panel p from row k0 on (k0 a multiple of
// fallback.Int8Block), at stride Ld.
func (w *Packed) rows(p, k0 int) fallback.WeightRows {
	r := w.WeightRows
	off := (p*w.K + k0) * w.Ld
	blocks := (p*fallback.Int8Blocks(w.K) + k0/fallback.Int8Block) * w.Ld
	switch w.Type {
	case fallback.KVFloat32:
		r.F32 = w.F32[off:]
	case fallback.KVInt8:
		r.I8, r.S = w.I8[off:], w.S[blocks:]
	case fallback.KVInt4:
		r.I4, r.S, r.Z = w.I4[off/2:], w.S[blocks:], w.Z[blocks:]
	default:
		if w.P != nil {
			r.P = w.pairRows(p, k0)
			break
		}
		r.U16 = w.U16[off:]
	}
	return r
}

// Matrix is a k×n weight matrix as a caller gives it: element (r, c) at
// r·RowStride + c·ColStride of F32, or of U16 (16-bit floats of Type), or
// of I8 (Type KVInt8) with the scale of element (r, c) at
// (r/32)·SRowStride + c·SColStride of S. RowStride n and ColStride 1 is
// the [in][out] layout; RowStride 1 and ColStride k the [out][in] one of
// PyTorch's nn.Linear. Int4 (Type KVInt4) is I4 of nibbles, element e in
// byte e/2, the low nibble when e is even, indexed as I8 from column Col0
// on (its columns may start mid-byte); its zero points are nibbles of Z
// at (r/32)·ZRowStride + (Col0+c)·ZColStride (nil: 8 for every block),
// its scales indexed as int8's from column Col0.
type Matrix struct {
	Type                   fallback.KVType
	F32                    []float32
	U16                    []uint16
	I8                     []int8
	I4                     []byte
	S                      []float32
	Z                      []byte
	RowStride, ColStride   int
	SRowStride, SColStride int
	ZRowStride, ZColStride int
	Col0                   int
}

// PackWeights packs m, k×n, in panels of cols columns as type t: the
// type it is given in, or from float32 to a 16-bit type (rounded to
// nearest, ties to even) or to int8 or int4 (each column's blocks of 32
// rows quantized by fallback.QuantizeInt8's or QuantizeInt4's rule).
// Other conversions, and non-finite values to convert, are the caller's
// to rule out.
func PackWeights(m Matrix, k, n, cols int, t fallback.KVType) Packed {
	panels := (n + cols - 1) / cols
	w := Packed{WeightRows: fallback.WeightRows{Type: t, Ld: cols}, K: k, N: n}
	size := panels * k * cols
	switch t {
	case fallback.KVFloat32:
		w.F32 = make([]float32, size)
	case fallback.KVInt8:
		w.I8 = make([]int8, size)
		w.S = make([]float32, panels*fallback.Int8Blocks(k)*cols)
	case fallback.KVInt4:
		packInt4(&w, m)
		return w
	default:
		w.U16 = make([]uint16, size)
	}
	nb := fallback.Int8Blocks(k)
	var blk []float32 // int8 from float32: a block of 32 rows of a panel, [32][cols]
	var col [fallback.Int8Block]float32
	var q [fallback.Int8Block]int8
	// Block by block of 32 rows of a panel, each copied in the source's
	// address order (gather), so that the 32 rows × cols elements it
	// covers are read as runs, not one strided column at a time.
	for p := 0; p < panels; p++ {
		w0 := min(cols, n-p*cols) // the panel's columns
		for r0 := 0; r0 < k; r0 += fallback.Int8Block {
			rows := min(fallback.Int8Block, k-r0)
			dst := (p*k + r0) * cols // element (r0, 0) of panel p
			src := r0*m.RowStride + p*cols*m.ColStride
			switch {
			case t == fallback.KVInt8 && m.Type == fallback.KVFloat32:
				if blk == nil {
					blk = make([]float32, fallback.Int8Block*cols)
				}
				gather(blk, cols, m.F32[src:], m.RowStride, m.ColStride, rows, w0, nil)
				for c := range w0 {
					for i := range rows {
						col[i] = blk[i*cols+c]
					}
					fallback.QuantizeInt8(q[:rows], w.S[(p*nb+r0/fallback.Int8Block)*cols+c:][:1], col[:rows])
					for i := range rows {
						w.I8[dst+i*cols+c] = q[i]
					}
				}
			case t == fallback.KVInt8:
				gather(w.S[(p*nb+r0/fallback.Int8Block)*cols:], cols, m.S[r0/fallback.Int8Block*m.SRowStride+p*cols*m.SColStride:],
					m.SRowStride, m.SColStride, 1, w0, nil)
				gather(w.I8[dst:], cols, m.I8[src:], m.RowStride, m.ColStride, rows, w0, nil)
			case t == fallback.KVFloat32:
				gather(w.F32[dst:], cols, m.F32[src:], m.RowStride, m.ColStride, rows, w0, nil)
			case m.Type == fallback.KVFloat32:
				gather(w.U16[dst:], cols, m.F32[src:], m.RowStride, m.ColStride, rows, w0, func(x float32) uint16 { return narrow(x, t) })
			default:
				gather(w.U16[dst:], cols, m.U16[src:], m.RowStride, m.ColStride, rows, w0, nil)
			}
		}
	}
	return w
}

// packInt4 fills w (Type KVInt4, its sizes set) from m: int4 nibbles
// moved, or float32 quantized by fallback.QuantizeInt4 per column and
// block of 32 rows.
func packInt4(w *Packed, m Matrix) {
	k, cols := w.K, w.Ld
	panels, nb := (w.N+cols-1)/cols, fallback.Int8Blocks(k)
	w.Half = Int4Half(cols)
	w.I4 = make([]byte, panels*k*cols/2)
	w.S = make([]float32, panels*nb*cols)
	w.Z = make([]uint8, panels*nb*cols)
	var col [fallback.Int8Block]float32
	var u [fallback.Int8Block]uint8
	for p := 0; p < panels; p++ {
		for r0 := 0; r0 < k; r0 += fallback.Int8Block {
			rows := min(fallback.Int8Block, k-r0)
			sb := (p*nb + r0/fallback.Int8Block) * cols // the block's scale row
			for c := range min(cols, w.N-p*cols) {
				mc := m.Col0 + p*cols + c // the column of m
				if m.Type == fallback.KVFloat32 {
					for i := range rows {
						col[i] = m.F32[(r0+i)*m.RowStride+mc*m.ColStride]
					}
					w.S[sb+c], w.Z[sb+c] = fallback.QuantizeInt4(u[:rows], col[:rows])
				} else {
					for i := range rows {
						u[i] = nibble(m.I4, (r0+i)*m.RowStride+mc*m.ColStride)
					}
					w.S[sb+c], w.Z[sb+c] = m.S[r0/fallback.Int8Block*m.SRowStride+mc*m.SColStride], 8
					if m.Z != nil {
						w.Z[sb+c] = nibble(m.Z, r0/fallback.Int8Block*m.ZRowStride+mc*m.ZColStride)
					}
				}
				for i := range rows {
					fallback.SetInt4(w.I4[(p*k+r0+i)*cols/2:], c, w.Half, u[i])
				}
			}
		}
	}
}

// nibble returns element e of nibble-packed x: the low nibble of byte e/2
// when e is even, else its high one.
func nibble(x []byte, e int) uint8 { return x[e/2] >> (4 * (e & 1)) & 15 }

// gather writes the rows×w block of src whose element (i, c) is at
// i·rs + c·cs to dst at i·ld + c, converted by conv (nil: none, S is D),
// walking src in its address order: rows by copy when cs is 1 and there
// is no conversion, else column by column when rows are contiguous (rs
// 1), else row by row.
func gather[S, D any](dst []D, ld int, src []S, rs, cs, rows, w int, conv func(S) D) {
	if conv == nil {
		d := any(dst).([]S)
		if cs != 1 {
			gather(d, ld, src, rs, cs, rows, w, func(x S) S { return x })
			return
		}
		for i := range rows {
			copy(d[i*ld:i*ld+w], src[i*rs:i*rs+w])
		}
		return
	}
	if rs == 1 {
		for c := range w {
			for i, x := range src[c*cs : c*cs+rows] {
				dst[i*ld+c] = conv(x)
			}
		}
		return
	}
	for i := range rows {
		for c := range w {
			dst[i*ld+c] = conv(src[i*rs+c*cs])
		}
	}
}

// narrow rounds x to the 16-bit type t.
func narrow(x float32, t fallback.KVType) uint16 {
	if t == fallback.KVBFloat16 {
		return fallback.F32ToBF16(x)
	}
	return fallback.F32ToF16(x)
}

// gemmPanel runs the kernel on panel `panel` of B from row k0: kc rows,
// nw columns, for the mc rows of A at a (stride lda) into c. 16-bit and
// int8 panels go to GemmW on sets that have it, and are otherwise widened
// into the worker's scratch for Gemm (the same values, the same order:
// the same bits); int8 and int4 panels of an item of at most gemvRows
// rows (a decode step's) go to GemvI8 and GemvI4, which scale block sums
// rather than weights, on every set. Int4 panels of larger items are
// widened.
func (g *Gemm) gemmPanel(ks *kernels.Set, ws *Workspace, c []float32, ldc int, a []float32, lda, panel, k0, kc, mc, nw int, accumulate, packed bool) {
	b := g.B.rows(panel, k0)
	gemm := ks.Gemm
	if packed { // a is a slab of PackA's, read by Gemm's packed twin
		gemm = ks.GemmPacked
	}
	switch {
	case b.Type == fallback.KVFloat32:
		gemm(c, ldc, a, lda, b.F32, b.Ld, mc, nw, kc, accumulate)
	case b.Type == fallback.KVInt8 && mc <= gemvRows:
		ks.GemvI8(c, ldc, a, lda, b, mc, nw, kc, accumulate)
	case b.Type == fallback.KVInt4 && mc <= gemvRows:
		ks.GemvI4(c, ldc, a, lda, b, mc, nw, kc, accumulate)
	case ks.HasGemmW(b.Type) && (b.P == nil || ks.PairsWeights()):
		if packed {
			ks.GemmWPacked(c, ldc, a, lda, b, mc, nw, kc, accumulate)
			break
		}
		ks.GemmW(c, ldc, a, lda, b, mc, nw, kc, accumulate)
	default:
		ws.wb = grow(ws.wb, kc*b.Ld)
		ks.WidenWeights(ws.wb, b.Ld, b, kc, nw)
		gemm(c, ldc, a, lda, ws.wb, b.Ld, mc, nw, kc, accumulate)
	}
}
