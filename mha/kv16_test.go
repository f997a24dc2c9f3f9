package mha

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/fastattn/fastattn/fallback"
)

var types16 = []DType{Float16, BFloat16}

// round16 rounds x to t and returns the 16-bit values and their float32
// widening (what the oracle sees).
func round16(x []float32, t DType) ([]uint16, []float32) {
	h := make([]uint16, len(x))
	w := make([]float32, len(x))
	fallback.Narrow(h, x, fallback.KVType(t))
	fallback.Widen(w, h, fallback.KVType(t))
	return h, w
}

// check16 runs Attention16 on every engine and compares it with the
// float64 oracle on the rounded K and V, within the float32 tolerance
// (the rounding is in the inputs, not in the arithmetic).
func check16(t *testing.T, rng *rand.Rand, s Shape, o Options, typ DType) {
	t.Helper()
	checkStored(t, rng, s, o, typ.String(), func(k, v []float32, _, _ int) ([]float32, []float32, storedCall) {
		k16, kf := round16(k, typ)
		v16, vf := round16(v, typ)
		return kf, vf, func(e *Engine, out, q []float32, o *Options) error { return e.Attention16(out, q, k16, v16, typ, s, o) }
	})
}

// TestAttention16: 16-bit K and V on every set, prefill (flash path) and
// decode steps (the fused decode path: KVLen >= 128, few rows per KV
// head), GQA ratios 1..16, both layouts, head dims that hit every tail
// (odd ones too: the AVX2 kernel then takes the widening path), every
// option at random.
func TestAttention16(t *testing.T) {
	t.Parallel() // a sweep against the oracle: runs beside the other sweeps, after the sequential tests
	rng := rand.New(rand.NewPCG(16, 16))
	for _, typ := range types16 {
		for di, dk := range []int{1, 7, 8, 16, 33, 64, 96, 128} {
			for li, lens := range [][2]int{{1, 1}, {5, 17}, {70, 130}, {1, 300}} {
				if !longTests() && (di+li+int(typ))%2 != 0 {
					continue // half the cases: every head dim and length still
				}
				s := randomShape(rng, dk, lens[0], lens[1])
				check16(t, rng, s, randomOptions(rng).build(rng, s), typ)
			}
		}
		gqaCases(rng, 8, func(s Shape, o Options) { check16(t, rng, s, o, typ) })
	}
}

// gqaCases calls check on decode-shaped cases of every GQA ratio 1..16
// (the fused decode path: KVLen >= 128, a group's rows in one call), both
// layouts, head dims 32..128, a ValueDim of 8..8·valueVecs a third of the
// time, causal or every option at random.
func gqaCases(rng *rand.Rand, valueVecs int, check func(Shape, Options)) {
	for group := 1; group <= 16; group++ {
		for _, lq := range []int{1, 16 / group} {
			s := Shape{Batch: 1 + rng.IntN(2), Heads: 2 * group, KVHeads: 2, QLen: max(lq, 1),
				KVLen: []int{128, 200, 700}[rng.IntN(3)], HeadDim: []int{32, 64, 80, 128}[rng.IntN(4)],
				Layout: Layout(rng.IntN(2))}
			if rng.IntN(3) == 0 {
				s.ValueDim = 8 * (1 + rng.IntN(valueVecs))
			}
			o := Options{Causal: true}
			if rng.IntN(2) == 0 {
				o = randomOptions(rng).build(rng, s)
			}
			check(s, o)
		}
	}
}

// TestDecodeSteps16: token-by-token decode steps against a 16-bit K/V
// buffer (QLen 1, KVLens growing) give the rows of one causal call over
// the same buffer.
func TestDecodeSteps16(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 17))
	for _, typ := range types16 {
		for _, layout := range []Layout{BSHD, BHSD} {
			checkDecodeSteps(t, rng, layout, 64, typ.String(), func(k, v []float32) attendFunc {
				k16, _ := round16(k, typ)
				v16, _ := round16(v, typ)
				return func(e *Engine, out, q []float32, s Shape, o *Options) error {
					return e.Attention16(out, q, k16, v16, typ, s, o)
				}
			})
		}
	}
}

// attendFunc is one attention call over K and V held by the closure.
type attendFunc func(e *Engine, out, q []float32, s Shape, o *Options) error

