package mha

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

// quantizedQueries returns the values ComputeInt8 multiplies K by: each
// row of q (dk elements) times the scale s.Scale resolves to, quantized
// as K's rows are and dequantized (rows with a NaN or ±Inf keep their
// scaled values), and the scale the oracle then takes (1).
func quantizedQueries(t *testing.T, s Shape, o *Options, q []float32) ([]float32, fallback.Spec) {
	t.Helper()
	rs, err := s.resolve()
	if err != nil {
		t.Fatal(err)
	}
	spec := specOf(rs, o)
	scale := float32(spec.Scale)
	dk := rs.HeadDim
	out := make([]float32, len(q))
	for i, x := range q {
		out[i] = x * scale
	}
	nb := QuantBlocks(dk)
	row := fallback.QueryQ8{Q: make([]int8, fallback.QueryQ8Ld(dk)), S: make([]float32, nb), Corr: make([]int32, nb), Ld: fallback.QueryQ8Ld(dk)}
	for r := 0; r < len(q)/dk; r++ {
		x := out[r*dk : (r+1)*dk]
		if fallback.NonFinite(x) >= 0 {
			continue
		}
		fallback.QuantizeQuery(row, x, 1, dk)
		fallback.DequantizeQuery(x, row, 1, dk)
	}
	spec.Scale = 1
	return out, spec
}

// checkInt8Mode runs AttentionInt8 in ComputeInt8 on every engine against
// the float64 oracle on the quantized queries and the dequantized K and V,
// within the float32 tolerance: the mode's only departure from the
// float32 arithmetic is the queries' quantization, in the oracle's inputs.
func checkInt8Mode(t *testing.T, rng *rand.Rand, s Shape, o Options) {
	t.Helper()
	checkIntMode(t, rng, s, o, Int8)
}

// checkIntMode is checkInt8Mode over K/V stored as typ (Int8 or Int4).
func checkIntMode(t *testing.T, rng *rand.Rand, s Shape, o Options, typ DType) {
	t.Helper()
	rs, err := s.resolve()
	if err != nil {
		t.Fatal(err)
	}
	o.Compute = ComputeInt8
	q, k, v, _ := inputs(rng, rs)
	kf, vf, call := storeQuantized(t, typ, s, k, v, rs.HeadDim, rs.ValueDim)
	qq, spec := quantizedQueries(t, s, &o, q)
	wantOut, wantLSE := fallback.Attention(spec, qq, kf, vf)
	compareEngines(t, typ.String()+" K/V, int8 mode", s, o, q, call, wantOut, wantLSE, tolOut)
}

// storeQuantized quantizes k and v (head dims kd and vd) to typ (Int8 or
// Int4) and returns their dequantized values and the call of shape s on
// them (AttentionInt8 or AttentionInt4).
func storeQuantized(t *testing.T, typ DType, s Shape, k, v []float32, kd, vd int) ([]float32, []float32, storedCall) {
	t.Helper()
	if typ == Int4 {
		k4, kf := quantize4(t, k, kd)
		v4, vf := quantize4(t, v, vd)
		return kf, vf, func(e *Engine, out, q []float32, o *Options) error { return e.AttentionInt4(out, q, k4, v4, s, o) }
	}
	k8, kf := quantize8(t, k, kd)
	v8, vf := quantize8(t, v, vd)
	return kf, vf, func(e *Engine, out, q []float32, o *Options) error { return e.AttentionInt8(out, q, k8, v8, s, o) }
}

// TestComputeInt8: the int8 mode on every set (AVX512_VNNI's integer
// decode kernel where the CPU has it), prefill and decode steps, GQA
// ratios 1..16 (a decode item's rows 1..16), both layouts, head dims at
// every tail of a scale block and of the kernel's 64-byte chunks (36,
// 100, 132; 33 and 66: not multiples of 4, the float32 kernels), every
// option at random.
func TestComputeInt8(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(0x98, 8))
	for di, dk := range []int{4, 33, 36, 64, 66, 100, 128, 132, 576} {
		for li, lens := range [][2]int{{1, 17}, {1, 130}, {5, 70}, {1, 1029}} {
			if !longTests() && (di+li)%2 != 0 {
				continue
			}
			s := randomShape(rng, dk, lens[0], lens[1])
			checkInt8Mode(t, rng, s, randomOptions(rng).build(rng, s))
		}
	}
	gqaCases(rng, 12, func(s Shape, o Options) { checkInt8Mode(t, rng, s, o) })
}

