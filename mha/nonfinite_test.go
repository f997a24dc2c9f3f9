package mha

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

var (
	nan32  = float32(math.NaN())
	inf32  = float32(math.Inf(1))
	poison = []float32{nan32, inf32, -inf32}
)

// pathShapes are shapes that take each path of the engine: the flash loop
// with one head per item (edge blocks of 16 keys), with several heads per
// item, a split decode step by QK, and one by the Dot kernel (<= 4 rows).
var pathShapes = []Shape{
	{Batch: 2, Heads: 2, KVHeads: 2, QLen: 70, KVLen: 90, HeadDim: 19, ValueDim: 21},
	{Batch: 1, Heads: 8, KVHeads: 1, QLen: 40, KVLen: 60, HeadDim: 16, Layout: BHSD},
	{Batch: 2, Heads: 8, KVHeads: 2, QLen: 3, KVLen: 300, HeadDim: 24, ValueDim: 9},
	{Batch: 2, Heads: 4, KVHeads: 2, QLen: 2, KVLen: 260, HeadDim: 33, Layout: BHSD},
}

// poisonMasked overwrites, with probability 1/8 each, the K and V rows of
// key positions that at least one query row of their KV group does not see
// (causal, window, key length, a -Inf bias entry or a false mask entry) with NaN or ±Inf: the
// whole row or one element. The rows that see a poisoned key get NaN or
// Inf, as the oracle says; every other row must be untouched by it.
func poisonMasked(rng *rand.Rand, s Shape, o *Options, k, v []float32) {
	sp := specOf(s, o)
	group := s.Heads / s.KVHeads
	for b := 0; b < s.Batch; b++ {
		for g := 0; g < s.KVHeads; g++ {
			for j := 0; j < s.KVLen; j++ {
				if !maskedSomewhere(&sp, b, g*group, (g+1)*group, j) || rng.IntN(8) != 0 {
					continue
				}
				for _, t := range []struct {
					x   []float32
					dim int
				}{{k, s.HeadDim}, {v, s.ValueDim}} {
					row := t.x[sp.Index(b, j, g, s.KVHeads, s.KVLen, t.dim):][:t.dim]
					bad := poison[rng.IntN(len(poison))]
					if rng.IntN(2) == 0 {
						row[rng.IntN(len(row))] = bad
					} else {
						fill(row, bad)
					}
				}
			}
		}
	}
}

// maskedSomewhere reports whether some query row of heads [h0, h1) of
// batch b does not see key j.
func maskedSomewhere(sp *fallback.Spec, b, h0, h1, j int) bool {
	for h := h0; h < h1; h++ {
		for i := 0; i < sp.QLen; i++ {
			if !sp.Visible(b, i, j) || sp.Filtered(b, h, i, j) {
				return true
			}
		}
	}
	return false
}

func fill(x []float32, v float32) {
	for i := range x {
		x[i] = v
	}
}

// rowStats counts the rows of an oracle output that are finite, NaN and
// zero (no key), so a test can check that it exercised each kind.
func rowStats(out []float64, dv int) (finite, nan, zero int) {
	for r := 0; r < len(out)/dv; r++ {
		row := out[r*dv : (r+1)*dv]
		switch {
		case math.IsNaN(row[0]):
			nan++
		case row[0] == 0 && row[len(row)-1] == 0:
			zero++
		default:
			finite++
		}
	}
	return
}

