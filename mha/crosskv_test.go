package mha

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

// TestCrossKV: attending to a CrossKV, from any number of steps and
// goroutines, equals ForwardCross bit for bit (QK-norm applied, no
// rotary), and ForwardCross equals the float64 reference.
func TestCrossKV(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 38))
	cfg := LayerConfig{DModel: 40, Heads: 4, KVHeads: 2, HeadDim: 10, ValueDim: 6, Rotary: Rotary{Dims: 10}}
	for _, e := range engines {
		l, w := testLayer(t, e, rng, cfg, true)
		w.QNorm, w.KNorm = random(rng, 10), random(rng, 20)
		l, err := NewLayer(e, cfg, w)
		if err != nil {
			t.Fatal(err)
		}
		const B, enc = 2, 150
		xkv := random(rng, B*enc*40)
		kv, err := l.NewCrossKV(xkv, B, enc)
		if err != nil {
			t.Fatal(err)
		}
		if kv.Batch() != B || kv.Len() != enc {
			t.Fatalf("CrossKV: Batch %d Len %d", kv.Batch(), kv.Len())
		}
		opts := &Options{KVLens: []int{enc, 97}}
		var wg sync.WaitGroup
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, lq := range []int{1, 3, 1, 20} {
					xq := random(rand.New(rand.NewPCG(uint64(g), uint64(lq))), B*lq*40)
					want, got := make([]float32, B*lq*40), make([]float32, B*lq*40)
					if err := l.ForwardCross(want, xq, xkv, B, lq, enc, opts); err != nil {
						t.Error(err)
						return
					}
					if err := l.Cross(got, xq, kv, lq, opts); err != nil {
						t.Error(err)
						return
					}
					if i := firstDiff(got, want); i >= 0 {
						t.Errorf("%s Cross: out[%d] = %v, ForwardCross %v", e.Kernels(), i, got[i], want[i])
						return
					}
				}
			}()
		}
		wg.Wait()
		// ForwardCross against float64: QK-norm, no rotary.
		xq := random(rng, B*5*40)
		want := referenceCross(l.Config(), w, xq, xkv, B, 5, enc, opts)
		got := make([]float32, len(want))
		if err := l.Cross(got, xq, kv, 5, opts); err != nil {
			t.Fatal(err)
		}
		compare(t, e.Kernels()+" cross", got, want, tolLayer, &worstLayer)

		other, _ := testLayer(t, e, rng, cfg, false)
		wantErr(t, "other layer's CrossKV", other.Cross(got, xq, kv, 5, nil), ErrOption)
		wantErr(t, "nil CrossKV", l.Cross(got, xq, nil, 5, nil), ErrNil)
		wantErr(t, "zero CrossKV", l.Cross(got, xq, &CrossKV{}, 5, nil), ErrNil)
		wantErr(t, "short xq", l.Cross(got, xq[:7], kv, 5, nil), ErrBuffer)
		wantErr(t, "short xkv", func() error { _, err := l.NewCrossKV(xkv[:9], B, enc); return err }(), ErrBuffer)
		wantErr(t, "zero kvLen", func() error { _, err := l.NewCrossKV(xkv, B, 0); return err }(), ErrShape)
		dead, cancel := context.WithCancel(context.Background())
		cancel()
		wantErr(t, "cancelled CrossKV", func() error { _, err := l.NewCrossKVContext(dead, xkv, B, enc); return err }(), context.Canceled)
		wantErr(t, "cancelled Cross", l.CrossContext(&doneCtx{Context: context.Background()}, got, xq, kv, 5, nil), context.Canceled)
	}
}

// referenceCross is ForwardCross's float64 reference with QK-norm.
func referenceCross(cfg LayerConfig, w Weights, xq, xkv []float32, batch, lq, lk int, o *Options) []float64 {
	dm, H, Hkv, D := cfg.DModel, cfg.Heads, cfg.KVHeads, cfg.HeadDim
	q := fallback.Linear(xq, w.WQ, w.BQ, batch*lq, dm, H*D)
	k := fallback.Linear(xkv, w.WK, w.BK, batch*lk, dm, Hkv*D)
	if w.QNorm != nil {
		rmsNorm64(q, w.QNorm, 1e-6)
	}
	if w.KNorm != nil {
		rmsNorm64(k, w.KNorm, 1e-6)
	}
	v := toF32(fallback.Linear(xkv, w.WV, w.BV, batch*lk, dm, Hkv*cfg.ValueDim))
	s := Shape{Batch: batch, Heads: H, KVHeads: Hkv, QLen: lq, KVLen: lk, HeadDim: D, ValueDim: cfg.ValueDim}
	attn, _ := fallback.Attention(specOf(s, o), toF32(q), toF32(k), v)
	return fallback.Linear(toF32(attn), w.WO, w.BO, batch*lq, H*cfg.ValueDim, dm)
}