// checkDecodeSteps runs, on every engine, token-by-token decode steps
// (QLen 1, KVLens growing) over the K and V that prepare stores, and
// compares each with the rows of one causal call over the same K and V.
func checkDecodeSteps(t *testing.T, rng *rand.Rand, layout Layout, D int, name string, prepare func(k, v []float32) attendFunc) {
	t.Helper()
	const L, C, H, Hkv = 150, 160, 8, 2
	full := Shape{Batch: 1, Heads: H, KVHeads: Hkv, QLen: L, KVLen: C, HeadDim: D, Layout: layout}
	q, k, v, want := inputs(rng, full)
	attend := prepare(k, v)
	for _, e := range engines {
		if err := attend(e, want, q, full, &Options{Causal: true, KVLens: []int{L}}); err != nil {
			t.Fatal(err)
		}
		step := full
		step.QLen = 1
		qi, out := make([]float32, H*D), make([]float32, H*D)
		for i := 0; i < L; i++ {
			for h := 0; h < H; h++ {
				src := (i*H + h) * D
				if layout == BHSD {
					src = (h*L + i) * D
				}
				copy(qi[h*D:(h+1)*D], q[src:src+D])
			}
			if err := attend(e, out, qi, step, &Options{KVLens: []int{i + 1}}); err != nil {
				t.Fatal(err)
			}
			for h := 0; h < H; h++ {
				dst := (i*H + h) * D
				if layout == BHSD {
					dst = (h*L + i) * D
				}
				w := make([]float64, D)
				for j := range w {
					w[j] = float64(want[dst+j])
				}
				compare(t, fmt.Sprintf("%s %s %v step %d head %d", e.Kernels(), name, layout, i, h), out[h*D:(h+1)*D], w, tolOut, &worstOut)
			}
		}
	}
}

// decodeVersusForward decodes x ([B][L][dm]) into cache in steps of
// varied sizes and returns the largest difference from full, the float32
// Forward's output of the same x.
// causalForward draws B sequences of L inputs for l and returns them
// with l's causal Forward of them, the reference a cache's decode steps
// are held to.
func causalForward(t *testing.T, l *Layer, rng *rand.Rand, B, L int) (x, full []float32) {
	t.Helper()
	x = random(rng, B*L*l.Config().DModel)
	full = make([]float32, len(x))
	if err := l.Forward(full, x, B, L, &Options{Causal: true}); err != nil {
		t.Fatal(err)
	}
	return x, full
}

func decodeVersusForward(t *testing.T, l *Layer, cache, ref *Cache, x, full []float32, B, L int) float64 {
	t.Helper()
	dm := l.Config().DModel
	worst := 0.0
	for pos, step := 0, 100; pos < L; pos, step = pos+step, 1+pos%3 {
		step = min(step, L-pos)
		xs := make([]float32, B*step*dm)
		for b := 0; b < B; b++ {
			copy(xs[b*step*dm:(b+1)*step*dm], x[(b*L+pos)*dm:(b*L+pos+step)*dm])
		}
		got, o32 := make([]float32, len(xs)), make([]float32, len(xs))
		if err := l.Decode(got, xs, cache, step, nil); err != nil {
			t.Fatal(err)
		}
		if err := l.Decode(o32, xs, ref, step, nil); err != nil {
			t.Fatal(err)
		}
		for b := 0; b < B; b++ {
			for i := 0; i < step*dm; i++ {
				worst = max(worst, math.Abs(float64(got[b*step*dm+i]-full[(b*L+pos)*dm+i])))
			}
		}
	}
	return worst
}

// TestCache16: a layer decoding into a 16-bit cache stores exactly the
// rounded keys and values a float32 cache holds, and its outputs stay
// within the rounding's reach of the float32 Forward.
func TestCache16(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 18))
	cfg := LayerConfig{DModel: 48, Heads: 8, KVHeads: 2, HeadDim: 16}
	for _, e := range engines {
		l, _ := testLayer(t, e, rng, cfg, true)
		const B, L, C = 2, 140, 150 // capacity >= 128: the split decode path
		x, full := causalForward(t, l, rng, B, L)
		c32, err := l.NewCache(B, C)
		if err != nil {
			t.Fatal(err)
		}
		for _, typ := range types16 {
			c16, err := l.NewCacheOf(B, C, typ)
			if err != nil {
				t.Fatal(err)
			}
			if c16.Type() != typ || c16.K != nil || len(c16.K16) != B*C*cfg.KVHeads*cfg.HeadDim {
				t.Fatalf("NewCacheOf(%v): type %v, K %d floats, K16 %d", typ, c16.Type(), len(c16.K), len(c16.K16))
			}
			if err := c32.ResetAll(); err != nil {
				t.Fatal(err)
			}
			worst := decodeVersusForward(t, l, c16, c32, x, full, B, L)
			k16, _ := round16(c32.K, typ)
			v16, _ := round16(c32.V, typ)
			for i := range k16 {
				if k16[i] != c16.K16[i] {
					t.Fatalf("%s %v: K16[%d] = %#04x, the rounded float32 cache holds %#04x", e.Kernels(), typ, i, c16.K16[i], k16[i])
				}
			}
			for i := range v16 {
				if v16[i] != c16.V16[i] {
					t.Fatalf("%s %v: V16[%d] = %#04x, the rounded float32 cache holds %#04x", e.Kernels(), typ, i, c16.V16[i], v16[i])
				}
			}
			// Inputs of magnitude ~1 rounded by 2^-11 (f16) or 2^-8 (bf16).
			if bound := map[DType]float64{Float16: 5e-3, BFloat16: 3e-2}[typ]; worst > bound {
				t.Errorf("%s %v cache: decode differs from the float32 Forward by %.3g > %.3g", e.Kernels(), typ, worst, bound)
			}
		}
	}
}

