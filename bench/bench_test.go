package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/mha"
	"github.com/fastattn/fastattn/tile"
)

// report adds GFLOP/s and % of the FMA peak measured around the timed loop
// (same set, same thread count).
func report(b *testing.B, ks *kernels.Set, threads int, flops float64, loop func()) {
	peak := Around(ks, threads, FMA, func() {
		b.ResetTimer()
		loop()
		b.StopTimer()
	})
	gflops := flops * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(gflops, "GFLOP/s")
	if peak > 0 {
		b.ReportMetric(100*gflops/peak, "%peak")
	}
}

// threadCounts is 1 and the engine's thread count n, once each (so names
// do not repeat when GOMAXPROCS is 1).
func threadCounts(n int) []int {
	if n == 1 {
		return []int{1}
	}
	return []int{1, n}
}

// attentionName is the sub-benchmark name of one case of
// BenchmarkAttention.
func attentionName(isa string, c Case, causal bool, threads int) string {
	return fmt.Sprintf("isa=%s/%s/causal=%v/threads=%d", isa, c.Path(), causal, threads)
}

// TestBenchmarkNames: every sub-benchmark name is distinct whatever the
// thread count, and each path element is one key=value (benchstat groups
// by them).
func TestBenchmarkNames(t *testing.T) {
	for _, n := range []int{1, 2, 64} {
		seen := map[string]bool{}
		for _, c := range defaultCases {
			for _, causal := range []bool{false, true} {
				for _, th := range threadCounts(n) {
					name := attentionName("avx2", c, causal, th)
					if seen[name] {
						t.Fatalf("threads %d: %s twice", n, name)
					}
					seen[name] = true
					for _, el := range strings.Split(name, "/") {
						if k, v, ok := strings.Cut(el, "="); !ok || k == "" || strings.ContainsAny(v, "=,") {
							t.Fatalf("%s: element %q is not one key=value", name, el)
						}
					}
				}
			}
		}
	}
}

