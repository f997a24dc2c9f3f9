package mha

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// The fuzz targets of the serving surface (issue 34): each input is
// either an error wrapping the right sentinel, with nothing changed, or a
// result equal to a reference; never a panic or a hang.

// FuzzCacheOps decodes a sequence of cache operations from the input —
// DecodeSeqs with random counts (too many included), Truncate, Reset,
// CopyTo, and calls on a cancelled context — and checks them against a
// model of the cache (one length per sequence) and the outputs of every
// successful step against a recomputation from the sequence's history.
func FuzzCacheOps(f *testing.F) {
	f.Add(uint8(0), []byte{0, 3, 1, 2, 0, 5, 5, 5, 1, 1, 2, 0, 3, 1, 0, 4, 2, 1, 2})
	f.Add(uint8(3), []byte{0, 12, 0, 0, 0, 1, 1, 1, 5, 0, 0, 0, 2, 2, 3, 0, 2, 1, 4})
	f.Add(uint8(2), []byte{4, 1, 1, 1, 0, 2, 9, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, kind uint8, ops []byte) {
		if len(ops) > 96 {
			ops = ops[:96]
		}
		const B, capacity = 3, 12
		e := engines[int(kind)%len(engines)]
		rng := rand.New(rand.NewPCG(uint64(kind), uint64(len(ops))))
		l, _ := testLayer(t, e, rng, LayerConfig{DModel: 16, Heads: 2, KVHeads: 1, HeadDim: 8,
			Rotary: Rotary{Dims: 8}}, true)
		typ := []DType{Float32, Float16, BFloat16, Int8, Int4}[kind%5]
		var opts *Options // int8 and int4 caches: the int8 mode for half the kinds
		if typ.quantized() && kind/5%2 == 1 {
			opts = &Options{Compute: ComputeInt8}
		}
		cache, err := l.NewCacheOf(B, capacity, typ)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := l.NewCacheOf(1, capacity, typ)
		if err != nil {
			t.Fatal(err)
		}
		hist := make([][]float32, B) // the model: each sequence's tokens
		next := func() int {
			if len(ops) == 0 {
				return 0
			}
			b := int(ops[0])
			ops = ops[1:]
			return b
		}
		cancelled, stop := context.WithCancel(context.Background())
		stop()
		for len(ops) > 0 {
			before := cache.Lens(nil)
			switch next() % 6 {
			case 0, 1: // DecodeSeqs, on a cancelled context with case 1
				counts := []int{next() % 14, next() % 14, next() % 14}
				n := sum(counts)
				x, out := random(rng, n*16), make([]float32, n*16)
				ctx := context.Background()
				if ops := len(ops); ops%2 == 1 && n > 0 {
					ctx = cancelled
				}
				err := l.DecodeSeqs(ctx, out, x, cache, counts, opts)
				fits := true
				for b, c := range counts {
					fits = fits && len(hist[b])/16+c <= capacity
				}
				switch {
				case ctx == cancelled: // either error may come first: nothing changes
					if !errors.Is(err, context.Canceled) && (fits || !errors.Is(err, ErrCacheFull)) {
						t.Fatalf("a cancelled DecodeSeqs %v on lengths %v: %v", counts, before, err)
					}
				case !fits:
					if !errors.Is(err, ErrCacheFull) {
						t.Fatalf("counts %v past capacity %d with lengths %v: %v, want ErrCacheFull", counts, capacity, before, err)
					}
				case err != nil:
					t.Fatalf("DecodeSeqs %v on lengths %v: %v", counts, before, err)
				default:
					for b, row := 0, 0; b < B; b++ {
						if counts[b] == 0 {
							continue
						}
						hist[b] = append(hist[b], x[row*16:(row+counts[b])*16]...)
						if d := recompute(l, ref, hist[b], out[row*16:(row+counts[b])*16], opts); !(d <= 2e-4) {
							t.Fatalf("%v cache, sequence %d at %d tokens: outputs differ from the recomputation by %.3g", typ, b, len(hist[b])/16, d)
						}
						row += counts[b]
					}
				}
			case 2: // Truncate, sometimes past the length
				b, n := next()%4, next()%14
				err := cache.Truncate(b, n)
				if b >= B || n > len(hist[b])/16 {
					if !errors.Is(err, ErrOption) {
						t.Fatalf("Truncate(%d, %d) on lengths %v: %v, want ErrOption", b, n, before, err)
					}
				} else if err != nil {
					t.Fatal(err)
				} else {
					hist[b] = hist[b][:n*16]
				}
			case 3: // Reset
				b := next() % B
				if err := cache.Reset(b); err != nil {
					t.Fatal(err)
				}
				hist[b] = hist[b][:0]
			case 4: // CopyTo another slot
				dst, src, n := next()%B, next()%B, next()%14
				err := cache.CopyTo(cache, dst, src, n)
				if n > len(hist[src])/16 {
					if !errors.Is(err, ErrOption) {
						t.Fatalf("CopyTo(%d, %d, %d) on lengths %v: %v, want ErrOption", dst, src, n, before, err)
					}
				} else if err != nil {
					t.Fatal(err)
				} else {
					hist[dst] = append(hist[dst][:0:0], hist[src][:n*16]...)
				}
			case 5: // bad calls: nothing changes
				err := l.DecodeSeqs(context.Background(), nil, make([]float32, 32), cache, []int{0, 0, 0}, nil)
				if !errors.Is(err, ErrBuffer) {
					t.Fatalf("a mis-sized x: %v, want ErrBuffer", err)
				}
			}
			for b, n := range cache.Lens(nil) {
				if n != len(hist[b])/16 {
					t.Fatalf("sequence %d holds %d tokens, the model %d (lengths before the op %v)", b, n, len(hist[b])/16, before)
				}
			}
		}
	})
}

