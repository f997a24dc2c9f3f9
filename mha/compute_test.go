package mha

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/tile"
)

// tolBF16 bounds ComputeBF16 against the float64 oracle on the operands
// it rounds (the scaled queries, the keys and the values): what is left
// is the rounding of the weights PV reads, each within 2^-9 of itself,
// so at most 2^-9·max|v| <= 1.96e-3 on values in [-1, 1], plus float32's
// sums. The LSE does not see that rounding: it keeps tolLSE.
const tolBF16 = 2.5e-3

// roundBF16 returns x rounded to bfloat16 (nearest, ties to even), as
// float32.
func roundBF16(x []float32) []float32 {
	r := make([]float32, len(x))
	for i, f := range x {
		r[i] = fallback.BF16ToF32(fallback.F32ToBF16(f))
	}
	return r
}

// decodeRows reports whether s has a decode step's rows (tile.DecodeRows),
// which the bfloat16 mode leaves to float32 arithmetic.
func decodeRows(s Shape) bool {
	rs, _ := s.resolve()
	return tile.DecodeRows(&tile.Problem{Heads: rs.Heads, KVHeads: rs.KVHeads, QLen: rs.QLen})
}

// checkBF16 runs one call with K and V stored as typ in ComputeBF16 on
// every engine, and compares it with the float64 oracle on the rounded
// operands: each query times the scale, then rounded, with a scale of 1;
// the stored keys and values rounded. A decode step's rows (decodeRows)
// are float32's: the oracle on the operands as stored, float32's bounds.
func checkBF16(t *testing.T, rng *rand.Rand, s Shape, o Options, typ DType) {
	t.Helper()
	rs, err := s.resolve()
	if err != nil {
		t.Fatal(err)
	}
	q, k, v, _ := inputs(rng, rs)
	var kf, vf []float32
	var call storedCall
	switch typ {
	case Float32:
		kf, vf = k, v
		call = func(e *Engine, out, q []float32, o *Options) error { return e.Attention(out, q, k, v, s, o) }
	case Int8, Int4:
		kf, vf, call = storeQuantized(t, typ, s, k, v, rs.HeadDim, rs.ValueDim)
	default:
		var k16, v16 []uint16
		k16, kf = round16(k, typ)
		v16, vf = round16(v, typ)
		call = func(e *Engine, out, q []float32, o *Options) error { return e.Attention16(out, q, k16, v16, typ, s, o) }
	}
	spec := specOf(rs, &o)
	if decodeRows(s) {
		wantOut, wantLSE := fallback.Attention(spec, q, kf, vf)
		o.Compute = ComputeBF16
		compareEngines(t, "bf16 compute, decode rows (float32), "+typ.String()+" K/V", s, o, q, call, wantOut, wantLSE, tolOut)
		return
	}
	scale := float32(spec.Scale)
	qs := make([]float32, len(q))
	for i, x := range q {
		qs[i] = x * scale // the float32 product the packed query block holds
	}
	spec.Scale = 1
	wantOut, wantLSE := fallback.Attention(spec, roundBF16(qs), roundBF16(kf), roundBF16(vf))
	o.Compute = ComputeBF16
	compareEngines(t, "bf16 compute, "+typ.String()+" K/V", s, o, q, call, wantOut, wantLSE, tolBF16)
}

