package mha

import (
	"fmt"
	"github.com/fastattn/fastattn/kernels"
	"math"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/tile"
)

// layerWeights are a layer's projection matrices packed for the GEMM
// kernels in the type the caller chose (tile.Packed: panels of the set's
// register width, int8 scales beside them), and its biases, copied.
type layerWeights struct {
	q, k, v, o     tile.Packed
	bq, bk, bv, bo []float32
}

// bytes returns the memory the weights hold.
func (w *layerWeights) bytes() int64 {
	n := w.q.Bytes() + w.k.Bytes() + w.v.Bytes() + w.o.Bytes()
	return n + 4*int64(len(w.bq)+len(w.bk)+len(w.bv)+len(w.bo))
}

// givenMatrix is one weight matrix as the caller gave it: in float32, in
// 16-bit bits, in int8 with scales or in int4 blocks (one of them set),
// in×out elements in Weights' orientation.
type givenMatrix struct {
	name    string
	f32     []float32
	u16     []uint16
	i8      Int8Weight
	i4      Int4Weight
	in, out int
}

// given reports whether the matrix is given in any form.
func (g givenMatrix) given() bool {
	return g.f32 != nil || g.u16 != nil || g.i8.Data != nil || g.i8.Scales != nil || g.given4()
}

// given4 reports whether the matrix is given as int4 blocks.
func (g givenMatrix) given4() bool {
	return g.i4.Data != nil || g.i4.Scales != nil || g.i4.Zeros != nil
}

// form returns the storage type the matrix is given in, checking that it
// is given in exactly one form that type t allows.
func (g givenMatrix) form(t DType) (DType, error) {
	n, form := 0, Float32
	if g.f32 != nil {
		n++
	}
	if g.u16 != nil {
		n, form = n+1, t
		if !t.is16() {
			return 0, fmt.Errorf("%w: %s16 holds 16-bit floats: Weights.Type must be Float16 or BFloat16, is %v", ErrOption, g.name, t)
		}
	}
	if g.i8.Data != nil || g.i8.Scales != nil {
		n, form = n+1, Int8
		if t != Int8 {
			return 0, fmt.Errorf("%w: %s8 holds int8 blocks: Weights.Type must be Int8, is %v", ErrOption, g.name, t)
		}
	}
	if g.given4() {
		n, form = n+1, Int4
		if t != Int4 {
			return 0, fmt.Errorf("%w: %s4 holds int4 blocks: Weights.Type must be Int4, is %v", ErrOption, g.name, t)
		}
	}
	if n > 1 {
		return 0, fmt.Errorf("%w: %s is given in %d forms (float32, 16-bit, int8, int4): set one", ErrOption, g.name, n)
	}
	return form, nil
}

// check checks the lengths and values of a matrix given in form: every
// float32 finite (and, to be stored as float16, within its range), every
// 16-bit value finite, every int8 or int4 scale finite and >= 0. The
// layout of int4 blocks depends on outIn.
func (g givenMatrix) check(form, t DType, outIn bool) error {
	elems, scales := g.name, g.name+"8.Scales"
	switch form {
	case Float32:
		if err := needLen(g.name, len(g.f32), g.in, g.out); err != nil {
			return err
		}
		if i := fallback.NonFinite(g.f32[:g.in*g.out]); i >= 0 {
			return fmt.Errorf("%w: %s[%d] = %v", ErrNonFinite, g.name, i, g.f32[i])
		}
		if t == Float16 {
			for i, x := range g.f32[:g.in*g.out] {
				if math.IsInf(float64(fallback.F16ToF32(fallback.F32ToF16(x))), 0) {
					return fmt.Errorf("%w: %s[%d] = %v overflows float16 (largest finite 65504)", ErrNonFinite, g.name, i, x)
				}
			}
		}
	case Int8:
		if err := needLen(g.name+"8.Data", len(g.i8.Data), g.in, g.out); err != nil {
			return err
		}
		return checkScales(scales, g.i8.Scales, g.in, g.out)
	case Int4:
		nb := fallback.Int8Blocks(g.in)
		data, zeros := []int{g.in, g.out}, []int{nb, g.out} // nibbles, rounded up to bytes below
		if outIn {
			data, zeros = []int{g.out, nb * QuantBlock}, []int{g.out, 2 * ((nb + 1) / 2)}
		}
		if err := needNibbles(g.name+"4.Data", len(g.i4.Data), data...); err != nil {
			return err
		}
		if g.i4.Zeros != nil {
			if err := needNibbles(g.name+"4.Zeros", len(g.i4.Zeros), zeros...); err != nil {
				return err
			}
		}
		return checkScales(g.name+"4.Scales", g.i4.Scales, g.in, g.out)
	default:
		elems += "16"
		if err := needLen(elems, len(g.u16), g.in, g.out); err != nil {
			return err
		}
		exp := uint16(0x7c00) // float16's exponent bits
		if form == BFloat16 {
			exp = 0x7f80
		}
		for i, h := range g.u16[:g.in*g.out] {
			if h&exp == exp {
				return fmt.Errorf("%w: %s[%d] = %#04x is NaN or ±Inf as %v", ErrNonFinite, elems, i, h, form)
			}
		}
	}
	return nil
}

