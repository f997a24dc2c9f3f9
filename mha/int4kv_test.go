package mha

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

// quantize4 quantizes x, rows of dim, to Int4 K/V and returns the tensor
// and its dequantized values (what the oracle sees).
func quantize4(t *testing.T, x []float32, dim int) (Int4KVTensor, []float32) {
	t.Helper()
	rows := len(x) / dim
	q := Int4KVTensor{Data: make([]byte, rows*Int4RowBytes(dim)), Scales: make([]float32, rows*QuantBlocks(dim))}
	if err := QuantizeInt4KV(q, x, dim); err != nil {
		t.Fatal(err)
	}
	w := make([]float32, len(x))
	if err := DequantizeInt4KV(w, q, dim); err != nil {
		t.Fatal(err)
	}
	return q, w
}

// checkInt4 runs AttentionInt4 on every engine and compares it with the
// float64 oracle on the dequantized K and V, within the float32 tolerance.
func checkInt4(t *testing.T, rng *rand.Rand, s Shape, o Options) {
	t.Helper()
	checkStored(t, rng, s, o, "int4", func(k, v []float32, kd, vd int) ([]float32, []float32, storedCall) {
		return storeQuantized(t, Int4, s, k, v, kd, vd)
	})
}

// TestAttentionInt4: AttentionInt4 against the oracle on the dequantized
// K/V, on every kernel set: head dims at every tail of a block of 32 (1,
// 7, 33: a padded last block) and of the kernels' vectors, key lengths off
// the widened chunk (64) and the decode block, every option at random,
// and GQA decode steps of 1..16 rows.
func TestAttentionInt4(t *testing.T) {
	t.Parallel() // a sweep against the oracle
	rng := rand.New(rand.NewPCG(40, 40))
	for di, dk := range []int{1, 7, 16, 33, 64, 80, 96, 128, 256} {
		for li, lens := range [][2]int{{1, 1}, {5, 17}, {70, 130}, {1, 300}, {3, 1029}, {1, 200}} {
			if !longTests() && (di+li)%2 != 0 {
				continue // half the cases: every head dim and length still
			}
			s := randomShape(rng, dk, lens[0], lens[1])
			checkInt4(t, rng, s, randomOptions(rng).build(rng, s))
		}
	}
	gqaCases(rng, 12, func(s Shape, o Options) { checkInt4(t, rng, s, o) })
}

// TestComputeInt8OverInt4: the int8 mode over Int4 K/V (the rows widened
// to int8, DecodeQ8 where the set has it) against the oracle on the
// quantized queries and the dequantized K/V, as TestComputeInt8.
func TestComputeInt8OverInt4(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(42, 42))
	for di, dk := range []int{4, 33, 36, 64, 100, 128, 576} {
		for li, lens := range [][2]int{{1, 17}, {1, 130}, {5, 70}, {1, 1029}} {
			if !longTests() && (di+li)%2 != 0 {
				continue
			}
			s := randomShape(rng, dk, lens[0], lens[1])
			checkIntMode(t, rng, s, randomOptions(rng).build(rng, s), Int4)
		}
	}
	gqaCases(rng, 12, func(s Shape, o Options) { checkIntMode(t, rng, s, o, Int4) })
}