// TestComputeBF16: the bfloat16 mode on every set and every K/V storage,
// head dims at every vector tail, prefill and decode shapes (Dot rows, the
// split-KV path), GQA ratios 1..16, both layouts, every option at random.
func TestComputeBF16(t *testing.T) {
	t.Parallel() // a sweep against the oracle: runs beside the other sweeps, after the sequential tests
	rng := rand.New(rand.NewPCG(0xbf, 16))
	for _, typ := range []DType{Float32, BFloat16, Float16, Int8, Int4} {
		for di, dk := range []int{1, 7, 16, 33, 64, 80, 128} {
			for li, lens := range [][2]int{{1, 1}, {5, 17}, {70, 130}, {1, 300}, {3, 700}} {
				if !longTests() && (di+li+int(typ))%2 != 0 {
					continue // half the cases: every head dim and length still
				}
				s := randomShape(rng, dk, lens[0], lens[1])
				checkBF16(t, rng, s, randomOptions(rng).build(rng, s), typ)
			}
		}
		gqaCases(rng, 8, func(s Shape, o Options) { checkBF16(t, rng, s, o, typ) })
		// Sharp softmaxes (scores of ±10 and more): a score off by the
		// rounding of an operand moves the output far past tolBF16, so
		// these fail unless the queries and keys are rounded as specified.
		for _, lens := range [][2]int{{1, 64}, {33, 200}} {
			s := randomShape(rng, 64, lens[0], lens[1])
			o := randomOptions(rng).build(rng, s)
			o.Scale, o.Softcap = 4, 0
			checkBF16(t, rng, s, o, typ)
		}
	}
}

// TestComputeBF16Roundings pins the roundings tolBF16 cannot see, bit for
// bit on every set: a row that sees one key outputs its value rounded to
// bfloat16 (its weight is exactly 1); a row of two keys, values 1 and 0,
// outputs its first weight rounded to bfloat16 over the unrounded sum.
func TestComputeBF16Roundings(t *testing.T) {
	rng := rand.New(rand.NewPCG(0xbf, 1))
	s := Shape{Batch: 1, Heads: 2, QLen: 17, KVLen: 1, HeadDim: 5, ValueDim: 37} // rows past a decode step's
	q, k, v, out := inputs(rng, s)
	want := roundBF16(v)
	for _, e := range bf16Engines {
		if err := e.Attention(out, q, k, v, s, &Options{Compute: ComputeBF16}); err != nil {
			t.Fatal(err)
		}
		for i, got := range out {
			if w := want[(i/s.ValueDim)%s.Heads*s.ValueDim+i%s.ValueDim]; got != w { // BSHD: head (i/dv) mod H
				t.Fatalf("%s: one key: out[%d] = %v, want its value rounded, %v", e.Kernels(), i, got, w)
			}
		}
	}
	two := Shape{Batch: 1, Heads: 1, QLen: 17, KVLen: 2, HeadDim: 1}
	ones := []float32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	for _, e := range bf16Engines {
		moved := 0
		for x := float32(0.125); x < 4; x += 0.125 { // keys 0 and x: weights e^-x and 1
			k, v := []float32{0, x}, []float32{1, 0}
			f32, bf := make([]float32, 17), make([]float32, 17)
			if err := e.Attention(f32, ones, k, v, two, &Options{Scale: 1}); err != nil {
				t.Fatal(err)
			}
			if err := e.Attention(bf, ones, k, v, two, &Options{Scale: 1, Compute: ComputeBF16}); err != nil {
				t.Fatal(err)
			}
			p := float64(f32[0]) / (1 - float64(f32[0])) // the weight e^-x, from p/(1+p)
			want := float64(fallback.BF16ToF32(fallback.F32ToBF16(float32(p)))) / (1 + p)
			if !(math.Abs(float64(bf[0])-want) <= 1e-6*want) {
				t.Fatalf("%s: keys 0, %v: out %v, want %v (the weight %v rounded, over the unrounded sum)", e.Kernels(), x, bf[0], want, p)
			}
			if bf[0] != f32[0] {
				moved++
			}
		}
		if moved == 0 {
			t.Fatalf("%s: no weight was rounded", e.Kernels())
		}
	}
}

// TestComputeErrors: an undefined Compute is refused and named.
func TestComputeErrors(t *testing.T) {
	s := Shape{Batch: 1, Heads: 1, QLen: 2, KVLen: 3, HeadDim: 4}
	q, k, v, out := inputs(rand.New(rand.NewPCG(1, 1)), s)
	for _, c := range []Compute{-1, 3, 99} {
		err := engines[0].Attention(out, q, k, v, s, &Options{Compute: c})
		if !errors.Is(err, ErrOption) {
			t.Fatalf("Compute %d: err = %v, want ErrOption", int(c), err)
		}
		if want := "Compute = " + c.String(); !contains(err.Error(), want) {
			t.Fatalf("Compute %d: %q does not name %q", int(c), err, want)
		}
	}
	if ComputeF32.String() != "f32" || ComputeBF16.String() != "bf16" || ComputeInt8.String() != "int8" {
		t.Fatalf("names %q %q %q", ComputeF32, ComputeBF16, ComputeInt8)
	}
}

