package tile

import (
	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// A decode step of one query row per KV head (MHA) over BSHD K/V reads its
// keys key by key across the heads: each key position's rows of every KV
// head lie side by side, so a split item that takes all the KV heads and
// walks keys outer and heads inner (kernels' HeadScores and HeadPV) reads
// K and V in address order, two ascending streams. The fused decode runs
// one head at a time, its rows a whole key row apart (8 KiB at 32 heads of
// 128 float16 dims), each on its own page; interleaving heads in groups of
// a page (headgroups.go) reads each page within microseconds but still out
// of order. Measured on Zen 3 (a plain Go loop over 32 heads × 4096 keys
// × 128 float16 dims, one thread, best of 9): key by key over the whole
// row 9.3–9.9 GB/s (address order 9.1–11.0), key by key over half rows
// (groups of 16 heads) 5.1–6.1, head by head in 16-key blocks 3.3–4.7.
// The head kernels prefetch the rows 32 KiB ahead of those they read
// (kernels.headAheadBytes), where the hardware prefetchers alone left
// the stream at 16–17 GB/s on Zen 4.
//
// The softmax is the flash loop's (Softmax over a tile of keys × heads),
// so the state each head leaves is that of the online softmax over the
// item's keys, in blocks of keyMajorBlock keys. On Zen 4, one thread,
// 1,32,32,1,4096,128 BSHD, six alternated rounds, blocks of 128 keys
// against 64: bfloat16 3.71–4.17 ms against 3.89–5.28 (faster in all
// six), int8 2.99–3.22 against 3.07–3.48 (five of six), float16
// 3.52–3.98 against 3.51–4.87 (four of six); 32 keys slower, 256 level
// with 128.
const keyMajorBlock = 128

// keyMajor reports whether p's split items take their KV heads key by key:
// one query row per KV head, BSHD K/V that are not paged, with head dims
// the head kernels take (kernels.HeadDims: float32, 16-bit or int8), V
// its own tensor, several KV heads, and nothing on the scores but the
// scale (no bias, mask, softcap or ALiBi) in float32 arithmetic.
func keyMajor(p *Problem) bool {
	return !p.KVHeadsMajor && p.PageKeys == 0 && p.KVHeads >= 2 && p.Heads == p.KVHeads && p.QLen == 1 &&
		!p.VInK && p.Bias == nil && p.Mask == nil && p.Slopes == nil && p.Softcap == 0 && !p.BF16 && !p.Q8 &&
		kernels.HeadDims(p.KVType, p.HeadDim, p.ValueDim)
}

// keyMajorGroup is the KV heads a key-major split item takes: all of
// them, or an even share when there are more than maxRows (the rows a
// Workspace holds).
func keyMajorGroup(p *Problem) int {
	groups := (p.KVHeads + maxRows - 1) / maxRows
	return (p.KVHeads + groups - 1) / groups
}

// runKeyMajor runs KV heads [g0, g1) of batch b over chunk's keys
// [k0, k1) key by key across the heads and saves each head's state. It
// reports false, having done nothing, where ks has no head kernels, where
// it reads float32 rows a head's stride apart as fast as in address order
// (stridedFloat32), or where the chunk holds keys its rows do not all see
// (a window's or a causal offset's edge): the caller then runs the heads
// in interleaved groups of a page. Softmax's lanes past the heads
// (rp > heads) start at zero scores, so they stay finite and never slow
// the exp with stale values.
func (sp Split) runKeyMajor(ks *kernels.Set, p *Problem, b, g0, g1, chunk, k0, k1 int, ws *Workspace, part []float32) bool {
	dk, dv := p.HeadDim, p.ValueDim
	if !headKernels(ks, p) {
		return false
	}
	lo, a, e, hi := keySpans(p, sp.headItem(p, b, g0))
	a, e = max(a, k0), min(e, k1)
	if max(lo, k0) != a || min(hi, k1) != e {
		return false
	}
	heads := g1 - g0
	rp := (heads + ks.Lanes - 1) / ks.Lanes * ks.Lanes
	ws.qr = grow(ws.qr, heads*dk)
	ws.o = grow(ws.o, heads*dv)
	ws.m, ws.l, ws.al = grow(ws.m, rp), grow(ws.l, rp), grow(ws.al, rp)
	ws.s = grow(ws.s, keyMajorBlock*rp)
	if rp > heads {
		clear(ws.s)
	}
	for g := g0; g < g1; g++ {
		packRows(p, sp.headItem(p, b, g), ws.qr[(g-g0)*dk:])
	}
	for r := range ws.m {
		ws.m[r] = negInf
	}
	clear(ws.l)
	clear(ws.o)
	for j := a; j < e; j += keyMajorBlock {
		n := min(keyMajorBlock, e-j)
		ks.HeadScores(ws.s, rp, ws.qr, p.kvRows(b, j, g0, false), n, heads, dk)
		ks.Softmax(ws.s, rp, ws.m, ws.l, ws.al, n, rp, 0)
		ks.HeadPV(ws.o, dv, ws.s, rp, p.kvRows(b, j, g0, true), ws.al, n, heads, dv)
	}
	st := partStride(p)
	for g := g0; g < g1; g++ {
		h := g - g0
		dst := part[((b*sp.Chunks+chunk)*p.Heads+g)*st:][:st]
		copy(dst, ws.o[h*dv:(h+1)*dv])
		dst[dv], dst[dv+1] = ws.m[h], ws.l[h]
	}
	return true
}

// headKernels reports whether ks runs p's key-major items on its head
// kernels: it has them for p's K/V, and p's are not float32 that it runs
// in head groups instead (stridedFloat32).
func headKernels(ks *kernels.Set, p *Problem) bool {
	return ks.HasHeads(p.KVType, p.HeadDim, p.ValueDim) && !stridedFloat32(ks, p)
}

// stridedFloat32 reports whether the MHA decode of p runs its float32 K/V
// in interleaved head groups on the fused decode kernel rather than key
// by key: on a set that reads strided K/V in place
// (kernels.Set.ReadsStridedKV; the avx512 set on AMD). Zen 4, one thread,
// 1,32,32,1,4096,128 BSHD float32, 15 rounds in one process: 5.41 ms in
// head groups against 5.62 key by key on the zmm head kernels (6.23 on
// the ymm ones; BHSD 5.29); in three later bench rounds level (5.32–5.40
// ms in groups, 5.29–5.55 key by key). Float16 was mixed (3.48–4.39
// against 4.09–4.26 ms) and int8 slower in groups (3.31–4.21 against
// 3.18–3.25): they stay key by key.
func stridedFloat32(ks *kernels.Set, p *Problem) bool {
	return p.KVType == fallback.KVFloat32 && ks.ReadsStridedKV()
}