// TestQuantizeInt4KV: the documented rule on a block (the largest
// magnitude exact at u = 0, the others within d/2 or clamped to 7·d, ties
// to even), q4_0's nibble order, a padded tail block, zero blocks, and the
// errors.
func TestQuantizeInt4KV(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 41))
	const dim = 80 // two blocks of 32 and one of 16 (padded)
	x := make([]float32, 3*dim)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	clear(x[dim : dim+32])   // a zero block
	x[2*dim+40] = 5          // the largest magnitude is positive: d < 0
	x[5], x[6] = -4, 4       // a tie: the first (-4) sets d = 0.5
	x[7], x[8] = 0.75, -1.25 // x/d = 1.5 → 2, -2.5 → -2 (ties to even)
	x[9] = 3.7               // x/d = 7.4 → 7
	q, w := quantize4(t, x, dim)
	if len(q.Data) != 3*48 || len(q.Scales) != 9 {
		t.Fatalf("%d bytes, %d scales for 3 rows of 80", len(q.Data), len(q.Scales))
	}
	if q.Scales[0] != 0.5 || w[5] != -4 || w[6] != 3.5 {
		t.Errorf("block 0: scale %v, -4 → %v, 4 → %v (want 0.5, -4 exact, 4 clamped to 3.5)", q.Scales[0], w[5], w[6])
	}
	if w[7] != 1 || w[8] != -1 || w[9] != 3.5 {
		t.Errorf("ties: 0.75 → %v (want 1: 1.5 → 2), -1.25 → %v (want -1: -2.5 → -2), 3.7 → %v (want 3.5)", w[7], w[8], w[9])
	}
	if q.Scales[3] != 0 || q.Data[48] != 0x88 {
		t.Errorf("zero block: scale %v, byte %#x (want 0, 0x88)", q.Scales[3], q.Data[48])
	}
	for r := range 3 {
		for b := range 3 {
			d := q.Scales[r*3+b]
			for j := range min(32, dim-32*b) {
				i := r*dim + 32*b + j
				by := q.Data[r*48+16*b+j%16]
				u := by & 15
				if j >= 16 {
					u = by >> 4
				}
				if got := float32(int(u)-8) * d; got != w[i] {
					t.Fatalf("row %d elem %d: nibble %d·%v = %v, Dequantize gives %v (q4_0 order)", r, 32*b+j, u, d, got, w[i])
				}
				if e := math.Abs(float64(w[i] - x[i])); e > math.Abs(float64(d))/2*1.0001 && float64(x[i])/float64(d) < 7.5 {
					t.Fatalf("row %d elem %d: %v → %v, error %v > d/2 = %v", r, 32*b+j, x[i], w[i], e, math.Abs(float64(d))/2)
				}
			}
		}
		if pad := q.Data[r*48+32 : r*48+48]; pad[0]&0xf0 != 0x80 || pad[15]&0xf0 != 0x80 {
			t.Errorf("row %d: the padded tail block's high nibbles %#x…%#x, want 8", r, pad[0], pad[15])
		}
	}
	bad := append([]float32(nil), x...)
	bad[dim+3] = float32(math.NaN())
	wantErr(t, "NaN", QuantizeInt4KV(q, bad, dim), ErrNonFinite)
	wantErr(t, "short data", QuantizeInt4KV(Int4KVTensor{Data: q.Data[1:], Scales: q.Scales}, x, dim), ErrBuffer)
	wantErr(t, "short scales", DequantizeInt4KV(w, Int4KVTensor{Data: q.Data, Scales: q.Scales[1:]}, dim), ErrBuffer)
	wantErr(t, "not rows", DequantizeInt4KV(w[1:], q, dim), ErrShape)
	if q.Scales[2*3+1] != -0.625 || fallback.Int4KVAt(q.Data[2*48:], 40) != -8 || w[2*dim+40] != 5 {
		t.Errorf("the largest magnitude 5: scale %v, nibble %d, value %v (want -0.625, -8, 5)",
			q.Scales[2*3+1], fallback.Int4KVAt(q.Data[2*48:], 40), w[2*dim+40])
	}
}

// TestAttentionInt4Errors: missing bytes or scales and overlaps are
// ErrBuffer.
func TestAttentionInt4Errors(t *testing.T) {
	s := Shape{Batch: 1, Heads: 2, QLen: 3, KVLen: 5, HeadDim: 40}
	q, out := make([]float32, 240), make([]float32, 240)
	k := Int4KVTensor{Data: make([]byte, 10*32), Scales: make([]float32, 20)}
	v := Int4KVTensor{Data: make([]byte, 10*32), Scales: make([]float32, 20)}
	wantErr(t, "whole", AttentionInt4(out, q, k, v, s, nil), nil)
	wantErr(t, "short k", AttentionInt4(out, q, Int4KVTensor{Data: k.Data[:319], Scales: k.Scales}, v, s, nil), ErrBuffer)
	wantErr(t, "k as int8 elements", AttentionInt4(out, q, Int4KVTensor{Data: make([]byte, 400), Scales: k.Scales}, v, s, nil), ErrBuffer)
	wantErr(t, "short v scales", AttentionInt4(out, q, k, Int4KVTensor{Data: v.Data, Scales: v.Scales[:19]}, s, nil), ErrBuffer)
	wantErr(t, "out overlaps k scales", AttentionInt4(out, q, Int4KVTensor{Data: k.Data, Scales: out[:20]}, v, s, nil), ErrBuffer)
}

