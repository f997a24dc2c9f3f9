package mha

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// engines holds one Engine per kernel set this CPU runs, and one on the
// emulated bfloat16 kernels (kernels.EmulatedBF16) where there is AVX-512:
// every test that checks numbers runs on all of them.
var engines []*Engine

// bf16Engines are engines, with AVX-512 an engine on the emulated AMX
// tiles, and with AVX2 one on GemmAMX's blocks in Go (kernels.GoTiles):
// the engines of the bfloat16 mode's tests.
var bf16Engines []*Engine

// int8Engines are engines and, where the CPU has AVX512_VNNI, an engine
// on the avx2 set whose DecodeQ8 is the AVX-VNNI kernel's Emu twin and
// one on EmulatedAMX, whose ScoresQ8 is AMX-INT8's Emu twin: the engines
// of the int8 mode's oracle tests.
var int8Engines []*Engine

func TestMain(m *testing.M) {
	for _, ks := range kernels.Available() {
		e, err := NewEngine(Config{ISA: ks.Name, Threads: 2})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		engines = append(engines, e)
	}
	// The avx512 set with its bfloat16 kernels' Emu twins: the bfloat16
	// mode's kernel path runs on every AVX-512 CPU, AVX512_BF16 or not.
	if ks := kernels.EmulatedBF16(); ks != nil {
		engines = append(engines, &Engine{ks: ks, pool: newPool(2)})
	}
	// The bfloat16 mode's tests also run the Emu twin of AMX's GemmAMX:
	// the tile drivers' path (it differs from avx512-bf16emu in that mode
	// only, so the other tests leave it out).
	bf16Engines = engines
	if ks := kernels.EmulatedAMX(); ks != nil {
		bf16Engines = append(append([]*Engine(nil), engines...), &Engine{ks: ks, pool: newPool(2)})
	}
	// And the tile drivers with GemmAMX's blocks in Go (kernels.GoTiles):
	// on any AVX2 CPU, AVX-512 or not.
	if ks := kernels.GoTiles(); ks != nil && os.Getenv("FASTATTN_ISA") == "" {
		bf16Engines = append(append([]*Engine(nil), bf16Engines...), &Engine{ks: ks, pool: newPool(2)})
	}
	int8Engines = engines
	if ks := kernels.EmulatedVNNI(); ks != nil && os.Getenv("FASTATTN_ISA") == "" {
		int8Engines = append(append([]*Engine(nil), engines...), &Engine{ks: ks, pool: newPool(2)})
	}
	if ks := kernels.EmulatedAMX(); ks != nil && ks.HasScoresQ8() && os.Getenv("FASTATTN_ISA") == "" {
		int8Engines = append(append([]*Engine(nil), int8Engines...), &Engine{ks: ks, pool: newPool(2)})
	}
	// The native AMX-INT8 kernel, which the avx512 set runs only when
	// FASTATTN_AMX asks for it.
	if ks := kernels.AMXInt8(); ks != nil && kernels.AMXInt8Status() != nil && os.Getenv("FASTATTN_ISA") == "" {
		int8Engines = append(append([]*Engine(nil), int8Engines...), &Engine{ks: ks, pool: newPool(2)})
	}
	// Where the CPU runs AMX, the same set without it (Config.NoAMX).
	for _, e := range engines {
		if ks := e.ks.WithoutAMX(); ks != e.ks {
			off := &Engine{ks: ks, pool: newPool(2)}
			bf16Engines = append(append([]*Engine(nil), bf16Engines...), off)
			int8Engines = append(append([]*Engine(nil), int8Engines...), off)
		}
	}
	os.Exit(m.Run())
}

// engineNamed returns the engine of list on kernel set name, or nil.
func engineNamed(list []*Engine, name string) *Engine {
	for _, e := range list {
		if e.Kernels() == name {
			return e
		}
	}
	return nil
}

// firstDiff returns the first index where got and want differ bit for
// bit (NaNs included), or -1.
func firstDiff(got, want []float32) int {
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return i
		}
	}
	return -1
}

// random returns n uniform values in [-1, 1).
func random(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = 2*rng.Float32() - 1
	}
	return x
}

// inputs returns random q, k, v and an output buffer for shape s.
func inputs(rng *rand.Rand, s Shape) (q, k, v, out []float32) {
	s, _ = s.resolve()
	q = random(rng, s.Batch*s.QLen*s.Heads*s.HeadDim)
	k = random(rng, s.Batch*s.KVLen*s.KVHeads*s.HeadDim)
	v = random(rng, s.Batch*s.KVLen*s.KVHeads*s.ValueDim)
	out = make([]float32, s.Batch*s.QLen*s.Heads*s.ValueDim)
	return
}

