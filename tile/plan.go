package tile

// Plan splits a Problem into work items. An item is one batch, one KV head,
// a run of the query heads that share it and a run of query positions; its
// rows are packed head-major (row = head·positions + position), so the K and
// V of the KV head are read once for all of them (GQA/MQA).
//
// The split depends on the shape and the block sizes only, never on the
// thread count, and every item writes its own output rows: results are bit
// for bit the same at any thread count.
type Plan struct {
	Blocks    Blocks
	HeadsPer  int // query heads per item
	PosPer    int // query positions per item
	headRuns  int // runs of HeadsPer heads per KV group
	posRuns   int // runs of PosPer positions
	perKVHead int // headRuns·posRuns
	group     int // query heads per KV head
}

// NewPlan plans p with block sizes bl.
func NewPlan(p *Problem, bl Blocks) Plan {
	group := p.Heads / p.KVHeads
	pos := min(p.QLen, max(1, bl.Rows/group))
	heads := min(group, max(1, bl.Rows/pos))
	pl := Plan{
		Blocks:   bl,
		HeadsPer: heads,
		PosPer:   pos,
		headRuns: (group + heads - 1) / heads,
		posRuns:  (p.QLen + pos - 1) / pos,
		group:    group,
	}
	pl.perKVHead = pl.headRuns * pl.posRuns
	return pl
}

// Items returns the number of work items of a problem with batch·KV heads.
func (pl *Plan) Items(p *Problem) int {
	return p.Batch * p.KVHeads * pl.perKVHead
}

// item is one work item's coordinates.
type item struct {
	b, g   int // batch, KV head
	h0, nh int // first query head, number of query heads
	i0, nq int // first query position, number of positions
}

// item returns the coordinates of item n. The last runs of positions come
// first: with a causal mask they have the most keys, and taking the longest
// items first balances the workers.
func (pl *Plan) item(p *Problem, n int) item {
	posRun := pl.posRuns - 1 - n%pl.posRuns
	n /= pl.posRuns
	headRun := n % pl.headRuns
	n /= pl.headRuns
	g := n % p.KVHeads
	b := n / p.KVHeads
	it := item{b: b, g: g}
	it.h0 = g*pl.group + headRun*pl.HeadsPer
	it.nh = min(pl.HeadsPer, (g+1)*pl.group-it.h0)
	it.i0 = posRun * pl.PosPer
	it.nq = min(pl.PosPer, p.QLen-it.i0)
	return it
}
