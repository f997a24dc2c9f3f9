package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/mha"
)

// PrefixRow is one shared-prefix row (-prefix): a decode step of Batch
// sequences that share a Prefix-token prompt and hold Suffix tokens of
// their own, one new token each, through a paged cache whose sequences
// share the prompt's blocks (cascade attention: the prompt read once for
// every query), beside the same step through private contiguous caches
// and through a paged cache with nothing shared. The layer's DModel is
// small so that the step is its attention: the projections are under 5%
// of its arithmetic.
type PrefixRow struct {
	Kind              string  `json:"kind"` // "shared prefix"
	ISA               string  `json:"isa"`
	Shape             string  `json:"shape"` // the layer
	Threads           int     `json:"threads"`
	Batch             int     `json:"batch"`
	Prefix            int     `json:"prefix"`
	Suffix            int     `json:"suffix"`
	KV                string  `json:"kv"`
	Compute           string  `json:"compute"`
	BlockTokens       int     `json:"block_tokens"`
	RowBytes          int     `json:"row_bytes"` // one token's K and V over every KV head
	MedianMs          float64 `json:"median_ms"` // shared, paged
	CacheBytes        int64   `json:"cache_bytes"`
	PrivateMs         float64 `json:"private_ms"` // contiguous caches, one a sequence
	PrivateCacheBytes int64   `json:"private_cache_bytes"`
	PagedMs           float64 `json:"paged_ms"` // paged, nothing shared
	Speedup           float64 `json:"speedup"`  // private_ms / median_ms
	PagedRatio        float64 `json:"paged_ratio"`
	GFLOPS            float64 `json:"gflops"` // the shared step's attention arithmetic
	PctPeak           float64 `json:"pct_peak"`
	Engine            string  `json:"engine"`           // the unit pct_peak is of: "fma", "bf16dot" or "amx"
	PrivateGBs        float64 `json:"private_gb_per_s"` // K/V bytes the private step reads
	PrivatePctBW      float64 `json:"private_pct_bandwidth"`
}

// prefixCase is one row's sizes.
type prefixCase struct{ batch, prefix, suffix int }

// prefixModel is the layer of the rows: Llama-3-8B's attention (32 heads,
// 8 KV heads, D 128) with a small DModel.
var prefixModel = decodeModel{128, 32, 8, 128}

func (cfg *config) prefixCases() []prefixCase {
	if cfg.quick {
		return []prefixCase{{4, 512, 32}}
	}
	return []prefixCase{{32, 4096, 128}, {8, 2048, 256}}
}

// measurePrefix times every shared-prefix row of one kernel set, thread
// count and K/V type.
func measurePrefix(cfg *config, e *mha.Engine, ks *kernels.Set, threads int, kv mha.DType, cm mha.Compute, m Machine, emit func(PrefixRow)) error {
	l, err := newModelLayer(e, prefixModel, true)
	if err != nil {
		return err
	}
	for _, pc := range cfg.prefixCases() {
		row, err := measurePrefixCase(cfg, l, ks, pc, threads, kv, cm, m)
		if err != nil {
			return err
		}
		emit(row)
	}
	return nil
}