// specOf is the oracle's view of an attention call.
func specOf(s Shape, o *Options) fallback.Spec {
	s, _ = s.resolve()
	sp := fallback.Spec{
		Batch: s.Batch, Heads: s.Heads, KVHeads: s.KVHeads, QLen: s.QLen, KVLen: s.KVLen,
		HeadDim: s.HeadDim, ValueDim: s.ValueDim, HeadsMajor: s.Layout == BHSD,
		Scale: 1 / math.Sqrt(float64(s.HeadDim)), BiasBatch: 1, BiasHeads: 1,
	}
	if o == nil {
		return sp
	}
	if o.Scale != 0 {
		sp.Scale = float64(o.Scale)
	}
	sp.Softcap = float64(o.Softcap)
	sp.Causal, sp.Window, sp.KVLens = o.Causal, o.Window, o.KVLens
	if o.QueryOffset != nil {
		sp.OffsetSet, sp.Offset = true, *o.QueryOffset
	}
	if o.Bias != nil {
		sp.Bias, sp.BiasBatch, sp.BiasHeads, sp.BiasQLen = o.Bias, max(o.BiasBatch, 1), max(o.BiasHeads, 1), o.BiasQLen
	}
	if o.Mask != nil {
		sp.Mask, sp.MaskBatch, sp.MaskHeads, sp.MaskQLen = o.Mask, max(o.MaskBatch, 1), max(o.MaskHeads, 1), o.MaskQLen
	}
	sp.Slopes, sp.Sinks = o.ALiBi, o.Sinks
	return sp
}

// Tolerance against the float64 oracle. The output is a convex combination
// of values in [-1, 1]; float32 rounds each score's Dk-term dot product
// (relative error ~ sqrt(Dk)·2^-24), exp adds at most 2 ulp and the sums over
// at most a few hundred keys add ~ sqrt(Lk)·2^-24 each. Both stay far below
// 1e-5 for the shapes tested; softcap (tanh from exp, absolute error ~ c·2^-24
// on the score) and biases of magnitude up to 4 keep it there. The measured
// worst case over the whole suite is printed by TestReportError with -v.
const (
	tolOut = 2e-5
	tolLSE = 2e-5
)

// worst tracks the largest error seen, for the record.
var worstOut, worstLSE float64

// compare checks out and lse against the oracle and reports the first
// mismatches. A NaN or infinite expectation must be met exactly (NaN for
// NaN, the same infinity); finite ones within tol, relative to 1 + |want|.
func compare(t *testing.T, what string, got []float32, want []float64, tol float64, worst *float64) {
	t.Helper()
	bad := 0
	for i, w := range want {
		g := float64(got[i])
		switch {
		case math.IsNaN(w):
			if !math.IsNaN(g) {
				t.Errorf("%s[%d] = %v, want NaN", what, i, g)
				bad++
			}
		case math.IsInf(w, 0):
			if g != w {
				t.Errorf("%s[%d] = %v, want %v", what, i, g, w)
				bad++
			}
		default:
			err := math.Abs(g-w) / (1 + math.Abs(w))
			if !(err <= tol) { // NaN fails too
				t.Errorf("%s[%d] = %v, want %v (err %.3g > %.3g)", what, i, g, w, err, tol)
				bad++
			}
			*worst = max(*worst, err)
		}
		if bad >= 5 {
			t.Fatalf("%s: too many mismatches", what)
		}
	}
}

// checkCase runs one call with random inputs on every engine and compares
// it with the oracle.
func checkCase(t *testing.T, rng *rand.Rand, s Shape, o Options) {
	t.Helper()
	rs, err := s.resolve()
	if err != nil {
		t.Fatal(err)
	}
	q, k, v, _ := inputs(rng, rs)
	checkInputs(t, rs, o, q, k, v)
}

// checkInputs runs one call on every engine and compares it with the
// oracle.
func checkInputs(t *testing.T, s Shape, o Options, q, k, v []float32) {
	t.Helper()
	wantOut, wantLSE := fallback.Attention(specOf(s, &o), q, k, v)
	for _, e := range engines {
		out := make([]float32, len(wantOut))
		for i := range out {
			out[i] = 12345 // every element must be written
		}
		lse := make([]float32, len(wantLSE))
		o.OutLSE = lse
		if err := e.Attention(out, q, k, v, s, &o); err != nil {
			t.Fatalf("%s: %+v %+v: %v", e.Kernels(), s, o, err)
		}
		compare(t, e.Kernels()+" out", out, wantOut, tolOut, &worstOut)
		compare(t, e.Kernels()+" lse", lse, wantLSE, tolLSE, &worstLSE)
		if t.Failed() {
			t.Fatalf("%s: shape %+v options %+v", e.Kernels(), s, o)
		}
	}
}