// TestCacheInt4: a layer decoding into an int4 cache stores exactly the
// q4_0 blocks of the float32 cache's rows (QuantizeInt4KV), its scales
// too, and decodes within int4's reach of the float32 Forward.
func TestCacheInt4(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 43))
	cfg := LayerConfig{DModel: 48, Heads: 8, KVHeads: 2, HeadDim: 40, ValueDim: 24}
	for _, e := range engines {
		l, _ := testLayer(t, e, rng, cfg, true)
		const B, L, C = 2, 140, 150 // capacity >= 128: the split decode path
		x, full := causalForward(t, l, rng, B, L)
		c32, _ := l.NewCache(B, C)
		c4, err := l.NewCacheOf(B, C, Int4)
		if err != nil {
			t.Fatal(err)
		}
		if c4.Type() != Int4 || c4.K8 != nil || len(c4.K4) != B*C*2*32 || len(c4.V4) != B*C*2*16 || len(c4.KScale) != B*C*2*2 || len(c4.VScale) != B*C*2*1 {
			t.Fatalf("NewCacheOf(Int4): type %v, K8 %d, K4 %d, V4 %d, KScale %d, VScale %d", c4.Type(), len(c4.K8), len(c4.K4), len(c4.V4), len(c4.KScale), len(c4.VScale))
		}
		worst := decodeVersusForward(t, l, c4, c32, x, full, B, L)
		for _, p := range []struct {
			name   string
			f32    []float32
			bytes  []byte
			scales []float32
			dim    int
		}{{"K", c32.K, c4.K4, c4.KScale, 40}, {"V", c32.V, c4.V4, c4.VScale, 24}} {
			want, _ := quantize4(t, p.f32, p.dim)
			w, nb := Int4RowBytes(p.dim), QuantBlocks(p.dim)
			for i := range want.Scales {
				if i/nb%C < L && want.Scales[i] != p.scales[i] { // the rows written
					t.Fatalf("%s: %s scale %d = %v, want %v", e.Kernels(), p.name, i, p.scales[i], want.Scales[i])
				}
			}
			for i := range want.Data {
				if i/w%C < L && want.Data[i] != p.bytes[i] {
					t.Fatalf("%s: %s4[%d] = %#x, the quantized float32 cache holds %#x", e.Kernels(), p.name, i, p.bytes[i], want.Data[i])
				}
			}
		}
		// Inputs of magnitude ~1, steps of |max|/8 per block: 0.06–0.09 measured.
		if worst > 0.2 {
			t.Errorf("%s int4 cache: decode differs from the float32 Forward by %.3g > 0.2", e.Kernels(), worst)
		}
		t.Logf("%s int4 cache: %.3g from the float32 Forward", e.Kernels(), worst)
	}
}

// ggmlQ4Block is one of ggml's block_q4_0: a float16 scale, then 16 bytes
// of nibbles (byte j: element j low, element j+16 high).
type ggmlQ4Block struct {
	d  uint16
	qs [16]byte
}

// ggmlQuantizeQ4 is ggml's quantize_row_q4_0_ref (src/ggml-quants.c),
// line for line: d = max/-8 stored as float16, u = min(15, int8(x·(1/d)
// + 8.5)).
func ggmlQuantizeQ4(x []float32) []ggmlQ4Block {
	out := make([]ggmlQ4Block, len(x)/32)
	for i := range out {
		amax, mx := float32(0), float32(0)
		for _, v := range x[i*32 : (i+1)*32] {
			if a := float32(math.Abs(float64(v))); amax < a {
				amax, mx = a, v
			}
		}
		d := mx / -8
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		out[i].d = fallback.F32ToF16(d)
		for j := range 16 {
			x0, x1 := x[i*32+j]*id, x[i*32+16+j]*id
			out[i].qs[j] = min(15, uint8(int8(x0+8.5))) | min(15, uint8(int8(x1+8.5)))<<4
		}
	}
	return out
}