// checkScales checks that scales holds QuantBlocks(in)·out scales, each
// finite and >= 0.
func checkScales(name string, scales []float32, in, out int) error {
	nb := fallback.Int8Blocks(in)
	if err := needLen(name, len(scales), nb, out); err != nil {
		return err
	}
	for i, s := range scales[:nb*out] {
		if !(s >= 0) || math.IsInf(float64(s), 0) {
			return fmt.Errorf("%w: %s[%d] = %v: a scale must be finite and >= 0", ErrNonFinite, name, i, s)
		}
	}
	return nil
}

// pack packs columns [c0, c0+n) of the matrix as type t in panels of cols
// columns (the matrix is in×out, [in][out] or, with outIn, [out][in]).
func (g givenMatrix) pack(form, t DType, outIn bool, c0, n, cols int) tile.Packed {
	nb := fallback.Int8Blocks(g.in)
	m := tile.Matrix{Type: fallback.KVType(form), RowStride: g.out, ColStride: 1, SRowStride: g.out, SColStride: 1}
	if outIn {
		m.RowStride, m.ColStride, m.SRowStride, m.SColStride = 1, g.in, 1, nb
	}
	switch form {
	case Float32:
		m.F32 = g.f32[c0*m.ColStride:]
	case Int8:
		m.I8, m.S = g.i8.Data[c0*m.ColStride:], g.i8.Scales[c0*m.SColStride:]
	case Int4: // nibbles: column c0 may start mid-byte
		m.I4, m.S, m.Z, m.Col0 = g.i4.Data, g.i4.Scales, g.i4.Zeros, c0
		m.ZRowStride, m.ZColStride = m.SRowStride, m.SColStride
		if outIn {
			m.ColStride, m.ZColStride = nb*QuantBlock, 2*((nb+1)/2)
		}
	default:
		m.U16 = g.u16[c0*m.ColStride:]
	}
	return tile.PackWeights(m, g.in, n, cols, fallback.KVType(t))
}

// pairRows holds the bfloat16 matrices of lw in pairs where ks reads
// them so (tile.Packed.PairRows: the amd64 sets; nothing elsewhere), in
// place of their rows: one copy whatever the mode.
func (lw *layerWeights) pairRows(ks *kernels.Set) {
	for _, w := range []*tile.Packed{&lw.q, &lw.k, &lw.v, &lw.o} {
		w.PairRows(ks)
	}
}