// TestComputeInt8Blocks: the int8 mode's flash blocks, items of more
// query rows than the fused decode takes (prefill, and 32-128 heads over
// one KV head as MLA's absorbed decode has them), int8 and int4 K/V,
// whose scores come from ScoresQ8 where the set has it: head dims at every tail of a scale block
// and of the kernel's 4-dim steps, key counts around its 6-key tile and
// the KV block, every option at random (masks, windows and biases run the
// blocks' edges and filters on those scores).
func TestComputeInt8Blocks(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(0x98, 9))
	for di, dk := range []int{4, 33, 36, 64, 100, 128, 576} {
		for li, lens := range [][2]int{{17, 17}, {40, 301}, {100, 700}, {1, 523}} {
			if !longTests() && (di+li)%2 != 0 {
				continue
			}
			s := randomShape(rng, dk, lens[0], lens[1])
			if lens[0] == 1 { // one position, many heads over one KV head
				s.Heads, s.KVHeads = 32<<rng.IntN(3), 1
			}
			o := randomOptions(rng).build(rng, s)
			checkInt8Mode(t, rng, s, o)
			checkIntMode(t, rng, s, o, Int4) // int4 K widened to int8 for ScoresQ8
		}
	}
}

// TestComputeInt8Errors: the mode over K that is not int8 is ErrOption,
// naming the mode; an unknown mode names the three.
func TestComputeInt8Errors(t *testing.T) {
	s := Shape{Batch: 1, Heads: 2, QLen: 1, KVLen: 20, HeadDim: 32}
	q, out := make([]float32, 64), make([]float32, 64)
	k, v := make([]float32, 1280), make([]float32, 1280)
	o := &Options{Compute: ComputeInt8}
	wantErr(t, "float32 K", Attention(out, q, k, v, s, o), ErrOption)
	k16 := make([]uint16, 1280)
	wantErr(t, "float16 K", Attention16(out, q, k16, k16, Float16, s, o), ErrOption)
	wantErr(t, "unknown mode", Attention(out, q, k, v, s, &Options{Compute: ComputeInt8 + 1}), ErrOption)
	k8 := Int8KVTensor{Data: make([]int8, 1280), Scales: make([]float32, 40)}
	wantErr(t, "int8 K", AttentionInt8(out, q, k8, k8, s, o), nil)
}

// TestComputeInt8NonFinite: a query row holding a NaN or an Inf is not
// quantized, so its output is the float32 mode's (NaN), on the decode
// kernel's path (a GQA step) and the flash path alike, and the other
// rows of its item keep the mode.
func TestComputeInt8NonFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(0x98, 9))
	for _, lq := range []int{1, 9} {
		s := Shape{Batch: 1, Heads: 8, KVHeads: 2, QLen: lq, KVLen: 300, HeadDim: 64}
		q, k, v, out := inputs(rng, s)
		k8, _ := quantize8(t, k, 64)
		v8, _ := quantize8(t, v, 64)
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
			q[5*64+3] = bad // token 0, head 5
			for _, e := range engines {
				for _, c := range []Compute{ComputeF32, ComputeInt8} {
					if err := e.AttentionInt8(out, q, k8, v8, s, &Options{Compute: c}); err != nil {
						t.Fatal(err)
					}
					for i := 5 * 64; i < 6*64; i++ {
						if !math.IsNaN(float64(out[i])) {
							t.Fatalf("%s %v lq %d q %v: out[%d] = %v, want NaN", e.Kernels(), c, lq, bad, i, out[i])
						}
					}
					for i := 4 * 64; i < 5*64; i++ { // head 4, same KV head
						if math.IsNaN(float64(out[i])) || math.IsInf(float64(out[i]), 0) {
							t.Fatalf("%s %v lq %d: head 4 out[%d] = %v", e.Kernels(), c, lq, i, out[i])
						}
					}
				}
			}
		}
	}
}