// TestMaskedKeysPoisoned: a key a row does not see contributes nothing to
// it, whatever K and V hold there — NaN and ±Inf planted at masked
// positions reach only the rows that see them, on every set and path, for
// causal, window (both ways), negative offsets, key lengths, -Inf bias
// entries and false mask entries, with ALiBi and sinks.
func TestMaskedKeysPoisoned(t *testing.T) {
	t.Parallel() // a sweep against the oracle: runs beside the other sweeps, after the sequential tests
	rng := rand.New(rand.NewPCG(21, 22))
	off := -5
	sets := map[string]optionSet{
		"causal": {causal: true}, "window": {window: true}, "offset": {offset: true},
		"kvlens": {kvlens: true}, "bias": {bias: true}, "causal+bias+softcap": {causal: true, bias: true, softcap: true},
		"all":   {causal: true, window: true, offset: true, softcap: true, kvlens: true, bias: true},
		"bidir": {window: true, bidir: true, kvlens: true}, "mask": {mask: true}, "mask+bias": {mask: true, bias: true},
		"alibi+sinks+mask": {alibi: true, sinks: true, mask: true, causal: true},
	}
	var finite, nan int
	for name, f := range sets {
		for _, s := range pathShapes {
			rs, _ := s.resolve()
			for rep := 0; rep < 3; rep++ {
				o := f.build(rng, rs)
				if rep == 2 && o.Causal {
					o.QueryOffset = &off // the first rows see nothing
				}
				q, k, v, _ := inputs(rng, rs)
				poisonMasked(rng, rs, &o, k, v)
				want, _ := fallback.Attention(specOf(rs, &o), q, k, v)
				fi, na, _ := rowStats(want, rs.ValueDim)
				finite, nan = finite+fi, nan+na
				t.Run(name, func(t *testing.T) { checkInputs(t, rs, o, q, k, v) })
			}
		}
	}
	if finite == 0 || nan == 0 {
		t.Fatalf("the cases had %d finite and %d NaN rows: both kinds must occur", finite, nan)
	}
}

// TestAllMaskedPoisoned: rows that see no key output zeros and LSE -Inf
// even when every K and V element is NaN or Inf.
func TestAllMaskedPoisoned(t *testing.T) {
	for _, s := range pathShapes {
		rs, _ := s.resolve()
		rng := rand.New(rand.NewPCG(23, 24))
		q, k, v, _ := inputs(rng, rs)
		for i := range k {
			k[i] = poison[i%3]
		}
		for i := range v {
			v[i] = poison[(i+1)%3]
		}
		off := -rs.KVLen // no row sees a key
		checkInputs(t, rs, Options{Causal: true, QueryOffset: &off}, q, k, v)
		kvlens := make([]int, rs.Batch)
		checkInputs(t, rs, Options{KVLens: kvlens}, q, k, v)
		bias := make([]float32, rs.QLen*rs.KVLen)
		fill(bias, -inf32)
		checkInputs(t, rs, Options{Bias: bias, Softcap: 2}, q, k, v)
	}
}

// TestNaNRule: NaN in a visible input is NaN in the rows it reaches, never
// "no key": a NaN query row, a NaN key, a NaN or +Inf bias entry give NaN
// output and LSE; a NaN value gives NaN output columns. Every set and path
// agrees with the oracle, which is checked to say NaN.
func TestNaNRule(t *testing.T) {
	for _, s := range pathShapes {
		rs, _ := s.resolve()
		sp := specOf(rs, nil)
		for _, c := range []struct {
			name  string
			plant func(q, k, v, bias []float32)
			lse   bool // the LSE is NaN too
		}{
			{"q", func(q, k, v, bias []float32) { q[sp.Index(0, 0, 0, rs.Heads, rs.QLen, rs.HeadDim)] = nan32 }, true},
			{"k", func(q, k, v, bias []float32) { k[sp.Index(0, 0, 0, rs.KVHeads, rs.KVLen, rs.HeadDim)+1] = nan32 }, true},
			{"v", func(q, k, v, bias []float32) { v[sp.Index(0, 1, 0, rs.KVHeads, rs.KVLen, rs.ValueDim)] = nan32 }, false},
			{"bias NaN", func(q, k, v, bias []float32) { bias[3] = nan32 }, true},
			{"bias +Inf", func(q, k, v, bias []float32) { bias[rs.KVLen+2] = inf32 }, true},
		} {
			rng := rand.New(rand.NewPCG(25, 26))
			q, k, v, _ := inputs(rng, rs)
			bias := random(rng, rs.QLen*rs.KVLen)
			c.plant(q, k, v, bias)
			for _, o := range []Options{{Bias: bias}, {Bias: bias, Causal: true, Softcap: 3}} {
				wantOut, wantLSE := fallback.Attention(specOf(rs, &o), q, k, v)
				nanOut, nanLSE := 0, 0
				for _, x := range wantOut {
					if math.IsNaN(x) {
						nanOut++
					}
				}
				for _, x := range wantLSE {
					if math.IsNaN(x) {
						nanLSE++
					}
				}
				if nanOut == 0 || (nanLSE > 0) != c.lse {
					t.Fatalf("%s: the oracle has %d NaN outputs and %d NaN LSEs", c.name, nanOut, nanLSE)
				}
				t.Run(c.name, func(t *testing.T) { checkInputs(t, rs, o, q, k, v) })
			}
		}
	}
}

