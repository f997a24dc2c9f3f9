package mha

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/fastattn/fastattn/kernels"
	"github.com/fastattn/fastattn/tile"
)

// threadsOf returns the Threads option, 0 for nil options.
func threadsOf(o *Options) int {
	if o == nil {
		return 0
	}
	return o.Threads
}

// Config configures an Engine.
type Config struct {
	// Threads is the number of worker goroutines; 0 means GOMAXPROCS.
	Threads int
	// ISA names the kernel set (generic, avx2, avx512, neon); "" means
	// FASTATTN_ISA if set, else the best this CPU runs.
	ISA string
	// NoAMX keeps the engine off AMX tiles where the CPU has them: the
	// bfloat16 mode then runs on VDPBF16PS (or, on Intel, the float32
	// kernels with the mode's roundings) and the int8 mode on VPDPBUSD.
	// FASTATTN_AMX=off does the same for every engine of the process.
	NoAMX bool
}

// Engine owns a pool of worker goroutines, each with its own scratch, and
// runs attention calls and MHA layers on it. The first call with larger
// head dims than before sizes every worker's scratch for them (briefly
// holding the engine alone), so later calls allocate nothing on the
// workers, whichever run their items. A call's own buffers (its job, a
// layer's projections) come from free lists: they are allocated only the
// first time more calls run at once than before, so a steady load
// allocates nothing. An Engine is safe for concurrent use; its
// results are bit for bit the same whatever the thread count. Only New
// makes a usable Engine: the methods of a nil or zero Engine return
// ErrNil.
type Engine struct {
	ks     *kernels.Set
	pool   *pool
	mu     sync.RWMutex // calls hold it for reading, Close for writing
	closed bool
	shared bool // the Default engine: Close does nothing
	// The head dims and widened-weight floats every worker's scratch is
	// reserved for (reserve); written under mu held for writing.
	resDk, resDv, resWb atomic.Int64
	resGemm             atomic.Bool            // reserveGemm done
	resQ8Heads, resQ8Dk atomic.Int64           // reserveQ8's
	partMu              sync.Mutex             // guards parts
	parts               [][]float32            // free partial buffers of split decode steps
	works               freeList[[]attnWork]   // free problem lists of calls
	copies              freeList[*tile.KVCopy] // free heads-major K/V copies (tile.Regroup)
}

// NewEngine starts an Engine: cfg.Threads worker goroutines (GOMAXPROCS for 0)
// running the kernel set cfg.ISA names ("": FASTATTN_ISA if set, else the
// best this CPU runs).
// An unknown set, or one this CPU cannot run, is an error wrapping ErrISA;
// Threads outside [0, MaxThreads] wraps ErrOption. Close stops the workers.
func NewEngine(cfg Config) (*Engine, error) {
	if cfg.Threads < 0 || cfg.Threads > MaxThreads {
		return nil, fmt.Errorf("%w: Threads = %d, must be in [0, %d]", ErrOption, cfg.Threads, MaxThreads)
	}
	var ks *kernels.Set
	var err error
	if cfg.ISA == "" {
		ks, err = kernels.Best()
	} else {
		ks, err = kernels.Lookup(cfg.ISA)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrISA, err)
	}
	if cfg.NoAMX {
		ks = ks.WithoutAMX()
	}
	threads := cfg.Threads
	if threads == 0 {
		threads = min(runtime.GOMAXPROCS(0), MaxThreads)
	}
	return &Engine{ks: ks, pool: newPool(threads)}, nil
}

// Kernels returns the name of the kernel set the engine runs ("" for a
// nil or zero Engine).
func (e *Engine) Kernels() string {
	if e.usable() != nil {
		return ""
	}
	return e.ks.Name
}

// Threads returns the number of worker goroutines (0 for a nil or zero
// Engine).
func (e *Engine) Threads() int {
	if e.usable() != nil {
		return 0
	}
	return e.pool.size
}

