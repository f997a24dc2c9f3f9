package tile

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// TestKeyMajor: an MHA decode step over BSHD K/V read key by key across
// the heads matches float64 attention of the same (widened or
// dequantized) operands on every set and float32, 16-bit and int8 K/V, over ragged key lengths, a causal offset,
// a window (whose edge chunks run head by head), more heads than a
// Workspace's rows (two groups), head dims of one vector and of K and V
// apart, and key counts that end inside a block; its results do not
// depend on the order the items run in; and the plan groups heads as
// keyMajorGroup says (float32 on a set that reads strided K/V in place
// then runs in interleaved groups: stridedFloat32).
func TestKeyMajor(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 53))
	types := []fallback.KVType{fallback.KVFloat32, fallback.KVFloat16, fallback.KVBFloat16, fallback.KVInt8}
	for _, ks := range kernels.Available() {
		for _, kt := range types {
			for _, c := range []struct {
				batch, heads, kvLen, dk, dv int
				lens                        []int
				causal                      bool
				window                      int
			}{
				{1, 8, 1000, 64, 64, nil, false, 0},
				{2, 20, 700, 8, 8, []int{700, 333}, false, 0},
				{1, 70, 300, 32, 64, nil, false, 0}, // two groups of 35
				{1, 3, 2100, 128, 64, nil, true, 0},
				{1, 4, 1500, 32, 32, nil, true, 200}, // window edges: head by head
			} {
				name := fmt.Sprintf("%s/%v/%+v", ks.Name, kt, c)
				if kt == fallback.KVInt8 && (c.dk%fallback.Int8Block != 0 || c.dv%fallback.Int8Block != 0) {
					continue
				}
				p := interleaveProblem(rng, kt, c.batch, c.heads, c.heads, 1, c.kvLen, c.dk, c.dv)
				p.KVLens, p.Causal, p.Window = c.lens, c.causal, c.window
				if !keyMajor(p) {
					t.Fatalf("%s: not key-major", name)
				}
				a := NewAttention(p)
				if !a.splits || a.split.Group != keyMajorGroup(p) || a.split.Group < 2 {
					t.Fatalf("%s: split %+v, want groups of %d heads", name, a.split, keyMajorGroup(p))
				}
				got := runAttention(ks, &a)
				checkDecodeOracle(t, name, p, got)
				// The items in reverse order, on a fresh Workspace: the same bits.
				var ws Workspace
				a.Part = make([]float32, a.PartLen())
				for n := a.Items() - 1; n >= 0; n-- {
					a.Run(ks, n, &ws)
				}
				m := a.Merging()
				for n := range m.Items() {
					m.Run(ks, n, &ws)
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(p.Out[i]) {
						t.Fatalf("%s: out[%d] %v, %v with the items in reverse", name, i, got[i], p.Out[i])
					}
				}
			}
		}
	}
}

// checkDecodeOracle holds the output of a decode step p (one query row,
// BSHD, no bias or mask) to float64 attention over the widened K and V.
func checkDecodeOracle(t *testing.T, name string, p *Problem, out []float32) {
	t.Helper()
	dk, dv := p.HeadDim, p.ValueDim
	for b := 0; b < p.Batch; b++ {
		for h := 0; h < p.Heads; h++ {
			lo, hi := p.keyRange(b, 0)
			g := h / (p.Heads / p.KVHeads)
			qo, _ := p.row(b, 0, h, p.Heads, 1, dk)
			s := make([]float64, hi-lo)
			mx := math.Inf(-1)
			for j := lo; j < hi; j++ {
				k := p.kvRows(b, j, g, false)
				var acc float64
				for d := 0; d < dk; d++ {
					acc += float64(p.Q[qo+d]*p.Scale) * float64(kvAt(k, d))
				}
				s[j-lo] = acc
				mx = max(mx, acc)
			}
			var sum float64
			for i := range s {
				s[i] = math.Exp(s[i] - mx)
				sum += s[i]
			}
			oo, _ := p.row(b, 0, h, p.Heads, 1, dv)
			for d := 0; d < dv; d++ {
				var want float64
				for j := lo; j < hi; j++ {
					want += s[j-lo] * float64(kvAt(p.kvRows(b, j, g, true), d))
				}
				want /= sum
				if got := float64(out[oo+d]); math.Abs(got-want) > 2e-5 {
					t.Fatalf("%s: out[b %d][h %d][%d] = %g, want %g", name, b, h, d, got, want)
				}
			}
		}
	}
}

// kvAt is element c of the first row of r (float32, 16-bit, or int8 times
// its block's scale) as float32.
func kvAt(r fallback.KVRows, c int) float32 {
	switch r.Type {
	case fallback.KVFloat32:
		return r.F32[c]
	case fallback.KVInt8:
		return float32(r.I8[c]) * r.S[c/fallback.Int8Block]
	}
	var x [1]float32
	fallback.Widen(x[:], r.U16[c:c+1], r.Type)
	return x[0]
}
