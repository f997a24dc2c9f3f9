package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/fastattn/fastattn/fallback"
)

// TestScoresQ8 checks every set's ScoresQ8 against fallback.ScoresQ8 bit
// for bit, and both against float64 sums of the values the quantized rows
// and keys stand for, over head dims with and without a partial last
// block, every key tail of the 6-key tile, one and two row vectors per
// panel and several panels, with every operand against a guard page. The
// sets include EmulatedAMX's (ScoresQ8AMX's Emu twin: whole groups of 16
// keys on the tiles, odd and even block counts, the rest on ScoresQ8) and,
// where the CPU runs AMX-INT8, the native ScoresQ8AMX (AMXInt8), which
// the avx512 set leaves off by default.
func TestScoresQ8(t *testing.T) {
	var sets []*Set
	for _, ks := range append(Available(), EmulatedAMX(), AMXInt8()) {
		if ks != nil && ks.HasScoresQ8() {
			sets = append(sets, ks)
		}
	}
	if len(sets) == 0 {
		t.Skip("no set of this CPU has ScoresQ8")
	}
	rng := rand.New(rand.NewPCG(3, 9))
	for _, ks := range sets {
		for _, dk := range []int{4, 28, 32, 36, 64, 80, 100, 128, 576} {
			for _, nk := range []int{1, 2, 3, 4, 5, 6, 7, 11, 13, 16, 37, 48} {
				for _, vecs := range []int{1, 2, 3, 4, 5} {
					for _, atEnd := range []bool{false, true} {
						scoresQ8Case(t, ks, rng, dk, nk, vecs*ks.Lanes, atEnd)
					}
				}
			}
		}
	}
}

func scoresQ8Case(t *testing.T, ks *Set, rng *rand.Rand, dk, nk, rows int, atEnd bool) {
	t.Helper()
	k, kf, f1 := kvOperand(t, rng, fallback.KVInt8, nk, dk, dk+rng.IntN(3), atEnd)
	defer f1()
	ldk := fallback.KeysQ8Stride(dk) + 4*rng.IntN(2)
	kp, f2 := guardedBytes(t, span(nk, fallback.KeysQ8Stride(dk), ldk), atEnd)
	defer f2()
	for i := range kp {
		kp[i] = 0x5a // bytes between the packed rows stay as they were
	}
	ks.PackKeysQ8(kp, ldk, k, nk, dk)
	wantK := make([]byte, len(kp))
	for i := range wantK {
		wantK[i] = 0x5a
	}
	fallback.PackKeysQ8(wantK, ldk, k, nk, dk)
	if string(kp) != string(wantK) {
		t.Fatalf("%s PackKeysQ8 dk=%d nk=%d ldk=%d: bytes differ from fallback.PackKeysQ8", ks, dk, nk, ldk)
	}

	nb, ldq := fallback.Int8Blocks(dk), rows+ks.Lanes*rng.IntN(2)
	q := QueryQ8{Q: make([]int8, rows*nb*fallback.Int8Block), S: make([]float32, rows*nb), Corr: make([]int32, rows*nb), Ld: nb * fallback.Int8Block}
	src := make([]float32, rows*dk)
	for i := range src {
		src[i] = (2*rng.Float32() - 1) * float32(1+(i%dk)/32%3)
	}
	if rows > 1 && dk > 32 {
		clear(src[dk : dk+32]) // row 1's first block: all zeros, scale 0
	}
	live := rows - rng.IntN(ks.Lanes) // the rest are the item's padding
	fallback.QuantizeQuery(q, src, live, dk)
	qf := make([]float32, rows*dk)
	fallback.DequantizeQuery(qf, q, live, dk)

	qq, f3 := guarded8(t, nb*fallback.Int8Block*ldq, atEnd)
	qs, f4 := guarded(t, nb*ldq, atEnd)
	qc, f5 := guarded32(t, nb*ldq, atEnd)
	defer func() { f3(); f4(); f5() }()
	quads := QuadsQ8{Q: qq, S: qs, C: unsafe.Slice((*int32)(unsafe.Pointer(&qc[0])), len(qc)), Ld: ldq}
	fallback.PackQueryQ8(quads, q, live, dk)

	lds := rows + rng.IntN(5)
	s, f6 := guarded(t, span(nk, rows, lds), atEnd)
	defer f6()
	want := make([]float32, len(s))
	for i := range s {
		s[i], want[i] = float32(math.NaN()), float32(math.NaN())
	}
	ks.ScoresQ8(s, lds, kp, ldk, quads, nk, rows, dk)
	fallback.ScoresQ8(want, lds, kp, ldk, quads, nk, rows, dk)
	where := fmt.Sprintf("%s ScoresQ8 dk=%d nk=%d rows=%d (%d live) ldk=%d ldq=%d lds=%d", ks, dk, nk, rows, live, ldk, ldq, lds)
	for c := range nk {
		for r := range lds {
			i := c*lds + r
			if i >= len(s) {
				break
			}
			if math.Float32bits(s[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: s[%d][%d] = %g, fallback.ScoresQ8 %g", where, c, r, s[i], want[i])
			}
			if r >= rows {
				if !math.IsNaN(float64(s[i])) {
					t.Fatalf("%s: s[%d][%d] past the rows written: %g", where, c, r, s[i])
				}
				continue
			}
			exact, abs := 0.0, 0.0
			if r < live {
				for d := range dk {
					p := float64(kf[c*k.Ld+d]) * float64(qf[r*dk+d])
					exact, abs = exact+p, abs+math.Abs(p)
				}
			}
			// One rounding of the scale product and one FMA per block.
			if tol := float64(2*nb+2)*0x1p-24*abs + 1e-30; math.Abs(float64(s[i])-exact) > tol {
				t.Fatalf("%s: s[%d][%d] = %g, float64 %g (tolerance %g)", where, c, r, s[i], exact, tol)
			}
		}
	}
}
