package mha

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/fastattn/fastattn/kernels"
)

// PagedConfig sizes a PagedCache.
type PagedConfig struct {
	// Type is the storage of K and V: Float32 (the zero value), Float16,
	// BFloat16, Int8 or Int4, as NewCacheOf's.
	Type DType
	// Bytes is the pool's size: it holds Bytes/BlockBytes() whole blocks
	// (at least one). It has no default: the error for 0 names the bytes
	// of a block and of a 4,096-token sequence, to size it from.
	Bytes int64
	// BlockTokens is the tokens of one block, a multiple of 16 (the
	// kernels' key block); 0 means DefaultBlockTokens.
	BlockTokens int
	// Window > 0 is the layer's sliding window (every DecodePaged call
	// must then set Options.Window to it): a block whose tokens no later
	// query of a sequence can see any more leaves that sequence, and
	// returns to the pool when no other holds it, so such a layer's memory
	// is bounded by the window, not the conversation.
	Window int
}

// DefaultBlockTokens is the block size of a PagedCache whose config sets
// none: a multiple of 64 (the split decode's smallest chunk), so paged
// decoding gives the contiguous cache's bits; long enough that the fused
// decode kernel's calls, one a block's run, cost little (a decode step of
// 32 sequences of 4,224 bfloat16 tokens, Zen 4, one thread: pages of 64
// ran 0.90–0.97× the contiguous cache's speed, 128 0.97–1.03×, 256
// 1.08×); short enough that a sequence's partly filled last block wastes
// little (B = 32 chats of 128 tokens each over a shared prompt hold 1.0×
// their tokens' bytes at 128, 1.5× at 256).
const DefaultBlockTokens = 128

// SeqID names a sequence of a PagedCache; IDs are not reused.
type SeqID int64

// PagedCache is a layer's KV cache for serving many sequences: a pool of
// fixed-size blocks (BlockTokens tokens of every KV head's K and V), and
// for each sequence a table of the blocks holding its tokens in order.
// Sequences are added (NewSeq, Fork, Reuse) and removed (Free) at any
// time; a block is reference-counted and may be held by many sequences:
// Fork shares a sequence's blocks without copying a row, and a sequence
// that appends into a block another holds copies that one block first
// (copy on write). Full blocks may be given keys (SetKeys, say a hash of
// their token ids and their prefix's): Reuse starts a new sequence on the
// longest run of cached blocks matching a request's keys, and a keyed
// block no sequence holds stays cached until the pool needs it, the least
// recently released first.
//
// Layer.DecodePaged decodes any subset of the sequences in one call, and
// computes the attention of sequences that share leading blocks (a system
// prompt) to those blocks once, as one grouped problem for all their
// queries, merging it with each sequence's own part by log-sum-exp
// (cascade attention).
//
// A PagedCache takes one changing call at a time: DecodePaged,
// DecodePagedTree, NewSeq, Fork, Reuse, SetKeys, Truncate, Reset, Keep
// and Free return ErrBusy while another holds it, even on other
// sequences, so two goroutines may not decode disjoint sequences of one
// pool at once: a server gives the pool to one goroutine, which batches
// every request's tokens into its DecodePaged calls (see the Example).
// Its reads never say busy: Len, Seqs, FreeBlocks and CachedBlocks answer
// at once, from the state the last completed change left; Check waits for
// the call in flight. It belongs to the Layer that made it.
type PagedCache struct {
	typ    DType
	layer  *Layer
	bt     int // tokens a block
	blocks int
	window int
	store  kvData // the pool: [blocks][KVHeads][bt][dim] of K and V (and int8 scales)

	refs     []int32  // per block: the sequences holding it
	free     []int32  // blocks held by none and keyed by none
	key      []uint64 // per block: its key, if keyed
	keyed    []bool
	byKey    map[uint64]int32
	lruPrev  []int32 // keyed blocks held by none, least recently released first
	lruNext  []int32
	lruHead  int32
	lruTail  int32
	lruCount int

	seqs   map[SeqID]*pagedSeq
	nextID SeqID
	// The counts as the last call left them, for readers at any time.
	freeNow, cachedNow, seqsNow atomic.Int64
	calls                       uint64     // DecodePaged calls made (a call marks its sequences to find one named twice)
	mu                          sync.Mutex // held by the changing call in flight (hold: TryLock)
	// A decoding call's state while it holds the cache (decodePaged):
	// its sequences, the layer's scratch it uses, whether it is a tree step.
	ids   []SeqID
	ps    *pagedScratch
	tree  bool
	seqMu sync.RWMutex // guards seqs for Len, which runs beside a call
}