// FuzzMerge splits the keys of one attention call at random points, runs
// each shard on its own and merges them: the result is the single call's.
func FuzzMerge(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(5), uint8(40), uint8(16), uint8(3), true)
	f.Add(uint64(2), uint8(1), uint8(1), uint8(7), uint8(8), uint8(6), false)
	f.Fuzz(func(t *testing.T, seed uint64, heads, lq, lk, dim, parts uint8, causal bool) {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := Shape{Batch: 1 + int(seed%2), Heads: 1 + int(heads%4), QLen: 1 + int(lq%12), KVLen: 1 + int(lk%64),
			HeadDim: 1 + int(dim%40), Layout: Layout(seed >> 3 & 1)}
		s, _ = s.resolve()
		q, k, v, want := inputs(rng, s)
		e := engines[int(seed)%len(engines)]
		if err := e.Attention(want, q, k, v, s, &Options{Causal: causal}); err != nil {
			t.Fatal(err)
		}
		// Cut points: 1..parts shards, possibly empty ones skipped.
		cuts := []int{0}
		for i := 1; i < 1+int(parts%5); i++ {
			cuts = append(cuts, rng.IntN(s.KVLen+1))
		}
		cuts = append(cuts, s.KVLen)
		slices.Sort(cuts)
		var outs, lses [][]float32
		for i := 1; i < len(cuts); i++ {
			a, b := min(cuts[i-1], cuts[i]), max(cuts[i-1], cuts[i])
			if a == b {
				continue
			}
			part := s
			part.KVLen = b - a
			off := s.KVLen - s.QLen - a
			out, lse := make([]float32, len(want)), make([]float32, s.Batch*s.Heads*s.QLen)
			opts := &Options{Causal: causal, QueryOffset: &off, OutLSE: lse}
			if err := e.Attention(out, q, keyShard(s, k, s.HeadDim, a, b), keyShard(s, v, s.HeadDim, a, b), part, opts); err != nil {
				t.Fatal(err)
			}
			outs, lses = append(outs, out), append(lses, lse)
		}
		got := make([]float32, len(want))
		if err := Merge(got, nil, outs, lses, s); err != nil {
			t.Fatal(err)
		}
		w := widen64(want)
		if causal && s.QLen > s.KVLen { // rows that see no key: zeros in both
			for i := range w {
				if math.IsNaN(w[i]) {
					w[i] = 0
				}
			}
		}
		// Shards round outputs and LSEs to float32 on their own: errors of a
		// few ulps of the values' scale, which a row whose weighted values
		// cancel to near 0 makes large relative to its own size.
		vmax := 0.0
		for _, x := range v {
			vmax = max(vmax, math.Abs(float64(x)))
		}
		nearScale(t, "merged shards", got, w, 1e-4, vmax)
	})
}

