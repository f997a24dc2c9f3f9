package mha

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// FuzzAttention compares every kernel set with the oracle on shapes and
// options drawn from the fuzzer's input. Shapes are kept small so each
// input runs in well under a millisecond; bad shapes must give errors, not
// panics.
func FuzzAttention(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(2), uint8(9), uint8(17), uint8(8), uint8(0xff))
	f.Add(uint64(2), uint8(1), uint8(0), uint8(1), uint8(200), uint8(64), uint8(0x11))
	f.Add(uint64(3), uint8(6), uint8(5), uint8(33), uint8(1), uint8(130), uint8(0x42))
	f.Fuzz(func(t *testing.T, seed uint64, heads, kvDiv, lq, lk, dk, flags uint8) {
		rng := rand.New(rand.NewPCG(seed, uint64(flags)))
		s := Shape{
			Batch: 1 + int(flags>>6), Heads: int(heads % 9), KVHeads: int(kvDiv % 5),
			QLen: int(lq), KVLen: int(lk), HeadDim: int(dk % 140), Layout: Layout(flags >> 5 & 1),
		}
		if flags&16 != 0 {
			s.ValueDim = 1 + int(seed%50)
		}
		rs, err := s.resolve()
		if err != nil {
			// Invalid shape: the call must say so, not panic.
			if err := engines[0].Attention(nil, nil, nil, nil, s, nil); !errors.Is(err, ErrShape) {
				t.Fatalf("shape %+v: %v, want ErrShape", s, err)
			}
			return
		}
		f := optionSet{causal: flags&1 != 0, window: flags&2 != 0, softcap: flags&4 != 0,
			kvlens: flags&8 != 0, bias: seed%3 == 0, offset: seed%5 == 0, scale: seed%7 == 0,
			bidir: seed%11 == 0, mask: seed%13 == 0, alibi: flags&16 != 0, sinks: seed%17 == 0}
		checkCase(t, rng, rs, f.build(rng, rs))
	})
}

// FuzzPoisonedMask is FuzzAttention with NaN and ±Inf planted in the K and
// V rows of masked key positions: rows that do not see them must match the
// oracle, and the rows that do must be NaN or Inf exactly where it says.
func FuzzPoisonedMask(f *testing.F) {
	f.Add(uint64(4), uint8(4), uint8(2), uint8(40), uint8(90), uint8(16), uint8(0x0b))
	f.Add(uint64(5), uint8(8), uint8(1), uint8(1), uint8(200), uint8(64), uint8(0x09))
	f.Add(uint64(6), uint8(3), uint8(3), uint8(70), uint8(70), uint8(33), uint8(0x27))
	f.Fuzz(func(t *testing.T, seed uint64, heads, kvDiv, lq, lk, dk, flags uint8) {
		rng := rand.New(rand.NewPCG(seed, uint64(flags)))
		s := Shape{
			Batch: 1 + int(flags>>6), Heads: 1 + int(heads%8), KVHeads: 1 + int(kvDiv%4),
			QLen: 1 + int(lq), KVLen: 1 + int(lk), HeadDim: 1 + int(dk%100), Layout: Layout(flags >> 5 & 1),
		}
		s.Heads *= s.KVHeads
		f := optionSet{causal: flags&1 != 0, window: flags&2 != 0, softcap: flags&4 != 0,
			kvlens: flags&8 != 0, bias: seed%2 == 0, offset: seed%5 == 0,
			bidir: seed%3 == 0, mask: seed%7 == 0, alibi: flags&16 != 0, sinks: seed%11 == 0}
		rs, _ := s.resolve()
		o := f.build(rng, rs)
		q, k, v, _ := inputs(rng, rs)
		poisonMasked(rng, rs, &o, k, v)
		checkInputs(t, rs, o, q, k, v)
	})
}

