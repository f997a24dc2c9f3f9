package mha

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// prefixRows returns, from rows of width dk, each row's first dv elements
// as rows of their own: the separate V that ValueInKey spares a caller.
func prefixRows[T any](src []T, dk, dv int) []T {
	rows := len(src) / dk
	dst := make([]T, rows*dv)
	for r := range rows {
		copy(dst[r*dv:(r+1)*dv], src[r*dk:r*dk+dv])
	}
	return dst
}

// TestValueInKey: a call whose V is the prefix of K's rows gives, bit for
// bit, the call with that prefix copied into a V of its own, on every
// kernel set, storage type, layout and option, on the decode, split and
// flash paths; and (float32) it agrees with the float64 oracle.
func TestValueInKey(t *testing.T) {
	t.Parallel() // a sweep against the oracle: runs beside the other sweeps, after the sequential tests
	rng := rand.New(rand.NewPCG(32, 4))
	type dims struct{ h, hkv, lq, lk, dk, dv int }
	cases := []dims{
		{16, 1, 1, 300, 576, 512}, // MLA absorbed decode (one KV head), split over keys
		{4, 1, 1, 17, 72, 64},
		{8, 2, 1, 1500, 40, 32},
		{2, 2, 3, 50, 33, 17},  // odd dims: tails, the generic decode
		{3, 1, 9, 70, 24, 24},  // Dv = Dk: V is all of K
		{2, 1, 37, 80, 96, 64}, // prefill: the flash loop
	}
	sets := []optionSet{{}, {causal: true, lse: true}, {window: true, alibi: true}, {sinks: true, softcap: true},
		{mask: true, kvlens: true}, {bias: true, offset: true}}
	for _, c := range cases {
		for _, layout := range []Layout{BSHD, BHSD} {
			for _, t8 := range []DType{Float32, Float16, BFloat16, Int8, Int4} {
				if !longTests() && int(layout) != int(t8)%2 { // emulators: one layout per type
					continue
				}
				for i, f := range sets {
					if !longTests() && i%3 != int(t8)%3 { // a third of the sets, each type a different third
						continue
					}
					s := Shape{Batch: 2, Heads: c.h, KVHeads: c.hkv, QLen: c.lq, KVLen: c.lk, HeadDim: c.dk, ValueDim: c.dv, Layout: layout}
					o := f.build(rng, s)
					name := fmt.Sprintf("%+v/%v/%v/%+v", c, layout, t8, f)
					q, k, _, _ := inputs(rng, s)
					checkValueInKey(t, name, s, o, t8, q, k)
				}
			}
		}
	}
}

// checkValueInKey runs one call with V inside K and the same call with V
// copied out, on every engine, and compares them bit for bit.
func checkValueInKey(t *testing.T, name string, s Shape, o Options, t8 DType, q, k []float32) {
	t.Helper()
	dk, dv := s.HeadDim, s.ValueDim
	n := s.Batch * s.QLen * s.Heads * dv
	inK := s
	inK.ValueInKey = true
	var lse []float32
	if o.OutLSE != nil {
		lse = make([]float32, len(o.OutLSE))
	}
	for _, e := range engines {
		got, want := make([]float32, n), make([]float32, n)
		gotLSE := append([]float32(nil), lse...)
		oi, ov := o, o
		oi.OutLSE, ov.OutLSE = gotLSE, lse
		var errIn, errV error
		switch t8 {
		case Float32:
			errIn = e.Attention(got, q, k, nil, inK, &oi)
			errV = e.Attention(want, q, k, prefixRows(k, dk, dv), s, &ov)
		case Int8:
			rows := len(k) / dk
			kq := Int8KVTensor{Data: make([]int8, len(k)), Scales: make([]float32, rows*QuantBlocks(dk))}
			if err := QuantizeInt8KV(kq, k, dk); err != nil {
				t.Fatal(err)
			}
			// V's scales are the first ones of each K row: its blocks
			// start where K's do.
			vq := Int8KVTensor{Data: prefixRows(kq.Data, dk, dv), Scales: prefixRows(kq.Scales, QuantBlocks(dk), QuantBlocks(dv))}
			errIn = e.AttentionInt8(got, q, kq, Int8KVTensor{}, inK, &oi)
			errV = e.AttentionInt8(want, q, kq, vq, s, &ov)
		case Int4:
			kq, _ := quantize4(t, k, dk)
			// V's blocks are K's first ones: their bytes and scales (a
			// partial last block keeps K's elements past dv, never read).
			vq := Int4KVTensor{Data: prefixRows(kq.Data, Int4RowBytes(dk), Int4RowBytes(dv)), Scales: prefixRows(kq.Scales, QuantBlocks(dk), QuantBlocks(dv))}
			errIn = e.AttentionInt4(got, q, kq, Int4KVTensor{}, inK, &oi)
			errV = e.AttentionInt4(want, q, kq, vq, s, &ov)
		default:
			k16 := make([]uint16, len(k))
			if err := Narrow16(k16, k, t8); err != nil {
				t.Fatal(err)
			}
			errIn = e.Attention16(got, q, k16, nil, t8, inK, &oi)
			errV = e.Attention16(want, q, k16, prefixRows(k16, dk, dv), t8, s, &ov)
		}
		if errIn != nil || errV != nil {
			t.Fatalf("%s %s: %v / %v", e.Kernels(), name, errIn, errV)
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("%s %s: out[%d] = %v with V in K, %v with V copied", e.Kernels(), name, i, got[i], want[i])
		}
		if i := firstDiff(gotLSE, lse); i >= 0 {
			t.Fatalf("%s %s: LSE[%d] = %v with V in K, %v with V copied", e.Kernels(), name, i, gotLSE[i], lse[i])
		}
	}
	if t8 == Float32 {
		checkInputs(t, s, o, q, k, prefixRows(k, dk, dv))
	}
}

// TestValueInKeyErrors: V given beside ValueInKey, and a value row longer
// than its key row, are errors naming the problem.
func TestValueInKeyErrors(t *testing.T) {
	s := Shape{Batch: 1, Heads: 2, KVHeads: 1, QLen: 1, KVLen: 8, HeadDim: 16, ValueDim: 8, ValueInKey: true}
	q, k, out := make([]float32, 32), make([]float32, 8*16), make([]float32, 16)
	if err := Attention(out, q, k, make([]float32, 8*8), s, nil); !errors.Is(err, ErrBuffer) {
		t.Errorf("v beside ValueInKey: %v, want ErrBuffer", err)
	}
	kq := Int8KVTensor{Data: make([]int8, 8*16), Scales: make([]float32, 8)}
	if err := AttentionInt8(out, q, kq, Int8KVTensor{Scales: make([]float32, 8)}, s, nil); !errors.Is(err, ErrBuffer) {
		t.Errorf("v scales beside ValueInKey: %v, want ErrBuffer", err)
	}
	long := s
	long.ValueDim = 17
	if err := Attention(make([]float32, 34), q, k, nil, long, nil); !errors.Is(err, ErrShape) {
		t.Errorf("ValueDim > HeadDim with ValueInKey: %v, want ErrShape", err)
	}
	if err := Attention(out, q, k, nil, s, nil); err != nil {
		t.Errorf("a valid call: %v", err)
	}
}
