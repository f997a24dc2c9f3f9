// Command bench measures fastattn on this machine: it runs the default
// attention shapes through every kernel set the CPU can run and prints the
// median time and GFLOP/s of each.
//
//	go run ./bench            # the full table
//	go run ./bench -quick     # a smoke run, seconds
//	go run ./bench -isa avx2  # one kernel set
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/mha"
	"github.com/klauspost/cpuid/v2"
)

// Case is one benchmark shape.
type Case struct {
	B, H, Hkv, Lq, Lk, D int
	Causal               bool
}

func (c Case) String() string {
	return fmt.Sprintf("B=%d,H=%d,Hkv=%d,Lq=%d,Lk=%d,D=%d", c.B, c.H, c.Hkv, c.Lq, c.Lk, c.D)
}

// Short is the case in benchmark-name form: B=1,H=16,L=1024,D=128 for
// self-attention shapes, with Hkv, Lq and Lk spelled out otherwise.
func (c Case) Short() string {
	if c.Lq == c.Lk && c.H == c.Hkv {
		return fmt.Sprintf("B=%d,H=%d,L=%d,D=%d", c.B, c.H, c.Lq, c.D)
	}
	return c.String()
}

// Pairs returns the (query, key) pairs a call computes: Lq·Lk, or under a
// causal mask (bottom-right) the pairs with j <= i + Lk - Lq.
func (c Case) Pairs() float64 {
	if !c.Causal {
		return float64(c.Lq) * float64(c.Lk)
	}
	n := 0.0
	for i := 0; i < c.Lq; i++ {
		n += float64(min(c.Lk, max(0, i+c.Lk-c.Lq+1)))
	}
	return n
}

// FLOPs is 2·(Dk+Dv)·B·H·pairs.
func (c Case) FLOPs() float64 { return 2 * float64(2*c.D) * float64(c.B*c.H) * c.Pairs() }

// defaultCases are the shapes of the README table.
var defaultCases = []Case{
	{B: 1, H: 8, Hkv: 8, Lq: 512, Lk: 512, D: 64},
	{B: 1, H: 8, Hkv: 8, Lq: 2048, Lk: 2048, D: 64},
	{B: 1, H: 16, Hkv: 16, Lq: 1024, Lk: 1024, D: 128},
	{B: 1, H: 32, Hkv: 32, Lq: 1, Lk: 4096, D: 128},
	{B: 1, H: 32, Hkv: 8, Lq: 1, Lk: 8192, D: 128},
}

// Bench holds one case's buffers.
type Bench struct {
	c          Case
	q, k, v, o []float32
	shape      mha.Shape
	opts       mha.Options
}

// NewBench allocates and fills a case's inputs.
func NewBench(c Case, threads int) *Bench {
	b := &Bench{c: c}
	b.shape = mha.Shape{Batch: c.B, Heads: c.H, KVHeads: c.Hkv, QLen: c.Lq, KVLen: c.Lk, HeadDim: c.D, Layout: benchLayout}
	b.q = fill(c.B * c.Lq * c.H * c.D)
	b.k = fill(c.B * c.Lk * c.Hkv * c.D)
	b.v = fill(c.B * c.Lk * c.Hkv * c.D)
	b.o = make([]float32, c.B*c.Lq*c.H*c.D)
	b.opts = mha.Options{Causal: c.Causal, Threads: threads}
	return b
}

func fill(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i%17)/17 - 0.5
	}
	return x
}

// Run makes one call.
func (b *Bench) Run(e *mha.Engine) error {
	return e.Attention(b.o, b.q, b.k, b.v, b.shape, &b.opts)
}

// Median times calls until minTime has passed (at least 3 after one
// warm-up call) and returns the median.
func Median(run func() error, minTime time.Duration) (time.Duration, error) {
	if err := run(); err != nil { // warm-up, discarded
		return 0, err
	}
	var ts []time.Duration
	start := time.Now()
	for len(ts) < 3 || time.Since(start) < minTime {
		t0 := time.Now()
		if err := run(); err != nil {
			return 0, err
		}
		ts = append(ts, time.Since(t0))
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	return ts[len(ts)/2], nil
}

func main() {
	quick := flag.Bool("quick", false, "small shapes and short timings, for a smoke run")
	isa := flag.String("isa", "", "comma-separated kernel sets to run (default: all available)")
	flag.Parse()

	sets := kernels.Available()
	if *isa != "" {
		sets = sets[:0]
		for _, name := range strings.Split(*isa, ",") {
			ks, err := kernels.Lookup(name)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			sets = append(sets, ks)
		}
	}
	cases, minTime := defaultCases, time.Second
	if *quick {
		cases, minTime = []Case{{B: 1, H: 4, Hkv: 4, Lq: 256, Lk: 256, D: 64}, {B: 1, H: 8, Hkv: 2, Lq: 1, Lk: 2048, D: 64}}, 100*time.Millisecond
	}
	best, err := kernels.Best()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Printf("CPU: %s, %d cores, GOMAXPROCS %d; kernel sets: %d, default %s\n\n",
		cpuid.CPU.BrandName, runtime.NumCPU(), runtime.GOMAXPROCS(0), len(sets), best.Name)
	fmt.Printf("%-8s %-38s %-6s %7s %12s %9s\n", "isa", "shape", "mask", "threads", "median", "GFLOP/s")
	threads := []int{1, runtime.GOMAXPROCS(0)}
	if threads[1] == 1 {
		threads = threads[:1]
	}
	for _, ks := range sets {
		e, err := mha.New(mha.Config{ISA: ks.Name})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, c := range cases {
			for _, causal := range []bool{false, true} {
				if causal && c.Lq == 1 {
					continue // a decode row sees every key either way
				}
				c.Causal = causal
				for _, th := range threads {
					b := NewBench(c, th)
					d, err := Median(func() error { return b.Run(e) }, minTime)
					if err != nil {
						fmt.Fprintln(os.Stderr, err)
						os.Exit(1)
					}
					mask := "full"
					if causal {
						mask = "causal"
					}
					fmt.Printf("%-8s %-38s %-6s %7d %12v %9.1f\n", ks.Name, c, mask, th, d.Round(time.Microsecond), c.FLOPs()/d.Seconds()/1e9)
				}
			}
		}
		e.Close()
	}
}

var benchLayout = mha.Layout(map[bool]int{true: 1, false: 0}[os.Getenv("BHSD") != ""])
