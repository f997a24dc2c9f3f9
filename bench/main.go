// Command bench measures fastattn on this machine against the machine's
// own limits and against what a Go user writes today (gonum).
//
//	go run ./bench                 # limits, then the table (about 8 minutes on 2 cores)
//	go run ./bench -quick          # a smoke run of the README's shapes, about 35 s
//	go run ./bench -isa avx2       # some kernel sets only
//	go run ./bench -shape 1,32,8,1,32768,128 -threads 1,2
//	go run ./bench -json           # one JSON record per line
//	go run ./bench -svg chart.svg  # GFLOP/s against sequence length
//
// Every speed is also given as a ratio to a limit measured in the same
// run: GFLOP/s against the FMA peak of the same kernel set and thread
// count (measured right before and after each row), decode GB/s against
// the streaming-read bandwidth. FLOPs count only the (query, key) pairs
// computed: 2·(Dk+Dv)·B·H·pairs, about half of Lq·Lk under a causal mask.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/mha"
	"github.com/klauspost/cpuid/v2"
)

// Row is one line of the table (and one -json record).
type Row struct {
	Kind       string  `json:"kind"` // "attention" or "layer"
	ISA        string  `json:"isa"`
	Shape      string  `json:"shape"`
	Dv         int     `json:"dv,omitempty"`          // attention rows whose Dv differs from Dk
	VInK       bool    `json:"v_in_k,omitempty"`      // V read inside K (-vink)
	Churn      bool    `json:"churn,omitempty"`       // measured after churnHeap (-churn)
	Mask       string  `json:"mask"`                  // "full" or "causal", then "+variant" (bench/variants.go)
	Layout     string  `json:"layout"`                // "bshd" or "bhsd"
	KV         string  `json:"kv"`                    // storage of K and V: "f32", "f16", "bf16", "int8", "int4"
	Compute    string  `json:"compute"`               // the products' arithmetic: "f32", "bf16" (mha.ComputeBF16) or "int8" (mha.ComputeInt8)
	BF16Native bool    `json:"bf16_native,omitempty"` // bf16 rows: on the CPU's bfloat16 instruction or tiles, %peak of their peak
	Engine     string  `json:"engine"`                // the unit %peak is of: "fma", "bf16dot" or "amx"
	Weights    string  `json:"weights,omitempty"`     // layer rows: the weights' type
	Threads    int     `json:"threads"`
	MedianMs   float64 `json:"median_ms"`
	GFLOPS     float64 `json:"gflops"`
	PctPeak    float64 `json:"pct_peak"`
	PeakGFLOPS float64 `json:"peak_gflops,omitempty"`   // the peak %peak is of: measured right before and after the row
	GBs        float64 `json:"gb_per_s,omitempty"`      // decode: K+V read
	PctBW      float64 `json:"pct_bandwidth,omitempty"` // decode: of the read bandwidth
	ReadGBs    float64 `json:"read_gbs,omitempty"`      // decode: that bandwidth (Machine.ReadBW)
	TokPerS    float64 `json:"tokens_per_s,omitempty"`  // decode: B tokens per step
	BaselineMs float64 `json:"baseline_ms,omitempty"`   // gonum, same threads
	Speedup    float64 `json:"speedup,omitempty"`       // baseline / fastattn
}

type config struct {
	bwBuf   []uint64 // the read-bandwidth probe's buffer, kept for the probes beside decode rows
	quick   bool
	json    bool
	svg     string
	sets    []*kernels.Set
	cases   []Case
	layers  []LayerCase
	gemms   []GemmCase    // the GEMM rows, beside the layer rows
	weights []mha.DType   // of the layer rows
	compute []mha.Compute // of the attention and layer rows
	kvLayer []mha.DType   // the cache of the layer decode rows
	// layerCtx is the context of the layer decode rows.
	layerCtx int
	threads  []int
	layouts  []mha.Layout // of the attention rows (layer rows: BSHD)
	kvDec    []mha.DType  // K/V storage of decode rows
	kvPre    []mha.DType  // and of prefill rows
	minTime  time.Duration
	noBase   bool
	vars     []variant   // of every attention row
	serving  string      // "on", "off" or "only": the serving rows (bench/serving.go)
	prefix   bool        // only the shared-prefix rows (bench/prefix.go)
	kvPrefix []mha.DType // their K/V storage
	// blockTokens is their paged caches' block size (0: the default).
	blockTokens int
	md          string // -md: a -json run's file to print as markdown (markdown.go), nothing measured
	churn       bool   // -churn: churnHeap before each attention row
	perf        string // -perf: the folder of runs to write docs/PERFORMANCE.md from (perfdoc.go)
}