// pagedSeq is one sequence: its tokens and its block table (a released
// block, outside the window, is -1).
type pagedSeq struct {
	n      int
	blocks []int32
	call   uint64       // the DecodePaged call that last named it (PagedCache.calls+1)
	length atomic.Int64 // n as the last completed change left it (setLen), for Len
}

// setLen sets s's length to n and publishes it to Len.
func (s *pagedSeq) setLen(n int) {
	s.n = n
	s.length.Store(int64(n))
}

// NewPagedCache returns an empty paged cache for l (ErrOption for a bad
// type, block size or window; ErrShape for a pool of less than one block
// or more than this machine can allocate).
func (l *Layer) NewPagedCache(cfg PagedConfig) (*PagedCache, error) {
	if err := l.usable(); err != nil {
		return nil, err
	}
	t := cfg.Type
	if !t.kvTypeOK() {
		return nil, fmt.Errorf("%w: paged cache DType %d is not Float32, Float16, BFloat16, Int8 or Int4", ErrOption, int(t))
	}
	bt := cfg.BlockTokens
	if bt == 0 {
		bt = DefaultBlockTokens
	}
	if bt < 16 || bt%16 != 0 || bt > maxCoord {
		return nil, fmt.Errorf("%w: BlockTokens = %d, must be a positive multiple of 16", ErrOption, cfg.BlockTokens)
	}
	if cfg.Window < 0 || cfg.Window > maxCoord {
		return nil, fmt.Errorf("%w: paged cache Window = %d, must be in [0, %d]", ErrOption, cfg.Window, maxCoord)
	}
	c := &PagedCache{typ: t, layer: l, bt: bt, window: cfg.Window}
	per := c.BlockBytes()
	if cfg.Bytes < per {
		return nil, fmt.Errorf("%w: PagedConfig.Bytes = %d holds no block: a block of %d tokens takes %d bytes, a 4096-token sequence %d (set Bytes to the pool's size)",
			ErrShape, cfg.Bytes, bt, per, per*int64(c.blocksOf(4096)))
	}
	c.blocks = int(min(cfg.Bytes/per, int64(maxCoord)))
	if err := checkAlloc("the paged cache", uint64(c.blocks)*uint64(per)/4); err != nil {
		return nil, err
	}
	rows := c.blocks * bt * l.cfg.KVHeads
	dk, dv := l.cfg.HeadDim, l.cfg.storedV()
	c.store = kvData{t: t, headsMajor: true}
	switch {
	case t.is16():
		c.store.k16, c.store.v16 = make([]uint16, rows*dk), make([]uint16, rows*dv)
	case t.quantized():
		c.store.k8, c.store.v8 = make([]int8, rows*t.width(dk)), make([]int8, rows*t.width(dv))
		c.store.ks, c.store.vs = make([]float32, rows*QuantBlocks(dk)), make([]float32, rows*QuantBlocks(dv))
	default:
		c.store.k, c.store.v = make([]float32, rows*dk), make([]float32, rows*dv)
	}
	c.refs, c.key, c.keyed = make([]int32, c.blocks), make([]uint64, c.blocks), make([]bool, c.blocks)
	c.lruPrev, c.lruNext = make([]int32, c.blocks), make([]int32, c.blocks)
	c.lruHead, c.lruTail = -1, -1
	c.byKey = make(map[uint64]int32)
	c.seqs = make(map[SeqID]*pagedSeq)
	c.free = make([]int32, c.blocks)
	for i := range c.free { // popped from the end: block 0 first
		c.free[i] = int32(c.blocks - 1 - i)
	}
	c.freeNow.Store(int64(c.blocks))
	return c, nil
}

