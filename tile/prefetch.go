package tile

import "github.com/fastattn/fastattn/kernels"

// prefetchItem asks for the lines of flash item it (number n) that the
// hardware prefetchers do not foresee, while its keys keep the core busy
// for tens of microseconds: its own output rows, written when its keys are
// done, and the query rows of the item this worker most likely runs next,
// n + ws.Stride, packed as that item begins. Each is a block of rows a
// head's stride apart; read or written cold, a 64-row item's 16–32 KiB of
// query rows and as much output cost 3–10 µs of misses each on Zen 4
// (begin and store were 7% of a 512-token prefill at head dim 64, 12% of
// its causal form). With one worker the guess is exact; with several,
// taking items from a shared counter, it holds while they keep in step.
func prefetchItem(ks *kernels.Set, p *Problem, pl *Plan, it item, n int, ws *Workspace) {
	dv := p.ValueDim
	for hh := 0; hh < it.nh; hh++ {
		off, stride := p.row(it.b, it.i0, it.h0+hh, p.Heads, p.QLen, dv)
		ks.PrefetchLines(p.Out[off:], stride, it.nq, dv)
	}
	next := n + max(ws.Stride, 1)
	if next >= pl.Items(p) {
		return
	}
	nx := pl.item(p, next)
	for hh := 0; hh < nx.nh; hh++ {
		off, stride := p.row(nx.b, nx.i0, nx.h0+hh, p.Heads, p.QLen, p.HeadDim)
		ks.PrefetchLines(p.Q[off:], stride, nx.nq, p.HeadDim)
	}
}