// TestInt4KVFromGGML: ggml's q4_0 blocks, as its reference quantizer
// writes them, become an Int4KVTensor by copying their 16 bytes and
// widening d; AttentionInt4 on them is the oracle's attention on ggml's
// dequantize_row_q4_0 values, on every set. QuantizeInt4KV's nibbles are
// ggml's (with d kept in float32) but where x/d lies within a rounding of
// a half.
func TestInt4KVFromGGML(t *testing.T) {
	rng := rand.New(rand.NewPCG(46, 46))
	s := Shape{Batch: 1, Heads: 8, KVHeads: 2, QLen: 1, KVLen: 300, HeadDim: 64, Layout: BHSD}
	rs, _ := s.resolve()
	q, k, v, _ := inputs(rng, rs)
	tensor := func(x []float32) (Int4KVTensor, []float32) {
		blocks := ggmlQuantizeQ4(x)
		t4 := Int4KVTensor{Data: make([]byte, 16*len(blocks)), Scales: make([]float32, len(blocks))}
		d16 := make([]uint16, len(blocks))
		vals := make([]float32, len(x))
		for i, b := range blocks {
			copy(t4.Data[16*i:], b.qs[:])
			d16[i] = b.d
			d := fallback.F16ToF32(b.d) // dequantize_row_q4_0
			for j := range 16 {
				vals[32*i+j] = float32(int(b.qs[j]&15)-8) * d
				vals[32*i+16+j] = float32(int(b.qs[j]>>4)-8) * d
			}
		}
		if err := Widen16(t4.Scales, d16, Float16); err != nil {
			t.Fatal(err)
		}
		return t4, vals
	}
	k4, kf := tensor(k)
	v4, vf := tensor(v)
	wantOut, wantLSE := fallback.Attention(specOf(rs, nil), q, kf, vf)
	compareEngines(t, "ggml q4_0 blocks", s, Options{}, q, func(e *Engine, out, q []float32, o *Options) error {
		return e.AttentionInt4(out, q, k4, v4, s, o)
	}, wantOut, wantLSE, tolOut)

	// The rule against ggml's, d in float32: the same nibble but on ties.
	x := make([]float32, 32*4096)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	ours, _ := quantize4(t, x, 32)
	differ := 0
	for i := range ours.Scales {
		d := ours.Scales[i]
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		for j := range 32 {
			xv := x[32*i+j]
			g := min(15, uint8(int8(xv*id+8.5)))
			got := uint8(fallback.Int4KVAt(ours.Data[16*i:], j) + 8)
			if got == g {
				continue
			}
			differ++
			if f := float64(xv / d); math.Abs(math.Abs(f-math.Trunc(f))-0.5) > 1e-5 {
				t.Fatalf("block %d element %d: x/d = %v, our nibble %d, ggml's %d: not a tie", i, j, f, got, g)
			}
		}
	}
	t.Logf("%d of %d nibbles differ from ggml's rule (ties)", differ, len(x))
}