// measurePrefixCase builds the three caches of one row (filled cheaply:
// through a window of one token, as filledCache) and times their steps
// interleaved.
func measurePrefixCase(cfg *config, l *mha.Layer, ks *kernels.Set, pc prefixCase, threads int, kv mha.DType, cm mha.Compute, m Machine) (PrefixRow, error) {
	B, P, S := pc.batch, pc.prefix, pc.suffix
	dm := l.Config().DModel
	fill := &mha.Options{Window: 1}
	lens := make([]int, B)
	for b := range lens {
		lens[b] = P + S
	}
	private, err := filledCache(l, lens, kv)
	if err != nil {
		return PrefixRow{}, err
	}
	bt := mha.DefaultBlockTokens
	if cfg.blockTokens > 0 {
		bt = cfg.blockTokens
	}
	newPaged := func(blocks int) (*mha.PagedCache, error) {
		probe, err := l.NewPagedCache(mha.PagedConfig{Type: kv, BlockTokens: bt, Bytes: 1 << 30})
		if err != nil {
			return nil, err
		}
		return l.NewPagedCache(mha.PagedConfig{Type: kv, BlockTokens: bt, Bytes: int64(blocks) * probe.BlockBytes()})
	}
	perSeq := (P+S)/bt + 2
	// Shared: the prompt once, forked B-1 times, then each one's own tokens.
	shared, err := newPaged(P/bt + B*(S/bt+2) + 1)
	if err != nil {
		return PrefixRow{}, err
	}
	root, _ := shared.NewSeq()
	if err := l.DecodePaged(context.Background(), make([]float32, P*dm), noise(P*dm, 9, 1), shared, []SeqID{root}, []int{P}, fill); err != nil {
		return PrefixRow{}, err
	}
	sharedSeqs, counts := []SeqID{root}, make([]int, B)
	for b := 1; b < B; b++ {
		f, err := shared.Fork(root, P)
		if err != nil {
			return PrefixRow{}, err
		}
		sharedSeqs = append(sharedSeqs, f)
	}
	for b := range counts {
		counts[b] = S
	}
	if err := l.DecodePaged(context.Background(), make([]float32, B*S*dm), noise(B*S*dm, 10, 1), shared, sharedSeqs, counts, fill); err != nil {
		return PrefixRow{}, err
	}
	// Paged, nothing shared: each sequence fills its own blocks.
	paged, err := newPaged(B * perSeq)
	if err != nil {
		return PrefixRow{}, err
	}
	pagedSeqs := make([]SeqID, B)
	for b := range pagedSeqs {
		pagedSeqs[b], _ = paged.NewSeq()
		counts[b] = P + S
	}
	for b := range pagedSeqs {
		x := noise((P+S)*dm, 11, 1)
		if err := l.DecodePaged(context.Background(), make([]float32, len(x)), x, paged, pagedSeqs[b:b+1], counts[b:b+1], fill); err != nil {
			return PrefixRow{}, err
		}
	}
	opts := &mha.Options{Threads: threads, Compute: cm}
	x, y := noise(B*dm, 8, 1), make([]float32, B*dm)
	ones := make([]int, B)
	for b := range ones {
		ones[b] = 1
	}
	pagedStep := func(c *mha.PagedCache, seqs []SeqID) func() error {
		return func() error {
			if err := l.DecodePaged(context.Background(), y, x, c, seqs, ones, opts); err != nil {
				return err
			}
			for _, id := range seqs {
				n, _ := c.Len(id)
				if err := c.Truncate(id, n-1); err != nil {
					return err
				}
			}
			return nil
		}
	}
	var times []time.Duration
	peak := Around(ks, threads, engineOf(ks, cm), func() {
		times, err = interleavedN([]func() error{pagedStep(shared, sharedSeqs), stepperWith(l, private, opts), pagedStep(paged, pagedSeqs)}, prefixTime(cfg))
	})
	if err != nil {
		return PrefixRow{}, err
	}
	dsh, dpr, dpg := times[0], times[1], times[2]
	rowBytes := int(paged.BlockBytes()) / bt
	H, D := prefixModel.h, prefixModel.d
	flops := float64(B) * float64(H) * float64(P+S+1) * float64(2*D) * 2
	gf := flops / dsh.Seconds() / 1e9
	privBytes := float64(B) * float64(P+S+1) * float64(rowBytes)
	pgbs := privBytes / dpr.Seconds() / 1e9
	used := int64(shared.Blocks()-shared.FreeBlocks()) * shared.BlockBytes()
	return PrefixRow{Kind: "shared prefix", ISA: ks.Name, Engine: engineOf(ks, cm).String(), Shape: prefixModel.String(), Threads: threads, Batch: B, Prefix: P, Suffix: S,
		KV: kv.String(), Compute: cm.String(), BlockTokens: bt, RowBytes: rowBytes,
		MedianMs: ms(dsh), CacheBytes: used, PrivateMs: ms(dpr), PrivateCacheBytes: int64(B) * int64(P+S+1) * int64(rowBytes),
		PagedMs: ms(dpg), Speedup: dpr.Seconds() / dsh.Seconds(), PagedRatio: dpr.Seconds() / dpg.Seconds(),
		GFLOPS: gf, PctPeak: 100 * gf / peak, PrivateGBs: pgbs, PrivatePctBW: 100 * pgbs / m.ReadBW(cfg.bwBuf, threads)}, nil
}

// prefixTime is how long a prefix row alternates its three steps: 4× the
// other rows' time (at least 4 s outside -quick), since a row's steps take
// 30–130 ms each and the ratios of a second's handful of them moved by
// ±15% between runs.
func prefixTime(cfg *config) time.Duration {
	if cfg.quick {
		return cfg.minTime
	}
	return max(4*cfg.minTime, 4*time.Second)
}

// SeqID is mha.SeqID, for brevity here.
type SeqID = mha.SeqID

// interleavedN is interleaved for any number of calls.
func interleavedN(fs []func() error, minTime time.Duration) ([]time.Duration, error) {
	for _, f := range fs {
		if err := f(); err != nil {
			return nil, err
		}
	}
	ts := make([][]time.Duration, len(fs))
	start := time.Now()
	for len(ts[0]) < 5 || time.Since(start) < minTime {
		for i, f := range fs {
			t0 := time.Now()
			if err := f(); err != nil {
				return nil, err
			}
			ts[i] = append(ts[i], time.Since(t0))
		}
	}
	out := make([]time.Duration, len(fs))
	for i := range ts {
		out[i] = median(ts[i])
	}
	return out, nil
}

// prefixRow prints one shared-prefix row.
func (p *printer) prefixRow(r PrefixRow) {
	if p.json {
		p.enc.Encode(r)
		return
	}
	fmt.Printf("%-7s shared prefix %-5s %-4s B=%-3d P=%-5d S=%-4d thr %d  shared %8.2fms %6.1f GFLOP/s (%3.0f%% peak) %7.1f MB | private %8.2fms (%3.0f%% bw) %7.1f MB | paged %8.2fms | private/shared %.2f×  private/paged %.2f\n",
		r.ISA, r.KV, r.Compute, r.Batch, r.Prefix, r.Suffix, r.Threads, r.MedianMs, r.GFLOPS, r.PctPeak, float64(r.CacheBytes)/1e6,
		r.PrivateMs, r.PrivatePctBW, float64(r.PrivateCacheBytes)/1e6, r.PagedMs, r.Speedup, r.PagedRatio)
}