// BenchmarkAttention runs the default cases on every kernel set at one and
// all threads. Names suit benchstat, one key per path element:
// BenchmarkAttention/isa=avx512/B=1/H=16/L=1024/D=128/causal=false/threads=1.
// Decode cases also report GB/s of K and V read.
func BenchmarkAttention(b *testing.B) {
	for _, ks := range kernels.Available() {
		e, err := mha.NewEngine(mha.Config{ISA: ks.Name})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		for _, c := range defaultCases {
			for _, causal := range []bool{false, true} {
				if causal && c.Decode() {
					continue
				}
				c.Causal = causal
				for _, th := range threadCounts(e.Threads()) {
					b.Run(attentionName(ks.Name, c, causal, th), func(b *testing.B) {
						q, k, v := fill(c.B*c.Lq*c.H*c.D), fill(c.B*c.Lk*c.Hkv*c.D), fill(c.B*c.Lk*c.Hkv*c.D)
						o := make([]float32, len(q))
						opts := &mha.Options{Causal: causal, Threads: th}
						run := func() {
							if err := e.Attention(o, q, k, v, c.Shape(), opts); err != nil {
								b.Fatal(err)
							}
						}
						run()
						report(b, ks, th, c.FLOPs(), func() {
							for i := 0; i < b.N; i++ {
								run()
							}
						})
						if c.Decode() {
							b.ReportMetric(c.KVBytes()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
						}
					})
				}
			}
		}
	}
}

// BenchmarkLayer runs the causal MHA layer (projections and attention).
func BenchmarkLayer(b *testing.B) {
	for _, ks := range kernels.Available() {
		e, err := mha.NewEngine(mha.Config{ISA: ks.Name})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		for _, lc := range defaultLayers {
			for _, th := range threadCounts(e.Threads()) {
				b.Run(fmt.Sprintf("isa=%s/dm=%d/H=%d/Hkv=%d/L=%d/threads=%d", ks.Name, lc.DModel, lc.H, lc.Hkv, lc.L, th), func(b *testing.B) {
					dm := lc.DModel
					layer, err := mha.NewLayer(e, mha.LayerConfig{DModel: dm, Heads: lc.H, KVHeads: lc.Hkv, HeadDim: lc.D},
						mha.Weights{WQ: fill(dm * lc.H * lc.D), WK: fill(dm * lc.Hkv * lc.D), WV: fill(dm * lc.Hkv * lc.D), WO: fill(lc.H * lc.D * dm)})
					if err != nil {
						b.Fatal(err)
					}
					x := fill(lc.B * lc.L * dm)
					y := make([]float32, len(x))
					opts := &mha.Options{Causal: true, Threads: th}
					report(b, ks, th, lc.FLOPs(), func() {
						for i := 0; i < b.N; i++ {
							if err := layer.Forward(y, x, lc.B, lc.L, opts); err != nil {
								b.Fatal(err)
							}
						}
					})
				})
			}
		}
	}
}

// BenchmarkGEMM runs the projection GEMM (tile.Gemm, B packed) on one
// thread: C[M][N] = A[M][K]·B[K][N], 2·M·N·K FLOPs.
func BenchmarkGEMM(b *testing.B) {
	for _, ks := range kernels.Available() {
		for _, s := range []struct{ m, n, k int }{{512, 512, 512}, {512, 1536, 512}, {512, 6144, 4096}, {64, 4096, 4096}, {1, 4096, 4096}} {
			for _, t := range []fallback.KVType{fallback.KVFloat32, fallback.KVBFloat16, fallback.KVFloat16, fallback.KVInt8, fallback.KVInt4} {
				b.Run(fmt.Sprintf("isa=%s/w=%v/M=%d/N=%d/K=%d", ks.Name, t, s.m, s.n, s.k), func(b *testing.B) {
					benchGemm(b, ks, t, s.m, s.n, s.k, true)
				})
				if t == fallback.KVBFloat16 && ks.PairsWeights() {
					// The row layout such a set held before: the pairs'
					// speed measured against it in one run.
					b.Run(fmt.Sprintf("isa=%s/w=%v-rows/M=%d/N=%d/K=%d", ks.Name, t, s.m, s.n, s.k), func(b *testing.B) {
						benchGemm(b, ks, t, s.m, s.n, s.k, false)
					})
				}
			}
		}
	}
}

// benchGemm times the projection of m rows through a k×n weight matrix
// stored as t (bfloat16 in pairs where the set reads them, if paired, as
// a layer holds them), reporting GFLOP/s against the set's peak and the
// weights' GB/s.
func benchGemm(b *testing.B, ks *kernels.Set, t fallback.KVType, m, n, k int, paired bool) {
	cols := tile.PanelCols(ks)
	w := tile.PackWeights(tile.Matrix{F32: fill(k * n), RowStride: n, ColStride: 1}, k, n, cols, t)
	if paired {
		w.PairRows(ks)
	}
	g := tile.Gemm{A: fill(m * k), LDA: k, B: w, C: make([]float32, m*n), LDC: n, M: m}
	var ws tile.Workspace
	var pa tile.PackedA
	report(b, ks, 1, 2*float64(m*n*k), func() {
		for i := 0; i < b.N; i++ {
			pk := g.PackA(ks, &pa) // as the layer does, once a call, before Items
			pk.RunAll(ks)
			for it := 0; it < g.Items(); it++ {
				g.Run(ks, it, &ws)
			}
		}
	})
	// The weights' bytes, read once per call: what bounds a GEMV (M=1).
	b.ReportMetric(float64(w.Bytes())*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}

// TestShapeDims: -shape takes Dk/Dv in its last field, and a row with V
// inside K counts K's bytes once.
func TestShapeDims(t *testing.T) {
	c, err := parseShape("1,16,1,1,4096,576/512")
	if err != nil {
		t.Fatal(err)
	}
	if c.D != 576 || c.ValueDim() != 512 || c.String() != "B=1,H=16,Hkv=1,Lq=1,Lk=4096,D=576/512" {
		t.Errorf("parsed %+v as %s", c, c)
	}
	if got, want := c.KVBytes(), 4096*4*float64(576+512); got != want {
		t.Errorf("KVBytes %v, want %v", got, want)
	}
	c.VInK, c.KV = true, mha.BFloat16
	if got, want := c.KVBytes(), 4096*2*576.0; got != want || c.String() != "B=1,H=16,Hkv=1,Lq=1,Lk=4096,D=576/512+vink" {
		t.Errorf("V in K: KVBytes %v, want %v (%s)", got, want, c)
	}
	if got, want := c.FLOPs(), 2*float64(576+512)*16*4096; got != want {
		t.Errorf("FLOPs %v, want %v", got, want)
	}
	for _, bad := range []string{"1,16,1,1,4096,576/", "1,16,1,1,4096,/512", "1,16,1,1,4096,576/0", "1,2,3"} {
		if _, err := parseShape(bad); err == nil {
			t.Errorf("parseShape(%q) took it", bad)
		}
	}
}

// TestMarkdown: -md turns a -json run's records into the README's table:
// the machine line, one line per attention, layer or GEMM row with its
// share of its limit, other records left out; a file without a machine
// record is an error.
func TestMarkdown(t *testing.T) {
	run := `{"kind":"machine","cpu":"Test CPU","cores":2,"threads":2,"peak_gflops_1_thread":{"avx2":91},"read_gbs_1_thread":12.5}
{"kind":"attention","isa":"avx2","shape":"B=1,H=8","mask":"causal","layout":"bshd","kv":"f32","compute":"f32","engine":"fma","threads":1,"median_ms":1.5,"gflops":60,"pct_peak":66}
{"kind":"attention","isa":"avx2","shape":"B=1,H=32,Lq=1","mask":"full","layout":"bhsd","kv":"bf16","compute":"f32","engine":"fma","threads":1,"median_ms":2,"pct_bandwidth":71,"tokens_per_s":500}
{"kind":"shared prefix","isa":"avx2"}
`
	var b strings.Builder
	if err := writeMarkdown(&b, strings.NewReader(run)); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{"Test CPU, 2 cores; one thread: avx2 FMA peak 91 GFLOP/s; read probe 12.5 GB/s.",
		"| avx2 | attention `B=1,H=8` causal bshd kv f32 | 1 | 1.5 ms | 66% of the fma peak (60.0 GFLOP/s) |",
		"| avx2 | attention `B=1,H=32,Lq=1` full bhsd kv bf16 | 1 | 2 ms | 71% of the read probe (500 tok/s) |"} {
		if !strings.Contains(got, want) {
			t.Errorf("-md output lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "\n| avx2") != 2 {
		t.Errorf("-md output has other rows than the two:\n%s", got)
	}
	if err := writeMarkdown(&b, strings.NewReader(`{"kind":"attention"}`)); err == nil {
		t.Error("a run without a machine record gave no error")
	}
}

// TestPerformanceDoc: -perf writes one section per machine folder, its
// notes, prefill and decode lines with the peer beside them (the fastest
// operator on the same shape, mask and threads), a row seen in two runs
// as the range of its cells, and refuses a folder without a machine
// record.
func TestPerformanceDoc(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "test-cpu")
	if err := os.Mkdir(m, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(m, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.jsonl", `{"kind":"machine","cpu":"Test CPU","cores":2,"peak_gflops_1_thread":{"avx2":91},"read_gbs_1_thread":12.5,"read_gbs_all_threads":13,"amx":"no AMX"}
{"kind":"attention","isa":"avx2","shape":"B=1,H=8,Hkv=8,Lq=512,Lk=512,D=64","mask":"causal","layout":"bshd","kv":"f32","compute":"f32","engine":"fma","threads":1,"median_ms":2,"gflops":60,"pct_peak":66}
{"kind":"attention","isa":"avx2","shape":"B=1,H=32,Hkv=8,Lq=1,Lk=8192,D=128","mask":"full","layout":"bhsd","kv":"f32","compute":"f32","engine":"fma","threads":1,"median_ms":4,"gb_per_s":8,"pct_bandwidth":64}
{"kind":"attention","isa":"avx2","shape":"B=1,H=32,Hkv=8,Lq=1,Lk=8192,D=128","mask":"full","layout":"bhsd","kv":"f16","compute":"f32","engine":"fma","threads":1,"median_ms":2,"gb_per_s":8,"pct_bandwidth":64}
{"kind":"gemm","isa":"avx2","shape":"gemm M=512,K=4096,N=4096","weights":"f32","compute":"f32","engine":"fma","threads":1,"median_ms":270,"pct_peak":68}
{"anchor":"onednn","kind":"gemm","type":"f32","M":512,"K":4096,"N":4096,"impl":"brg:avx2","median_ms":297,"gflops":57.8}
`)
	write("b.jsonl", `{"kind":"machine","cpu":"Test CPU","cores":2}
{"kind":"attention","isa":"avx2","shape":"B=1,H=8,Hkv=8,Lq=512,Lk=512,D=64","mask":"causal","layout":"bshd","kv":"f32","compute":"f32","engine":"fma","threads":1,"median_ms":2.5,"gflops":50,"pct_peak":55}
{"peer":"onnxruntime","op":"MultiHeadAttention","shape":"1,8,8,512,512,64","causal":true,"threads":1,"median_ms":5}
{"peer":"onnxruntime","op":"Attention-23","shape":"1,8,8,512,512,64","causal":true,"threads":1,"median_ms":4}
{"peer":"onnxruntime","op":"Attention-23","shape":"1,8,8,512,512,64","causal":false,"threads":1,"median_ms":1}
{"peer":"ggml","op":"FLASH_ATTN_EXT f16","shape":"1,32,8,1,8192,128","kv":"f16","causal":false,"threads":1,"median_ms":3}
`)
	write("notes.md", "What bounds each row here.\n")
	var b strings.Builder
	if err := writePerformance(&b, dir); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"## test-cpu: Test CPU, 2 cores",
		"One thread: avx2 FMA peak 91 GFLOP/s; read probe 12.5 GB/s (all threads 13.0). AMX: no AMX.",
		"What bounds each row here.",
		"| avx2 | `1,8,8,512,512,64` | causal | bshd | f32 | f32 | 1 | 2.00–2.50 | 55–66 | 50.0–60.0 | 4 ms (onnxruntime Attention-23), 1.60× |",
		"| avx2 | `1,32,8,1,8192,128` | bhsd | f32 | f32 | 1 | 4.00 | 64 | 8.00 | – |", // the f16 peer is not its K/V type
		"| avx2 | `1,32,8,1,8192,128` | bhsd | f16 | f32 | 1 | 2.00 | 64 | 8.00 | 3 ms (ggml FLASH_ATTN_EXT f16), 1.50× |",
		"| avx2 | gemm | `gemm M=512,K=4096,N=4096` | w f32, f32 | 1 | fma peak | 270 | 68 | 297 ms (brg:avx2), 1.10× |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("-perf output lacks %q:\n%s", want, got)
		}
	}
	write("a.jsonl", "")
	write("b.jsonl", "")
	if err := writePerformance(&b, dir); err == nil {
		t.Error("a folder without a machine record gave no error")
	}
}

// TestChurnHeap: -churn's workload runs on an engine and keeps at most
// churnKeptMax bytes alive however often it runs.
func TestChurnHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 256 MiB a round")
	}
	e, err := mha.NewEngine(mha.Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	defer func() { churnKept = nil }()
	for range 3 {
		if err := churnHeap(e); err != nil {
			t.Fatal(err)
		}
	}
	kept := 0
	for _, b := range churnKept {
		kept += len(b)
	}
	if kept == 0 || kept > churnKeptMax {
		t.Errorf("churnHeap keeps %d bytes, want (0, %d]", kept, churnKeptMax)
	}
}