// BlockBytes returns the bytes of one block: BlockTokens tokens of K and
// V over every KV head, with int8's or int4's scales.
func (c *PagedCache) BlockBytes() int64 {
	cfg := c.layer.cfg
	dk, dv := int64(cfg.HeadDim), int64(cfg.storedV())
	var per int64
	switch {
	case c.typ.is16():
		per = 2 * (dk + dv)
	case c.typ.quantized(): // the rows' bytes and their scales
		per = int64(c.typ.width(int(dk))) + 4*int64(QuantBlocks(int(dk)))
		if dv != 0 {
			per += int64(c.typ.width(int(dv))) + 4*int64(QuantBlocks(int(dv)))
		}
	default:
		per = 4 * (dk + dv)
	}
	return per * int64(cfg.KVHeads) * int64(c.bt)
}

// BlockTokens returns the tokens of one block.
func (c *PagedCache) BlockTokens() int { return c.bt }

// Blocks returns the pool's blocks.
func (c *PagedCache) Blocks() int { return c.blocks }

// Type returns the storage type of K and V.
func (c *PagedCache) Type() DType { return c.typ }

// FreeBlocks returns the blocks no sequence holds: free ones and cached
// (keyed) ones that an allocation may evict. It may be called at any
// time: during another call it gives the count before that call.
func (c *PagedCache) FreeBlocks() int {
	if c == nil {
		return 0
	}
	return int(c.freeNow.Load())
}

// CachedBlocks returns the keyed blocks no sequence holds (kept for Reuse
// until evicted), as FreeBlocks does.
func (c *PagedCache) CachedBlocks() int {
	if c == nil {
		return 0
	}
	return int(c.cachedNow.Load())
}

// made returns ErrNil for a nil or zero PagedCache.
func (c *PagedCache) made() error {
	if c == nil || c.layer == nil {
		return fmt.Errorf("%w: PagedCache (make one with Layer.NewPagedCache)", ErrNil)
	}
	return nil
}

// hold takes the cache for one call; release must follow if it succeeds.
func (c *PagedCache) hold() error {
	if err := c.made(); err != nil {
		return err
	}
	if !c.mu.TryLock() {
		return ErrBusy
	}
	return nil
}

// release ends the call holding the cache, publishing its counts first.
func (c *PagedCache) release() {
	c.freeNow.Store(int64(len(c.free) + c.lruCount))
	c.cachedNow.Store(int64(c.lruCount))
	c.seqsNow.Store(int64(len(c.seqs)))
	c.mu.Unlock()
}

// holdSeq takes the cache for one call on sequence id and returns it;
// release must follow if it succeeds.
func (c *PagedCache) holdSeq(id SeqID) (*pagedSeq, error) {
	if err := c.hold(); err != nil {
		return nil, err
	}
	s, err := c.seq(id)
	if err != nil {
		c.release()
	}
	return s, err
}

// seq returns sequence id, or an ErrOption naming it.
func (c *PagedCache) seq(id SeqID) (*pagedSeq, error) {
	s := c.seqs[id]
	if s == nil {
		return nil, fmt.Errorf("%w: paged cache has no sequence %d", ErrOption, id)
	}
	return s, nil
}

// NewSeq adds an empty sequence and returns its ID.
func (c *PagedCache) NewSeq() (SeqID, error) {
	if err := c.hold(); err != nil {
		return 0, err
	}
	defer c.release()
	return c.add(&pagedSeq{}), nil
}

// add registers s under a new ID.
func (c *PagedCache) add(s *pagedSeq) SeqID {
	id := c.nextID
	c.nextID++
	s.length.Store(int64(s.n))
	c.seqMu.Lock()
	c.seqs[id] = s
	c.seqMu.Unlock()
	return id
}

// Len returns the tokens sequence id holds (ErrOption if there is no such
// sequence). It may be called at any time: during a call that changes the
// sequence it gives the length before that call's change.
func (c *PagedCache) Len(id SeqID) (int, error) {
	if err := c.made(); err != nil {
		return 0, err
	}
	c.seqMu.RLock()
	s := c.seqs[id]
	c.seqMu.RUnlock()
	if s == nil {
		return 0, fmt.Errorf("%w: paged cache has no sequence %d", ErrOption, id)
	}
	return int(s.length.Load()), nil
}