// TestComputeInt8Accuracy measures what the mode costs on data of unit
// scale (q, k, v ~ N(0, 1)), decode rows of a GQA group over 4096 keys:
// the output of int8 K/V in the float32 mode and in the int8 mode against
// the exact result on float32 K/V, and the int8 mode against the float32
// mode on the same int8 K/V (relative RMS error, and the largest
// element's error relative to the largest output). Bounded at 1.2% and
// 2% against the exact result, 0.8% and 1.5% between the modes (the
// figures in compute.go's doc come from its log).
func TestComputeInt8Accuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(0xacc, 8))
	errs := func(got []float32, want []float64) (rel, worst float64) {
		var num, den, peak float64
		for i, w := range want {
			d := float64(got[i]) - w
			num, den, worst, peak = num+d*d, den+w*w, max(worst, math.Abs(d)), max(peak, math.Abs(w))
		}
		return math.Sqrt(num / den), worst / peak
	}
	for _, dk := range []int{64, 128} {
		s, q, k, v, exact := accuracyCase(rng, dk)
		k8, _ := quantize8(t, k, dk)
		v8, _ := quantize8(t, v, dk)
		for _, e := range engines {
			var outs [2][]float32
			for i, c := range []Compute{ComputeF32, ComputeInt8} {
				outs[i] = make([]float32, len(exact))
				if err := e.AttentionInt8(outs[i], q, k8, v8, s, &Options{Compute: c}); err != nil {
					t.Fatal(err)
				}
				rel, worst := errs(outs[i], exact)
				t.Logf("%s D=%d int8 K/V, %v mode: against exact, relative error %.3g, largest %.3g of the largest output", e.Kernels(), dk, c, rel, worst)
				if !(rel <= 1.2e-2 && worst <= 2e-2) {
					t.Errorf("%s D=%d %v mode: relative error %.3g, largest %.3g of the largest output", e.Kernels(), dk, c, rel, worst)
				}
			}
			f32 := make([]float64, len(exact))
			for i, x := range outs[0] {
				f32[i] = float64(x)
			}
			rel, worst := errs(outs[1], f32)
			t.Logf("%s D=%d int8 K/V: int8 mode against float32 mode, relative %.3g, largest %.3g of the largest output", e.Kernels(), dk, rel, worst)
			if !(rel <= 8e-3 && worst <= 1.5e-2) {
				t.Errorf("%s D=%d: int8 mode against float32 mode, relative %.3g, largest %.3g", e.Kernels(), dk, rel, worst)
			}
		}
	}
}

// TestComputeInt8Threads: the int8 mode's results are bit-identical at 1
// and 2 threads (the test engines' pools) on every engine, a split decode step (chunks of one KV
// head on several workers, each quantizing the rows once) and a prefill.
func TestComputeInt8Threads(t *testing.T) {
	rng := rand.New(rand.NewPCG(0x98, 10))
	for _, lq := range []int{1, 33} {
		s := Shape{Batch: 2, Heads: 8, KVHeads: 2, QLen: lq, KVLen: 1500, HeadDim: 128}
		q, k, v, _ := inputs(rng, s)
		k8, _ := quantize8(t, k, 128)
		v8, _ := quantize8(t, v, 128)
		for _, e := range engines {
			var first []float32
			for _, th := range []int{1, 2} {
				out := make([]float32, len(q))
				if err := e.AttentionInt8(out, q, k8, v8, s, &Options{Compute: ComputeInt8, Threads: th, Causal: lq > 1}); err != nil {
					t.Fatal(err)
				}
				if first == nil {
					first = out
				} else if i := firstDiff(out, first); i >= 0 {
					t.Fatalf("%s Lq %d: %d threads out[%d] = %v, 1 thread %v", e.Kernels(), lq, th, i, out[i], first[i])
				}
			}
		}
	}
}