// TestWiden16AllPatterns: Widen16 over all 65536 patterns of both types
// against the IEEE definition (float16: sign, 5-bit exponent, 10-bit
// fraction, subnormals; bfloat16: float32's upper half), the NaN rule of
// Widen16's doc included.
func TestWiden16AllPatterns(t *testing.T) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	for _, typ := range []DType{Float16, BFloat16} {
		dst := make([]float32, len(src))
		if err := Widen16(dst, src, typ); err != nil {
			t.Fatal(err)
		}
		for i, h := range src {
			var want uint32
			if typ == BFloat16 {
				want = uint32(h) << 16
			} else {
				sign, exp, frac := uint32(h>>15), int(h>>10&31), uint32(h&1023)
				switch {
				case exp == 31 && frac != 0: // NaN: payload kept, quiet bit set
					want = sign<<31 | 0x7fc00000 | frac<<13
				case exp == 31:
					want = sign<<31 | 0x7f800000
				default:
					v := math.Ldexp(float64(frac), -24) // subnormal
					if exp > 0 {
						v = math.Ldexp(1+float64(frac)/1024, exp-15)
					}
					want = math.Float32bits(float32(v)) | sign<<31
				}
			}
			if got := math.Float32bits(dst[i]); got != want {
				t.Fatalf("Widen16(%#04x, %v) = %#08x, want %#08x", h, typ, got, want)
			}
		}
	}
}

// FuzzNarrow16 checks Narrow16 of any float32 bits against rounding to
// nearest, ties to even, stated as a property of the two neighbours: the
// result's value is at least as near as the next pattern up and down (a
// tie going to the even one), overflow past the largest finite value's
// rounding boundary is ±Inf, and a NaN stays a NaN of the same sign with
// the quiet bit set.
func FuzzNarrow16(f *testing.F) {
	for _, b := range []uint32{0, 0x80000000, 0x3f800000, 0x477fe000, 0x477ff000, 0x477fefff, 0x7f7fffff, 0x7f800001, 0x33000000, 0x33000001, 0x387fc000, 0x3f808000, 0x3f818000} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, bits uint32) {
		x := math.Float32frombits(bits)
		for _, typ := range []DType{Float16, BFloat16} {
			dst := make([]uint16, 17) // a whole vector and a tail: both paths
			src := make([]float32, 17)
			for i := range src {
				src[i] = x
			}
			if err := Narrow16(dst, src, typ); err != nil {
				t.Fatal(err)
			}
			checkNarrowed(t, x, dst[0], typ)
			for _, ks := range kernels.Available() { // every set's kernel, vector part and tail
				got := make([]uint16, len(dst))
				ks.Narrow(got, src, fallback.KVType(typ))
				for i := range got {
					if got[i] != dst[0] {
						t.Fatalf("%s: Narrow(%#08x, %v): %#04x at %d, Narrow16 %#04x", ks.Name, bits, typ, got[i], i, dst[0])
					}
				}
			}
		}
	})
}

// checkNarrowed checks h as the nearest 16-bit value of type typ to x.
func checkNarrowed(t *testing.T, x float32, h uint16, typ DType) {
	t.Helper()
	value := func(h uint16) float64 { // the exact value; the pattern past the largest finite one is its power of two
		w := make([]float32, 1)
		Widen16(w, []uint16{h}, typ)
		v := float64(w[0])
		if math.IsInf(v, 0) {
			if typ == Float16 {
				return math.Copysign(65536, v)
			}
			return math.Copysign(math.Ldexp(1, 128), v)
		}
		return v
	}
	expBits, quiet := uint16(0x7c00), uint16(0x0200)
	if typ == BFloat16 {
		expBits, quiet = 0x7f80, 0x0040
	}
	sign := uint16(0)
	if math.Signbit(float64(x)) {
		sign = 0x8000
	}
	switch {
	case x != x:
		if h&expBits != expBits || h&^0x8000&^expBits == 0 || h&0x8000 != sign || h&quiet == 0 {
			t.Fatalf("Narrow16(NaN %#08x, %v) = %#04x, want a quiet NaN of the same sign", math.Float32bits(x), typ, h)
		}
		return
	case math.IsInf(float64(x), 0):
		if h != sign|expBits {
			t.Fatalf("Narrow16(%v, %v) = %#04x", x, typ, h)
		}
		return
	}
	if h&0x8000 != sign {
		t.Fatalf("Narrow16(%v, %v) = %#04x: wrong sign", x, typ, h)
	}
	mag := h &^ 0x8000
	if mag > expBits {
		t.Fatalf("Narrow16(%v, %v) = %#04x is a NaN", x, typ, h)
	}
	ax, v := math.Abs(float64(x)), math.Abs(value(mag))
	if mag == expBits { // Inf: x must be at or past the boundary halfway to the next power of two
		if below := value(mag - 1); ax < (below+v)/2 {
			t.Fatalf("Narrow16(%v, %v) = Inf below the overflow boundary", x, typ)
		}
		return
	}
	d := math.Abs(ax - v)
	for _, n := range []uint16{mag - 1, mag + 1} {
		if mag == 0 && n == mag-1 {
			continue
		}
		dn := math.Abs(ax - math.Abs(value(n)))
		if dn < d || (dn == d && mag&1 == 1) {
			t.Fatalf("Narrow16(%v, %v) = %#04x (%v), but %#04x (%v) is nearer or the even of a tie", x, typ, h, value(mag), n, value(n))
		}
	}
}