func main() {
	cfg, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if cfg.md != "" || cfg.perf != "" {
		err := markdownFile(cfg.md)
		if cfg.perf != "" {
			err = writePerformance(os.Stdout, cfg.perf)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags() (*config, error) {
	quick := flag.Bool("quick", false, "a smoke run: the README table's first prefill and GQA decode shapes, short timings (about 35 s)")
	isa := flag.String("isa", "", "comma-separated kernel sets (default: every set this CPU runs)")
	shapes := flag.String("shape", "", "semicolon-separated shapes B,H,Hkv,Lq,Lk,D instead of the defaults (D: a head dim, or Dk/Dv)")
	vink := flag.Bool("vink", false, "read V as the first Dv elements of each K row (MLA's absorbed decode; shapes with Dv <= Dk)")
	threads := flag.String("threads", "", "comma-separated thread counts (default: 1 and all cores)")
	churn := flag.Bool("churn", false, "before each attention row, churn the heap as a long-running server's is (allocations kept and freed, other shapes, FreeOSMemory): a row's speed should not depend on it")
	asJSON := flag.Bool("json", false, "print one JSON record per line instead of the table")
	svg := flag.String("svg", "", "also write a chart of GFLOP/s against sequence length to this SVG file")
	noBase := flag.Bool("nobaseline", false, "skip the gonum baseline")
	layouts := flag.String("layout", "bshd", "comma-separated layouts of the attention rows: bshd, bhsd")
	kvs := flag.String("kv", "", "comma-separated K/V storage types: f32, f16, bf16, int8, int4 (default: all five on decode rows, f32 on prefill rows)")
	vars := flag.String("variants", "plain", "comma-separated semantics to run each attention row with: plain, alibi, sinks, kvlens, mask, bias, window=N")
	serving := flag.String("serving", "on", "the serving rows (ragged decode, rotary+QK-norm cost, cancellation): on, off, or only")
	layersOnly := flag.Bool("layers", false, "only the layer rows (forward and decode step per weight type)")
	md := flag.String("md", "", "print the records of a -json run saved in this file as the README's markdown table, and measure nothing")
	perf := flag.String("perf", "", "print docs/PERFORMANCE.md made from this folder of runs (one subfolder per machine: -json records, peers' records, notes.md), and measure nothing")
	blockTokens := flag.Int("block", 0, "tokens per block of the shared-prefix rows' paged caches (0: mha.DefaultBlockTokens)")
	prefixOnly := flag.Bool("prefix", false, "only the shared-prefix rows: a decode step of sequences sharing a prompt, paged with sharing (cascade) vs private caches vs paged unshared (-kv: f32,bf16 by default)")
	weights := flag.String("weights", "f32", "comma-separated weight types of the layer rows: f32, bf16, f16, int8, int4")
	computes := flag.String("compute", "f32", "comma-separated arithmetic of the attention and layer rows: f32, bf16 (bfloat16 products, float32 sums), int8 (query rows quantized, integer dot products: rows of int8 and int4 K/V only)")
	flag.Parse()
	if *md != "" || *perf != "" {
		return &config{md: *md, perf: *perf}, nil
	}
	if *serving != "on" && *serving != "off" && *serving != "only" {
		return nil, fmt.Errorf("-serving: %q is not on, off or only", *serving)
	}

	cfg := &config{quick: *quick, json: *asJSON, churn: *churn, svg: *svg, noBase: *noBase, serving: *serving,
		cases: defaultCases, layers: defaultLayers, gemms: defaultGemms, minTime: time.Second, layerCtx: 4096}
	if cfg.quick {
		cfg.cases, cfg.layers, cfg.gemms, cfg.minTime, cfg.layerCtx = quickCases, quickLayers, quickGemms, 100*time.Millisecond, 256
	}
	for _, name := range strings.Split(*weights, ",") {
		t, ok := weightNames[strings.TrimSpace(name)]
		if !ok {
			return nil, fmt.Errorf("-weights: %q is not f32, bf16, f16, int8 or int4", name)
		}
		cfg.weights = append(cfg.weights, t)
	}
	for _, name := range strings.Split(*computes, ",") {
		c, ok := map[string]mha.Compute{"f32": mha.ComputeF32, "bf16": mha.ComputeBF16, "int8": mha.ComputeInt8}[strings.TrimSpace(name)]
		if !ok {
			return nil, fmt.Errorf("-compute: %q is not f32, bf16 or int8", name)
		}
		cfg.compute = append(cfg.compute, c)
	}
	cfg.sets = kernels.Available()
	if *isa != "" {
		cfg.sets = nil
		for _, name := range strings.Split(*isa, ",") {
			ks, err := kernels.Lookup(strings.TrimSpace(name))
			if err != nil {
				return nil, err
			}
			cfg.sets = append(cfg.sets, ks)
		}
	}
	if *layersOnly {
		cfg.cases, cfg.serving = nil, "off"
	}
	if *prefixOnly {
		cfg.prefix = true
	}
	cfg.blockTokens = *blockTokens
	if *shapes != "" && !*layersOnly {
		cfg.cases, cfg.layers, cfg.gemms = nil, nil, nil
		for _, s := range strings.Split(*shapes, ";") {
			c, err := parseShape(s)
			if err != nil {
				return nil, err
			}
			c.VInK = *vink
			if c.VInK && c.ValueDim() > c.D {
				return nil, fmt.Errorf("-vink: shape %q has Dv > Dk: a value row must be a prefix of its key row", s)
			}
			cfg.cases = append(cfg.cases, c)
		}
	}
	cfg.kvDec, cfg.kvPre = []mha.DType{mha.Float32, mha.Float16, mha.BFloat16, mha.Int8, mha.Int4}, []mha.DType{mha.Float32}
	cfg.kvLayer = []mha.DType{mha.BFloat16}
	cfg.kvPrefix = []mha.DType{mha.Float32, mha.BFloat16}
	if *kvs != "" {
		cfg.kvDec = nil
		for _, name := range strings.Split(*kvs, ",") {
			t, ok := map[string]mha.DType{"f32": mha.Float32, "f16": mha.Float16, "bf16": mha.BFloat16, "int8": mha.Int8, "int4": mha.Int4}[strings.TrimSpace(name)]
			if !ok {
				return nil, fmt.Errorf("-kv: %q is not f32, f16, bf16, int8 or int4", name)
			}
			cfg.kvDec = append(cfg.kvDec, t)
		}
		cfg.kvPre, cfg.kvLayer, cfg.kvPrefix = cfg.kvDec, cfg.kvDec, cfg.kvDec
	}
	for _, name := range strings.Split(*layouts, ",") {
		switch strings.TrimSpace(name) {
		case "bshd":
			cfg.layouts = append(cfg.layouts, mha.BSHD)
		case "bhsd":
			cfg.layouts = append(cfg.layouts, mha.BHSD)
		default:
			return nil, fmt.Errorf("-layout: %q is not bshd or bhsd", name)
		}
	}
	var err error
	if cfg.vars, err = parseVariants(*vars); err != nil {
		return nil, err
	}
	cfg.threads = []int{1}
	if n := runtime.GOMAXPROCS(0); n > 1 {
		cfg.threads = append(cfg.threads, n)
	}
	if *threads != "" {
		cfg.threads = nil
		for _, s := range strings.Split(*threads, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("-threads: %q is not a positive integer", s)
			}
			cfg.threads = append(cfg.threads, n)
		}
	}
	return cfg, nil
}

// Median calls f until minTime has passed and at least 3 times after one
// discarded warm-up call, and returns the median duration.
func Median(f func() error, minTime time.Duration) (time.Duration, error) {
	if err := f(); err != nil {
		return 0, err
	}
	var ts []time.Duration
	start := time.Now()
	for len(ts) < 3 || time.Since(start) < minTime {
		t0 := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		ts = append(ts, time.Since(t0))
	}
	return median(ts), nil
}

// fill returns n deterministic values in [-0.5, 0.5).
func fill(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i%17)/17 - 0.5
	}
	return x
}