// normal returns n standard normal values.
func normal(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// TestComputeBF16Accuracy measures ComputeBF16 against the float64 oracle
// on the unrounded inputs, on realistic data: q, k and v ~ N(0, 1), head
// dims 64 and 128, 4096 keys (the last 64 query positions of a causal
// prefill, or 64 queries over all of them; 1024 keys with -short), every
// set. The error,
// ‖out − exact‖/‖exact‖, is that of rounding the operands to 8
// significant bits: 0.34% on every set and shape here against float32's
// 1.2e-6 (printed with -v), bounded at 1% (the 0.3% a PyTorch user
// expects of bfloat16 SDPA, pytorch/pytorch#163588, is the same order).
// The largest element's error is bounded by 2% of the largest output
// (0.32–0.44% measured).
func TestComputeBF16Accuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(0xacc, 16))
	for _, dk := range []int{64, 128} {
		for _, causal := range []bool{false, true} {
			s := Shape{Batch: 1, Heads: 2, KVHeads: 1, QLen: 64, KVLen: 4096, HeadDim: dk}
			if !longTests() {
				s.KVLen = 1024
			}
			q := normal(rng, s.QLen*s.Heads*dk)
			k := normal(rng, s.KVLen*dk)
			v := normal(rng, s.KVLen*dk)
			o := Options{Causal: causal}
			want, _ := fallback.Attention(specOf(s, &o), q, k, v)
			var peak float64
			for _, w := range want {
				peak = max(peak, math.Abs(w))
			}
			for _, e := range bf16Engines {
				for _, c := range []Compute{ComputeF32, ComputeBF16} {
					out := make([]float32, len(want))
					o.Compute = c
					if err := e.Attention(out, q, k, v, s, &o); err != nil {
						t.Fatal(err)
					}
					var num, den, worst float64
					for i, w := range want {
						d := float64(out[i]) - w
						num, den, worst = num+d*d, den+w*w, max(worst, math.Abs(d))
					}
					rel := math.Sqrt(num / den)
					t.Logf("%s D=%d causal=%v %v: relative error %.3g, largest %.3g of the largest output", e.Kernels(), dk, causal, c, rel, worst/peak)
					bound, elem := 1e-2, 2e-2
					if c == ComputeF32 {
						bound, elem = 1e-5, 1e-5
					}
					if !(rel <= bound && worst <= elem*peak) {
						t.Errorf("%s D=%d causal=%v %v: relative error %.3g (bound %g), largest %.3g of the largest output (bound %g)",
							e.Kernels(), dk, causal, c, rel, bound, worst/peak, elem)
					}
				}
			}
		}
	}
}

// referenceBF16Layer is referenceLayer in the bfloat16 mode, in float64:
// each projection's input rounded to bfloat16 (w holds the bfloat16
// weights' values), the attention on rounded operands (the scaled
// queries, the keys, the values), its output rounded before WO.
func referenceBF16Layer(cfg LayerConfig, w Weights, x []float32, batch, L int, o *Options) []float64 {
	dm := cfg.DModel
	xr := roundBF16(x)
	q := toF32(fallback.Linear(xr, w.WQ, w.BQ, batch*L, dm, cfg.Heads*cfg.HeadDim))
	k := toF32(fallback.Linear(xr, w.WK, w.BK, batch*L, dm, cfg.KVHeads*cfg.HeadDim))
	v := toF32(fallback.Linear(xr, w.WV, w.BV, batch*L, dm, cfg.KVHeads*cfg.ValueDim))
	s := Shape{Batch: batch, Heads: cfg.Heads, KVHeads: cfg.KVHeads, QLen: L, KVLen: L, HeadDim: cfg.HeadDim, ValueDim: cfg.ValueDim}
	spec := specOf(s, o)
	for i := range q {
		q[i] *= float32(spec.Scale)
	}
	spec.Scale = 1
	attn, _ := fallback.Attention(spec, roundBF16(q), roundBF16(k), roundBF16(v))
	return fallback.Linear(roundBF16(toF32(attn)), w.WO, w.BO, batch*L, cfg.Heads*cfg.ValueDim, dm)
}