// Seqs returns the number of sequences, as FreeBlocks does.
func (c *PagedCache) Seqs() int {
	if c == nil {
		return 0
	}
	return int(c.seqsNow.Load())
}

// Free removes sequence id; the blocks only it held return to the pool
// (or, keyed, to the cached blocks Reuse may find).
func (c *PagedCache) Free(id SeqID) error {
	s, err := c.holdSeq(id)
	if err != nil {
		return err
	}
	defer c.release()
	for _, b := range s.blocks {
		c.unref(b)
	}
	c.seqMu.Lock()
	delete(c.seqs, id)
	c.seqMu.Unlock()
	return nil
}

// Fork adds a sequence holding the first n tokens of sequence src (0 <= n
// <= its length) by reference: no row is copied, the blocks are shared
// until either sequence writes into one (it then copies that block).
func (c *PagedCache) Fork(src SeqID, n int) (SeqID, error) {
	s, err := c.holdSeq(src)
	if err != nil {
		return 0, err
	}
	defer c.release()
	if n < 0 || n > s.n {
		return 0, fmt.Errorf("%w: Fork of %d tokens of sequence %d, it holds %d", ErrOption, n, src, s.n)
	}
	if err := c.windowHolds(s, n); err != nil {
		return 0, fmt.Errorf("Fork of sequence %d at %d: %w", src, n, err)
	}
	f := &pagedSeq{n: n, blocks: append([]int32(nil), s.blocks[:c.blocksOf(n)]...)}
	for _, b := range f.blocks {
		c.ref(b)
	}
	return c.add(f), nil
}

// Truncate rolls sequence id back to its first n tokens (0 <= n <= its
// length); the blocks past them leave the sequence. A block it shares
// stays shared: the next append copies it first.
func (c *PagedCache) Truncate(id SeqID, n int) error {
	s, err := c.holdSeq(id)
	if err != nil {
		return err
	}
	defer c.release()
	if n < 0 || n > s.n {
		return fmt.Errorf("%w: Truncate of sequence %d to %d tokens, it holds %d", ErrOption, id, n, s.n)
	}
	if err := c.windowHolds(s, n); err != nil {
		return fmt.Errorf("Truncate of sequence %d to %d: %w", id, n, err)
	}
	keep := c.blocksOf(n)
	for _, b := range s.blocks[keep:] {
		c.unref(b)
	}
	s.blocks = s.blocks[:keep]
	s.setLen(n)
	return nil
}

// row is the pool's row of key r of block blk, KV head 0 (head g is g·bt
// rows further).
func (c *PagedCache) row(blk int32, r int) int {
	return int(blk)*c.layer.cfg.KVHeads*c.bt + r
}

// Reset empties sequence id (Truncate to 0): its blocks leave it.
func (c *PagedCache) Reset(id SeqID) error { return c.Truncate(id, 0) }

// blocksOf is the blocks n tokens fill.
func (c *PagedCache) blocksOf(n int) int { return (n + c.bt - 1) / c.bt }

// windowHolds checks that a sequence cut to n tokens still has every
// block its next query sees (position n sees keys from n-Window+1 on).
func (c *PagedCache) windowHolds(s *pagedSeq, n int) error {
	if c.window == 0 || n == 0 {
		return nil
	}
	first := max(n-c.window+1, 0) / c.bt
	for i := first; i < c.blocksOf(n); i++ {
		if s.blocks[i] < 0 {
			return fmt.Errorf("%w: its tokens from %d on were released (outside the window of %d)", ErrOption, i*c.bt, c.window)
		}
	}
	return nil
}

// ref adds a holder to block b (taking it off the cached list if it was
// held by none).
func (c *PagedCache) ref(b int32) {
	if b < 0 {
		return
	}
	if c.refs[b] == 0 && c.keyed[b] {
		c.lruRemove(b)
	}
	c.refs[b]++
}