func run(cfg *config) error {
	watch := StartBusy()
	out := newPrinter(cfg.json)
	best, err := kernels.Best()
	if err != nil {
		return err
	}
	m := Machine{CPU: cpuModel(), Cores: runtime.NumCPU(), Threads: runtime.GOMAXPROCS(0), Selected: best.Name,
		Peak1: map[string]float64{}, PeakN: map[string]float64{}, BF16Peak1: map[string]float64{}, BF16PeakN: map[string]float64{},
		AMXPeak1: map[string]float64{}, AMXPeakN: map[string]float64{}, AMX: amxStatus(kernels.AMXStatus), AMXInt8: amxStatus(kernels.AMXInt8Status),
		L3Bytes: int64(max(cpuid.CPU.Cache.L3, 0))}
	for _, ks := range cfg.sets {
		m.Peak1[ks.Name] = PeakGFLOPS(ks, 1, FMA)
		m.PeakN[ks.Name] = PeakGFLOPS(ks, m.Threads, FMA)
		if ks.HasBF16Peak() {
			m.BF16Peak1[ks.Name] = PeakGFLOPS(ks, 1, BF16Dot)
			m.BF16PeakN[ks.Name] = PeakGFLOPS(ks, m.Threads, BF16Dot)
		}
		if ks.HasAMXPeak() {
			m.AMXPeak1[ks.Name] = PeakGFLOPS(ks, 1, AMX)
			m.AMXPeakN[ks.Name] = PeakGFLOPS(ks, m.Threads, AMX)
		}
	}
	cfg.bwBuf = newBandwidthBuffer()
	m.BW1, m.BWN = ReadGBs(cfg.bwBuf, 1), ReadGBs(cfg.bwBuf, m.Threads)
	out.machine(m, cfg.sets)

	rows, layers, gemms := cfg.rows(), cfg.layers, cfg.gemms
	if cfg.serving == "only" {
		rows, layers, gemms = nil, nil, nil
	}
	var gemmWeights []mha.DType // the GEMM rows' weight types: -weights but int4 (a GEMV format)
	for _, wt := range cfg.weights {
		if wt != mha.Int4 {
			gemmWeights = append(gemmWeights, wt)
		}
	}
	servingRows := 0
	if cfg.serving != "off" {
		servingRows = 1
	}
	prefixRows := 0
	if cfg.prefix {
		rows, layers, gemms, servingRows = nil, nil, nil, 0
		for _, kv := range cfg.kvPrefix {
			for _, cm := range cfg.compute {
				prefixRows += boolInt(computes(cm, kv))
			}
		}
	}
	// The int8 mode runs over int8 or int4 K only: no layer forward (its K is
	// float32) nor GEMM rows.
	forwardModes := 0
	for _, cm := range cfg.compute {
		forwardModes += boolInt(cm != mha.ComputeInt8)
	}
	total := len(cfg.sets) * len(cfg.threads) * ((len(layers)*len(cfg.weights)+len(gemms)*len(gemmWeights))*forwardModes + len(rows) + servingRows + prefixRows)
	progress := newProgress(total, cfg.minTime)
	defer progress.done()
	baselines := map[string]float64{} // case+threads → median ms
	for _, ks := range cfg.sets {
		e, err := mha.NewEngine(mha.Config{ISA: ks.Name, Threads: max(cfg.threads[len(cfg.threads)-1], m.Threads)})
		if err != nil {
			return err
		}
		for _, c := range rows {
			for _, th := range cfg.threads {
				progress.step(fmt.Sprintf("%s %s %s %s %v compute=%v threads=%d", ks.Name, c, c.maskName(), layoutName(c.Layout), c.KV, c.Compute, th))
				row, err := measureAttention(cfg, e, ks, c, th, m, baselines)
				if err != nil {
					return err
				}
				out.row(row)
			}
		}
		for _, lc := range layers {
			for _, wt := range cfg.weights {
				l, err := newBenchLayer(e, lc, wt)
				if err != nil {
					return err
				}
				for _, th := range cfg.threads {
					for _, cm := range cfg.compute {
						if cm != mha.ComputeInt8 {
							progress.step(fmt.Sprintf("%s %s weights=%v compute=%v threads=%d", ks.Name, lc, wt, cm, th))
							row, err := measureLayer(cfg, l, ks, lc, wt, cm, th)
							if err != nil {
								return err
							}
							out.row(row)
						}
						for _, kv := range cfg.kvLayer {
							if !computes(cm, kv) {
								continue
							}
							row, err := measureLayerDecode(cfg, l, ks, lc, wt, kv, cm, th, m)
							if err != nil {
								return err
							}
							out.row(row)
						}
					}
				}
			}
		}
		for _, gc := range gemms {
			for _, wt := range gemmWeights {
				for _, th := range cfg.threads {
					for _, cm := range cfg.compute {
						if cm == mha.ComputeInt8 {
							continue
						}
						progress.step(fmt.Sprintf("%s %s weights=%v compute=%v threads=%d", ks.Name, gc, wt, cm, th))
						row, err := measureGemm(cfg, ks, gc, wt, cm, th)
						if err != nil {
							return err
						}
						out.row(row)
					}
				}
			}
		}
		for _, kv := range cfg.kvPrefix[:min(len(cfg.kvPrefix), prefixRows)] {
			for _, cm := range cfg.compute {
				if !computes(cm, kv) {
					continue
				}
				for _, th := range cfg.threads {
					progress.step(fmt.Sprintf("%s shared prefix kv=%v compute=%v threads=%d", ks.Name, kv, cm, th))
					if err := measurePrefix(cfg, e, ks, th, kv, cm, m, out.prefixRow); err != nil {
						return err
					}
				}
			}
		}
		for i := 0; i < servingRows; i++ {
			for _, th := range cfg.threads {
				progress.step(fmt.Sprintf("%s serving rows threads=%d", ks.Name, th))
				if err := measureServing(cfg, e, ks.Name, th, m, out.servingRow); err != nil {
					return err
				}
			}
		}
		e.Close()
	}
	if cfg.svg != "" {
		if err := chart(cfg, cfg.svg); err != nil {
			return err
		}
		out.note(fmt.Sprintf("chart written to %s", cfg.svg))
	}
	progress.done()
	out.footnotes(m)
	out.busy(watch.Others())
	return nil
}

