package tile

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// TestInterleavedHeads: a split step over BSHD K/V whose items take groups
// of KV heads and run them interleaved gives, bit for bit, the output of
// the same chunks run one head per item, on every set and float K/V type
// (int8 and int4 are not grouped), for MHA and GQA rows, two positions
// (causal edges: the heads then run one after another), ALiBi, ragged key
// lengths, chunks whose keys end inside a step, and a group cut short by
// the head count. MHA steps that a set reads key by key across the heads
// are TestKeyMajor's; on the other sets their key-major groups run as
// interleaved groups of a page.
func TestInterleavedHeads(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 49))
	for _, c := range []struct {
		kt      fallback.KVType
		kvHeads int
	}{{fallback.KVInt8, 8}, {fallback.KVInt4, 8}, {fallback.KVInt4, 32}} { // int8 MHA: key-major
		p := Problem{Batch: 1, Heads: 32, KVHeads: c.kvHeads, QLen: 1, KVLen: 4096, HeadDim: 128, ValueDim: 128, KVType: c.kt}
		if sp, _ := NewSplit(&p); sp.Group != 1 {
			t.Errorf("%v K/V, %d KV heads: groups of %d KV heads, want 1", c.kt, c.kvHeads, sp.Group)
		}
	}
	types := []fallback.KVType{fallback.KVFloat32, fallback.KVFloat16, fallback.KVBFloat16}
	for _, ks := range kernels.Available() {
		for _, kt := range types {
			for _, c := range []struct {
				batch, heads, kvHeads, qLen, kvLen, dk, dv int
				lens                                       []int
				alibi, causal                              bool
			}{
				{1, 8, 8, 1, 4100, 64, 64, nil, false, false},
				{1, 12, 3, 1, 4500, 128, 96, nil, false, false},
				{2, 6, 6, 1, 2100, 32, 32, []int{2100, 1300}, true, false},
				{1, 16, 8, 2, 600, 64, 64, nil, false, true},    // edges: one head after another
				{1, 20, 20, 1, 2600, 64, 64, nil, false, false}, // 16 heads, then 4
				{1, 4, 4, 1, 4200, 16, 16, nil, false, false},   // a 64-byte row: 4 heads in all
			} {
				name := fmt.Sprintf("%s/%v/%+v", ks.Name, kt, c)
				p := interleaveProblem(rng, kt, c.batch, c.heads, c.kvHeads, c.qLen, c.kvLen, c.dk, c.dv)
				p.KVLens, p.Causal = c.lens, c.causal
				if c.alibi {
					p.Slopes = make([]float32, c.heads)
					for h := range p.Slopes {
						p.Slopes[h] = 0.05 * float32(h+1)
					}
				}
				if keyMajor(p) && headKernels(ks, p) {
					continue
				}
				a := NewAttention(p)
				if !a.splits || a.split.Group < 2 || c.qLen == 1 && !keyMajor(p) && a.split.Keys < 2*stepKeys(p) {
					t.Fatalf("%s: not split over groups of heads with chunks of 2 steps (%+v, steps of %d keys)", name, a.split, stepKeys(p))
				}
				grouped := runAttention(ks, &a)
				one := a
				one.split.Group = 1
				single := runAttention(ks, &one)
				for i := range grouped {
					if math.Float32bits(grouped[i]) != math.Float32bits(single[i]) {
						t.Fatalf("%s: out[%d] %v interleaved, %v one head per item", name, i, grouped[i], single[i])
					}
				}
			}
		}
	}
}

// interleaveProblem is a BSHD decode problem with random Q and K/V of type
// kt (float32, 16-bit or int8).
func interleaveProblem(rng *rand.Rand, kt fallback.KVType, batch, heads, kvHeads, qLen, kvLen, dk, dv int) *Problem {
	p := &Problem{Batch: batch, Heads: heads, KVHeads: kvHeads, QLen: qLen, KVLen: kvLen, HeadDim: dk, ValueDim: dv,
		KVType: kt, Scale: 1 / float32(math.Sqrt(float64(dk)))}
	p.Q = randoms(rng, batch*heads*qLen*dk)
	p.Out = make([]float32, batch*heads*qLen*dv)
	rows := batch * kvLen * kvHeads
	k, v := randoms(rng, rows*dk), randoms(rng, rows*dv)
	switch kt {
	case fallback.KVFloat32:
		p.K, p.V = k, v
	case fallback.KVInt8: // rows quantized one by one: ggml's q8_0
		p.K8, p.V8 = make([]int8, len(k)), make([]int8, len(v))
		p.KS, p.VS = make([]float32, rows*fallback.Int8Blocks(dk)), make([]float32, rows*fallback.Int8Blocks(dv))
		for r := 0; r < rows; r++ {
			fallback.QuantizeInt8(p.K8[r*dk:(r+1)*dk], p.KS[r*fallback.Int8Blocks(dk):], k[r*dk:(r+1)*dk])
			fallback.QuantizeInt8(p.V8[r*dv:(r+1)*dv], p.VS[r*fallback.Int8Blocks(dv):], v[r*dv:(r+1)*dv])
		}
	default:
		p.K16, p.V16 = make([]uint16, len(k)), make([]uint16, len(v))
		fallback.Narrow(p.K16, k, kt)
		fallback.Narrow(p.V16, v, kt)
	}
	return p
}

// runAttention runs a's items and its merge one after another on one
// Workspace and returns the output.
func runAttention(ks *kernels.Set, a *Attention) []float32 {
	var ws Workspace
	a.Part = make([]float32, a.PartLen())
	for n := range a.Items() {
		a.Run(ks, n, &ws)
	}
	m := a.Merging()
	for n := range m.Items() {
		m.Run(ks, n, &ws)
	}
	return append([]float32(nil), a.P.Out...)
}