// FuzzQuantizeInt8 checks QuantizeInt8KV's rule on random rows: per block
// of 32, scale = max|x|/127 and |q·scale − x| at most half a step, q in
// [−127, 127]; DequantizeInt8KV gives float32(q)·scale; a NaN or ±Inf
// anywhere is ErrNonFinite and nothing is written.
func FuzzQuantizeInt8(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(40), float32(0))
	f.Add(uint64(2), uint8(1), uint8(32), float32(math.Inf(1)))
	f.Add(uint64(3), uint8(2), uint8(7), float32(1e-40))
	f.Fuzz(func(t *testing.T, seed uint64, rows, dim uint8, poke float32) {
		rng := rand.New(rand.NewPCG(seed, 3))
		r, d := 1+int(rows%5), 1+int(dim%70)
		src := random(rng, r*d)
		for i := range src {
			src[i] *= float32(math.Ldexp(1, rng.IntN(40)-20))
		}
		at := rng.IntN(len(src))
		src[at] = poke
		nb := QuantBlocks(d)
		dst := Int8KVTensor{Data: make([]int8, r*d), Scales: make([]float32, r*nb)}
		for i := range dst.Data {
			dst.Data[i] = 99
		}
		err := QuantizeInt8KV(dst, src, d)
		if math.IsNaN(float64(poke)) || math.IsInf(float64(poke), 0) {
			if !errors.Is(err, ErrNonFinite) {
				t.Fatalf("quantizing %v: %v, want ErrNonFinite", poke, err)
			}
			for _, q := range dst.Data {
				if q != 99 {
					t.Fatalf("a refused QuantizeInt8KV wrote data")
				}
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		back := make([]float32, len(src))
		if err := DequantizeInt8KV(back, dst, d); err != nil {
			t.Fatal(err)
		}
		for row := 0; row < r; row++ {
			for blk := 0; blk < nb; blk++ {
				lo, hi := row*d+blk*32, row*d+min((blk+1)*32, d)
				amax := float32(0)
				for _, x := range src[lo:hi] {
					amax = max(amax, float32(math.Abs(float64(x))))
				}
				scale := dst.Scales[row*nb+blk]
				if scale != amax/127 {
					t.Fatalf("row %d block %d: scale %v, want max|x|/127 = %v", row, blk, scale, amax/127)
				}
				for i := lo; i < hi; i++ {
					q := dst.Data[i]
					if q < -127 || back[i] != float32(q)*scale {
						t.Fatalf("element %d: q %d, dequantized %v, scale %v", i, q, back[i], scale)
					}
					// Half a step, plus the rounding of scale and of the
					// product (subnormal scales keep few bits).
					if e := math.Abs(float64(back[i]) - float64(src[i])); e > 0.50001*float64(scale)+128*math.Ldexp(1, -149) {
						t.Fatalf("element %d: %v quantized to %v (scale %v): off by more than half a step", i, src[i], back[i], scale)
					}
				}
			}
		}
	})
}

// FuzzOptionEdges sets every field of Options to an edge value chosen by
// the input (NaN, ±Inf, negative, zero, the limits and just past them,
// lengths one off): each call is an error wrapping ErrOption, ErrBuffer
// or ErrShape, or a result equal to the oracle's.
func FuzzOptionEdges(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, pick []byte) {
		at := 0
		choose := func(n int) int {
			if at >= len(pick) {
				return 0
			}
			at++
			return int(pick[at-1]) % n
		}
		s := Shape{Batch: 2, Heads: 4, KVHeads: 2, QLen: 5, KVLen: 9, HeadDim: 8, Layout: Layout(choose(2))}
		rng := rand.New(rand.NewPCG(uint64(len(pick)), 5))
		q, k, v, _ := inputs(rng, s)
		floats := []float32{0, 1, -1, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), MaxScale, MaxScale * 2,
			math.MaxFloat32, 1e-45, float32(MinSoftcap), 0.5, 30}
		ints := []int{0, 1, -1, 2, 4, 5, 9, 10, math.MaxInt, math.MinInt, maxCoord, maxCoord + 1}
		o := Options{
			Causal:  choose(2) == 1,
			Window:  ints[choose(len(ints))],
			Softcap: floats[choose(len(floats))],
			Scale:   floats[choose(len(floats))],
			Threads: ints[choose(len(ints))],
		}
		if choose(3) == 0 {
			off := ints[choose(len(ints))]
			o.QueryOffset = &off
		}
		if choose(3) == 0 {
			o.KVLens = make([]int, 1+choose(3))
			for b := range o.KVLens {
				o.KVLens[b] = ints[choose(len(ints))]
			}
		}
		perHead := func() []float32 {
			x := make([]float32, 3+choose(3)) // 4 heads: one off either way
			for h := range x {
				x[h] = floats[choose(len(floats))] / 64
			}
			return x
		}
		if choose(3) == 0 {
			o.ALiBi = perHead()
		}
		if choose(4) == 0 { // K is float32: the int8 mode and undefined modes are ErrOption
			o.Compute = []Compute{-1, ComputeInt8, ComputeInt8 + 1}[choose(3)]
		}
		if choose(3) == 0 {
			o.Sinks = perHead()
		}
		if choose(3) == 0 {
			o.BiasBatch, o.BiasHeads, o.BiasQLen = ints[choose(6)], ints[choose(6)], ints[choose(7)]
			o.Bias = random(rng, max(0, choose(4)-1)+9*[]int{1, 5, 20, 40}[choose(4)])
		}
		if choose(3) == 0 {
			o.MaskBatch, o.MaskHeads, o.MaskQLen = ints[choose(6)], ints[choose(6)], ints[choose(7)]
			o.Mask = make([]bool, 9*[]int{1, 2, 5, 10, 40}[choose(5)]+choose(2))
			for i := range o.Mask {
				o.Mask[i] = rng.IntN(4) != 0
			}
		}
		for _, e := range engines {
			out := make([]float32, s.Batch*s.QLen*s.Heads*s.HeadDim)
			err := e.Attention(out, q, k, v, s, &o)
			if err != nil {
				if !errors.Is(err, ErrOption) && !errors.Is(err, ErrBuffer) && !errors.Is(err, ErrShape) {
					t.Fatalf("%s: %+v: %v, not a sentinel error", e.Kernels(), o, err)
				}
				continue
			}
			want, _ := fallback.Attention(specOf(s, &o), q, k, v)
			if o.Scale > 30 { // scores of 10^5 and more: float32 rounding moves the weights; finite where the oracle is
				for i := range want {
					if !math.IsNaN(want[i]) && math.IsNaN(float64(out[i])) {
						t.Fatalf("%s: out[%d] is NaN, the oracle %v (options %+v)", e.Kernels(), i, want[i], o)
					}
				}
				continue
			}
			compare(t, e.Kernels()+" out", out, want, tolOut, &worstOut)
			if t.Failed() {
				t.Fatalf("%s: options %+v", e.Kernels(), o)
			}
		}
	})
}

