package mha

import (
	"errors"
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
			kvlens: flags&8 != 0, bias: seed%3 == 0, offset: seed%5 == 0, scale: seed%7 == 0}
		checkCase(t, rng, rs, f.build(rng, rs))
	})
}
