package fallback

import "math"

// WeightRows is a block of a projection weight matrix as a layer keeps
// it: rows of Ld elements of Type (row p holds the weights of input p for
// Ld consecutive outputs) in F32, U16 (16-bit floats) or I8. Int8 rows
// share a float32 scale per column and block of Int8Block rows: the
// scale of element (p, j) is S[(p/Int8Block)·Ld + j], so a block of the
// matrix starts on a multiple of Int8Block rows. (Along the input
// dimension, as GGUF's q8_0 and ONNX's MatMulNBits block a weight row.)
// Int4 rows are packed nibbles in I4, row p at byte p·Ld/2, interleaved
// by Half (Int4Byte; Ld a multiple of 2·Half), with the scales in S and
// the zero points (0..15) in Z, both indexed as int8's scales.
// Bfloat16 rows may be held in pairs instead (P, U16 nil): rows 2q and
// 2q+1 interleaved, pair row q at q·Ld, row 2q's element j in the low
// half of P[q·Ld + j] and row 2q+1's in its high half: the B operand of
// AMX's tiles and of VDPBF16PS, which the amd64 sets' GemmW reads too.
type WeightRows struct {
	Type KVType
	F32  []float32
	U16  []uint16
	P    []uint32
	I8   []int8
	I4   []byte
	S    []float32
	Z    []uint8
	Ld   int
	Half int
}

// Len returns the number of elements the rows' slice holds.
func (w WeightRows) Len() int {
	switch w.Type {
	case KVFloat32:
		return len(w.F32)
	case KVInt8:
		return len(w.I8)
	case KVInt4:
		return 2 * len(w.I4)
	}
	if w.P != nil {
		return 2 * len(w.P)
	}
	return len(w.U16)
}

// PairRows returns rows rows (even) of n elements of bfloat16 src, at
// stride ld, held in pairs at the same stride: pair row q's element j is
// src[2q·ld+j] | src[(2q+1)·ld+j]<<16.
func PairRows(src []uint16, ld, rows, n int) []uint32 {
	dst := make([]uint32, rows/2*ld)
	for q := 0; q < rows/2; q++ {
		lo, hi, d := src[2*q*ld:][:n], src[(2*q+1)*ld:][:n], dst[q*ld:][:n]
		for j := range d {
			d[j] = uint32(lo[j]) | uint32(hi[j])<<16
		}
	}
	return dst
}

// WidenWeights writes k rows of n elements of w as float32 at stride ldd
// in dst: 16-bit values widened exactly, int8 ones as float32(q)·scale,
// rounded once (the value the kernels multiply by), int4 ones as
// float32(u-z)·scale.
func WidenWeights(dst []float32, ldd int, w WeightRows, k, n int) {
	if w.Type == KVInt4 {
		widenInt4(dst, ldd, w, k, n)
		return
	}
	for p := 0; p < k; p++ {
		d := dst[p*ldd : p*ldd+n]
		switch w.Type {
		case KVFloat32:
			copy(d, w.F32[p*w.Ld:])
		case KVInt8:
			q, s := w.I8[p*w.Ld:][:n], w.S[p/Int8Block*w.Ld:][:n]
			for j, x := range q {
				d[j] = float32(x) * s[j]
			}
		default:
			if w.P != nil { // the row's half of each dword of its pair row
				for j, x := range w.P[p/2*w.Ld:][:n] {
					d[j] = math.Float32frombits(x << (16 * (1 - p%2)) & 0xffff0000)
				}
				continue
			}
			Widen(d, w.U16[p*w.Ld:][:n], w.Type)
		}
	}
}

// GemvI8 is the projection of a few rows through int8 weights with each
// block's scales applied to the block's sum (the GemvWI8 kernels' order):
//
//	c[i][j] = accumulate ? c[i][j] : 0
//	for each block q0 = 0, 32, ... < k:
//	    sum     = a[i][q0]·float32(q[q0][j]) + ... (FMAs, in order of p)
//	    c[i][j] = fma(sum, scale[q0/32][j], c[i][j])
//
// w is int8; its rows hold at least n elements at stride w.Ld.
func GemvI8(c []float32, ldc int, a []float32, lda int, w WeightRows, m, n, k int, accumulate bool) {
	gemvBlocks(c, ldc, a, lda, w, m, n, k, accumulate)
}

// gemvBlocks is GemvI8 and GemvI4: per block of Int8Block rows the
// products with the stored integers (q, or int4's nibbles u) summed
// unscaled, int4's zero points taken off through the block's sum of a,
// the scales applied once.
func gemvBlocks(c []float32, ldc int, a []float32, lda int, w WeightRows, m, n, k int, accumulate bool) {
	var sum [64]float32 // the block sums of 64 columns at a time
	for i := 0; i < m; i++ {
		ci, ai := c[i*ldc:i*ldc+n], a[i*lda:i*lda+k]
		if !accumulate {
			clear(ci)
		}
		for j0 := 0; j0 < n; j0 += len(sum) {
			cw := min(len(sum), n-j0)
			for q0 := 0; q0 < k; q0 += Int8Block {
				s := sum[:cw]
				asum := ai[q0]
				for p := q0; p < min(k, q0+Int8Block); p++ {
					if p > q0 {
						asum += ai[p]
					}
					for j := range s {
						var x float32
						if w.Type == KVInt4 {
							x = float32(Int4At(w.I4[p*w.Ld/2:], j0+j, w.Half))
						} else {
							x = float32(w.I8[p*w.Ld+j0+j])
						}
						if p == q0 {
							s[j] = ai[p] * x
						} else {
							s[j] = fma32(ai[p], x, s[j])
						}
					}
				}
				blk := q0/Int8Block*w.Ld + j0
				for j := range s {
					if w.Type == KVInt4 {
						s[j] = fma32(-float32(w.Z[blk+j]), asum, s[j])
					}
					ci[j0+j] = fma32(s[j], w.S[blk+j], ci[j0+j])
				}
			}
		}
	}
}

// fma32 is x·y + z rounded once to float32, as a float32 FMA. x·y is
// exact in float64 (24 + 24 bits); their sum s with z is rounded there,
// e its exact error (Knuth's two-sum), and where s lies exactly halfway
// between two float32 values the sign of e says which one the exact sum
// rounds to (a plain float32(s) would round that tie to even: the double
// rounding).
func fma32(x, y, z float32) float32 {
	p := float64(x) * float64(y)
	s := p + float64(z)
	r := float32(s)
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return r
	}
	bb := s - p
	e := (p - (s - bb)) + (float64(z) - bb)
	if e == 0 || float64(r) == s {
		return r
	}
	// s is not a float32: r and its neighbour n across s bracket it.
	n := math.Nextafter32(r, float32(math.Copysign(math.Inf(1), s-float64(r))))
	if float64(r)+float64(n) != 2*s { // not a tie: float32(s) rounded the exact sum
		return r
	}
	if (e > 0) == (float64(n) > float64(r)) {
		return n
	}
	return r
}