// TestCloseUnderLoad: Close while calls run on many goroutines. Calls in
// flight finish (or return ErrClosed if they had not started), later calls
// return ErrClosed, and no goroutine is left behind.
func TestCloseUnderLoad(t *testing.T) {
	base := runtime.NumGoroutine()
	e, err := NewEngine(Config{Threads: 4})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(34, 11))
	s := Shape{Batch: 1, Heads: 4, KVHeads: 2, QLen: 64, KVLen: 256, HeadDim: 32}
	q, k, v, _ := inputs(rng, s)
	l, _ := testLayer(t, e, rng, LayerConfig{DModel: 32, Heads: 2, HeadDim: 16}, false)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok, closed int
	for g := 0; g < 12; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]float32, len(q))
			x, y := random(rand.New(rand.NewPCG(uint64(g), 1)), 4*32), make([]float32, 4*32)
			for i := 0; ; i++ {
				var err error
				if g%2 == 0 {
					err = e.Attention(out, q, k, v, s, &Options{Causal: true})
				} else {
					err = l.Forward(y, x, 1, 4, nil)
				}
				mu.Lock()
				switch {
				case err == nil:
					ok++
				case errors.Is(err, ErrClosed):
					closed++
				default:
					t.Errorf("a call during Close: %v", err)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := e.Attention(make([]float32, len(q)), q, k, v, s, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Attention after Close: %v, want ErrClosed", err)
	}
	if err := e.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		t.Errorf("%d goroutines after Close, %d before New", n, base)
	}
	t.Logf("%d calls finished, %d returned ErrClosed", ok, closed)
	if closed != 12 {
		t.Errorf("%d of 12 goroutines saw ErrClosed", closed)
	}
}
