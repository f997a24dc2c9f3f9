package main

import (
	"fmt"
	"math"
	"time"

	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/mha"
)

// The layer rows: per layer shape, weight type (-weights) and thread
// count, a causal forward over L tokens ("layer") and a decode step of
// one token after layerCtx ("layer decode"), whose bytes are the weights
// as stored plus the K/V it reads.

// weightNames are the weight types -weights takes.
var weightNames = map[string]mha.DType{"f32": mha.Float32, "bf16": mha.BFloat16, "f16": mha.Float16, "int8": mha.Int8, "int4": mha.Int4}

// newBenchLayer returns a layer of shape lc with weights of type wt drawn
// as a trained layer's (standard deviation 1/sqrt(fan-in): activations
// stay O(1)), given as float32 and rounded or quantized by NewLayer.
func newBenchLayer(e *mha.Engine, lc LayerCase, wt mha.DType) (*mha.Layer, error) {
	dm := lc.DModel
	in, out := float32(1/math.Sqrt(float64(dm))), float32(1/math.Sqrt(float64(lc.H*lc.D)))
	w := mha.Weights{WQ: noise(dm*lc.H*lc.D, 1, in), WK: noise(dm*lc.Hkv*lc.D, 2, in), WV: noise(dm*lc.Hkv*lc.D, 3, in),
		WO: noise(lc.H*lc.D*dm, 4, out), Type: wt}
	return mha.NewLayer(e, mha.LayerConfig{DModel: dm, Heads: lc.H, KVHeads: lc.Hkv, HeadDim: lc.D}, w)
}

// measureLayer times one causal forward of layer l (shape lc, weights of
// type wt).
func measureLayer(cfg *config, l *mha.Layer, ks *kernels.Set, lc LayerCase, wt mha.DType, cm mha.Compute, threads int) (Row, error) {
	x := fill(lc.B * lc.L * lc.DModel)
	y := make([]float32, len(x))
	opts := &mha.Options{Causal: true, Threads: threads, Compute: cm}
	var d time.Duration
	var err error
	unit := engineOf(ks, cm)
	peak := Around(ks, threads, unit, func() {
		d, err = Median(func() error { return l.Forward(y, x, lc.B, lc.L, opts) }, cfg.minTime)
	})
	if err != nil {
		return Row{}, err
	}
	r := Row{Kind: "layer", ISA: ks.Name, Shape: lc.String(), Mask: "causal", Layout: "bshd", KV: "f32", Weights: wt.String(),
		Compute: cm.String(), BF16Native: unit != FMA, Engine: unit.String(), Threads: threads, MedianMs: ms(d), GFLOPS: lc.FLOPs() / d.Seconds() / 1e9}
	if peak > 0 {
		r.PctPeak, r.PeakGFLOPS = 100*r.GFLOPS/peak, peak
	}
	return r, nil
}

// measureLayerDecode times a decode step of layer l: lc.B sequences of
// cfg.layerCtx tokens in a cache of type kv, one new token each. GB/s
// counts the weights as the layer stores them and the K/V the step reads
// (scales included).
func measureLayerDecode(cfg *config, l *mha.Layer, ks *kernels.Set, lc LayerCase, wt, kv mha.DType, cm mha.Compute, threads int, m Machine) (Row, error) {
	lens := make([]int, lc.B)
	for b := range lens {
		lens[b] = cfg.layerCtx
	}
	c, err := filledCache(l, lens, kv)
	if err != nil {
		return Row{}, err
	}
	d, err := Median(stepperWith(l, c, &mha.Options{Threads: threads, Compute: cm}), cfg.minTime)
	if err != nil {
		return Row{}, err
	}
	kvCase := Case{B: lc.B, H: lc.H, Hkv: lc.Hkv, Lq: 1, Lk: cfg.layerCtx + 1, D: lc.D, KV: kv}
	bytes := float64(l.WeightBytes()) + kvCase.KVBytes()
	r := Row{Kind: "layer decode", ISA: ks.Name, Shape: fmt.Sprintf("%s ctx=%d", lc.model(), cfg.layerCtx), Mask: "causal",
		Layout: "bhsd", KV: kv.String(), Weights: wt.String(), Compute: cm.String(), Threads: threads, MedianMs: ms(d),
		GBs: bytes / d.Seconds() / 1e9, ReadGBs: m.ReadBW(cfg.bwBuf, threads), TokPerS: float64(lc.B) / d.Seconds()}
	r.PctBW = 100 * r.GBs / r.ReadGBs
	return r, nil
}