// packWeights checks the matrices and biases of w and packs the matrices
// as w.Type in panels of cols columns: dm is DModel, qw, kw, vw the widths
// of the Q, K and V projections, ow of the concatenated heads.
func packWeights(w Weights, dm, qIn, qw, kw, vw, ow, cols int) (layerWeights, error) {
	t := w.Type
	if t != Float32 && !t.is16() && t != Int8 && t != Int4 {
		return layerWeights{}, fmt.Errorf("%w: Weights.Type %d is not Float32, Float16, BFloat16, Int8 or Int4", ErrOption, int(t))
	}
	fw := qw + kw + vw
	// Checked in the fields' order (an error names the first bad one);
	// WO comes last.
	var mats, biases []givenMatrix
	fused := givenMatrix{"WQKV", w.WQKV, w.WQKV16, w.WQKV8, w.WQKV4, dm, fw}
	separate := []givenMatrix{{"WQ", w.WQ, w.WQ16, w.WQ8, w.WQ4, qIn, qw}, {"WK", w.WK, w.WK16, w.WK8, w.WK4, dm, kw}, {"WV", w.WV, w.WV16, w.WV8, w.WV4, dm, vw}}
	if fused.given() || w.BQKV != nil {
		for _, g := range separate {
			if g.given() {
				return layerWeights{}, fmt.Errorf("%w: WQKV/BQKV replace WQ, WK, WV, BQ, BK, BV: set one form (%s is set)", ErrOption, g.name)
			}
		}
		if w.BQ != nil || w.BK != nil || w.BV != nil {
			return layerWeights{}, fmt.Errorf("%w: WQKV/BQKV replace WQ, WK, WV, BQ, BK, BV: set one form", ErrOption)
		}
		mats = append(mats, fused)
		biases = append(biases, givenMatrix{name: "BQKV", f32: w.BQKV, in: 1, out: fw})
	} else {
		mats = append(mats, separate...)
		biases = append(biases, givenMatrix{name: "BQ", f32: w.BQ, in: 1, out: qw},
			givenMatrix{name: "BK", f32: w.BK, in: 1, out: kw}, givenMatrix{name: "BV", f32: w.BV, in: 1, out: vw})
	}
	mats = append(mats, givenMatrix{"WO", w.WO, w.WO16, w.WO8, w.WO4, ow, dm})
	biases = append(biases, givenMatrix{name: "BO", f32: w.BO, in: 1, out: dm})
	forms := make([]DType, len(mats))
	for i, g := range mats {
		var err error
		if forms[i], err = g.form(t); err != nil {
			return layerWeights{}, err
		}
		if err := g.check(forms[i], t, w.OutIn); err != nil {
			return layerWeights{}, err
		}
	}
	for _, b := range biases {
		if b.f32 == nil {
			continue
		}
		if err := b.check(Float32, Float32, false); err != nil {
			return layerWeights{}, err
		}
	}
	bias := func(b []float32, c0, n int) []float32 {
		if len(b) == 0 {
			return nil
		}
		return clone(b[c0:], n)
	}
	last := len(mats) - 1
	lw := layerWeights{o: mats[last].pack(forms[last], t, w.OutIn, 0, dm, cols), bo: bias(w.BO, 0, dm)}
	if last == 1 {
		g, f := mats[0], forms[0]
		lw.q, lw.k, lw.v = g.pack(f, t, w.OutIn, 0, qw, cols), g.pack(f, t, w.OutIn, qw, kw, cols), g.pack(f, t, w.OutIn, qw+kw, vw, cols)
		lw.bq, lw.bk, lw.bv = bias(w.BQKV, 0, qw), bias(w.BQKV, qw, kw), bias(w.BQKV, qw+kw, vw)
	} else {
		lw.q, lw.k, lw.v = mats[0].pack(forms[0], t, w.OutIn, 0, qw, cols), mats[1].pack(forms[1], t, w.OutIn, 0, kw, cols), mats[2].pack(forms[2], t, w.OutIn, 0, vw, cols)
		lw.bq, lw.bk, lw.bv = bias(w.BQ, 0, qw), bias(w.BK, 0, kw), bias(w.BV, 0, vw)
	}
	return lw, nil
}

// WeightBytes returns the memory the layer's weights hold: each matrix
// padded to whole panels of the kernel set's width (to a multiple of 64
// columns on AVX-512, 16 on AVX2 and NEON) times the bytes of its type,
// plus for Int8 a float32 scale per 32 weights, plus the float32 biases.
// Int4 takes half a byte per weight, and per 32 weights a float32 scale
// and a byte of zero point. A bfloat16 layer holds about half a float32
// one's, an Int8 layer 0.28, an Int4 layer 0.16.
func (l *Layer) WeightBytes() int64 {
	if l == nil {
		return 0
	}
	return l.w.bytes() + l.mla.bytes()
}