// tolBF16Layer bounds a layer in the bfloat16 mode against
// referenceBF16Layer: tolBF16 of the attention, and float32 sums a
// bfloat16 rounding apart (of a projected query, or of an attention
// output before WO) where the two round a value that sits near a tie.
const tolBF16Layer = 5e-3

// TestLayerComputeBF16: a layer of bfloat16 weights in the bfloat16 mode
// on every set, Forward against the float64 composition of the same
// roundings (measured: at most 2.4e-3), bit for bit on an input rounded
// beforehand, and decode steps through a cache against Forward's rows.
func TestLayerComputeBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(0xbf, 4))
	for _, cfg := range []LayerConfig{
		{DModel: 64, Heads: 4, KVHeads: 2, HeadDim: 16},
		{DModel: 72, Heads: 3, HeadDim: 24, ValueDim: 20},
	} {
		for _, e := range bf16Engines {
			l32, w := testLayer(t, e, rng, cfg, true)
			cfg := l32.Config()
			values, _ := weightsAs(w, cfg, BFloat16)
			typed := w
			typed.Type = BFloat16
			l := mustLayer(t, e, cfg, typed)
			const B, L = 2, 40
			x := random(rng, B*L*cfg.DModel)
			o := Options{Causal: true, Compute: ComputeBF16}
			full := make([]float32, len(x))
			if err := l.Forward(full, x, B, L, &o); err != nil {
				t.Fatal(err)
			}
			compare(t, e.Kernels()+" bf16 layer", full, referenceBF16Layer(cfg, values, x, B, L, &o), tolBF16Layer, &worstLayer)
			rounded := make([]float32, len(x)) // the projections round their input: the same bits
			if err := l.Forward(rounded, roundBF16(x), B, L, &o); err != nil {
				t.Fatal(err)
			}
			if i := firstDiff(rounded, full); i >= 0 {
				t.Fatalf("%s: the input rounded beforehand changes out[%d]: %v, %v", e.Kernels(), i, rounded[i], full[i])
			}
			cache, err := l.NewCacheOf(B, L, BFloat16)
			if err != nil {
				t.Fatal(err)
			}
			dm := cfg.DModel
			for pos, step := 0, 9; pos < L; pos, step = pos+step, 1+pos%2 {
				step = min(step, L-pos)
				xs, want := make([]float32, B*step*dm), make([]float64, B*step*dm)
				for b := range B {
					copy(xs[b*step*dm:(b+1)*step*dm], x[(b*L+pos)*dm:])
					for i := range step * dm {
						want[b*step*dm+i] = float64(full[(b*L+pos)*dm+i])
					}
				}
				out := make([]float32, len(xs))
				if err := l.Decode(out, xs, cache, step, &Options{Compute: ComputeBF16}); err != nil {
					t.Fatal(err)
				}
				compare(t, e.Kernels()+" bf16 layer decode", out, want, tolBF16Layer, &worstLayer)
			}
		}
	}
}