// TestConvertHelpers: Narrow16 and Widen16 round-trip every finite
// 16-bit value, round ties to even, keep NaN, Inf and subnormals, and
// return sentinel errors for bad arguments.
func TestConvertHelpers(t *testing.T) {
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	w, back := make([]float32, len(all)), make([]uint16, len(all))
	for _, typ := range types16 {
		if err := Widen16(w, all, typ); err != nil {
			t.Fatal(err)
		}
		if err := Narrow16(back, w, typ); err != nil {
			t.Fatal(err)
		}
		for i, h := range all {
			if x := w[i]; x != x {
				exp, mant := uint16(0x7c00), uint16(0x03ff)
				if typ == BFloat16 {
					exp, mant = 0x7f80, 0x007f
				}
				if b := back[i]; b&exp != exp || b&mant == 0 || b&0x8000 != h&0x8000 {
					t.Fatalf("%v: NaN %#04x came back as %#04x", typ, h, b)
				}
				continue
			}
			if back[i] != h {
				t.Fatalf("%v: %#04x → %v → %#04x", typ, h, w[i], back[i])
			}
		}
	}
	for _, c := range []struct {
		typ  DType
		x    float32
		want uint16
	}{
		{Float16, 65504, 0x7bff}, {Float16, 65519, 0x7bff}, {Float16, 65520, 0x7c00}, {Float16, -1e9, 0xfc00},
		{Float16, 0x1p-24, 0x0001}, {Float16, 0x1p-25, 0x0000}, {Float16, 0x1.8p-25, 0x0001}, {Float16, 0x1p-14, 0x0400},
		{Float16, 1 + 0x1p-11, 0x3c00}, {Float16, 1 + 3*0x1p-11, 0x3c02}, {Float16, float32(math.Inf(-1)), 0xfc00},
		{BFloat16, math.Float32frombits(0x3f808000), 0x3f80}, {BFloat16, math.Float32frombits(0x3f818000), 0x3f82},
		{BFloat16, math.MaxFloat32, 0x7f80}, {BFloat16, math.Float32frombits(0x00000001), 0x0000},
		{BFloat16, math.Float32frombits(0xff800001), 0xffc0},
	} {
		h := make([]uint16, 1)
		if err := Narrow16(h, []float32{c.x}, c.typ); err != nil || h[0] != c.want {
			t.Errorf("Narrow16(%v (%#08x), %v) = %#04x, %v; want %#04x", c.x, math.Float32bits(c.x), c.typ, h[0], err, c.want)
		}
	}
	if err := Narrow16(make([]uint16, 4), make([]float32, 4), Float32); !errors.Is(err, ErrOption) {
		t.Errorf("Narrow16 to Float32: %v, want ErrOption", err)
	}
	if err := Widen16(make([]float32, 3), make([]uint16, 4), Float16); !errors.Is(err, ErrBuffer) {
		t.Errorf("Widen16 into a short dst: %v, want ErrBuffer", err)
	}
}

// TestAttention16Errors: bad 16-bit calls return their sentinels.
func TestAttention16Errors(t *testing.T) {
	s := Shape{Batch: 1, Heads: 2, QLen: 3, KVLen: 5, HeadDim: 4}
	q, out := make([]float32, 24), make([]float32, 24)
	k, v := make([]uint16, 40), make([]uint16, 40)
	wantErr(t, "Float32 type", Attention16(out, q, k, v, Float32, s, nil), ErrOption)
	wantErr(t, "short k", Attention16(out, q, k[:39], v, Float16, s, nil), ErrBuffer)
	arena := make([]float32, 64)
	k16 := unsafeU16(arena[24:44])
	wantErr(t, "out overlaps k", Attention16(arena[:24], q, k16, v, BFloat16, s, nil), nil)
	wantErr(t, "out overlaps k", Attention16(arena[30:54], q, k16, v, BFloat16, s, nil), ErrBuffer)
	if _, err := exampleCacheLayer(t).NewCacheOf(1, 4, DType(7)); !errors.Is(err, ErrOption) {
		t.Errorf("NewCacheOf(DType(7)): %v, want ErrOption", err)
	}
}

// unsafeU16 views x's memory as uint16 values.
func unsafeU16(x []float32) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(x))), 2*len(x))
}

// exampleCacheLayer is a small layer on the first engine.
func exampleCacheLayer(t *testing.T) *Layer {
	l, _ := testLayer(t, engines[0], rand.New(rand.NewPCG(1, 2)), LayerConfig{DModel: 8, Heads: 2, HeadDim: 4}, false)
	return l
}