// FuzzQuantizeInt4KV checks QuantizeInt4KV's rule on random rows: per
// block of 32, d = m/-8 for m the first element of largest magnitude (+0
// for a zero block), m itself exact, every other value within half a step
// unless it lies above the top level 7·d (then 7·d), a padded tail's
// nibbles 8; DequantizeInt4KV gives float32(u-8)·d; a NaN or ±Inf anywhere
// is ErrNonFinite and nothing is written.
func FuzzQuantizeInt4KV(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(40), float32(0))
	f.Add(uint64(2), uint8(1), uint8(32), float32(math.Inf(-1)))
	f.Add(uint64(3), uint8(2), uint8(7), float32(1e-40))
	f.Add(uint64(4), uint8(0), uint8(64), float32(3.4e38))
	f.Fuzz(func(t *testing.T, seed uint64, rows, dim uint8, poke float32) {
		rng := rand.New(rand.NewPCG(seed, 4))
		r, d := 1+int(rows%5), 1+int(dim%70)
		src := random(rng, r*d)
		for i := range src {
			src[i] *= float32(math.Ldexp(1, rng.IntN(40)-20))
		}
		src[rng.IntN(len(src))] = poke
		nb, w := QuantBlocks(d), Int4RowBytes(d)
		dst := Int4KVTensor{Data: make([]byte, r*w), Scales: make([]float32, r*nb)}
		for i := range dst.Data {
			dst.Data[i] = 0x5a
		}
		err := QuantizeInt4KV(dst, src, d)
		if math.IsNaN(float64(poke)) || math.IsInf(float64(poke), 0) {
			if !errors.Is(err, ErrNonFinite) {
				t.Fatalf("quantizing %v: %v, want ErrNonFinite", poke, err)
			}
			for _, b := range dst.Data {
				if b != 0x5a {
					t.Fatalf("a refused QuantizeInt4KV wrote data")
				}
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		back := make([]float32, len(src))
		if err := DequantizeInt4KV(back, dst, d); err != nil {
			t.Fatal(err)
		}
		for row := range r {
			for blk := range nb {
				lo, hi := row*d+blk*32, row*d+min((blk+1)*32, d)
				m := float32(0)
				for _, x := range src[lo:hi] {
					if math.Abs(float64(x)) > math.Abs(float64(m)) {
						m = x
					}
				}
				scale := dst.Scales[row*nb+blk]
				if want := m / -8; scale != want || math.Signbit(float64(scale)) && m == 0 {
					t.Fatalf("row %d block %d: scale %v, want m/-8 = %v", row, blk, scale, want)
				}
				bytes := dst.Data[row*w+blk*16:][:16]
				for j := range 32 {
					u := bytes[j%16] & 15
					if j >= 16 {
						u = bytes[j%16] >> 4
					}
					i := lo + j
					if i >= hi {
						if u != 8 {
							t.Fatalf("row %d block %d: padding nibble %d = %d, want 8", row, blk, j, u)
						}
						continue
					}
					if back[i] != float32(int(u)-8)*scale {
						t.Fatalf("element %d: nibble %d, dequantized %v, scale %v", i, u, back[i], scale)
					}
					x, ad := float64(src[i]), math.Abs(float64(scale))
					tiny := 16 * math.Ldexp(1, -149) // subnormal scales keep few bits
					switch {
					case scale == 0:
						if back[i] != 0 {
							t.Fatalf("element %d: %v in a zero-scale block dequantized to %v", i, x, back[i])
						}
					case float64(src[i]/scale) > 7.5:
						if back[i] != 7*scale {
							t.Fatalf("element %d: %v above the top level 7·d = %v, dequantized %v", i, x, 7*scale, back[i])
						}
					case !(math.Abs(float64(back[i])-x) <= 0.50001*ad+tiny):
						t.Fatalf("element %d: %v quantized to %v (d %v): off by more than half a step", i, x, back[i], scale)
					}
					if src[i] == m && ad >= math.Ldexp(1, -126) && back[i] != m {
						t.Fatalf("element %d: the block's largest magnitude %v dequantizes to %v", i, m, back[i])
					}
				}
			}
		}
	})
}

// TestInt4KVAccuracy measures what q4_0 K/V (AttentionInt4) costs on
// N(0, 1) data, one decode row per head over 4096 keys (1024 without
// FASTATTN_LONG), in the float32 and int8 modes: the output's relative
// error (root mean square over the output's) against the float64
// oracle on the float32 K/V, and against the float32 K/V result of the
// same engine. q4_0 keeps 16 levels a block: a value's error is up to
// max|x|/16, about 14% of a block's scale, and an attention output
// averages many such values. The bounds are the docs' figure with margin.
func TestInt4KVAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(0xacc, 4))
	rms := func(got []float32, want []float64) float64 {
		var num, den float64
		for i, w := range want {
			d := float64(got[i]) - w
			num, den = num+d*d, den+w*w
		}
		return math.Sqrt(num / den)
	}
	for _, dk := range []int{64, 128} {
		s, q, k, v, exact := accuracyCase(rng, dk)
		k4, _ := quantize4(t, k, dk)
		v4, _ := quantize4(t, v, dk)
		for _, e := range engines {
			f32 := make([]float32, len(exact))
			if err := e.Attention(f32, q, k, v, s, nil); err != nil {
				t.Fatal(err)
			}
			wide := make([]float64, len(f32))
			for i, x := range f32 {
				wide[i] = float64(x)
			}
			for _, c := range []Compute{ComputeF32, ComputeInt8} {
				out := make([]float32, len(exact))
				if err := e.AttentionInt4(out, q, k4, v4, s, &Options{Compute: c}); err != nil {
					t.Fatal(err)
				}
				rel, relF32 := rms(out, exact), rms(out, wide)
				t.Logf("%s D=%d int4 K/V, %v mode: relative error %.3g against float64, %.3g against float32 K/V", e.Kernels(), dk, c, rel, relF32)
				if !(rel <= 0.15 && relF32 <= 0.15) {
					t.Errorf("%s D=%d int4 K/V, %v mode: relative error %.3g against float64, %.3g against float32 K/V", e.Kernels(), dk, c, rel, relF32)
				}
			}
		}
	}
}