// TestComputeBF16Storage: in the bfloat16 mode, K and V given as float32
// (rounded per block, or once per call by the rounding copy when more
// than one item per KV head reads them) give bit for bit what the same
// values stored as bfloat16 give, on every set, prefill and decode
// shapes, both layouts, random options.
func TestComputeBF16Storage(t *testing.T) {
	rng := rand.New(rand.NewPCG(0xbf, 7))
	for _, lens := range [][2]int{{1, 70}, {20, 90}, {130, 130}, {300, 300}} {
		for _, dk := range []int{16, 33, 64} {
			s := randomShape(rng, dk, lens[0], lens[1])
			o := randomOptions(rng).build(rng, s)
			o.Compute = ComputeBF16
			rs, _ := s.resolve()
			q, k, v, out := inputs(rng, rs)
			k16, _ := round16(k, BFloat16)
			v16, _ := round16(v, BFloat16)
			out16 := make([]float32, len(out))
			for _, e := range bf16Engines {
				if err := e.Attention(out, q, k, v, s, &o); err != nil {
					t.Fatal(err)
				}
				if decodeRows(s) { // float32's arithmetic: ComputeF32's bits
					f32 := o
					f32.Compute = ComputeF32
					if err := e.Attention(out16, q, k, v, s, &f32); err != nil {
						t.Fatal(err)
					}
					if i := firstDiff(out, out16); i >= 0 {
						t.Fatalf("%s %+v: decode rows in the mode: out[%d] = %v, ComputeF32 %v", e.Kernels(), s, i, out[i], out16[i])
					}
					continue
				}
				if err := e.Attention16(out16, q, k16, v16, BFloat16, s, &o); err != nil {
					t.Fatal(err)
				}
				if i := firstDiff(out, out16); i >= 0 {
					t.Fatalf("%s %+v %+v: float32 K/V out[%d] = %v, bfloat16 K/V %v", e.Kernels(), s, o, i, out[i], out16[i])
				}
			}
		}
	}
}

// TestAMXEmulatedBitwise: the bfloat16 mode on the AMX drivers (QK of
// whole 32×32 blocks on the Emu twin of GemmAMX, PV transposed, Oᵀ +=
// Vᵀ·Pᵀ, on the call's paired V columns, the tails on VDPBF16PS's) gives,
// bit for bit, what the VDPBF16PS kernels alone give: every product summed
// pair by pair in the same order. So the tile path's blocking, tails and
// layouts are those of a path the oracle tests hold; the native tiles only
// change the order of each block's sums. (Causal calls differ in their
// blocks: on tiles a one-head item's diagonal runs as whole masked blocks,
// not sixteen-key edges; the bfloat16 tests hold them to the oracle.)
// TestAMXGoBitwise checks the same of GoTiles against GoPairs on any AVX2
// CPU.
func TestAMXEmulatedBitwise(t *testing.T) {
	dot, amx := engineNamed(bf16Engines, "avx512-bf16emu"), engineNamed(bf16Engines, "avx512-amxemu")
	if dot == nil || amx == nil {
		t.Skip("no AVX-512: no emulated bfloat16 or AMX set")
	}
	checkTilesBitwise(t, dot, amx)
}

// TestAMXGoBitwise is TestAMXEmulatedBitwise on the tile drivers with
// GemmAMX's blocks in Go (kernels.GoTiles) against the same Go model
// without tiles (kernels.GoPairs).
func TestAMXGoBitwise(t *testing.T) {
	if os.Getenv("FASTATTN_ISA") != "" {
		t.Skip("FASTATTN_ISA forces a set")
	}
	dot, amx := kernels.GoPairs(), kernels.GoTiles()
	if dot == nil || amx == nil {
		t.Skip("no AVX2: no GoTiles")
	}
	checkTilesBitwise(t, &Engine{ks: dot, pool: newPool(2)}, &Engine{ks: amx, pool: newPool(2)})
}

