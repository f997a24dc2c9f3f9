package tile

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// TestPairedValues: in the bfloat16 mode on a set with bfloat16 kernels
// (the emulated twins where the CPU lacks the instructions, and GoPairs
// and GoTiles on any AVX2 CPU), a call whose Regroup rounds K and V and
// pairs V once (Problem.VPairs; on AMX tiles VTPairs, read by the
// transposed PV) gives bit for bit what the same call gives pairing each
// block for each item (on tiles, with O's rows): blocks that start on odd
// keys or end mid-pair (windows, causal edges) and an odd key count (the
// last pair's 0) included.
func TestPairedValues(t *testing.T) {
	var sets []*kernels.Set
	for _, ks := range append(kernels.Available(), kernels.EmulatedBF16(), kernels.EmulatedAMX(), kernels.GoPairs(), kernels.GoTiles()) {
		if ks != nil && ks.HasBF16() {
			sets = append(sets, ks)
		}
	}
	if len(sets) == 0 {
		t.Skip("no set with bfloat16 kernels on this CPU (AVX-512 needed)")
	}
	rng := rand.New(rand.NewPCG(0xbf, 9))
	for _, ks := range sets {
		for _, c := range []struct {
			lq, lk, window int
			causal         bool
		}{{100, 77, 0, false}, {130, 130, 0, true}, {90, 201, 37, true}, {70, 95, 20, false}} {
			if strings.HasSuffix(ks.Name, "-gotiles") || strings.HasSuffix(ks.Name, "-gopairs") {
				if c.window == 0 || !c.causal {
					continue // the Go models (slow under qemu): the windowed causal case, odd starts and keys
				}
			}
			p := Problem{Batch: 2, Heads: 4, KVHeads: 2, QLen: c.lq, KVLen: c.lk, HeadDim: 16, ValueDim: 24,
				KVType: fallback.KVFloat32, BF16: true, Scale: 0.25, Causal: c.causal, Window: c.window,
				BiasBatch: 1, BiasHeads: 1, BiasQLen: 1, MaskBatch: 1, MaskHeads: 1, MaskQLen: 1}
			p.Q = randoms(rng, p.Batch*p.QLen*p.Heads*p.HeadDim)
			p.K = randoms(rng, p.Batch*p.KVLen*p.KVHeads*p.HeadDim)
			p.V = randoms(rng, p.Batch*p.KVLen*p.KVHeads*p.ValueDim)
			run := func(p *Problem) []float32 {
				p.Out = make([]float32, p.Batch*p.QLen*p.Heads*p.ValueDim)
				a := NewAttention(p)
				var ws Workspace
				for n := 0; n < a.Items(); n++ {
					a.Run(ks, n, &ws)
				}
				return p.Out
			}
			each := run(&p)
			paired := p
			PairValues(ks, &paired)
			if !Regroups(&paired) {
				t.Fatalf("%s %+v: no regroup", ks, c)
			}
			rg := NewRegroup(&paired, new(KVCopy))
			var ws Workspace
			for n := 0; n < rg.Items(); n++ {
				rg.Run(ks, n, &ws)
			}
			rg.Use()
			if (paired.VPairs == nil) == (paired.VTPairs == nil) || (paired.VTPairs != nil) != ks.AMX() {
				t.Fatalf("%s %+v: V paired as rows %v, as columns %v", ks, c, paired.VPairs != nil, paired.VTPairs != nil)
			}
			once := run(&paired)
			for i := range each {
				if math.Float32bits(each[i]) != math.Float32bits(once[i]) {
					t.Fatalf("%s %+v: out[%d] = %v paired once, %v paired per item", ks, c, i, once[i], each[i])
				}
			}
		}
	}
}