// rows expands the cases into the table's attention rows: prefill shapes
// full and causal (BSHD), decode steps (which see every key either way)
// in each layout of -layout; each with every variant of -variants and
// every arithmetic of -compute, one after the other, so a variant's (or a
// bf16) row is timed next to its plain one.
func (cfg *config) rows() []Case {
	var rows []Case
	for _, c := range cfg.cases {
		if !c.Decode() {
			for _, l := range cfg.layouts {
				for _, kv := range cfg.kvPre {
					for _, causal := range []bool{false, true} {
						for _, v := range cfg.vars {
							for _, cm := range cfg.compute {
								if !computes(cm, kv) {
									continue
								}
								c.Layout, c.Causal, c.KV, c.Variant, c.Compute = l, causal, kv, v, cm
								rows = append(rows, c)
							}
						}
					}
				}
			}
			continue
		}
		for _, l := range cfg.layouts {
			for _, kv := range cfg.kvDec {
				for _, v := range cfg.vars {
					for _, cm := range cfg.compute {
						if !computes(cm, kv) {
							continue
						}
						c.Layout, c.KV, c.Variant, c.Compute = l, kv, v, cm
						rows = append(rows, c)
					}
				}
			}
		}
	}
	return rows
}

// boolInt is 1 for true, 0 for false.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// computes reports whether a row of K/V type kv runs in arithmetic cm:
// the int8 mode over int8 or int4 K only.
func computes(cm mha.Compute, kv mha.DType) bool {
	return cm != mha.ComputeInt8 || kv == mha.Int8 || kv == mha.Int4
}