// checkTilesBitwise holds engine amx, on AMX tiles, to engine dot's bits:
// prefill shapes whose K/V the call pairs once (GQA, an odd key count, a
// value dim of its own), causal GQA with non-finite values at masked keys
// (the poisoned blocks' row-major path between transposed ones), a
// key-padding mask, and a layer of bfloat16 weights; and no allocation.
func checkTilesBitwise(t *testing.T, dot, amx *Engine) {
	t.Helper()
	// The tile path allocates nothing in steady state either (the
	// transposed accumulator and weight pairs are reserved with the
	// workspace).
	as := Shape{Batch: 1, Heads: 4, KVHeads: 4, QLen: 256, KVLen: 256, HeadDim: 64}
	aq, ak, av, aout := inputs(rand.New(rand.NewPCG(1, 1)), as)
	if n := testing.AllocsPerRun(allocRuns(), func() {
		if err := amx.Attention(aout, aq, ak, av, as, &Options{Compute: ComputeBF16}); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("the AMX path allocates %v times per call", n)
	}
	rng := rand.New(rand.NewPCG(0xa3, 7))
	for _, s := range []Shape{
		{Batch: 1, Heads: 4, KVHeads: 2, QLen: 200, KVLen: 300, HeadDim: 64},
		{Batch: 2, Heads: 2, KVHeads: 2, QLen: 130, KVLen: 130, HeadDim: 128, ValueDim: 96, Layout: BHSD},
		{Batch: 1, Heads: 8, KVHeads: 1, QLen: 40, KVLen: 517, HeadDim: 32},
	} {
		for _, c := range []struct {
			causal, poison, pad bool
		}{{}, {causal: true}, {causal: true, poison: true}, {pad: true}} {
			if c.causal && s.Heads == s.KVHeads {
				continue // one head an item: the edges differ (above)
			}
			q, k, v, out := inputs(rng, s)
			opts := &Options{Causal: c.causal, Compute: ComputeBF16}
			rs, _ := s.resolve()
			dv := rs.ValueDim
			if c.poison { // keys 5 and 77 of each head: masked for a query row's first positions
				per := dv // values from one key to the next
				if s.Layout == BSHD {
					per *= s.KVHeads
				}
				for i := 0; i < len(v); i += dv {
					if j := i / per % s.KVLen; j == 5 || j == 77 {
						v[i+1] = float32(math.Inf(1))
					}
				}
			}
			if c.pad { // a key-padding mask: the last 7 keys and key 33
				opts.Mask, opts.MaskBatch, opts.MaskQLen = make([]bool, s.Batch*s.KVLen), s.Batch, 1
				for j := range opts.Mask {
					opts.Mask[j] = j%s.KVLen < s.KVLen-7 && j%s.KVLen != 33
				}
			}
			var outs [2][]float32
			for i, e := range []*Engine{dot, amx} {
				outs[i] = make([]float32, len(out))
				if err := e.Attention(outs[i], q, k, v, s, opts); err != nil {
					t.Fatal(err)
				}
			}
			if d := firstDiff(outs[1], outs[0]); d >= 0 {
				t.Errorf("%s %+v %+v: the AMX path differs at %d: %v, VDPBF16PS %v", amx.Kernels(), s, c, d, outs[1][d], outs[0][d])
			}
		}
	}
	// A layer of bfloat16 weights: its projections on tiles (the weights
	// held in pairs at NewLayer) give VDPBF16PS's bits, its attention the
	// above.
	cfg := LayerConfig{DModel: 96, Heads: 4, KVHeads: 2, HeadDim: 32}
	_, w := testLayer(t, dot, rng, cfg, true)
	w.Type = BFloat16
	x := random(rng, 2*70*cfg.DModel)
	var outs [2][]float32
	for i, e := range []*Engine{dot, amx} {
		l, err := NewLayer(e, cfg, w)
		if err != nil {
			t.Fatal(err)
		}
		if l.w.q.P == nil || l.w.q.U16 != nil {
			t.Fatalf("%s: bfloat16 weights not held once in pairs (pairs %v, rows %v)", e.Kernels(), l.w.q.P != nil, l.w.q.U16 != nil)
		}
		outs[i] = make([]float32, len(x))
		if err := l.Forward(outs[i], x, 2, 70, &Options{Causal: true, Compute: ComputeBF16}); err != nil {
			t.Fatal(err)
		}
	}
	if d := firstDiff(outs[1], outs[0]); d >= 0 {
		t.Errorf("layer Forward: the AMX path differs at %d: %v, VDPBF16PS %v", d, outs[1][d], outs[0][d])
	}
}

// TestComputeBF16Denormals pins the mode's rule for denormal bfloat16
// operands: the bfloat16 instructions (VDPBF16PS, TDPBF16PS, BFDOT) and
// GoTiles' Go model of them read them as zero, the float32 kernels (and
// the Emu twins of the instructions) keep their value. A query of 1e-39 (denormal, as float32
// and as bfloat16) against a key of 3e38 scores 0.3 on the float32
// kernels and 0 on the instruction — an adversarial case found the
// native path losing such a score — so each engine is held to its own
// side of the rule: every output 0.149 (kept) or exactly 0 (read as
// zero).
func TestComputeBF16Denormals(t *testing.T) {
	s := Shape{Batch: 1, Heads: 1, QLen: 17, KVLen: 2, HeadDim: 2} // more rows than a decode step's (tile.DecodeRows)
	q := make([]float32, 17*2)
	for i := 0; i < 17; i++ {
		q[2*i] = 1e-39 // bfloat16 0x000b: denormal
	}
	k := []float32{3e38, 0, 0, 0}
	v := []float32{1, 1, -1, -1}
	w0 := math.Exp(0.3) / (math.Exp(0.3) + 1) // the float32 path's weight of key 0
	kept := float32(2*w0 - 1)
	for _, e := range bf16Engines {
		out := make([]float32, 17*2)
		if err := e.Attention(out, q, k, v, s, &Options{Scale: 1, Compute: ComputeBF16}); err != nil {
			t.Fatal(err)
		}
		ks := e.ks
		flushes := ks.BF16ReadsDenormalsAsZero() && (ks.BF16Preferred() || ks.AMX())
		for i, x := range out {
			q0 := fallback.BF16ToF32(fallback.F32ToBF16(1e-39))
			var want float32
			if !flushes { // the float32 path's score: bf16(q)·bf16(k), the key rounded up to 3.0019e38
				sc := float64(q0) * float64(fallback.BF16ToF32(fallback.F32ToBF16(3e38)))
				wk := math.Exp(sc) / (math.Exp(sc) + 1)
				want = float32(2*wk - 1)
			}
			if !(math.Abs(float64(x-want)) <= 4e-3) { // a NaN fails too
				t.Errorf("%s (denormals read as zero: %v): out[%d] = %v, want %v (the float32 path's, unrounded: %v)", e.Kernels(), flushes, i, x, want, kept)
				break
			}
		}
	}
}

// TestComputeBF16MixedStep: one DecodeSeqs call in the bfloat16 mode
// that mixes a prompt chunk with decode tokens (a serving step) rounds
// the chunk's attention (many rows per KV head) and leaves the decode
// tokens' to float32 (tile.DecodeRows): their rows are ComputeF32's bits,
// on every engine, so the mode never slows the decode part of a step.
func TestComputeBF16MixedStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(0xbf, 66))
	cfg := LayerConfig{DModel: 64, Heads: 8, KVHeads: 2, HeadDim: 16, Rotary: Rotary{Dims: 16, Base: 1e4}}
	counts := []int{1, 40, 1} // decode, a prompt chunk (160 rows a KV head), decode
	for _, e := range bf16Engines {
		l, _ := testLayer(t, e, rng, cfg, true)
		x := random(rng, 42*cfg.DModel)
		var outs [2][]float32
		for i, mode := range []Compute{ComputeF32, ComputeBF16} {
			c, err := l.NewCache(3, 256)
			if err != nil {
				t.Fatal(err)
			}
			prompt := random(rand.New(rand.NewPCG(1, 1)), 3*30*cfg.DModel)
			if err := l.DecodeSeqs(nil, make([]float32, len(prompt)), prompt, c, []int{30, 30, 30}, nil); err != nil {
				t.Fatal(err)
			}
			outs[i] = make([]float32, len(x))
			if err := l.DecodeSeqs(nil, outs[i], x, c, counts, &Options{Compute: mode}); err != nil {
				t.Fatal(err)
			}
		}
		dm := cfg.DModel
		for _, r := range []int{0, 41} { // the decode tokens' rows
			if d := firstDiff(outs[1][r*dm:(r+1)*dm], outs[0][r*dm:(r+1)*dm]); d >= 0 {
				t.Errorf("%s: decode token at row %d: the mode's output differs from ComputeF32's at %d", e.Kernels(), r, d)
			}
		}
		if firstDiff(outs[1][dm:41*dm], outs[0][dm:41*dm]) < 0 {
			t.Errorf("%s: the prompt chunk's rows were not rounded in the mode", e.Kernels())
		}
	}
}
