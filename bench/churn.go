package main

import (
	"math/rand/v2"
	"runtime"
	"runtime/debug"

	"github.com/fastattn/fastattn/mha"
)

// churnKept holds the buffers churnHeap keeps alive between rows, so the
// heap grows holes and history as a long-running server's does.
var churnKept [][]byte

// churnKeptMax bounds the bytes churnKept holds.
const churnKeptMax = 512 << 20

// churnHeap puts the process in the state a server is in after earlier
// work (-churn): 256 MiB of allocations of 4 KiB to 8 MiB, every third
// kept (the oldest dropped past churnKeptMax), a decode step and a small
// prefill of other shapes on e, then a collection and FreeOSMemory, which
// returns the freed pages to the OS (and breaks up any huge pages they
// were). A row measured after it shows whether its speed depends on where
// the heap puts its buffers.
func churnHeap(e *mha.Engine) error {
	rng := rand.New(rand.NewPCG(uint64(len(churnKept)), 0xc0ffee))
	kept := 0
	for _, b := range churnKept {
		kept += len(b)
	}
	for total := 0; total < 256<<20; {
		n := 4096<<rng.IntN(12) + rng.IntN(4096)
		b := make([]byte, n)
		for i := 0; i < n; i += 4096 {
			b[i] = byte(i)
		}
		if rng.IntN(3) == 0 {
			churnKept = append(churnKept, b)
			kept += n
		}
		total += n
	}
	for kept > churnKeptMax {
		kept -= len(churnKept[0])
		churnKept = churnKept[1:]
	}
	for _, s := range []mha.Shape{
		{Batch: 1, Heads: 32, KVHeads: 8, QLen: 1, KVLen: 4096, HeadDim: 128},
		{Batch: 1, Heads: 8, KVHeads: 8, QLen: 256, KVLen: 256, HeadDim: 64},
	} {
		q := make([]float32, s.Batch*s.Heads*s.QLen*s.HeadDim)
		kv := make([]float32, s.Batch*s.KVHeads*s.KVLen*s.HeadDim)
		out := make([]float32, len(q))
		if err := e.Attention(out, q, kv, kv, s, &mha.Options{Causal: true}); err != nil {
			return err
		}
	}
	runtime.GC()
	debug.FreeOSMemory()
	return nil
}