// FuzzLayerConfig builds layers, caches and calls from arbitrary
// configurations, absurd ones included (negative, zero, huge, products
// that wrap): every call returns nil or an error wrapping a sentinel,
// never panics, and a layer small enough to check agrees with the plain
// float64 composition in Forward and token by token in Decode.
func FuzzLayerConfig(f *testing.F) {
	f.Add(int64(16), int64(4), int64(2), int64(4), int64(0), int64(2), int64(5), uint8(0))
	f.Add(int64(1), int64(1<<32), int64(0), int64(1<<32), int64(0), int64(1), int64(1), uint8(1))
	f.Add(int64(8), int64(3), int64(3), int64(5), int64(7), int64(1<<40), int64(1<<40), uint8(2))
	f.Add(int64(-1), int64(2), int64(1), int64(-3), int64(0), int64(0), int64(-2), uint8(3))
	f.Add(int64(12), int64(4), int64(2), int64(6), int64(0), int64(2), int64(9), uint8(2|4|16))
	f.Add(int64(10), int64(2), int64(1), int64(5), int64(3), int64(1), int64(7), uint8(2|4|8|16|32|64))
	f.Fuzz(func(t *testing.T, dm, heads, kvHeads, headDim, valueDim, batch, seqLen int64, flags uint8) {
		cfg := LayerConfig{DModel: int(dm), Heads: int(heads), KVHeads: int(kvHeads), HeadDim: int(headDim), ValueDim: int(valueDim)}
		if flags&4 != 0 { // rotary over the leading even dims, both pair layouts
			cfg.Rotary = Rotary{Dims: int(headDim) &^ 1, Interleaved: flags&8 != 0, Base: float64(1 + int(dm)%7*1000)}
			if flags>>6 != 0 {
				cfg.Rotary.Scaling = &RopeScaling{Type: "linear", Factor: float64(1 + flags>>6)}
			}
		}
		B, L := int(batch), int(seqLen)
		small := func(x int64) bool { return x >= 0 && x <= 24 }
		checkable := small(dm) && dm > 0 && small(heads) && small(kvHeads) && small(headDim) && small(valueDim) &&
			small(batch) && small(seqLen)
		sentinel := func(what string, err error) {
			if err == nil {
				return
			}
			for _, s := range []error{ErrShape, ErrBuffer, ErrOption, ErrCacheFull, ErrNil} {
				if errors.Is(err, s) {
					return
				}
			}
			t.Fatalf("%s: %v wraps no sentinel", what, err)
		}
		var w Weights
		rng := rand.New(rand.NewPCG(uint64(dm), uint64(flags)))
		if checkable {
			rc := cfg
			if rc.KVHeads == 0 {
				rc.KVHeads = rc.Heads
			}
			if rc.ValueDim == 0 {
				rc.ValueDim = rc.HeadDim
			}
			// Scaled 1/sqrt(fan-in), as testLayer's, so activations stay O(1).
			mat := func(in, out int) []float32 {
				m := random(rng, in*out)
				for i := range m {
					m[i] /= float32(math.Sqrt(float64(in)))
				}
				return m
			}
			w = Weights{WQ: mat(int(dm), rc.Heads*rc.HeadDim), WK: mat(int(dm), rc.KVHeads*rc.HeadDim),
				WV: mat(int(dm), rc.KVHeads*rc.ValueDim), WO: mat(rc.Heads*rc.ValueDim, int(dm))}
			if flags&1 != 0 {
				w.BO = random(rng, int(dm))
			}
			if flags&16 != 0 { // QK-norm, per head or (flags&32) over all heads
				nq, nk := rc.HeadDim, rc.HeadDim
				if flags&32 != 0 {
					nq, nk = rc.Heads*rc.HeadDim, rc.KVHeads*rc.HeadDim
				}
				w.QNorm, w.KNorm = random(rng, nq), random(rng, nk)
			}
		} else {
			tiny := make([]float32, 64)
			w = Weights{WQ: tiny, WK: tiny, WV: tiny, WO: tiny}
		}
		e := engines[int(flags)%len(engines)]
		l, err := NewLayer(e, cfg, w)
		sentinel("NewLayer", err)
		if err != nil {
			return
		}
		cache, err := l.NewCache(B, L)
		sentinel("NewCache", err)
		if !checkable {
			buf := make([]float32, 256)
			sentinel("Forward", l.Forward(buf, buf[:128], B, L, nil))
			if cache != nil {
				sentinel("Decode", l.Decode(buf, buf[:128], cache, L, nil))
			}
			return
		}
		rc := l.Config()
		x := random(rng, B*L*rc.DModel)
		out := make([]float32, len(x))
		opts := &Options{Causal: flags&2 != 0}
		if err := l.Forward(out, x, B, L, opts); err != nil {
			sentinel("Forward", err)
			return
		}
		want := referenceSelf(rc, w, x, B, L, opts)
		compare(t, e.Kernels()+" Forward", out, want, tolLayer, &worstLayer)
		if cache == nil || flags&2 == 0 {
			return
		}
		// Token by token through the cache equals the causal Forward.
		for pos := 0; pos < L; pos++ {
			tok := make([]float32, B*rc.DModel)
			for b := 0; b < B; b++ {
				copy(tok[b*rc.DModel:], x[(b*L+pos)*rc.DModel:][:rc.DModel])
			}
			got := make([]float32, len(tok))
			if err := l.Decode(got, tok, cache, 1, nil); err != nil {
				t.Fatalf("Decode at %d: %v", pos, err)
			}
			for b := 0; b < B; b++ {
				ref := make([]float64, rc.DModel)
				for i := range ref {
					ref[i] = float64(out[(b*L+pos)*rc.DModel+i])
				}
				compare(t, e.Kernels()+" Decode", got[b*rc.DModel:][:rc.DModel], ref, tolLayer, &worstLayer)
			}
		}
	})
}