// unref drops a holder of block b: held by none, it becomes free, or
// cached if keyed.
func (c *PagedCache) unref(b int32) {
	if b < 0 {
		return
	}
	if c.refs[b]--; c.refs[b] > 0 {
		return
	}
	if c.keyed[b] {
		c.lruPush(b)
		return
	}
	c.free = append(c.free, b)
}

// available is the blocks an allocation may take: free, then cached.
func (c *PagedCache) available() int { return len(c.free) + c.lruCount }

// alloc takes a block for one holder: a free one, else the least recently
// released cached one (its key forgotten). available() must be positive.
func (c *PagedCache) alloc() int32 {
	var b int32
	if n := len(c.free); n > 0 {
		b, c.free = c.free[n-1], c.free[:n-1]
	} else {
		b = c.lruHead
		c.lruRemove(b)
		c.unkey(b)
	}
	c.refs[b] = 1
	return b
}

// unkey forgets block b's key.
func (c *PagedCache) unkey(b int32) {
	if c.keyed[b] {
		delete(c.byKey, c.key[b])
		c.keyed[b] = false
	}
}

// lruPush appends block b (held by none, keyed) to the cached list.
func (c *PagedCache) lruPush(b int32) {
	c.lruPrev[b], c.lruNext[b] = c.lruTail, -1
	if c.lruTail >= 0 {
		c.lruNext[c.lruTail] = b
	} else {
		c.lruHead = b
	}
	c.lruTail = b
	c.lruCount++
}

// lruRemove takes block b off the cached list.
func (c *PagedCache) lruRemove(b int32) {
	p, n := c.lruPrev[b], c.lruNext[b]
	if p >= 0 {
		c.lruNext[p] = n
	} else {
		c.lruHead = n
	}
	if n >= 0 {
		c.lruPrev[n] = p
	} else {
		c.lruTail = p
	}
	c.lruCount--
}

// SetKeys gives the first len(keys) blocks of sequence id (each full:
// len(keys)·BlockTokens <= its length) the keys, so that Reuse finds
// them. A key that names another block already keeps that block; a block
// keyed already keeps its key. A key should identify a block's tokens and
// every token before them (vLLM hashes the block's token ids with its
// parent block's hash).
func (c *PagedCache) SetKeys(id SeqID, keys []uint64) error {
	s, err := c.holdSeq(id)
	if err != nil {
		return err
	}
	defer c.release()
	if len(keys) > s.n/c.bt {
		return fmt.Errorf("%w: SetKeys of %d blocks of sequence %d, it fills %d", ErrOption, len(keys), id, s.n/c.bt)
	}
	for i, k := range keys {
		b := s.blocks[i]
		if b < 0 || c.keyed[b] {
			continue
		}
		if _, taken := c.byKey[k]; taken {
			continue
		}
		c.key[b], c.keyed[b], c.byKey[k] = k, true, b
	}
	return nil
}

// Reuse adds a sequence holding the longest run of cached blocks whose
// keys are keys[0], keys[1], ... (SetKeys), by reference, and returns it
// with its length (a multiple of BlockTokens). The caller then decodes
// the request's remaining tokens into it. When keys[0] is not cached (or
// keys is empty) the sequence is new and empty, as NewSeq's: the caller
// decodes the whole prompt into it, and Frees it like any other.
func (c *PagedCache) Reuse(keys []uint64) (SeqID, int, error) {
	if err := c.hold(); err != nil {
		return 0, 0, err
	}
	defer c.release()
	s := &pagedSeq{}
	for _, k := range keys {
		b, ok := c.byKey[k]
		if !ok {
			break
		}
		c.ref(b)
		s.blocks = append(s.blocks, b)
	}
	s.n = len(s.blocks) * c.bt
	return c.add(s), s.n, nil
}

// appendNeeds is the blocks appending n tokens to s takes from the pool:
// new blocks past its table, and a copy of its last block when the first
// new token lands in it while another sequence holds it or it is keyed.
func (c *PagedCache) appendNeeds(s *pagedSeq, n int) int {
	if n == 0 {
		return 0
	}
	need := c.blocksOf(s.n+n) - len(s.blocks)
	if s.n%c.bt != 0 && c.shared(s.blocks[s.n/c.bt]) {
		need++
	}
	return need
}

