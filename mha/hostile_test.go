package mha

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"
)

// Regression tests for the hostile calls of issue 34: each was accepted
// (or misread) before, and must now be an error naming the problem that
// changes nothing.

func wantBuffer(t *testing.T, what string, err error, naming string) {
	t.Helper()
	if !errors.Is(err, ErrBuffer) || !strings.Contains(err.Error(), naming) {
		t.Errorf("%s: %v, want ErrBuffer naming %q", what, err, naming)
	}
}

// TestLayerOutputsAgainstEveryInput: a layer's out (and LSE, and its
// cache) against CrossKV.K/V, Bias, Mask, ALiBi, Sinks and KVLens.
func TestLayerOutputsAgainstEveryInput(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 1))
	cfg := LayerConfig{DModel: 64, Heads: 4, KVHeads: 2, HeadDim: 16}
	for _, e := range engines {
		l, _ := testLayer(t, e, rng, cfg, false)
		x := random(rng, 2*64)
		kv, err := l.NewCrossKV(random(rng, 4*64), 1, 4) // K: [4][2][16], 128 floats
		if err != nil {
			t.Fatal(err)
		}
		k0 := append([]float32(nil), kv.K...)
		wantBuffer(t, "Cross into CrossKV.K", l.Cross(kv.K[:128], x, kv, 2, nil), "CrossKV.K")
		if firstDiff(kv.K, k0) >= 0 {
			t.Errorf("a refused Cross changed the CrossKV")
		}
		big := make([]float32, 2*9*64)
		out := big[:2*9*64]
		wantBuffer(t, "Forward into its Bias", l.Forward(out, random(rng, 2*9*64), 2, 9,
			&Options{Bias: big[:2*4*9*9], BiasBatch: 2, BiasHeads: 4}), "Bias")
		lens := []int{9, 9}
		wantBuffer(t, "LSE over KVLens", l.Forward(out, random(rng, 2*9*64), 2, 9,
			&Options{KVLens: lens, OutLSE: intsAsFloats(lens)}), "KVLens")
		cache, err := l.NewCache(2, 8)
		if err != nil {
			t.Fatal(err)
		}
		y := make([]float32, 2*64)
		wantBuffer(t, "DecodeSeqs into its Sinks", l.DecodeSeqs(context.Background(), y, x, cache, []int{1, 1},
			&Options{Sinks: y[4:8]}), "Sinks")
		wantBuffer(t, "DecodeSeqs into its ALiBi", l.DecodeSeqs(context.Background(), y, x, cache, []int{1, 1},
			&Options{ALiBi: y[64:68]}), "ALiBi")
		if cache.Len(0) != 0 || cache.Len(1) != 0 {
			t.Errorf("a refused DecodeSeqs appended tokens: lengths %d, %d", cache.Len(0), cache.Len(1))
		}
	}
}

// intsAsFloats returns the memory of x seen as float32s (a caller's
// aliasing mistake, made on purpose).
func intsAsFloats(x []int) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(x))), len(x)*int(unsafe.Sizeof(x[0]))/4)
}

// TestExactBufferLengths: a buffer longer than the shape needs is
// ErrBuffer too, so a miscounted batch is an error, not an answer from the
// wrong rows.
func TestExactBufferLengths(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 2))
	cfg := LayerConfig{DModel: 32, Heads: 2, HeadDim: 16}
	for _, e := range engines {
		l, _ := testLayer(t, e, rng, cfg, false)
		cache, err := l.NewCache(2, 8)
		if err != nil {
			t.Fatal(err)
		}
		x, out := random(rng, 3*32), make([]float32, 3*32) // 3 rows for counts summing to 2
		wantBuffer(t, "DecodeSeqs with a row too many", l.DecodeSeqs(context.Background(), out, x, cache, []int{1, 1}, nil), "x has 96 elements, the shape needs 64")
		if cache.Len(0) != 0 || cache.Len(1) != 0 {
			t.Errorf("lengths %d, %d after a refused call", cache.Len(0), cache.Len(1))
		}
		wantBuffer(t, "out too long", l.DecodeSeqs(context.Background(), out, x[:64], cache, []int{1, 1}, nil), "out has 96")
		wantBuffer(t, "Forward x too long", l.Forward(out[:64], x, 1, 2, nil), "xq has 96")
		s := Shape{Batch: 1, Heads: 2, QLen: 3, KVLen: 3, HeadDim: 16}
		q, k, v, o := inputs(rng, s)
		wantBuffer(t, "Attention out too long", e.Attention(append(o, 0), q, k, v, s, nil), "out has 97")
		wantBuffer(t, "Attention LSE too long", e.Attention(o, q, k, v, s, &Options{OutLSE: make([]float32, 7)}), "LSE has 7")
		wantBuffer(t, "Widen16 dst too long", Widen16(make([]float32, 3), make([]uint16, 2), BFloat16), "dst has 3")
	}
}

