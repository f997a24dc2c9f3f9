package mha

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPagedSoak serves requests the way a chat server does, on one Engine
// shared by several goroutines, each with its own paged cache (every
// storage type; one a sliding-window layer's): a system prompt decoded
// once, requests arriving on it by Fork or by Reuse of its keyed blocks,
// their own prompts fed in chunks beside others decoding a token at a
// time (the shared blocks run as a cascade), draft tokens rolled back,
// calls cancelled at random moments, requests finishing and freeing their
// blocks. After every call the pool's accounting is checked
// (PagedCache.Check) and sampled outputs are compared with a
// recomputation of the sequence's whole history on a contiguous cache; at
// the end, with every request freed, every block but the system prompt's
// is back in the pool. FASTATTN_SOAK sets the duration as for TestSoak.
func TestPagedSoak(t *testing.T) {
	d := soakDuration(t)
	e, err := NewEngine(Config{Threads: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rng := rand.New(rand.NewPCG(48, 10))
	a, _ := testLayer(t, e, rng, LayerConfig{DModel: 64, Heads: 8, KVHeads: 2, HeadDim: 16,
		Rotary: Rotary{Dims: 16, Base: 10000}}, true)
	b, _ := testLayer(t, e, rng, LayerConfig{DModel: 48, Heads: 4, HeadDim: 12}, true)
	type server struct {
		l      *Layer
		typ    DType
		window int
	}
	servers := []server{{a, Float32, 0}, {a, BFloat16, 0}, {a, Int8, 0}, {a, Int4, 0}, {b, Float16, 24}}
	var steps, checks, cancelled, shared atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for g, sv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(48, uint64(200+g)))
			dm := sv.l.Config().DModel
			var opts *Options
			if sv.window > 0 {
				opts = &Options{Window: sv.window}
			}
			probe, _ := sv.l.NewPagedCache(PagedConfig{Type: sv.typ, BlockTokens: 16, Bytes: 1 << 20})
			pc, err := sv.l.NewPagedCache(PagedConfig{Type: sv.typ, BlockTokens: 16, Bytes: 40 * probe.BlockBytes(), Window: sv.window})
			if err != nil {
				t.Error(err)
				return
			}
			ref, _ := sv.l.NewCacheOf(1, 400, sv.typ)
			// A monitor reads the pool's counts while the calls run, as a
			// server's metrics would.
			done := make(chan struct{})
			defer close(done)
			go func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					if f, c := pc.FreeBlocks(), pc.CachedBlocks(); f < 0 || f > pc.Blocks() || c < 0 || c > pc.Blocks() || pc.Seqs() < 0 {
						t.Errorf("goroutine %d: counts read during calls: %d free, %d cached of %d", g, f, c, pc.Blocks())
						return
					}
					if _, err := pc.Len(0); err != nil && !errors.Is(err, ErrOption) { // the first sequence (ErrOption: not made yet, or freed)
						t.Errorf("goroutine %d: Len during calls: %v", g, err)
						return
					}
					time.Sleep(50 * time.Microsecond)
				}
			}()
			fail := func(format string, args ...any) {
				t.Errorf("goroutine %d (%v): "+format, append([]any{g, sv.typ}, args...)...)
			}
			// The system prompt: 48 tokens, its three blocks keyed.
			system := random(rng, 48*dm)
			root, _ := pc.NewSeq()
			if err := sv.l.DecodePaged(context.Background(), make([]float32, len(system)), system, pc, []SeqID{root}, []int{48}, opts); err != nil {
				fail("the system prompt: %v", err)
				return
			}
			keys := prefixKeys(system, dm, 16, 3)
			if err := pc.SetKeys(root, keys); err != nil {
				fail("SetKeys: %v", err)
				return
			}
			type request struct {
				id     SeqID
				hist   []float32
				prompt int // own prompt tokens still to feed
				target int // total length at which it finishes
			}
			var live []*request
			for time.Now().Before(deadline) {
				steps.Add(1)
				if len(live) < 5 && rng.IntN(3) == 0 { // a request arrives on the system prompt
					var id SeqID
					n := 48
					if sv.window == 0 && rng.IntN(2) == 0 {
						id, n, err = pc.Reuse(keys)
					} else {
						id, err = pc.Fork(root, 48)
					}
					if err != nil || n != 48 {
						fail("a request on the system prompt: %d tokens, %v", n, err)
						return
					}
					live = append(live, &request{id: id, hist: append([]float32(nil), system...), prompt: 1 + rng.IntN(30), target: 60 + rng.IntN(100)})
				}
				var seqs []SeqID
				var counts []int
				var who []*request
				for _, r := range live {
					n := 1
					if r.prompt > 0 {
						n = min(r.prompt, 1+rng.IntN(12))
					}
					seqs, counts, who = append(seqs, r.id), append(counts, n), append(who, r)
				}
				total := sum(counts)
				if total == 0 {
					continue
				}
				x, out := random(rng, total*dm), make([]float32, total*dm)
				free := pc.FreeBlocks()
				if !sv.typ.quantized() && rng.IntN(16) == 0 {
					// Refused after its copies on write (ComputeInt8 over
					// unquantized K): the pool as it was.
					var refused Options
					if opts != nil {
						refused = *opts
					}
					refused.Compute = ComputeInt8
					if err := sv.l.DecodePaged(context.Background(), out, x, pc, seqs, counts, &refused); !errors.Is(err, ErrOption) || pc.FreeBlocks() != free {
						fail("a refused call: %v, %d blocks kept", err, free-pc.FreeBlocks())
						return
					}
				}
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if rng.IntN(10) == 0 {
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rng.IntN(300))*time.Microsecond)
				}
				err := sv.l.DecodePaged(ctx, out, x, pc, seqs, counts, opts)
				cancel()
				switch {
				case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
					cancelled.Add(1)
					if pc.FreeBlocks() != free {
						fail("a cancelled call kept %d blocks", free-pc.FreeBlocks())
					}
				case errors.Is(err, ErrCacheFull): // the pool is short: the newest request gives up
					r := live[len(live)-1]
					if err := pc.Free(r.id); err != nil {
						fail("Free: %v", err)
					}
					live = live[:len(live)-1]
				case err != nil:
					fail("DecodePaged: %v", err)
					return
				default:
					if len(live) > 1 {
						shared.Add(1)
					}
					for i, row := 0, 0; i < len(who); i++ {
						r, k := who[i], counts[i]
						r.hist = append(r.hist, x[row*dm:(row+k)*dm]...)
						r.prompt = max(r.prompt-k, 0)
						if i == 0 || rng.IntN(3) == 0 {
							checks.Add(1)
							if e := recompute(sv.l, ref, r.hist, out[row*dm:(row+k)*dm], opts); e > 2e-4 || math.IsNaN(e) {
								fail("a request at %d tokens: outputs differ from the recomputation by %.3g", len(r.hist)/dm, e)
							}
						}
						row += k
					}
				}
				for i := 0; i < len(live); i++ {
					r := live[i]
					n := len(r.hist) / dm
					switch {
					case n >= r.target: // finished
						if err := pc.Free(r.id); err != nil {
							fail("Free: %v", err)
						}
						live = append(live[:i], live[i+1:]...)
						i--
					case sv.window == 0 && n > 50 && rng.IntN(8) == 0: // rejected draft tokens
						keep := n - 1 - rng.IntN(3)
						if err := pc.Truncate(r.id, keep); err != nil {
							fail("Truncate: %v", err)
						}
						r.hist = r.hist[:keep*dm]
					}
				}
				if err := pc.Check(); err != nil {
					fail("%v", err)
					return
				}
			}
			for _, r := range live {
				if err := pc.Free(r.id); err != nil {
					fail("Free: %v", err)
				}
			}
			held := 3
			if sv.window > 0 {
				held = (sv.window+16)/16 + 1
			}
			if err := pc.Check(); err != nil || pc.Blocks()-pc.FreeBlocks() > held {
				fail("after freeing every request: %d blocks held, %v", pc.Blocks()-pc.FreeBlocks(), err)
			}
		}()
	}
	wg.Wait()
	t.Logf("soak: %d steps, %d recomputation checks, %d cancelled calls, %d calls with several requests (%v, %s)",
		steps.Load(), checks.Load(), cancelled.Load(), shared.Load(), d, e.Kernels())
	if checks.Load() == 0 {
		t.Errorf("the soak checked nothing")
	}
}