// Close stops the workers after the calls in flight return; later calls
// return ErrClosed — those of the engine, and NewLayer, NewMLALayer,
// NewCache, NewCrossKV and every call of a layer on it — and closing again
// does nothing. Close on the Default
// engine does nothing and returns nil: the package-level functions share
// it for the life of the process. Close on a nil or zero Engine returns
// ErrNil.
func (e *Engine) Close() error {
	if err := e.usable(); err != nil {
		return err
	}
	if e.shared {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	e.pool.close()
	return nil
}

// usable returns ErrNil for a nil or zero Engine.
func (e *Engine) usable() error {
	if e == nil || e.pool == nil || e.ks == nil {
		return fmt.Errorf("%w: Engine (make one with New)", ErrNil)
	}
	return nil
}

// open returns usable's error, or ErrClosed for a closed Engine: what
// makes a Layer, a Cache or a CrossKV on it checks this, so a closed
// engine is refused where things are made, not first at a Decode.
func (e *Engine) open() error {
	if err := e.usable(); err != nil {
		return err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return ErrClosed
	}
	return nil
}

// workers returns the most workers a call with opts uses.
func (e *Engine) workers(o *Options) int {
	if t := threadsOf(o); t > 0 {
		return min(t, e.pool.size)
	}
	return e.pool.size
}

// reserve makes every worker's scratch hold what any work item of head
// dims dk, dv (and a widened weight block of wb floats) can need, the
// first time a call brings larger ones: so after the first call of a
// shape, no call of it allocates, whichever workers run its items and
// however many goroutines call (without it, each worker grew its scratch
// the first time it happened to run such an item, calls later). It takes
// the engine for writing, so the workers are idle while it grows their
// scratch; later calls see it through the lock and the job channel. Call
// it before acquire.
func (e *Engine) reserve(dk, dv, wb int) {
	if int64(dk) <= e.resDk.Load() && int64(dv) <= e.resDv.Load() && int64(wb) <= e.resWb.Load() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	dk, dv, wb = max(dk, int(e.resDk.Load())), max(dv, int(e.resDv.Load())), max(wb, int(e.resWb.Load()))
	if (tile.WorkspaceBytes(dk, dv)+4*float64(wb))*float64(len(e.pool.ws)) > float64(memoryLimit) {
		return // more than the machine has: the workers grow as items need, as the calls' checks allow
	}
	for i := range e.pool.ws {
		e.pool.ws[i].Reserve(e.ks, dk, dv, wb)
	}
	e.resDk.Store(int64(dk))
	e.resDv.Store(int64(dv))
	e.resWb.Store(int64(wb))
}

// reserveGemm is reserve for a layer's projections: each worker's
// scratch for a block of C (tile.Workspace.ReserveGemm), so that no
// projection allocates, made by the first layer call.
func (e *Engine) reserveGemm() {
	if e.resGemm.Load() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.resGemm.Load() {
		return
	}
	if float64(tile.GemmScratchBytes)*float64(len(e.pool.ws)) > float64(memoryLimit) {
		return // more than the machine has: the workers grow as items need
	}
	for i := range e.pool.ws {
		e.pool.ws[i].ReserveGemm()
	}
	e.resGemm.Store(true)
}

// reserveQ8 is reserve for the int8 mode's split items of kvHeads KV
// heads of head dim dk (tile.Workspace.ReserveQ8), made by the first
// int8-mode call of such a shape, so that no later call allocates.
func (e *Engine) reserveQ8(kvHeads, dk int) {
	if int64(kvHeads) <= e.resQ8Heads.Load() && int64(dk) <= e.resQ8Dk.Load() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	kvHeads, dk = max(kvHeads, int(e.resQ8Heads.Load())), max(dk, int(e.resQ8Dk.Load()))
	for i := range e.pool.ws {
		e.pool.ws[i].ReserveQ8(kvHeads, dk)
	}
	e.resQ8Heads.Store(int64(kvHeads))
	e.resQ8Dk.Store(int64(dk))
}

// acquire marks a call in flight; release must follow if it succeeds.
func (e *Engine) acquire() error {
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (e *Engine) release() { e.mu.RUnlock() }

// Attention computes scaled dot-product attention: for each batch b, query
// head h and query row i,
//
//	out[b,i,h,:] = Σ_j softmax_j(s_ij) · v[b,j,h/(H/Hkv),:]
//
// with the scores s_ij and masks of Options (see there); opts may be nil.
// out must not overlap the inputs. Bad input returns an error wrapping
// ErrShape, ErrBuffer or ErrOption.
func (e *Engine) Attention(out, q, k, v []float32, shape Shape, opts *Options) error {
	return e.AttentionContext(context.Background(), out, q, k, v, shape, opts)
}

// AttentionContext is Attention that stops when ctx is done: the work
// items already started finish, the rest are skipped, and it returns
// ctx.Err(). out (and the LSE) then hold a mix of results and old
// contents.
func (e *Engine) AttentionContext(ctx context.Context, out, q, k, v []float32, shape Shape, opts *Options) error {
	if err := e.usable(); err != nil {
		return err
	}
	return e.run(ctx, out, q, kvData{k: k, v: v}, shape, opts)
}

// Attention16 is Attention with K and V stored as 16-bit floats of type t
// (Float16 or BFloat16; Narrow16 makes them from float32): half the bytes
// of K and V to read, widened to float32 in registers, float32
// arithmetic. The result is Attention's on the widened K and V. Every
// option holds. A t other than Float16 or BFloat16 is ErrOption.
func (e *Engine) Attention16(out, q []float32, k, v []uint16, t DType, shape Shape, opts *Options) error {
	return e.Attention16Context(context.Background(), out, q, k, v, t, shape, opts)
}

// Attention16Context is Attention16 that stops when ctx is done, as
// AttentionContext.
func (e *Engine) Attention16Context(ctx context.Context, out, q []float32, k, v []uint16, t DType, shape Shape, opts *Options) error {
	if err := e.usable(); err != nil {
		return err
	}
	if !t.is16() {
		return fmt.Errorf("%w: Attention16 takes Float16 or BFloat16, not %v", ErrOption, t)
	}
	return e.run(ctx, out, q, kvData{t: t, k16: k, v16: v}, shape, opts)
}

// run validates and runs one attention call.
func (e *Engine) run(ctx context.Context, out, q []float32, kv kvData, shape Shape, opts *Options) error {
	c, err := callOf(ctx, opts)
	if err != nil {
		return err
	}
	ws := e.getWorks(1)
	defer e.putWorks(ws)
	if ws[0].p, err = problem(out, q, kv, shape, opts, e.workers(opts)); err != nil {
		return err
	}
	e.reserve(ws[0].p.HeadDim, ws[0].p.ValueDim, 0)
	if ws[0].p.Q8 {
		e.reserveQ8(ws[0].p.KVHeads, ws[0].p.HeadDim)
	}
	if err := e.acquire(); err != nil {
		return err
	}
	defer e.release()
	if !e.attend(ws, c) {
		return ctx.Err()
	}
	return nil
}

// callOf returns the call of a context and options: nil ctx means
// context.Background(); a context already done is its error.
func callOf(ctx context.Context, opts *Options) (call, error) {
	c := call{threads: threadsOf(opts), bf16: opts != nil && opts.Compute == ComputeBF16}
	if ctx == nil {
		return c, nil
	}
	if err := ctx.Err(); err != nil {
		return call{}, err
	}
	c.cancel = ctx.Done()
	return c, nil
}

// openOr returns e, or Default() for nil, if it can take calls (not
// closed).
func openOr(e *Engine) (*Engine, error) {
	if e == nil {
		var err error
		if e, err = Default(); err != nil {
			return nil, err
		}
	}
	return e, e.open()
}

// getWorks returns n cleared attnWorks from the engine's free list.
func (e *Engine) getWorks(n int) []attnWork {
	ws, _ := e.works.get()
	if cap(ws) < n {
		ws = make([]attnWork, n)
	}
	ws = ws[:n]
	clear(ws)
	return ws
}

// putWorks returns ws to the free list.
func (e *Engine) putWorks(ws []attnWork) {
	clear(ws)
	e.works.put(ws)
}

// getPart returns a free partial buffer of at least n floats.
func (e *Engine) getPart(n int) []float32 {
	e.partMu.Lock()
	defer e.partMu.Unlock()
	for i, b := range e.parts {
		if cap(b) >= n {
			e.parts = append(e.parts[:i], e.parts[i+1:]...)
			return b[:n]
		}
	}
	if k := len(e.parts); k > 0 { // grow the last one rather than keep it
		e.parts = e.parts[:k-1]
	}
	return make([]float32, n)
}

// putPart returns a partial buffer to the free list.
func (e *Engine) putPart(b []float32) {
	if cap(b) == 0 {
		return
	}
	e.partMu.Lock()
	e.parts = append(e.parts, b)
	e.partMu.Unlock()
}

// gemm runs one projection on the pool; it reports whether it ran to the
// end (false: c.cancel fired).
func (e *Engine) gemm(g tile.Gemm, c call) bool {
	return gemmWorks.run(e.pool, g, e.ks, c)
}

var (
	defaultOnce   sync.Once
	defaultEngine *Engine
	defaultErr    error
)

// Default returns the package's shared Engine (GOMAXPROCS workers, the
// kernel set FASTATTN_ISA names, else the best this CPU runs), starting it on first use. It lives as long as the
// process: its Close does nothing.
func Default() (*Engine, error) {
	defaultOnce.Do(func() {
		defaultEngine, defaultErr = NewEngine(Config{})
		if defaultErr == nil {
			defaultEngine.shared = true
		}
	})
	return defaultEngine, defaultErr
}

// Attention computes scaled dot-product attention on the Default engine
// (every core, the best kernel set of the CPU): for each batch b, query
// head h and query row i,
//
//	out[b,i,h,:] = Σ_j softmax_j(s_ij) · v[b,j,h/(H/Hkv),:]
//
// with s_ij = scale·q·k plus the biases and masks of opts (nil: plain
// attention). Tensors are laid out as shape.Layout says (BSHD:
// [B][S][H][D]). out must not overlap the inputs; bad input returns an
// error wrapping ErrShape, ErrBuffer or ErrOption, and a FASTATTN_ISA
// naming a set this CPU cannot run ErrISA (the Default engine's).
// Engine.Attention has the full contract.
func Attention(out, q, k, v []float32, shape Shape, opts *Options) error {
	e, err := Default()
	if err != nil {
		return err
	}
	return e.Attention(out, q, k, v, shape, opts)
}

// Attention16 is Attention with K and V stored as 16-bit floats of type
// t (Float16 or BFloat16; Narrow16 makes them from float32), on the
// Default engine: half the bytes of K and V to read, widened to float32
// in registers, the result Attention's on the widened K and V. A t other
// than Float16 or BFloat16 is ErrOption (Engine.Attention16).
func Attention16(out, q []float32, k, v []uint16, t DType, shape Shape, opts *Options) error {
	e, err := Default()
	if err != nil {
		return err
	}
	return e.Attention16(out, q, k, v, t, shape, opts)
}
