package tile

import (
	"math/rand/v2"
	"testing"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// TestGemmPackedA: a Gemm whose items read A packed (PackA, its work's
// items in any order) gives the bits of the same Gemm reading A in place,
// over row tails, several row blocks, a last slab narrower than the
// depth, A rows wider than K, a bias, and every weight type packing
// serves (bfloat16 in pairs where the set reads them so); on sets with
// the packed kernels it packs wherever packs says so.
func TestGemmPackedA(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 71))
	shapes := []struct{ m, n, k, lda int }{
		{7, 256, 3, 3}, {11, 300, 513, 520}, {73, 257, 1030, 1030}, {150, 256, 600, 601}, {301, 512, 70, 75},
		{40, 1024, 300, 300}, // C's rows 4 KiB apart: the packed items accumulate C in their scratch
	}
	types := []fallback.KVType{fallback.KVFloat32, fallback.KVInt8, fallback.KVInt4, fallback.KVFloat16, fallback.KVBFloat16}
	for _, ks := range kernels.Available() {
		t.Run(ks.Name, func(t *testing.T) {
			cols := PanelCols(ks)
			for _, s := range shapes {
				for _, typ := range types {
					w := PackWeights(Matrix{F32: randoms(rng, s.k*s.n), RowStride: s.n, ColStride: 1}, s.k, s.n, cols, typ)
					w.PairRows(ks) // bfloat16 in pairs where the set reads them so, as a layer holds them
					a := randoms(rng, (s.m-1)*s.lda+s.k)
					var bias []float32
					if rng.IntN(2) == 0 {
						bias = randoms(rng, s.n)
					}
					in := Gemm{A: a, LDA: s.lda, B: w, C: make([]float32, s.m*s.n), LDC: s.n, Bias: bias, M: s.m}
					var ws Workspace
					for it := 0; it < in.Items(); it++ {
						in.Run(ks, it, &ws)
					}
					pg := in
					pg.C = make([]float32, s.m*s.n)
					var buf PackedA
					pk := pg.PackA(ks, &buf)
					want := ks.HasGemmPacked()
					if typ == fallback.KVFloat16 || typ == fallback.KVBFloat16 {
						want = ks.HasGemmWPacked(typ)
					}
					if (pk.Items() > 0) != want {
						t.Fatalf("%s %+v %v: PackA gave %d items", ks, s, typ, pk.Items())
					}
					for it := pk.Items() - 1; it >= 0; it-- {
						pk.Run(ks, it, &ws)
					}
					for it := pg.Items() - 1; it >= 0; it-- {
						pg.Run(ks, it, &ws)
					}
					for i := range pg.C {
						if pg.C[i] != in.C[i] {
							t.Fatalf("%s %+v %v: packed c[%d][%d] = %v, in place %v", ks, s, typ, i/s.n, i%s.n, pg.C[i], in.C[i])
						}
					}
				}
			}
		})
	}
}

// TestGemmItemsBeforePackA: a Gemm whose item count was taken before
// PackA (then larger: packed row blocks are taller) gives the same bits
// as one that took it after, the items past the packed count doing
// nothing, and items outside any count do nothing either.
func TestGemmItemsBeforePackA(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 23))
	const m, n, k = 600, 2048, 64 // 2048 columns: 16 column blocks, so the row blocks are not cut for more items
	for _, ks := range kernels.Available() {
		t.Run(ks.Name, func(t *testing.T) {
			w := PackWeights(Matrix{F32: randoms(rng, k*n), RowStride: n, ColStride: 1}, k, n, PanelCols(ks), fallback.KVFloat32)
			a := randoms(rng, m*k)
			after := Gemm{A: a, LDA: k, B: w, C: make([]float32, m*n), LDC: n, M: m}
			before := after
			before.C = make([]float32, m*n)
			var ws Workspace
			var bufA, bufB PackedA
			pk := after.PackA(ks, &bufA)
			pk.RunAll(ks)
			for it := range after.Items() {
				after.Run(ks, it, &ws)
			}
			items := before.Items()
			pk = before.PackA(ks, &bufB)
			pk.RunAll(ks)
			if ks.HasGemmPacked() && items <= before.Items() {
				t.Fatalf("%s: %d items before PackA, %d after: want more before", ks, items, before.Items())
			}
			for it := -1; it <= items; it++ {
				before.Run(ks, it, &ws)
			}
			for i := range after.C {
				if before.C[i] != after.C[i] {
					t.Fatalf("%s: c[%d][%d] = %v with the count taken before PackA, %v after", ks, i/n, i%n, before.C[i], after.C[i])
				}
			}
		})
	}
}

// TestGemmScratchReserved: where C's rows alias (a multiple of 4 KiB
// apart) the packed items accumulate their block of C in the worker's
// scratch; ReserveGemm leaves room for the tallest row block, so a
// reserved Workspace never grows, and the bits are those of C in place.
func TestGemmScratchReserved(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 72))
	const m, n, k = 1400, 1024, 40 // 1,400 rows: more than a packed row block holds
	for _, ks := range kernels.Available() {
		if !ks.HasGemmPacked() {
			continue
		}
		w := PackWeights(Matrix{F32: randoms(rng, k*n), RowStride: n, ColStride: 1}, k, n, PanelCols(ks), fallback.KVFloat32)
		a := randoms(rng, m*k)
		in := Gemm{A: a, LDA: k, B: w, C: make([]float32, m*n), LDC: n, Bias: randoms(rng, n), M: m}
		var ws Workspace
		for it := 0; it < in.Items(); it++ {
			in.Run(ks, it, &ws)
		}
		pg := in
		pg.C = make([]float32, m*n)
		var buf PackedA
		pk := pg.PackA(ks, &buf)
		var rws Workspace
		rws.ReserveGemm()
		held := cap(rws.cb)
		for it := 0; it < pk.Items(); it++ {
			pk.Run(ks, it, &rws)
		}
		for it := 0; it < pg.Items(); it++ {
			pg.Run(ks, it, &rws)
		}
		if len(rws.cb) == 0 {
			t.Fatalf("%s: C's aliasing rows did not go through the scratch", ks)
		}
		if cap(rws.cb) != held || held == 0 {
			t.Fatalf("%s: the C scratch grew from %d to %d floats", ks, held, cap(rws.cb))
		}
		for i := range pg.C {
			if pg.C[i] != in.C[i] {
				t.Fatalf("%s: c[%d][%d] = %v through the scratch, %v in place", ks, i/n, i%n, pg.C[i], in.C[i])
			}
		}
	}
}