// TestWiden16NaN: Widen16's NaN rule as documented: float16 NaNs get the
// quiet bit, bfloat16 is a plain shift (a signalling NaN stays one).
func TestWiden16NaN(t *testing.T) {
	for _, c := range []struct {
		t    DType
		in   uint16
		want uint32
	}{
		{BFloat16, 0x7f81, 0x7f810000}, {BFloat16, 0xffc1, 0xffc10000}, {BFloat16, 0x7f80, 0x7f800000},
		{Float16, 0x7c01, 0x7fc02000}, {Float16, 0xfe01, 0xffc02000}, {Float16, 0x7c00, 0x7f800000},
	} {
		dst := make([]float32, 1)
		if err := Widen16(dst, []uint16{c.in}, c.t); err != nil {
			t.Fatal(err)
		}
		if got := math.Float32bits(dst[0]); got != c.want {
			t.Errorf("Widen16(%#04x, %v) = %#08x, want %#08x", c.in, c.t, got, c.want)
		}
	}
}

// TestMergeValueDimOnly: Merge uses ValueDim, so HeadDim 0 is fine.
func TestMergeValueDimOnly(t *testing.T) {
	s := Shape{Batch: 1, Heads: 2, QLen: 3, ValueDim: 4}
	part := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24}
	lse := []float32{0, 0, 0, 0, 0, 0}
	out := make([]float32, len(part))
	if err := Merge(out, nil, [][]float32{part, part}, [][]float32{lse, lse}, s); err != nil {
		t.Fatal(err)
	}
	if firstDiff(out, part) >= 0 {
		t.Errorf("merging a part with itself: %v, want %v", out, part)
	}
}

// TestLayerConfigDefaults: Config reports the defaults NewLayer applied.
func TestLayerConfigDefaults(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 3))
	cfg := LayerConfig{DModel: 32, Heads: 2, HeadDim: 16, Rotary: Rotary{Dims: 16}}
	l, _ := testLayer(t, engines[0], rng, cfg, false)
	got := l.Config()
	if got.NormEps != 1e-6 || got.Rotary.Base != 10000 || got.KVHeads != 2 || got.ValueDim != 16 {
		t.Errorf("Config() = %+v, want NormEps 1e-6, Rotary.Base 10000, Scale 1, KVHeads 2, ValueDim 16", got)
	}
}

// TestALiBiSpan: ALiBi's distances are float32 integers, so a call whose
// distances reach 2^24 (an absurd QueryOffset, found by FuzzOptionEdges)
// is ErrOption instead of a result that depends on lost bits.
func TestALiBiSpan(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 12))
	s := Shape{Batch: 1, Heads: 2, QLen: 3, KVLen: 5, HeadDim: 8}
	q, k, v, out := inputs(rng, s)
	for _, off := range []int{MaxALiBiSpan, -MaxALiBiSpan, math.MaxInt / 4} {
		err := engines[0].Attention(out, q, k, v, s, &Options{ALiBi: []float32{0.5, 0.25}, QueryOffset: &off})
		if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "ALiBi") {
			t.Errorf("QueryOffset %d with ALiBi: %v, want ErrOption naming ALiBi", off, err)
		}
	}
	off := MaxALiBiSpan - 9
	if err := engines[0].Attention(out, q, k, v, s, &Options{ALiBi: []float32{0.5, 0.25}, QueryOffset: &off}); err != nil {
		t.Errorf("QueryOffset %d with ALiBi: %v", off, err)
	}
}