// shared reports whether block b may not be written in place: another
// sequence holds it, or its key promises its rows.
func (c *PagedCache) shared(b int32) bool { return c.refs[b] > 1 || c.keyed[b] }

// grow gives s room for n more tokens (appendNeeds(s, n) blocks must be
// available): its last block copied if shared (copy on write), new blocks
// past its table. It returns the shared block it copied, or -1: s still
// holds that block (its reference is dropped by commitGrow when the call
// succeeds, or the copy undone by undoGrow), so that a failed or
// cancelled call leaves the pool as it found it.
func (c *PagedCache) grow(s *pagedSeq, n int) (copied int32) {
	copied = -1
	if n == 0 {
		return copied
	}
	if s.n%c.bt != 0 {
		i := s.n / c.bt
		if old := s.blocks[i]; c.shared(old) {
			b := c.alloc()
			c.copyBlock(b, old, s.n%c.bt)
			s.blocks[i], copied = b, old
		}
	}
	for len(s.blocks) < c.blocksOf(s.n+n) {
		s.blocks = append(s.blocks, c.alloc())
	}
	return copied
}

// commitGrow ends a successful grow of s: the shared block it copied
// (not -1) loses s as a holder.
func (c *PagedCache) commitGrow(copied int32) {
	if copied >= 0 {
		c.unref(copied)
	}
}

// undoGrow takes back a grow of s whose call failed (s.n unchanged): the
// blocks past its tokens return to the pool, and the copy of a shared
// block (copied, not -1) gives way to that block again.
func (c *PagedCache) undoGrow(s *pagedSeq, copied int32) {
	if copied >= 0 {
		i := s.n / c.bt
		c.unref(s.blocks[i])
		s.blocks[i] = copied
	}
	for _, b := range s.blocks[c.blocksOf(s.n):] {
		c.unref(b)
	}
	s.blocks = s.blocks[:c.blocksOf(s.n)]
}

// copyBlock copies the first rows tokens of block from into block to,
// every KV head's K and V (and scales).
func (c *PagedCache) copyBlock(to, from int32, rows int) {
	copyKV(c.layer.cfg, c.store, c.row(to, 0), c.bt, c.store, c.row(from, 0), c.bt, rows)
}

// Keep is Cache.Keep on sequence id: after its first from tokens it keeps
// the tokens at slots (strictly increasing, each in [from, its length)) in
// their order and drops the rest, so that DecodePagedTree's accepted path
// is committed without recomputing it. A block the kept tokens move into
// that another sequence holds (or a key names) is copied first: when the
// pool has no block for that, ErrCacheFull. Bad arguments are ErrOption;
// nothing changes on an error.
func (c *PagedCache) Keep(id SeqID, from int, slots []int) error {
	s, err := c.holdSeq(id)
	if err != nil {
		return err
	}
	defer c.release()
	if from < 0 || from > s.n {
		return fmt.Errorf("%w: Keep after %d tokens of sequence %d, it holds %d", ErrOption, from, id, s.n)
	}
	for i, t := range slots {
		switch {
		case t < from || t >= s.n:
			return fmt.Errorf("%w: Keep of slot %d (slots[%d]) of sequence %d: must be in [%d, %d)", ErrOption, t, i, id, from, s.n)
		case i > 0 && t <= slots[i-1]:
			return fmt.Errorf("%w: Keep: slots[%d] = %d after slots[%d] = %d: slots must increase", ErrOption, i, t, i-1, slots[i-1])
		}
	}
	n := from + len(slots)
	if err := c.windowHolds(s, n); err != nil {
		return fmt.Errorf("Keep on sequence %d: %w", id, err)
	}
	need, last := 0, -1 // the shared blocks tokens move into, each once
	for i, t := range slots {
		if to := from + i; t != to && (s.blocks[to/c.bt] < 0 || s.blocks[t/c.bt] < 0) {
			return fmt.Errorf("%w: Keep on sequence %d moves slot %d to %d, a block released outside the window of %d", ErrOption, id, t, to, c.window)
		}
		if k := (from + i) / c.bt; t != from+i && k != last {
			if c.shared(s.blocks[k]) {
				need++
			}
			last = k
		}
	}
	if need > c.available() {
		return fmt.Errorf("%w: Keep needs %d blocks to copy, the pool has %d free", ErrCacheFull, need, c.available())
	}
	// Slot slots[i] >= from+i moves down to from+i: increasing slots never
	// overwrite one still to move.
	for i, t := range slots {
		to := from + i
		if t == to {
			continue
		}
		k := to / c.bt
		if old := s.blocks[k]; c.shared(old) { // copy on write: the rows it holds
			b := c.alloc()
			c.copyBlock(b, old, min(c.bt, s.n-k*c.bt))
			c.unref(old)
			s.blocks[k] = b
		}
		copyKV(c.layer.cfg, c.store, c.row(s.blocks[k], to%c.bt), c.bt, c.store, c.row(s.blocks[t/c.bt], t%c.bt), c.bt, 1)
	}
	keep := c.blocksOf(n)
	for _, b := range s.blocks[keep:] {
		c.unref(b)
	}
	s.blocks = s.blocks[:keep]
	s.setLen(n)
	c.releaseOutside(s)
	return nil
}

