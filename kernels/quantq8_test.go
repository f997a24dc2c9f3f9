package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/fastattn/fastattn/fallback"
)

// TestQuantizeRowQ8 checks every set's QuantizeRowQ8 against
// fallback.QuantizeQuery and DequantizeQuery bit for bit (bytes to the
// row's end, scales, corrections, the values written back), with and
// without values, over head dims with and without a partial last block,
// rows of every magnitude (zeros, subnormals, values near MaxFloat32 whose
// scale steps down, ties of the rounding), and rows with a NaN or ±Inf in
// a whole block or in the partial one (reported, the row unchanged), with
// every operand against a guard page.
func TestQuantizeRowQ8(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 11))
	for _, ks := range Available() {
		for _, dk := range []int{1, 4, 31, 32, 33, 64, 96, 100, 128, 576} {
			for kind := range 8 {
				for _, values := range []bool{false, true} {
					for _, atEnd := range []bool{false, true} {
						quantizeRowCase(t, ks, rng, dk, kind, values, atEnd)
					}
				}
			}
		}
	}
}

// quantizeRowCase runs one row of kind: 0-2 uniform of several scales,
// 3 with zero and subnormal blocks, 4 near MaxFloat32, 5 halves (ties),
// 6 a NaN or ±Inf in a whole block, 7 one in the last block.
func quantizeRowCase(t *testing.T, ks *Set, rng *rand.Rand, dk, kind int, values, atEnd bool) {
	t.Helper()
	nb := fallback.Int8Blocks(dk)
	ld := nb*fallback.Int8Block + 4*rng.IntN(2) // a longer row is zeros to its end
	src, f1 := guarded(t, dk, atEnd)
	defer f1()
	for i := range src {
		x := 2*rng.Float32() - 1
		switch kind {
		case 1:
			x *= 1e-3
		case 2:
			x *= 3e4
		case 3:
			switch i / fallback.Int8Block % 3 {
			case 0:
				x = 0
			case 1:
				x = math.Float32frombits(uint32(rng.IntN(300))) // subnormals
				if rng.IntN(2) == 0 {
					x = -x
				}
			}
		case 4:
			x *= math.MaxFloat32
		case 5:
			x = float32(rng.IntN(255)-127) / 2
		}
		src[i] = x
	}
	if kind == 4 {
		src[rng.IntN(dk)] = math.MaxFloat32
	}
	bad := -1
	switch {
	case kind == 6 && dk >= fallback.Int8Block:
		bad = rng.IntN(dk / fallback.Int8Block * fallback.Int8Block)
	case kind == 6 || kind == 7:
		bad = dk - 1 - rng.IntN(min(dk, dk%fallback.Int8Block+1))
	}
	if bad >= 0 {
		src[bad] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[rng.IntN(3)]
	}
	orig := append([]float32(nil), src...)

	q8, f2 := guarded8(t, ld, atEnd)
	s, f3 := guarded(t, nb, atEnd)
	c, f4 := guarded32(t, nb, atEnd)
	defer func() { f2(); f3(); f4() }()
	for i := range q8 {
		q8[i] = 0x55
	}
	q := QueryQ8{Q: q8, S: s, Corr: unsafe.Slice((*int32)(unsafe.Pointer(&c[0])), nb), Ld: ld}
	ok := ks.QuantizeRowQ8(q, src, dk, values)

	where := fmt.Sprintf("%s QuantizeRowQ8 dk=%d kind=%d values=%v", ks, dk, kind, values)
	if ok != (bad < 0) {
		t.Fatalf("%s: reported %v with a non-finite element at %d", where, ok, bad)
	}
	if !ok {
		for i := range src {
			if math.Float32bits(src[i]) != math.Float32bits(orig[i]) {
				t.Fatalf("%s: a row that is not finite changed at %d: %g, was %g", where, i, src[i], orig[i])
			}
		}
		return
	}
	want := QueryQ8{Q: make([]int8, ld), S: make([]float32, nb), Corr: make([]int32, nb), Ld: ld}
	wantSrc := append([]float32(nil), orig...)
	fallback.QuantizeQuery(want, wantSrc, 1, dk)
	if values {
		fallback.DequantizeQuery(wantSrc, want, 1, dk)
	}
	for i := range ld {
		if q.Q[i] != want.Q[i] {
			t.Fatalf("%s: byte %d = %d, fallback %d (x = %g, scale %g)", where, i, q.Q[i], want.Q[i], orig[min(i, dk-1)], want.S[i/fallback.Int8Block])
		}
	}
	for b := range nb {
		if math.Float32bits(q.S[b]) != math.Float32bits(want.S[b]) || q.Corr[b] != want.Corr[b] {
			t.Fatalf("%s: block %d: scale %g correction %d, fallback %g %d", where, b, q.S[b], q.Corr[b], want.S[b], want.Corr[b])
		}
	}
	for i := range src {
		if math.Float32bits(src[i]) != math.Float32bits(wantSrc[i]) {
			t.Fatalf("%s: src[%d] = %g, fallback %g", where, i, src[i], wantSrc[i])
		}
	}
}