// TestScoreOverflow: a score beyond float32's range is ±Inf. +Inf makes
// the row NaN (softcap maps it to +Softcap instead); -Inf weighs 0 like a
// mask, unless every key the row sees scores -Inf, which is NaN, not the
// zeros of a row with nothing to see.
func TestScoreOverflow(t *testing.T) {
	for _, s := range pathShapes {
		rs, _ := s.resolve()
		sp := specOf(rs, nil)
		rng := rand.New(rand.NewPCG(27, 28))
		q, k, v, _ := inputs(rng, rs)
		qrow := func(b, i, h int) []float32 {
			return q[sp.Index(b, i, h, rs.Heads, rs.QLen, rs.HeadDim):][:rs.HeadDim]
		}
		krow := func(b, j, g int) []float32 {
			return k[sp.Index(b, j, g, rs.KVHeads, rs.KVLen, rs.HeadDim):][:rs.HeadDim]
		}
		// Row (0, 0, 0): q[0] = 1e20. Key 1 of KV head 0: k[0] = 1e20 (+Inf
		// score), key 2: k[0] = -1e20 (-Inf); the other keys' k[0] = 0 keep
		// finite scores.
		for j := 0; j < rs.KVLen; j++ {
			krow(0, j, 0)[0] = 0
		}
		qrow(0, 0, 0)[0] = 1e20
		krow(0, 2, 0)[0] = -1e20
		checkInputs(t, rs, Options{}, q, k, v) // -Inf weighs 0
		krow(0, 1, 0)[0] = 1e20
		checkInputs(t, rs, Options{}, q, k, v)             // +Inf: NaN row
		checkInputs(t, rs, Options{Softcap: 5}, q, k, v)   // capped to 5
		checkInputs(t, rs, Options{Scale: 1e-30}, q, k, v) // no overflow
		// Every key -Inf for row (1 or 0, last position, head 0).
		b := rs.Batch - 1
		for j := 0; j < rs.KVLen; j++ {
			krow(b, j, 0)[0] = -1e20
		}
		qrow(b, rs.QLen-1, 0)[0] = 1e20
		want, _ := fallback.Attention(specOf(rs, nil), q, k, v)
		if _, nan, _ := rowStats(want, rs.ValueDim); nan < 2 {
			t.Fatalf("the oracle has %d NaN rows, want the +Inf and the all -Inf rows", nan)
		}
		checkInputs(t, rs, Options{}, q, k, v)
		checkInputs(t, rs, Options{Causal: true, Window: 40}, q, k, v)
	}
}

// TestNaNUnderMinusInfScore: a visible key whose score overflows to -Inf
// weighs 0, but 0·NaN is NaN: a NaN in its value row reaches the output
// even when every other key of its split-decode chunk also scores -Inf
// (the merge once dropped such chunks; found by FuzzPoisonedMask).
func TestNaNUnderMinusInfScore(t *testing.T) {
	for _, s := range pathShapes {
		rs, _ := s.resolve()
		sp := specOf(rs, nil)
		rng := rand.New(rand.NewPCG(29, 30))
		q, k, v, _ := inputs(rng, rs)
		for i := 0; i < rs.QLen; i++ {
			for h := 0; h < rs.Heads; h++ {
				q[sp.Index(0, i, h, rs.Heads, rs.QLen, rs.HeadDim)] = 0
			}
		}
		q[sp.Index(0, 0, 0, rs.Heads, rs.QLen, rs.HeadDim)] = 1e20 // row (0, 0, 0)
		for j := 0; j < rs.KVLen; j++ {
			x := float32(0)
			if j < 64 { // the first chunk: all -Inf for row (0, 0, 0)
				x = -1e20
			}
			k[sp.Index(0, j, 0, rs.KVHeads, rs.KVLen, rs.HeadDim)] = x
		}
		v[sp.Index(0, 5, 0, rs.KVHeads, rs.KVLen, rs.ValueDim)] = nan32
		want, _ := fallback.Attention(specOf(rs, nil), q, k, v)
		if !math.IsNaN(want[sp.Index(0, 0, 0, rs.Heads, rs.QLen, rs.ValueDim)]) {
			t.Fatal("the oracle does not carry the NaN")
		}
		checkInputs(t, rs, Options{}, q, k, v)
	}
}