// TestAMXInt8EmulatedBitwise holds the int8 mode on AMX-INT8's Emu twin
// (EmulatedAMX: ScoresQ8AMX's whole groups of 16 keys, the rest on
// ScoresQ8AVX512) to the avx512 set's bits (ScoresQ8AVX512 alone) over
// prefill and many heads over one KV head, int8 and int4 K/V, causal or
// not: the tiles' scores must equal VPDPBUSD's. It also asks the tile
// path for no allocation in steady state.
func TestAMXInt8EmulatedBitwise(t *testing.T) {
	vnni, amx := engineNamed(int8Engines, "avx512"), engineNamed(int8Engines, "avx512-amxemu")
	if vnni == nil || amx == nil || !vnni.ks.HasScoresQ8() {
		t.Skip("no AVX512_VNNI: no ScoresQ8 to hold the emulated AMX-INT8 set to")
	}
	rng := rand.New(rand.NewPCG(0xa8, 3))
	for _, s := range []Shape{
		{Batch: 1, Heads: 4, KVHeads: 2, QLen: 200, KVLen: 300, HeadDim: 64},
		{Batch: 2, Heads: 2, KVHeads: 2, QLen: 130, KVLen: 133, HeadDim: 96, ValueDim: 80, Layout: BHSD},
		{Batch: 1, Heads: 64, KVHeads: 1, QLen: 1, KVLen: 517, HeadDim: 576, ValueDim: 512},
	} {
		rs, err := s.resolve()
		if err != nil {
			t.Fatal(err)
		}
		q, k, v, _ := inputs(rng, rs)
		for _, typ := range []DType{Int8, Int4} {
			_, _, call := storeQuantized(t, typ, s, k, v, rs.HeadDim, rs.ValueDim)
			for _, causal := range []bool{false, true} {
				var outs [2][]float32
				for i, e := range []*Engine{vnni, amx} {
					outs[i] = make([]float32, len(q)/rs.HeadDim*rs.ValueDim)
					if err := call(e, outs[i], q, &Options{Causal: causal, Compute: ComputeInt8}); err != nil {
						t.Fatal(err)
					}
				}
				if d := firstDiff(outs[1], outs[0]); d >= 0 {
					t.Fatalf("%+v %v causal=%v: out[%d] = %g on the emulated tiles, %g on VPDPBUSD", s, typ, causal, d, outs[1][d], outs[0][d])
				}
			}
			out, o := make([]float32, len(q)/rs.HeadDim*rs.ValueDim), &Options{Compute: ComputeInt8}
			if n := testing.AllocsPerRun(allocRuns(), func() {
				if err := call(amx, out, q, o); err != nil {
					t.Fatal(err)
				}
			}); n != 0 {
				t.Errorf("%+v %v: the AMX-INT8 path allocates %v times per call", s, typ, n)
			}
		}
	}
}

// TestComputeInt8NoAllocs: after a shape's first call, the int8 mode
// allocates nothing on any worker (its flash items' quantized rows and a
// split step's memo are reserved for every worker by that first call),
// over int8 and int4 K/V, a split decode step and a prefill, on three
// workers.
func TestComputeInt8NoAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(68, 3))
	for _, ks := range int8Engines {
		e := &Engine{ks: ks.ks, pool: newPool(3)}
		for _, s := range []Shape{
			{Batch: 1, Heads: 8, KVHeads: 2, QLen: 1, KVLen: 4096, HeadDim: 64},  // split: the memo
			{Batch: 2, Heads: 4, KVHeads: 4, QLen: 96, KVLen: 200, HeadDim: 128}, // flash items
		} {
			for _, typ := range []DType{Int8, Int4} {
				q, k, v, _ := inputs(rng, s)
				_, _, call := storeQuantized(t, typ, s, k, v, s.HeadDim, s.HeadDim)
				out := make([]float32, len(q))
				o := &Options{Compute: ComputeInt8}
				step := func() {
					if err := call(e, out, q, o); err != nil {
						t.Fatal(err)
					}
				}
				if n, where := stepAllocs(t, 12, step); n != 0 {
					t.Errorf("%s %v K/V %+v: %d allocations in 12 calls after the first, at %s", e.Kernels(), typ, s, n, where)
				}
			}
		}
	}
}

// accuracyCase is the data of the quantized K/V accuracy tests: a GQA
// decode row per head (8 heads on 2 KV heads) over 4096 keys (1024
// without FASTATTN_LONG) of N(0, 1) values at head dim dk, and the
// float64 result on them.
func accuracyCase(rng *rand.Rand, dk int) (s Shape, q, k, v []float32, exact []float64) {
	s = Shape{Batch: 1, Heads: 8, KVHeads: 2, QLen: 1, KVLen: 4096, HeadDim: dk}
	if !longTests() {
		s.KVLen = 1024
	}
	q = normal(rng, s.Heads*dk)
	k = normal(rng, s.KVLen*s.KVHeads*dk)
	v = normal(rng, s.KVLen*s.KVHeads*dk)
	exact, _ = fallback.Attention(specOf(s, &Options{}), q, k, v)
	return s, q, k, v, exact
}