// maskName is the row's mask column: full or causal, and its variant.
func (c Case) maskName() string {
	if c.Causal {
		return "causal" + c.Variant.String()
	}
	return "full" + c.Variant.String()
}

// measureAttention times one attention row, its peak and its baseline.
func measureAttention(cfg *config, e *mha.Engine, ks *kernels.Set, c Case, threads int, m Machine, baselines map[string]float64) (Row, error) {
	dv, rows := c.ValueDim(), c.B*c.Lk*c.Hkv
	q, k, v := fill(c.B*c.Lq*c.H*c.D), fill(rows*c.D), fill(rows*dv) // v: the baseline's too
	o := make([]float32, c.B*c.Lq*c.H*dv)
	opts, err := c.options(threads)
	if err != nil {
		return Row{}, err
	}
	fv := v // what fastattn reads: nothing with V inside K
	if c.VInK {
		fv = nil
	}
	call := func() error { return e.Attention(o, q, k, fv, c.Shape(), opts) }
	switch {
	case c.KV == mha.Int8:
		k8 := mha.Int8KVTensor{Data: make([]int8, len(k)), Scales: make([]float32, rows*mha.QuantBlocks(c.D))}
		var v8 mha.Int8KVTensor
		if !c.VInK {
			v8 = mha.Int8KVTensor{Data: make([]int8, len(v)), Scales: make([]float32, rows*mha.QuantBlocks(dv))}
			err = mha.QuantizeInt8KV(v8, v, dv)
		}
		if err := errors.Join(mha.QuantizeInt8KV(k8, k, c.D), err); err != nil {
			return Row{}, err
		}
		call = func() error { return e.AttentionInt8(o, q, k8, v8, c.Shape(), opts) }
	case c.KV == mha.Int4:
		quantize := func(x []float32, d int) (mha.Int4KVTensor, error) {
			t := mha.Int4KVTensor{Data: make([]byte, len(x)/d*mha.Int4RowBytes(d)), Scales: make([]float32, len(x)/d*mha.QuantBlocks(d))}
			return t, mha.QuantizeInt4KV(t, x, d)
		}
		k4, err := quantize(k, c.D)
		var v4 mha.Int4KVTensor
		if !c.VInK {
			var errV error
			v4, errV = quantize(v, dv)
			err = errors.Join(err, errV)
		}
		if err != nil {
			return Row{}, err
		}
		call = func() error { return e.AttentionInt4(o, q, k4, v4, c.Shape(), opts) }
	case c.KV != mha.Float32:
		k16 := make([]uint16, len(k))
		var v16 []uint16
		if !c.VInK {
			v16 = make([]uint16, len(v))
			err = mha.Narrow16(v16, v, c.KV)
		}
		if err := errors.Join(mha.Narrow16(k16, k, c.KV), err); err != nil {
			return Row{}, err
		}
		call = func() error { return e.Attention16(o, q, k16, v16, c.KV, c.Shape(), opts) }
	}
	var d time.Duration
	unit := engineOf(ks, c.Compute)
	if cfg.churn {
		if err := churnHeap(e); err != nil {
			return Row{}, err
		}
	}
	peak := Around(ks, threads, unit, func() { d, err = Median(call, cfg.minTime) })
	if err != nil {
		return Row{}, err
	}
	r := Row{Kind: "attention", ISA: ks.Name, Shape: c.String(), VInK: c.VInK, Churn: cfg.churn, Mask: c.maskName(), Layout: layoutName(c.Layout), KV: c.KV.String(),
		Compute: c.Compute.String(), BF16Native: unit != FMA, Engine: unit.String(), Threads: threads, MedianMs: ms(d), GFLOPS: c.FLOPs() / d.Seconds() / 1e9}
	if dv != c.D {
		r.Dv = dv
	}
	if peak > 0 {
		r.PctPeak, r.PeakGFLOPS = 100*r.GFLOPS/peak, peak
	}
	if c.Decode() {
		r.GBs = c.KVBytes() / d.Seconds() / 1e9
		r.ReadGBs = m.ReadBW(cfg.bwBuf, threads)
		r.PctBW = 100 * r.GBs / r.ReadGBs
		r.TokPerS = float64(c.B) / d.Seconds()
	}
	if !cfg.noBase {
		plain := c
		plain.Variant = variant{} // the baseline computes the plain row
		key := fmt.Sprintf("%v/%s/%s/%d", c, plain.maskName(), layoutName(c.Layout), threads)
		if _, ok := baselines[key]; !ok {
			bl := NewBaseline(c)
			bd, err := Median(func() error { bl.Run(o, q, k, v, threads); return nil }, cfg.minTime)
			if err != nil {
				return Row{}, err
			}
			baselines[key] = ms(bd)
		}
		r.BaselineMs = baselines[key]
		r.Speedup = r.BaselineMs / r.MedianMs
	}
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// printer writes the human table or JSON lines.
type printer struct {
	json bool
	enc  *json.Encoder
	head bool
	// The largest %bw of a decode row and the K/V bytes it read, for the
	// footnote on rows above the probe.
	overBW    float64
	overBytes float64
}

func newPrinter(asJSON bool) *printer {
	return &printer{json: asJSON, enc: json.NewEncoder(os.Stdout)}
}

func (p *printer) machine(m Machine, sets []*kernels.Set) {
	if p.json {
		p.enc.Encode(struct {
			Kind string `json:"kind"`
			Machine
		}{"machine", m})
		return
	}
	fmt.Printf("CPU %s, %d cores, GOMAXPROCS %d, default kernel set %s", m.CPU, m.Cores, m.Threads, m.Selected)
	if m.L3Bytes > 0 {
		fmt.Printf(", L3 %d MiB", m.L3Bytes>>20)
	}
	fmt.Printf("\nAMX tiles: %s\n", m.AMX)
	for _, ks := range sets {
		if m.Peak1[ks.Name] > 0 {
			fmt.Printf("FMA peak      %-7s %7.1f GFLOP/s at 1 thread, %7.1f at %s\n", ks.Name, m.Peak1[ks.Name], m.PeakN[ks.Name], threadsWord(m.Threads))
		}
		if m.BF16Peak1[ks.Name] > 0 {
			fmt.Printf("BF16 dot peak %-7s %7.1f GFLOP/s at 1 thread, %7.1f at %s (the peak of bf16* rows)\n", ks.Name, m.BF16Peak1[ks.Name], m.BF16PeakN[ks.Name], threadsWord(m.Threads))
		}
		if m.AMXPeak1[ks.Name] > 0 {
			fmt.Printf("AMX peak      %-7s %7.1f GFLOP/s at 1 thread, %7.1f at %s (the peak of bf16+ rows)\n", ks.Name, m.AMXPeak1[ks.Name], m.AMXPeakN[ks.Name], threadsWord(m.Threads))
		}
	}
	fmt.Printf("memory read           %7.1f GB/s at 1 thread, %7.1f at %s\n\n", m.BW1, m.BWN, threadsWord(m.Threads))
	fmt.Printf("%%peak: GFLOP/s over the peak of the same kernel set and thread count measured right before and after\n" +
		"the row (the 'peak' column: the host's speed drifts, so it can differ from the figures above).\n" +
		"%%bw: decode rows' K/V bytes per second over the memory-read probe of the same thread count.\n\n")
}

// threadsWord is "1 thread" or "n threads".
func threadsWord(n int) string {
	if n == 1 {
		return "1 thread"
	}
	return fmt.Sprintf("%d threads", n)
}

func (p *printer) row(r Row) {
	if p.json {
		p.enc.Encode(r)
		return
	}
	if !p.head {
		p.head = true
		fmt.Printf("%-12s %-7s %-42s %-13s %-4s %-4s %-4s %-5s %3s %10s %8s %6s %6s %7s %6s %8s %10s %7s\n",
			"kind", "isa", "shape", "mask", "lay", "kv", "w", "comp", "thr", "median", "GFLOP/s", "peak", "%peak", "GB/s", "%bw", "tok/s", "gonum", "speedup")
	}
	gbs, bw, tok, base, speed := "", "", "", "", ""
	if r.GBs > 0 {
		gbs, bw, tok = fmt.Sprintf("%7.1f", r.GBs), fmt.Sprintf("%5.0f ", r.PctBW), fmt.Sprintf("%8.0f", r.TokPerS)
		if r.PctBW > 100 {
			bw = fmt.Sprintf("%5.0f+", r.PctBW) // footnote: the cache served part of it
			if r.PctBW > p.overBW {
				p.overBW, p.overBytes = r.PctBW, r.GBs*1e9*r.MedianMs/1e3
			}
		}
	}
	if r.BaselineMs > 0 {
		base, speed = fmt.Sprintf("%8.2fms", r.BaselineMs), fmt.Sprintf("%6.1fx", r.Speedup)
	}
	peak, pct := "     -", "     -"
	if r.PctPeak > 0 {
		peak, pct = fmt.Sprintf("%6.0f", r.PeakGFLOPS), fmt.Sprintf("%6.1f", r.PctPeak)
	}
	w := r.Weights
	if w == "" {
		w = "-"
	}
	gflops := "       -"
	if r.GFLOPS > 0 {
		gflops = fmt.Sprintf("%8.1f", r.GFLOPS)
	}
	comp := r.Compute
	switch r.Engine {
	case BF16Dot.String():
		comp += BF16Dot.mark() // %peak of the bfloat16 instruction's peak
	case AMX.String():
		comp += AMX.mark() // %peak of the tiles' peak
	}
	fmt.Printf("%-12s %-7s %-42s %-13s %-4s %-4s %-4s %-5s %3d %8.3fms %s %s %s %7s %6s %8s %10s %7s\n",
		r.Kind, r.ISA, r.Shape, r.Mask, r.Layout, r.KV, w, comp, r.Threads, r.MedianMs, gflops, peak, pct, gbs, bw, tok, base, speed)
}

// footnotes explains, after the table, what its marks mean.
func (p *printer) footnotes(m Machine) {
	if p.json || p.overBW == 0 {
		return
	}
	l3 := "this CPU's last-level cache"
	if m.L3Bytes > 0 {
		l3 = fmt.Sprintf("this CPU's %d MiB L3", m.L3Bytes>>20)
	}
	fmt.Printf("\n+ above 100%% of the read probe (up to %.0f%%): the bytes such a row reads (%.0f MB at the highest) fit\n", p.overBW, p.overBytes/1e6)
	fmt.Printf("  partly in %s, which serves repeated calls faster than memory; the probe reads %d MiB from memory.\n", l3, bandwidthBytes>>20)
}

func (p *printer) note(s string) {
	if p.json {
		p.enc.Encode(map[string]string{"kind": "note", "note": s})
		return
	}
	fmt.Println(s)
}

// busy reports the share of the machine other processes used during the
// run, with a warning when the numbers may be off because of it.
func (p *printer) busy(others float64) {
	if p.json {
		p.enc.Encode(map[string]any{"kind": "summary", "others_cpu_fraction": others, "busy_warning": others > 0.05})
		return
	}
	if others > 0.05 {
		fmt.Printf("\nWARNING: other processes used %.0f%% of the machine's CPU time during the run; timings are noisy.\n", 100*others)
	} else {
		fmt.Printf("\nother processes used %.1f%% of the machine's CPU time during the run.\n", 100*others)
	}
}
