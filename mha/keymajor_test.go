package mha

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDecodeKeyMajorEdges: an MHA decode step over BSHD K/V, which the
// sets with head kernels read key by key across the heads, gives every
// engine the generic set's output and LSE (within float32 sums' order)
// where a batch has no keys, one key, or a length off the blocks, with
// and without sinks.
func TestDecodeKeyMajorEdges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ref := engineNamed(engines, "generic")
	if ref == nil {
		t.Skip("no generic engine")
	}
	const heads, kvLen, d = 12, 700, 64
	s := Shape{Batch: 2, Heads: heads, QLen: 1, KVLen: kvLen, HeadDim: d, Layout: BSHD}
	q, k, v := make([]float32, 2*heads*d), make([]float32, 2*kvLen*heads*d), make([]float32, 2*kvLen*heads*d)
	for _, x := range [][]float32{q, k, v} {
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
	}
	sinks := make([]float32, heads)
	for i := range sinks {
		sinks[i] = 0.3 * float32(i)
	}
	for _, e := range engines {
		for _, lens := range [][]int{{0, kvLen}, {kvLen, 1}, {300, 129}} {
			for _, sk := range [][]float32{nil, sinks} {
				got, want := make([]float32, len(q)), make([]float32, len(q))
				gotLSE, wantLSE := make([]float32, 2*heads), make([]float32, 2*heads)
				if err := e.Attention(got, q, k, v, s, &Options{KVLens: lens, Sinks: sk, OutLSE: gotLSE}); err != nil {
					t.Fatal(err)
				}
				if err := ref.Attention(want, q, k, v, s, &Options{KVLens: lens, Sinks: sk, OutLSE: wantLSE}); err != nil {
					t.Fatal(err)
				}
				for i := range got {
					if !(math.Abs(float64(got[i]-want[i])) <= 1e-5) {
						t.Fatalf("%s, lens %v, sinks %v: out[%d] %v, generic %v", e.Kernels(), lens, sk != nil, i, got[i], want[i])
					}
				}
				for i := range gotLSE {
					if gotLSE[i] != wantLSE[i] && !(math.Abs(float64(gotLSE[i]-wantLSE[i])) <= 1e-5) {
						t.Fatalf("%s, lens %v, sinks %v: LSE[%d] %v, generic %v", e.Kernels(), lens, sk != nil, i, gotLSE[i], wantLSE[i])
					}
				}
			}
		}
	}
}
