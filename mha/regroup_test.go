package mha

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fastattn/fastattn/tile"
)

// toBHSD returns x, [B][S][H][d], as [B][H][S][d].
func toBHSD[T any](x []T, B, S, H, d int) []T {
	y := make([]T, len(x))
	for b := range B {
		for s := range S {
			for h := range H {
				copy(y[((b*H+h)*S+s)*d:][:d], x[((b*S+s)*H+h)*d:][:d])
			}
		}
	}
	return y
}

// TestRegroup: a BSHD prefill runs on a heads-major copy of K and V
// (tile.Regroup), at strides that alias and strides that do not, or in
// place on a set that reads strided K/V as fast (ReadsStridedKV), and
// gives bit for bit what the same call in BHSD gives, on every set,
// storage type and option, V inside K too.
func TestRegroup(t *testing.T) {
	rng := rand.New(rand.NewPCG(73, 74))
	for _, c := range []struct {
		t           DType
		hkv, dk, dv int
		vink        bool
	}{{Float32, 8, 128, 128, false}, {Float32, 4, 256, 64, false}, {Float32, 8, 128, 96, true},
		{BFloat16, 16, 128, 128, false}, {Float16, 8, 256, 200, false}, {Int8, 8, 512, 512, false}, {Int8, 4, 1024, 512, true},
		{Float32, 6, 64, 48, true}, {BFloat16, 5, 64, 64, false}} { // strides that do not alias: 1.5 and 0.625 KiB

		if !longTests() && c.t != BFloat16 && !c.vink { // emulators: the 16-bit case and the two with V in K
			continue
		}
		// Enough query rows to regroup (256), few keys: the copy's cost
		// is in its rows, not in the keys' count.
		s := Shape{Batch: 2, Heads: 2 * c.hkv, KVHeads: c.hkv, QLen: 256 + rng.IntN(8), KVLen: 20 + rng.IntN(50),
			HeadDim: c.dk, ValueDim: c.dv, ValueInKey: c.vink}
		f := randomOptions(rng)
		f.bias, f.mask = false, false // broadcast shapes differ between the layouts
		o := f.build(rng, s)
		name := fmt.Sprintf("%+v/%+v", c, f)
		q, k, v, _ := inputs(rng, s)
		if c.vink {
			v = nil
		}
		kv := kvDataOf(t, c.t, k, v, c.dk, c.dv)
		p, err := problem(make([]float32, s.Batch*s.QLen*s.Heads*c.dv), q, kv, s, &o, 2)
		if err != nil {
			t.Fatal(err)
		}
		bh := s
		bh.Layout = BHSD
		qb := toBHSD(q, s.Batch, s.QLen, s.Heads, c.dk)
		var kb, vb []float32
		kb = toBHSD(k, s.Batch, s.KVLen, c.hkv, c.dk)
		if v != nil {
			vb = toBHSD(v, s.Batch, s.KVLen, c.hkv, c.dv)
		}
		kvb := kvDataOf(t, c.t, kb, vb, c.dk, c.dv)
		for _, e := range engines {
			if copies := !e.ks.ReadsStridedKV(); tile.Regroups(e.ks, &p) != copies {
				t.Fatalf("%s %s: Regroups is %v where the set reads strided K/V in place: %v", e.Kernels(), name, !copies, e.ks.ReadsStridedKV())
			}
			got, want := make([]float32, s.Batch*s.QLen*s.Heads*c.dv), make([]float32, s.Batch*s.QLen*s.Heads*c.dv)
			og, ow := o, o
			og.OutLSE, ow.OutLSE = make([]float32, s.Batch*s.Heads*s.QLen), make([]float32, s.Batch*s.Heads*s.QLen)
			if err := e.run(nil, got, q, kv, s, &og); err != nil {
				t.Fatal(err)
			}
			if err := e.run(nil, want, qb, kvb, bh, &ow); err != nil {
				t.Fatal(err)
			}
			if i := firstDiff(toBHSD(got, s.Batch, s.QLen, s.Heads, c.dv), want); i >= 0 {
				t.Fatalf("%s %s: BSHD (regrouped or in place) and BHSD differ at %d", e.Kernels(), name, i)
			}
			if i := firstDiff(og.OutLSE, ow.OutLSE); i >= 0 {
				t.Fatalf("%s %s: LSE differs at %d", e.Kernels(), name, i)
			}
		}
		if c.t == Float32 && !c.vink {
			checkInputs(t, s, o, q, k, v)
		}
	}
}

// kvDataOf stores k and v (nil: V inside K) as type t.
func kvDataOf(t *testing.T, typ DType, k, v []float32, dk, dv int) kvData {
	t.Helper()
	switch {
	case typ == Float32:
		return kvData{k: k, v: v}
	case typ == Int8:
		d := kvData{t: Int8}
		kq := Int8KVTensor{Data: make([]int8, len(k)), Scales: make([]float32, len(k)/dk*QuantBlocks(dk))}
		if err := QuantizeInt8KV(kq, k, dk); err != nil {
			t.Fatal(err)
		}
		d.k8, d.ks = kq.Data, kq.Scales
		if v != nil {
			vq := Int8KVTensor{Data: make([]int8, len(v)), Scales: make([]float32, len(v)/dv*QuantBlocks(dv))}
			if err := QuantizeInt8KV(vq, v, dv); err != nil {
				t.Fatal(err)
			}
			d.v8, d.vs = vq.Data, vq.Scales
		}
		return d
	}
	d := kvData{t: typ, k16: make([]uint16, len(k))}
	if err := Narrow16(d.k16, k, typ); err != nil {
		t.Fatal(err)
	}
	if v != nil {
		d.v16 = make([]uint16, len(v))
		if err := Narrow16(d.v16, v, typ); err != nil {
			t.Fatal(err)
		}
	}
	return d
}