// TestCacheNonFinite: a token whose K or V is not finite in the cache's
// storage type is refused with ErrNonFinite for every type — NaN and ±Inf
// in all of them, a float32 beyond float16's or bfloat16's range in those —
// in a ragged call whose other sequence's tokens are fine, and nothing of
// the call is appended to any sequence; values just inside each range are
// stored.
func TestCacheNonFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 2))
	cfg := LayerConfig{DModel: 16, Heads: 4, KVHeads: 2, HeadDim: 8}
	f16Max, bf16Max := fallback.F16ToF32(0x7bff), fallback.BF16ToF32(0x7f7f)
	// The limits storable uses are where each type's rounding gives ±Inf.
	for _, c := range []struct {
		t      DType
		finite float32
		inf    float32
	}{
		{Float16, math.Nextafter32(65520, 0), 65520},
		{BFloat16, math.Float32frombits(0x7f7f7fff), math.Float32frombits(0x7f7f8000)},
	} {
		dst := make([]uint16, 2)
		if err := Narrow16(dst, []float32{c.finite, c.inf}, c.t); err != nil {
			t.Fatal(err)
		}
		w := []float32{widen16(dst[0], c.t), widen16(dst[1], c.t)}
		if w[0] != map[DType]float32{Float16: f16Max, BFloat16: bf16Max}[c.t] || !math.IsInf(float64(w[1]), 1) {
			t.Fatalf("%v: %v rounds to %v and %v to %v", c.t, c.finite, w[0], c.inf, w[1])
		}
	}
	for _, e := range engines {
		_, w := testLayer(t, e, rng, cfg, true)
		for _, typ := range []DType{Float32, Float16, BFloat16, Int8, Int4} {
			for _, bad := range []struct {
				name string
				v    float32 // the bias of V's element 3 (head 0) or, in x, NaN
				ok   bool
			}{
				{"NaN in x", nan32, false},
				{"V 1e5", 1e5, typ != Float16},
				{"V 65519", 65519, true},
				{"V 3.4e38", 3.4e38, typ == Float32 || typ.quantized()},
				{"V 3.39e38", 3.39e38, typ != Float16},
			} {
				wb := w
				wb.BV = append([]float32(nil), w.BV...)
				x := random(rng, 3*cfg.DModel)
				if math.IsNaN(float64(bad.v)) {
					x[2*cfg.DModel+5] = bad.v // the second sequence's token
				} else {
					wb.BV[3] = bad.v
					for j := range wb.WV { // V exactly its bias
						wb.WV[j] = 0
					}
				}
				lb, err := NewLayer(e, cfg, wb)
				if err != nil {
					t.Fatal(err)
				}
				c, err := lb.NewCacheOf(2, 8, typ)
				if err != nil {
					t.Fatal(err)
				}
				err = lb.DecodeSeqs(nil, make([]float32, 3*cfg.DModel), x, c, []int{2, 1}, nil)
				if bad.ok {
					if err != nil || c.Len(0) != 2 || c.Len(1) != 1 {
						t.Errorf("%s %v %s: %v, lengths %v, want stored", e.Kernels(), typ, bad.name, err, c.Lens(nil))
					}
					continue
				}
				if !errors.Is(err, ErrNonFinite) {
					t.Errorf("%s %v %s: %v, want ErrNonFinite", e.Kernels(), typ, bad.name, err)
					continue
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("%v cache: sequence ", typ)) {
					t.Errorf("%s %v %s: the error does not name the cache and sequence: %v", e.Kernels(), typ, bad.name, err)
				}
				if c.Len(0) != 0 || c.Len(1) != 0 {
					t.Errorf("%s %v %s: a refused call left lengths %v", e.Kernels(), typ, bad.name, c.Lens(nil))
				}
				// The cache goes on: the first sequence's good tokens alone.
				if math.IsNaN(float64(bad.v)) {
					if err := lb.DecodeSeqs(nil, make([]float32, 2*cfg.DModel), x[:2*cfg.DModel], c, []int{2, 0}, nil); err != nil || c.Len(0) != 2 {
						t.Errorf("%s %v: good tokens after a refused call: %v, lengths %v", e.Kernels(), typ, err, c.Lens(nil))
					}
				}
			}
		}
	}
}

// widen16 returns the float32 value of a 16-bit float of type t.
func widen16(h uint16, t DType) float32 {
	if t == Float16 {
		return fallback.F16ToF32(h)
	}
	return fallback.BF16ToF32(h)
}
