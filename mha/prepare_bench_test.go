package mha

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkPrepare: QK-norm and rotary over 512 tokens of a
// dm=4096,H=32,Hkv=8,D=128 layer (Qwen3's), one thread.
func BenchmarkPrepare(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const L, H, Hkv, D = 512, 32, 8, 128
	for _, c := range []struct {
		name       string
		rope, norm bool
	}{{"rope", true, false}, {"norm", false, true}, {"both", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			l := &Layer{e: engines[0], cfg: LayerConfig{Heads: H, KVHeads: Hkv, HeadDim: D}}
			if c.rope {
				l.rope, _ = newRope(Rotary{Dims: D, Base: 1e6}, D)
			}
			if c.norm {
				l.qNorm, _ = newQKNorm("QNorm", random(rng, D), H, D, 1e-6)
				l.kNorm, _ = newQKNorm("KNorm", random(rng, D), Hkv, D, 1e-6)
			}
			q, k := random(rng, L*H*D), random(rng, L*Hkv*D)
			pos, cs := make([]int, L), make([]float32, L*D)
			for i := range pos {
				pos[i] = i
			}
			t := prepWork{l: l, q: q, k: k, qRows: L, kRows: L, pos: pos, cs: cs}
			if !c.rope {
				t.pos = nil
			}
			b.SetBytes(int64(4 * L * (H + Hkv) * D))
			for i := 0; i < b.N; i++ {
				for n := 0; n < L/prepRows; n++ {
					t.Run(nil, n, nil)
				}
			}
		})
	}
}