// write stores n new tokens of s from position at (k and v:
// [n][KVHeads][dim], storable checked), each row into its block.
func (c *PagedCache) write(ks *kernels.Set, s *pagedSeq, at, n int, k, v []float32) {
	storeRows(ks, c.layer.cfg, c.store, n, k, v, func(i, g int) int {
		pos := at + i
		return c.row(s.blocks[pos/c.bt], pos%c.bt) + g*c.bt
	})
}

// releaseOutside drops from s the blocks no later query of it sees: with
// a window, position s.n sees keys from s.n-Window+1 on.
func (c *PagedCache) releaseOutside(s *pagedSeq) {
	if c.window == 0 {
		return
	}
	for i := 0; i < len(s.blocks) && (i+1)*c.bt <= s.n-c.window+1; i++ {
		if s.blocks[i] >= 0 {
			c.unref(s.blocks[i])
			s.blocks[i] = -1
		}
	}
}

// Check verifies the pool's accounting: every block is free, cached or
// held, its count equal to the sequences' table entries naming it, and no
// block is in two places. It is for tests and for a server's own checks;
// it waits for a call in flight to end, and holds the cache while it runs.
func (c *PagedCache) Check() error {
	if err := c.made(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.release()
	held := make([]int32, c.blocks)
	for _, s := range c.seqs {
		if len(s.blocks) != c.blocksOf(s.n) {
			return fmt.Errorf("a sequence of %d tokens has %d blocks", s.n, len(s.blocks))
		}
		for _, b := range s.blocks {
			if b >= 0 {
				held[b]++
			}
		}
	}
	where := make([]int, c.blocks)
	for _, b := range c.free {
		where[b]++
		if c.keyed[b] {
			return fmt.Errorf("free block %d is keyed", b)
		}
	}
	n := 0
	for b := c.lruHead; b >= 0; b = c.lruNext[b] {
		where[b]++
		if n++; n > c.blocks {
			return fmt.Errorf("the cached list loops")
		}
		if !c.keyed[b] {
			return fmt.Errorf("cached block %d has no key", b)
		}
	}
	if n != c.lruCount {
		return fmt.Errorf("cached list holds %d blocks, its count says %d", n, c.lruCount)
	}
	for b := range where {
		if held[b] != c.refs[b] {
			return fmt.Errorf("block %d: %d holders counted, %d in the tables", b, c.refs[b], held[b])
		}
		switch {
		case held[b] > 0 && where[b] != 0:
			return fmt.Errorf("block %d is held and free or cached", b)
		case held[b] == 0 && where[b] != 1:
			return fmt.Errorf("block %d is held by none and in %d lists", b, where[b])
		}
		if c.keyed[b] && c.byKey[c.key[b]] != int32(b) {
			return fmt.Errorf("block %d's key names block %d", b, c.byKey[c.key[b]])
		}
	}
	if len(c.byKey) > c.blocks {
		return fmt.Errorf("%d keys for %d blocks", len(c.byKey), c.blocks)
	}
	return nil
}
