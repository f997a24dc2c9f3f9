package mha

import (
	"errors"
	"github.com/fastattn/fastattn/tile"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

// storedWeights returns what a layer of type t keeps of the in×out
// matrix w ([in][out], or [out][in] with outIn): its values as float32,
// and the same as a checkpoint would give them (16-bit bits, int8 with
// scales, or int4 blocks, in Weights' documented layouts).
func storedWeights(w []float32, in, out int, outIn bool, t DType) (values []float32, bits []uint16, q Int8Weight, q4 Int4Weight) {
	values = make([]float32, len(w))
	at := func(i, o int) int { return weightAt(i, o, in, out, outIn) }
	switch {
	case t.is16():
		bits = make([]uint16, len(w))
		fallback.Narrow(bits, w, fallback.KVType(t))
		fallback.Widen(values, bits, fallback.KVType(t))
	case t == Int8:
		nb := QuantBlocks(in)
		q = Int8Weight{Data: make([]int8, len(w)), Scales: make([]float32, nb*out)}
		var col [QuantBlock]float32
		var blk [QuantBlock]int8
		var s [1]float32
		for o := 0; o < out; o++ {
			for b := 0; b < nb; b++ {
				n := min(QuantBlock, in-b*QuantBlock)
				for i := range n {
					col[i] = w[at(b*QuantBlock+i, o)]
				}
				fallback.QuantizeInt8(blk[:n], s[:], col[:n])
				si := b*out + o
				if outIn {
					si = o*nb + b
				}
				q.Scales[si] = s[0]
				for i := range n {
					q.Data[at(b*QuantBlock+i, o)] = blk[i]
					values[at(b*QuantBlock+i, o)] = float32(blk[i]) * s[0]
				}
			}
		}
	case t == Int4:
		q4 = int4Weights(w, values, in, out, outIn)
	default:
		copy(values, w)
	}
	return values, bits, q, q4
}

// int4Weights quantizes the in×out matrix w by Int4's rule into Int4Weight
// form (MatMulNBits' padded rows with outIn) and writes the values it
// stands for to values.
func int4Weights(w, values []float32, in, out int, outIn bool) Int4Weight {
	nb := QuantBlocks(in)
	set := func(x []byte, e int, u uint8) { x[e/2] |= u << (4 * (e & 1)) }
	data, zeros := (in*out+1)/2, (nb*out+1)/2
	if outIn {
		data, zeros = out*nb*16, out*((nb+1)/2)
	}
	q := Int4Weight{Data: make([]byte, data), Scales: make([]float32, nb*out), Zeros: make([]byte, zeros)}
	var col [QuantBlock]float32
	var u [QuantBlock]uint8
	for o := 0; o < out; o++ {
		for b := 0; b < nb; b++ {
			n := min(QuantBlock, in-b*QuantBlock)
			for i := range n {
				col[i] = w[weightAt(b*QuantBlock+i, o, in, out, outIn)]
			}
			s, z := fallback.QuantizeInt4(u[:n], col[:n])
			si, zi := b*out+o, b*out+o
			if outIn {
				si, zi = o*nb+b, o*2*((nb+1)/2)+b
			}
			q.Scales[si] = s
			set(q.Zeros, zi, z)
			for i := range n {
				e := (b*QuantBlock+i)*out + o
				if outIn {
					e = o*nb*QuantBlock + b*QuantBlock + i
				}
				set(q.Data, e, u[i])
				values[weightAt(b*QuantBlock+i, o, in, out, outIn)] = float32(int(u[i])-int(z)) * s
			}
		}
	}
	return q
}

// weightAt is the index of element (input i, output o) of an in×out
// matrix, [in][out] or, with outIn, [out][in].
func weightAt(i, o, in, out int, outIn bool) int {
	if outIn {
		return o*in + i
	}
	return i*out + o
}

// weightsAs returns w's matrices as a layer of type t stores them
// (float32 values), and as a checkpoint gives them (raw forms, Type t).
func weightsAs(w Weights, cfg LayerConfig, t DType) (values, raw Weights) {
	dm, qw, kw, vw, ow := cfg.DModel, cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim, cfg.KVHeads*cfg.ValueDim, cfg.Heads*cfg.ValueDim
	values, raw = w, w
	raw.WQ, raw.WK, raw.WV, raw.WO, raw.Type = nil, nil, nil, nil, t
	for _, m := range []struct {
		src          []float32
		in, out      int
		val          *[]float32
		bits         *[]uint16
		q            *Int8Weight
		q4           *Int4Weight
		rawF32       *[]float32
		rawF32Source []float32
	}{
		{w.WQ, dm, qw, &values.WQ, &raw.WQ16, &raw.WQ8, &raw.WQ4, &raw.WQ, w.WQ},
		{w.WK, dm, kw, &values.WK, &raw.WK16, &raw.WK8, &raw.WK4, &raw.WK, w.WK},
		{w.WV, dm, vw, &values.WV, &raw.WV16, &raw.WV8, &raw.WV4, &raw.WV, w.WV},
		{w.WO, ow, dm, &values.WO, &raw.WO16, &raw.WO8, &raw.WO4, &raw.WO, w.WO},
	} {
		v, bits, q, q4 := storedWeights(m.src, m.in, m.out, w.OutIn, t)
		*m.val = v
		switch {
		case t.is16():
			*m.bits = bits
		case t == Int8:
			*m.q = q
		case t == Int4:
			*m.q4 = q4
		default:
			*m.rawF32 = m.rawF32Source
		}
	}
	return values, raw
}

// fusedAs returns w with WQ, WK and WV concatenated into WQKV, given as
// a checkpoint of type t gives it (float32 for Float32).
func fusedAs(w Weights, cfg LayerConfig, t DType) Weights {
	dm := cfg.DModel
	var qkv []float32
	if w.OutIn { // [out][in]: the rows one after the other
		qkv = append(append(append(qkv, w.WQ...), w.WK...), w.WV...)
	} else {
		for i := 0; i < dm; i++ {
			for _, m := range [][]float32{w.WQ, w.WK, w.WV} {
				n := len(m) / dm
				qkv = append(qkv, m[i*n:(i+1)*n]...)
			}
		}
	}
	f := w
	f.WQ, f.WK, f.WV, f.Type = nil, nil, nil, t
	if w.BQ != nil {
		f.BQKV = append(append(append([]float32(nil), w.BQ...), w.BK...), w.BV...)
		f.BQ, f.BK, f.BV = nil, nil, nil
	}
	_, bits, q, q4 := storedWeights(qkv, dm, len(qkv)/dm, w.OutIn, t)
	switch {
	case t.is16():
		f.WQKV16 = bits
	case t == Int8:
		f.WQKV8 = q
	case t == Int4:
		f.WQKV4 = q4
	default:
		f.WQKV = qkv
	}
	if t != Float32 {
		f.WO = nil
		_, f.WO16, f.WO8, f.WO4 = storedWeights(w.WO, len(w.WO)/dm, dm, w.OutIn, t)
	}
	return f
}

// TestLayerWeightTypes: a layer of each weight type, built from float32
// matrices (rounded or quantized by NewLayer) or from the stored values a
// checkpoint holds, on every kernel set: the two give the same bits; a
// 16-bit layer gives the bits of a Float32 layer holding the rounded
// weights; and each is within the layer tolerance of the float64 oracle
// through the stored values (GQA, biases, cross-attention, both
// orientations, odd widths).
func TestLayerWeightTypes(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	cases := []struct {
		cfg   LayerConfig
		b, lq int
		lk    int
		opts  Options
		bias  bool
		outIn bool
	}{
		{LayerConfig{DModel: 32, Heads: 4, HeadDim: 8}, 2, 13, 13, Options{}, true, false},
		{LayerConfig{DModel: 48, Heads: 6, KVHeads: 2, HeadDim: 16}, 1, 75, 75, Options{Causal: true}, false, true},
		{LayerConfig{DModel: 40, Heads: 4, KVHeads: 1, HeadDim: 12, ValueDim: 7}, 2, 9, 9, Options{Causal: true, Window: 4}, true, true},
		{LayerConfig{DModel: 100, Heads: 3, HeadDim: 33}, 1, 80, 80, Options{Causal: true}, true, false},
		{LayerConfig{DModel: 24, Heads: 2, HeadDim: 5}, 3, 11, 29, Options{}, true, true}, // cross
	}
	for _, typ := range []DType{BFloat16, Float16, Int8, Int4} {
		for _, c := range cases {
			for _, e := range engines {
				l32, w := testLayer(t, e, rng, c.cfg, c.bias)
				cfg := l32.Config()
				w.OutIn = c.outIn
				if c.outIn { // the same random values read as [out][in]
					w.WQ, w.WK, w.WV, w.WO = transposed(w.WQ, cfg.DModel), transposed(w.WK, cfg.DModel), transposed(w.WV, cfg.DModel), transposed(w.WO, len(w.WO)/cfg.DModel)
				}
				values, raw := weightsAs(w, cfg, typ)
				typed := w
				typed.Type = typ
				lt, lr, lv := mustLayer(t, e, c.cfg, typed), mustLayer(t, e, c.cfg, raw), mustLayer(t, e, c.cfg, values)
				xq := random(rng, c.b*c.lq*cfg.DModel)
				xkv := xq
				if c.lk != c.lq {
					xkv = random(rng, c.b*c.lk*cfg.DModel)
				}
				lf := mustLayer(t, e, c.cfg, fusedAs(w, cfg, typ))
				outs := make([][]float32, 4)
				for i, l := range []*Layer{lt, lr, lv, lf} {
					outs[i] = make([]float32, c.b*c.lq*cfg.DModel)
					var err error
					if c.lk == c.lq {
						err = l.Forward(outs[i], xq, c.b, c.lq, &c.opts)
					} else {
						err = l.ForwardCross(outs[i], xq, xkv, c.b, c.lq, c.lk, &c.opts)
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				if i := firstDiff(outs[0], outs[1]); i >= 0 {
					t.Fatalf("%s %v %+v: float32 weights converted and the stored values given differ at %d: %v, %v", e.Kernels(), typ, cfg, i, outs[0][i], outs[1][i])
				}
				if i := firstDiff(outs[0], outs[3]); i >= 0 {
					t.Fatalf("%s %v %+v: fused WQKV in stored form differs from WQ, WK, WV at %d: %v, %v", e.Kernels(), typ, cfg, i, outs[0][i], outs[3][i])
				}
				if i := firstDiff(outs[0], outs[2]); i >= 0 && typ.is16() {
					t.Fatalf("%s %v %+v: differs from the float32 layer of the rounded weights at %d: %v, %v", e.Kernels(), typ, cfg, i, outs[0][i], outs[2][i])
				}
				if values.OutIn {
					values = untransposed(values, cfg)
				}
				want := referenceLayer(cfg, values, xq, xkv, c.b, c.lq, c.lk, &c.opts)
				compare(t, e.Kernels()+" "+typ.String()+" weights layer", outs[0], want, tolLayer, &worstLayer)
			}
		}
	}
}

// mustLayer is NewLayer that fails the test on an error.
func mustLayer(t *testing.T, e *Engine, cfg LayerConfig, w Weights) *Layer {
	t.Helper()
	l, err := NewLayer(e, cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// transposed returns the [in][out] matrix m (in rows) as [out][in].
func transposed(m []float32, in int) []float32 {
	out := len(m) / in
	r := make([]float32, len(m))
	for i := 0; i < in; i++ {
		for o := 0; o < out; o++ {
			r[o*in+i] = m[i*out+o]
		}
	}
	return r
}

// untransposed returns OutIn weights as [in][out] ones.
func untransposed(w Weights, cfg LayerConfig) Weights {
	back := func(m []float32, in int) []float32 { return transposed(m, len(m)/in) }
	w.WQ, w.WK, w.WV = back(w.WQ, cfg.DModel), back(w.WK, cfg.DModel), back(w.WV, cfg.DModel)
	w.WO = back(w.WO, len(w.WO)/cfg.DModel)
	w.OutIn = false
	return w
}

// TestLayerWeightBytes: WeightBytes is the stored matrices and biases, a
// bfloat16 layer at most 0.52 of the float32 one's, an Int8 layer at most
// 0.285 (1 byte and a 4-byte scale per 32 weights: 0.28125), an Int4
// layer at most 0.17 (half a byte, and a scale and a zero-point byte per
// 32 weights: 0.1641; the float32 biases add 0.0016 here).
func TestLayerWeightBytes(t *testing.T) {
	cfg := LayerConfig{DModel: 512, Heads: 8, KVHeads: 2, HeadDim: 64}
	rng := rand.New(rand.NewPCG(33, 34))
	_, w := testLayer(t, engines[0], rng, cfg, true)
	matrices := int64(512 * (512 + 128 + 128 + 512))
	biases := int64(4 * (512 + 128 + 128 + 512))
	// Every set, the AMX one too: bfloat16 weights are held once (rows,
	// or pairs on the amd64 sets), whatever mode a call later asks for.
	for _, e := range bf16Engines {
		bytes := map[DType]int64{}
		for _, typ := range []DType{Float32, BFloat16, Float16, Int8, Int4} {
			w.Type = typ
			l := mustLayer(t, e, cfg, w)
			bytes[typ] = l.WeightBytes()
			if typ == BFloat16 {
				for _, m := range []*tile.Packed{&l.w.q, &l.w.k, &l.w.v, &l.w.o} {
					if (m.P != nil) == (m.U16 != nil) || (m.P != nil) != e.ks.PairsWeights() {
						t.Errorf("%s: a bfloat16 matrix holds pairs %v and rows %v", e.Kernels(), m.P != nil, m.U16 != nil)
					}
				}
			}
		}
		if bytes[Float32] != 4*matrices+biases {
			t.Errorf("%s: float32 layer: WeightBytes %d, want %d", e.Kernels(), bytes[Float32], 4*matrices+biases)
		}
		for typ, bound := range map[DType]float64{BFloat16: 0.52, Float16: 0.52, Int8: 0.285, Int4: 0.17} {
			if r := float64(bytes[typ]) / float64(bytes[Float32]); r > bound {
				t.Errorf("%s: %v layer holds %.4f of the float32 layer's bytes, bound %.3f", e.Kernels(), typ, r, bound)
			}
		}
	}
	if (*Layer)(nil).WeightBytes() != 0 {
		t.Error("a nil layer's WeightBytes is not 0")
	}
}

// TestLayerWeightErrors: NewLayer names the tensor and index of a
// non-finite weight, bias or scale (and a float32 weight past float16's
// range for a Float16 layer), and rejects wrong lengths, forms its Type
// does not allow, and two forms of one matrix.
func TestLayerWeightErrors(t *testing.T) {
	cfg := LayerConfig{DModel: 64, Heads: 2, KVHeads: 2, HeadDim: 32, ValueDim: 32}
	rng := rand.New(rand.NewPCG(35, 36))
	_, w := testLayer(t, engines[0], rng, cfg, true)
	_, bf := weightsAs(w, cfg, BFloat16)
	_, i8 := weightsAs(w, cfg, Int8)
	_, i4 := weightsAs(w, cfg, Int4)
	nan := float32(math.NaN())
	cases := []struct {
		name string
		edit func() Weights
		err  error
		msg  string
	}{
		{"NaN weight", func() Weights { x := w; x.WQ = append([]float32(nil), w.WQ...); x.WQ[5] = nan; return x }, ErrNonFinite, "WQ[5] = NaN"},
		{"Inf bias", func() Weights {
			x := w
			x.BO = append([]float32(nil), w.BO...)
			x.BO[3] = float32(math.Inf(-1))
			return x
		}, ErrNonFinite, "BO[3] = -Inf"},
		{"NaN weight, int8 layer", func() Weights {
			x := w
			x.Type, x.WK = Int8, append([]float32(nil), w.WK...)
			x.WK[7] = nan
			return x
		}, ErrNonFinite, "WK[7] = NaN"},
		{"float16 overflow", func() Weights {
			x := w
			x.Type, x.WV = Float16, append([]float32(nil), w.WV...)
			x.WV[2] = 70000
			return x
		}, ErrNonFinite, "WV[2] = 70000 overflows float16"},
		{"16-bit weights without Type", func() Weights { x := bf; x.Type = Float32; return x }, ErrOption, "WQ16 holds 16-bit floats"},
		{"bfloat16 NaN bits", func() Weights { x := bf; x.WK16 = append([]uint16(nil), bf.WK16...); x.WK16[3] = 0x7fc0; return x }, ErrNonFinite, "WK16[3] = 0x7fc0 is NaN or ±Inf as bf16"},
		{"negative scale", func() Weights {
			x := i8
			x.WV8.Scales = append([]float32(nil), i8.WV8.Scales...)
			x.WV8.Scales[2] = -0.5
			return x
		}, ErrNonFinite, "WV8.Scales[2] = -0.5"},
		{"NaN scale", func() Weights {
			x := i8
			x.WO8.Scales = append([]float32(nil), i8.WO8.Scales...)
			x.WO8.Scales[1] = nan
			return x
		}, ErrNonFinite, "WO8.Scales[1] = NaN"},
		{"NaN int4 scale", func() Weights {
			x := i4
			x.WK4.Scales = append([]float32(nil), i4.WK4.Scales...)
			x.WK4.Scales[4] = float32(math.Inf(1))
			return x
		}, ErrNonFinite, "WK4.Scales[4] = +Inf"},
		{"short bits", func() Weights { x := bf; x.WQ16 = bf.WQ16[:10]; return x }, ErrBuffer, "WQ16 has 10 elements"},
		{"short nibbles", func() Weights { x := i4; x.WV4.Data = i4.WV4.Data[:7]; return x }, ErrBuffer, "WV4.Data has 7 bytes"},
		{"long nibbles", func() Weights { x := i4; x.WV4.Data = append(append([]byte(nil), i4.WV4.Data...), 0); return x }, ErrBuffer, "WV4.Data has 2049 bytes"},
		{"short zero points", func() Weights { x := i4; x.WO4.Zeros = i4.WO4.Zeros[:1]; return x }, ErrBuffer, "WO4.Zeros has 1 bytes"},
		{"long bits", func() Weights { x := bf; x.WQ16 = append(append([]uint16(nil), bf.WQ16...), 0); return x }, ErrBuffer, "WQ16 has"},
		{"int4 in an int8 layer", func() Weights { x := i4; x.Type = Int8; return x }, ErrOption, "Weights.Type must be Int4"},
		{"short scales", func() Weights { x := i8; x.WQ8.Scales = i8.WQ8.Scales[:3]; return x }, ErrBuffer, "WQ8.Scales has 3 elements"},
		{"bits in a float32 layer", func() Weights { x := bf; x.Type = Float32; return x }, ErrOption, "Weights.Type must be Float16 or BFloat16"},
		{"int8 in a bfloat16 layer", func() Weights { x := i8; x.Type = BFloat16; return x }, ErrOption, "Weights.Type must be Int8"},
		{"two forms", func() Weights { x := bf; x.WQ = w.WQ; return x }, ErrOption, "WQ is given in 2 forms"},
		{"fused and separate", func() Weights { x := bf; x.WQKV16 = make([]uint16, 64*192); return x }, ErrOption, "WQKV/BQKV replace"},
		{"unknown type", func() Weights { x := w; x.Type = 9; return x }, ErrOption, "Weights.Type 9"},
	}
	for _, c := range cases {
		_, err := NewLayer(engines[0], cfg, c.edit())
		if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want %v naming %q", c.name, err, c.err, c.msg)
		}
	}
	// A zero scale (a block of zeros, as q8_0 files hold it) is accepted.
	x := i8
	x.WQ8.Scales = append([]float32(nil), i8.WQ8.Scales...)
	x.WQ8.Scales[0] = 0
	if _, err := NewLayer(engines[0], cfg, x); err != nil {
		t.Errorf("a zero scale: %v", err)
	}
	// Int4 zero points left nil are 8: the same layer as zero-point
	// nibbles of 8 given.
	given, none := i4, i4
	given.WQ4.Zeros = make([]byte, len(i4.WQ4.Zeros))
	for i := range given.WQ4.Zeros {
		given.WQ4.Zeros[i] = 0x88
	}
	none.WQ4.Zeros = nil
	x1 := random(rng, 3*cfg.DModel)
	y := [2][]float32{make([]float32, len(x1)), make([]float32, len(x1))}
	for i, w := range []Weights{given, none} {
		if err := mustLayer(t, engines[0], cfg, w).Forward(y[i], x1, 1, 3, nil); err != nil {
			t.Fatal(err)
		}
	}
	if i := firstDiff(y[0], y[1]); i >= 0 {
		t.Errorf("int4 zero points nil and all 8 differ at %d: %v, %v", i, y[0][i], y[1][i])
	}
}

// TestLayerWeightAccuracy: on realistic data (weights ~ N(0, 1/fan-in),
// inputs ~ N(0, 1)) each weight type's output stays within a stated
// relative error of the float32 layer's (max |y - y32| / max |y32|), in a
// causal forward and in the decode steps after it (int8 there runs
// GemvI8); Weights.Type's doc quotes these bounds.
func TestLayerWeightAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 38))
	cfg := LayerConfig{DModel: 512, Heads: 8, KVHeads: 2, HeadDim: 64, Rotary: Rotary{Dims: 64, Base: 10000}}
	dm, L, B := cfg.DModel, 40, 2
	normal := func(n int, sd float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * sd)
		}
		return x
	}
	qw, kw, ow := 8*64, 2*64, 8*64
	w := Weights{WQ: normal(dm*qw, 1/math.Sqrt(float64(dm))), WK: normal(dm*kw, 1/math.Sqrt(float64(dm))),
		WV: normal(dm*kw, 1/math.Sqrt(float64(dm))), WO: normal(ow*dm, 1/math.Sqrt(float64(ow)))}
	x := normal(B*L*dm, 1)
	e := engines[0]
	run := func(typ DType) []float32 {
		w.Type = typ
		l := mustLayer(t, e, cfg, w)
		out := make([]float32, B*L*dm)
		if err := l.Forward(out[:B*(L-4)*dm], prefix(x, B, L, L-4, dm), B, L-4, &Options{Causal: true}); err != nil {
			t.Fatal(err)
		}
		// The last 4 tokens decode one at a time after a cached prefill.
		c, err := l.NewCache(B, L)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Decode(make([]float32, B*(L-4)*dm), prefix(x, B, L, L-4, dm), c, L-4, nil); err != nil {
			t.Fatal(err)
		}
		for p := L - 4; p < L; p++ {
			xs, ys := make([]float32, B*dm), make([]float32, B*dm)
			for b := 0; b < B; b++ {
				copy(xs[b*dm:], x[(b*L+p)*dm:(b*L+p+1)*dm])
			}
			if err := l.Decode(ys, xs, c, 1, nil); err != nil {
				t.Fatal(err)
			}
			for b := 0; b < B; b++ {
				copy(out[B*(L-4)*dm+(b*4+p-(L-4))*dm:], ys[b*dm:(b+1)*dm])
			}
		}
		return out
	}
	ref := run(Float32)
	peak := 0.0
	for _, v := range ref {
		peak = max(peak, math.Abs(float64(v)))
	}
	for typ, bound := range map[DType]float64{BFloat16: 5e-3, Float16: 1e-3, Int8: 1.5e-2, Int4: 0.15} {
		got, worst := run(typ), 0.0
		for i := range got {
			worst = max(worst, math.Abs(float64(got[i]-ref[i])))
		}
		t.Logf("%v weights: max relative error %.3g of the float32 layer's output (bound %.1e)", typ, worst/peak, bound)
		if worst/peak > bound {
			t.Errorf("%v weights: max relative error %.3g > %.1e", typ, worst/peak, bound)
		}
	}
}

// prefix returns the first n of L tokens of each of B sequences of x.
func prefix(x []float32, B, L, n, dm int) []float32 {
	p := make([]float32, 0, B*n*dm)
	for b := 0; b < B; b++ {
		p = append(p, x[b*L*dm:(b*L+n)*dm]...)
	}
	return p
}
