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
// and GoTiles on any AVX2 CPU), a call whose Regroup pairs V once
// (Problem.VPairs; on AMX tiles VTPairs, read by the transposed PV, where
// the call has more rows per KV head than V has columns) gives bit for bit
// what the same call gives pairing each block for each item (on tiles,
// with O's rows): blocks that start on odd keys or end mid-pair (windows,
// causal edges) and an odd key count (the last pair's 0) included; and V
// inside K (MLA's latent rows), rounded with a float32 K's copy or paired
// alone from bfloat16 K read in place, with as many rows per KV head as
// V has columns (VPairs on tiles too) and more.
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
			heads, kvHeads, dk, dv int
			lq, lk, window         int
			causal, vink, bf16K    bool
		}{
			{4, 2, 16, 24, 100, 77, 0, false, false, false},
			{4, 2, 16, 24, 130, 130, 0, true, false, false},
			{4, 2, 16, 24, 90, 201, 37, true, false, false},
			{4, 2, 16, 24, 70, 95, 20, false, false, false},
			{16, 1, 96, 80, 5, 101, 0, false, true, false}, // 80 rows a KV head, as many as V's columns
			{16, 1, 96, 80, 5, 101, 0, false, true, true},
			{8, 1, 24, 16, 12, 77, 0, true, true, true},  // 96 rows, 16 columns
			{8, 2, 24, 16, 20, 77, 0, false, true, true}, // two KV heads: K's rows strided
		} {
			if strings.HasSuffix(ks.Name, "-gotiles") || strings.HasSuffix(ks.Name, "-gopairs") {
				if !c.vink && (c.window == 0 || !c.causal) {
					continue // the Go models (slow under qemu): the windowed causal case, odd starts and keys, and V inside K
				}
			}
			p := Problem{Batch: 2, Heads: c.heads, KVHeads: c.kvHeads, QLen: c.lq, KVLen: c.lk, HeadDim: c.dk, ValueDim: c.dv,
				KVType: fallback.KVFloat32, BF16: true, Scale: 0.25, Causal: c.causal, Window: c.window, VInK: c.vink,
				BiasBatch: 1, BiasHeads: 1, BiasQLen: 1, MaskBatch: 1, MaskHeads: 1, MaskQLen: 1}
			p.Q = randoms(rng, p.Batch*p.QLen*p.Heads*p.HeadDim)
			p.K = randoms(rng, p.Batch*p.KVLen*p.KVHeads*p.HeadDim)
			if !c.vink {
				p.V = randoms(rng, p.Batch*p.KVLen*p.KVHeads*p.ValueDim)
			}
			if c.bf16K {
				p.K16 = make([]uint16, len(p.K))
				fallback.Narrow(p.K16, p.K, fallback.KVBFloat16)
				p.K, p.KVType = nil, fallback.KVBFloat16
			}
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
			if !Regroups(ks, &paired) {
				t.Fatalf("%s %+v: no regroup", ks, c)
			}
			rg := NewRegroup(&paired, new(KVCopy))
			kv := rg.Into
			if held := 4*float64(len(kv.K)+len(kv.V)+len(kv.VP)) + 2*float64(len(kv.K16)+len(kv.V16)); held != CopyBytes(&paired) {
				t.Fatalf("%s %+v: the copy holds %v bytes, CopyBytes says %v", ks, c, held, CopyBytes(&paired))
			}
			var ws Workspace
			for n := 0; n < rg.Items(); n++ {
				rg.Run(ks, n, &ws)
			}
			rg.Use()
			columns := ks.AMX() && c.lq*c.heads/c.kvHeads > c.dv
			if (paired.VPairs == nil) == (paired.VTPairs == nil) || (paired.VTPairs != nil) != columns {
				t.Fatalf("%s %+v: V paired as rows %v, as columns %v", ks, c, paired.VPairs != nil, paired.VTPairs != nil)
			}
			if c.bf16K && (paired.KVHeadsMajor || &paired.K16[0] != &p.K16[0]) {
				t.Fatalf("%s %+v: bfloat16 K with V inside was copied", ks, c)
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
