package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/mha"
	"github.com/fastattn/fastattn/tile"
)

// The GEMM rows: the projection kernel on its own, C[M][N] = A[M][K]·B[K][N]
// with B packed as a layer packs its weights (tile.PackWeights, and the
// AMX pairs where the set has tiles), the items spread over the threads as
// the engine's pool spreads them: 2·M·N·K FLOPs, against the peak of the
// engine it runs on. Shape: a layer's projection, M = 512 tokens of a
// 4096-wide model (Llama 3 8B's q_proj and o_proj).

// GemmCase is one GEMM shape.
type GemmCase struct{ M, K, N int }

func (c GemmCase) String() string { return fmt.Sprintf("gemm M=%d,K=%d,N=%d", c.M, c.K, c.N) }

var (
	defaultGemms = []GemmCase{{M: 512, K: 4096, N: 4096}}
	quickGemms   = []GemmCase{{M: 128, K: 512, N: 512}}
)

// measureGemm times one GEMM row: weights of type wt, arithmetic cm (the
// bfloat16 mode rounds A's blocks; with bfloat16 weights it runs the set's
// bfloat16 kernels or tiles), threads goroutines over the items.
func measureGemm(cfg *config, ks *kernels.Set, gc GemmCase, wt mha.DType, cm mha.Compute, threads int) (Row, error) {
	if wt == mha.Int4 {
		return Row{}, fmt.Errorf("gemm rows take f32, bf16, f16 or int8 weights")
	}
	w := tile.PackWeights(tile.Matrix{Type: fallback.KVFloat32, F32: noise(gc.K*gc.N, 5, 0.02), RowStride: gc.N, ColStride: 1},
		gc.K, gc.N, tile.PanelCols(ks), fallback.KVType(wt))
	w.PairRows(ks)
	g := tile.Gemm{A: fill(gc.M * gc.K), LDA: gc.K, B: w, C: make([]float32, gc.M*gc.N), LDC: gc.N, M: gc.M, BF16: cm == mha.ComputeBF16, Tiles: ks.AMX()}
	wss := make([]tile.Workspace, threads)
	var pa tile.PackedA
	// runItems runs w's items on the threads, as the layer's pool does.
	runItems := func(w tile.Work) {
		var wg sync.WaitGroup
		for t := 0; t < threads; t++ {
			wg.Add(1)
			go func(t int) {
				defer wg.Done()
				for it := t; it < w.Items(); it += threads {
					w.Run(ks, it, &wss[t])
				}
			}(t)
		}
		wg.Wait()
	}
	run := func() error {
		pk := g.PackA(ks, &pa) // as the layer does: once a call, then the items
		runItems(&pk)
		runItems(&g)
		return nil
	}
	var d time.Duration
	var err error
	unit := engineOf(ks, cm)
	if cm == mha.ComputeBF16 && wt != mha.BFloat16 {
		unit = FMA // other weight types keep the float32 kernels in the mode
	}
	peak := Around(ks, threads, unit, func() { d, err = Median(run, cfg.minTime) })
	if err != nil {
		return Row{}, err
	}
	r := Row{Kind: "gemm", ISA: ks.Name, Shape: gc.String(), Mask: "-", Layout: "-", KV: "-", Weights: wt.String(),
		Compute: cm.String(), BF16Native: unit != FMA, Engine: unit.String(), Threads: threads, MedianMs: ms(d),
		GFLOPS: 2 * float64(gc.M) * float64(gc.N) * float64(gc.K) / d.Seconds() / 1e9}
	if peak > 0 {
		r.PctPeak, r.PeakGFLOPS = 100*r.GFLOPS/peak, peak
	}
	return r, nil
}
