package mha_test

import (
	"context"
	"fmt"
	"log"
	"sync"

	"github.com/fastattn/fastattn/mha"
)

// request is one client's generation: a prompt and how many tokens to
// generate; done receives the tokens, or nil if the request was
// cancelled.
type request struct {
	ctx    context.Context
	prompt []int
	max    int
	done   chan []int
}

// running is an admitted request: its sequence, the prompt tokens fed so
// far, the tokens generated, and the blocks reserved for it.
type running struct {
	r      *request
	seq    mha.SeqID
	fed    int
	out    []int
	blocks int
}

// sample stands in for the model's head: the index of the largest of a
// token's output features, as a token id.
func sample(row []float32) int {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return 100 + best
}

// serve is the one goroutine that owns the pool: it admits requests while
// the pool can hold their worst case (prompt + max tokens), batches every
// running request's next prompt chunk or generated token into one
// DecodePaged call per step (continuous batching: a request joins or
// leaves between steps), drops a request whose context is done, and frees
// each finished request's blocks. It returns when requests is closed and
// all work is done.
func serve(layer *mha.Layer, cache *mha.PagedCache, requests <-chan *request) {
	const chunk = 16 // prompt tokens a request feeds per step
	bt := cache.BlockTokens()
	var waiting []*request
	var active []*running
	reserved, open := 0, true
	finish := func(a *running, tokens []int) {
		if err := cache.Free(a.seq); err != nil {
			log.Fatal(err)
		}
		reserved -= a.blocks
		a.r.done <- tokens
	}
	for open || len(waiting) > 0 || len(active) > 0 {
		// New requests: wait for one only when there is nothing to do.
		for open {
			var r *request
			if len(waiting) == 0 && len(active) == 0 {
				r, open = <-requests
			} else {
				select {
				case r, open = <-requests:
				default:
				}
			}
			if r == nil {
				break
			}
			waiting = append(waiting, r)
		}
		// Admission, first come first served, by the pool's blocks.
		for len(waiting) > 0 {
			r := waiting[0]
			if r.ctx.Err() != nil {
				r.done <- nil
				waiting = waiting[1:]
				continue
			}
			need := (len(r.prompt) + r.max + bt - 1) / bt
			if reserved+need > cache.Blocks() {
				break // it waits for a request to finish
			}
			seq, err := cache.NewSeq()
			if err != nil {
				log.Fatal(err)
			}
			reserved += need
			active = append(active, &running{r: r, seq: seq, blocks: need})
			waiting = waiting[1:]
		}
		// Cancelled requests leave; the others take a step together.
		var seqs []mha.SeqID
		var counts, tokens []int
		kept := active[:0]
		for _, a := range active {
			if a.r.ctx.Err() != nil {
				finish(a, nil)
				continue
			}
			kept = append(kept, a)
			if a.fed < len(a.r.prompt) {
				n := min(chunk, len(a.r.prompt)-a.fed)
				tokens = append(tokens, a.r.prompt[a.fed:a.fed+n]...)
				counts = append(counts, n)
			} else {
				tokens = append(tokens, a.out[len(a.out)-1])
				counts = append(counts, 1)
			}
			seqs = append(seqs, a.seq)
		}
		active = kept
		if len(seqs) == 0 {
			continue
		}
		x := embed(tokens...)
		out := make([]float32, len(x))
		if err := layer.DecodePaged(context.Background(), out, x, cache, seqs, counts, nil); err != nil {
			log.Fatal(err)
		}
		// Each request whose prompt is in reads its next token from the
		// output of its last token this step.
		row, kept := 0, active[:0]
		for i, a := range active {
			row += counts[i]
			if a.fed < len(a.r.prompt) {
				a.fed += counts[i]
				if a.fed < len(a.r.prompt) {
					kept = append(kept, a)
					continue
				}
			}
			a.out = append(a.out, sample(out[(row-1)*8:row*8]))
			if len(a.out) == a.r.max {
				finish(a, a.out)
				continue
			}
			kept = append(kept, a)
		}
		active = kept
	}
}

// A Go server on a paged cache: request goroutines hand their prompts to
// one scheduler goroutine that owns the pool (a PagedCache takes one
// changing call at a time) and batches prompt chunks and generated
// tokens into each DecodePaged call; admission waits for free blocks,
// and a request's context cancels it alone.
func ExamplePagedCache_server() {
	layer := pagedExampleLayer()
	// 6 blocks of 16 tokens (BlockBytes: 16 tokens × 2 KV heads × (4 + 4)
	// dims × 4 bytes = 1 KiB): two of the requests below at a time, each
	// reserving its prompt and its 6 tokens (3, 2 and 3 blocks).
	cache, err := layer.NewPagedCache(mha.PagedConfig{BlockTokens: 16, Bytes: 6 << 10})
	if err != nil {
		log.Fatal(err)
	}
	requests := make(chan *request)
	stopped := make(chan struct{})
	go func() {
		serve(layer, cache, requests)
		close(stopped)
	}()
	prompts := [][]int{make([]int, 40), make([]int, 21), make([]int, 9), make([]int, 30)}
	results := make([][]int, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		for j := range p {
			p[j] = (i*31 + j*7) % 97
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i == 2 {
				cancel() // this client hangs up
			}
			r := &request{ctx: ctx, prompt: p, max: 6, done: make(chan []int, 1)}
			requests <- r
			results[i] = <-r.done
		}()
	}
	wg.Wait()
	close(requests)
	<-stopped
	for i, tokens := range results {
		if tokens == nil {
			fmt.Printf("request %d: cancelled\n", i)
			continue
		}
		fmt.Printf("request %d: %v\n", i, tokens)
	}
	fmt.Println("free blocks:", cache.FreeBlocks(), "of", cache.Blocks())
	// Output:
	// request 0: [103 102 102 102 102 102]
	// request 1: [104 106 100 100 106 103]
	// request 2: cancelled
	// request 3: [100 106 106 106 106 100]
	// free blocks: 6 of 6
}
