package tile

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fastattn/fastattn/kernels"
)

// TestQ8Memo: a split item's quantized rows come back from the worker's
// memo unchanged after a flash item of the int8 mode quantized other
// rows on the same worker (its buffers are its own), a memo slot serves
// only its own (call, batch, KV head), and the rows it returns are the
// ones quantizing them again gives.
func TestQ8Memo(t *testing.T) {
	ks, err := kernels.Best()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(8, 8))
	const rows, dk = 4, 100
	p := &Problem{HeadDim: dk, ValueDim: 64, KVHeads: 2, Q8: true}
	var ws Workspace
	ws.qr = make([]float32, rows*dk)
	draw := func() []float32 {
		x := make([]float32, rows*dk)
		for i := range x {
			x[i] = 2*rng.Float32() - 1
		}
		return x
	}
	quantize := func(key q8Key, rowsIn []float32) (kernels.QueryQ8, []float32) {
		copy(ws.qr, rowsIn)
		ws.q8key = key
		quantizeRows(ks, p, rows, &ws, true)
		q := kernels.QueryQ8{Q: slices.Clone(ws.q8.Q), S: slices.Clone(ws.q8.S), Corr: slices.Clone(ws.q8.Corr), Ld: ws.q8.Ld}
		return q, slices.Clone(ws.qr)
	}
	a, b := draw(), draw()
	key := q8Key{call: splitCalls.Add(1), b: 0, g: 1}
	q1, r1 := quantize(key, a)
	quantize(q8Key{}, b)       // a flash item's rows
	q2, r2 := quantize(key, b) // a hit: the memo's rows, not b's
	if !slices.Equal(q1.Q, q2.Q) || !slices.Equal(q1.S, q2.S) || !slices.Equal(q1.Corr, q2.Corr) || !slices.Equal(r1, r2) {
		t.Fatal("the memo's rows changed after a flash item")
	}
	q3, _ := quantize(q8Key{call: key.call, b: 1, g: 1}, b) // another batch: quantized anew
	q4, _ := quantize(q8Key{}, b)
	if !slices.Equal(q3.Q, q4.Q) || !slices.Equal(q3.S, q4.S) || slices.Equal(q3.Q, q1.Q) {
		t.Fatal("a slot served another batch's rows")
	}
}
