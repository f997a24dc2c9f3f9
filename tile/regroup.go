package tile

import (
	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
)

// A flash item walks one KV head's keys from the first to the last. In
// BSHD a head's key rows lie Hkv·d elements apart, so the walk reads a
// short run (a row) from every page and no core's prefetchers follow it:
// measured on an Intel Xeon (family 6 model 207), one thread, B=1 H=16
// L=1024 D=128, AVX-512 ran 35–37% of the FMA peak in BSHD and 58–61% in
// BHSD, and 58–62% with Q in BSHD and only K and V in BHSD — the loss is
// the walk over K and V alone. Copying each block contiguous as it is
// used (K and V both) won back 8 of the 24 points: the strided reads
// themselves are the cost. So a prefill whose K/V rows alias first copies
// K and V heads-major, reading the source in address order (every head
// of a key, then the next key), in parallel items; the flash items then
// walk contiguous heads. The copy is one pass over K and V, against
// QLen/rows-per-item passes of the walk.

// regroupAnyStride: the copy pays at strides that do not alias too. A
// 64-byte column of a KV block whose rows lie a head's stride apart falls
// in 64/gcd(stride/64, 64) of L1's 64 sets: 2 at 2 KiB, 4 at 1 and 3 KiB,
// 8 at 1.5 KiB, 16 at 1.25 KiB, where a 256-key block needs far more
// lines than those sets' 8 ways hold, and each of QK's and PV's panel
// passes reads it from L2 again. On Zen 3, one thread, three alternated
// rounds, % of the FMA peak in place → regrouped: 1,8,8,2048,2048,64
// (2 KiB) full 52–58 → 63–64, causal 49–52 → 57–63; 1,8,8,512,512,64
// full 54–56 → 57–60; 1,4,4,2048,2048,64 (1 KiB) full 57–67 → 63–65,
// causal 50–55 → 56–59; 1,12,12,1024,1024,64 (3 KiB) full 55–56 → 60–63;
// 1,6,6,2048,2048,64 (1.5 KiB) full 59–60 → 59–68, causal 54–57 → 57–69;
// 1,5,5,2048,2048,64 (1.25 KiB) full 57–61 → 60–65, causal 47–57 → 58–60;
// 1,10,10,1024,1024,128 (5 KiB) level; float16 K/V at 2 KiB full 48–56
// → 62, int8 level.

// regroupMinRows is the fewest query rows for which the copy pays: the
// walk's passes over K and V number about QLen/64 (an item's rows), the
// copy is one read and one write of them.
const regroupMinRows = 256

// regroupKeys is the key positions one regroup item copies.
const regroupKeys = 64

// Regroups reports whether p's K and V are worth copying heads-major
// before set ks's flash items run (Regroup): BSHD K/V of several KV heads
// (whatever the stride: see regroupAnyStride), enough query rows, not a
// split decode, and a set that reads them slower in place
// (kernels.Set.ReadsStridedKV); or, in the bfloat16 mode, K/V not stored
// as bfloat16 that more than one item per KV head would each round
// (rounds), or V that they would each pair (pairsInPlace).
func Regroups(ks *kernels.Set, p *Problem) bool {
	if _, ok := NewSplit(p); ok {
		return false
	}
	if rounds(p) || pairsInPlace(p) {
		return true
	}
	return !p.KVHeadsMajor && p.KVHeads > 1 && p.QLen >= regroupMinRows && !ks.ReadsStridedKV()
}

// rounds reports whether a Regroup of p also rounds K and V to bfloat16
// (the bfloat16 mode, K/V stored otherwise or V of its own to be paired,
// more query rows per KV head than one item holds): each item would
// otherwise round (or pair) every block it reads, and the copy does each
// value once. The flash loop then reads bfloat16 K/V, whose widening is
// exact, and V's pairs: the same values, the same bits. A paged cache's
// bfloat16 rows, and bfloat16 K holding V, are not copied (below;
// pairsInPlace pairs their V).
func rounds(p *Problem) bool {
	if p.PageKeys > 0 && p.KVType == fallback.KVBFloat16 {
		// A paged cache's bfloat16 rows: K is read in place as pairs and V
		// paired once (pairsInPlace), or a block at a time by each item
		// (the same pairs, so the same bits). Without the copy of every
		// key of the call, a
		// cascade's step in the bfloat16 mode (B 32, P 4,096, Zen 4, one
		// thread, seven alternated pairs of runs) ran 1.04–1.22× as fast;
		// for float32 rows, which each item would round again, the copy
		// stays (6–7% faster with it).
		return false
	}
	return p.BF16 && (p.KVType != fallback.KVBFloat16 || (p.PairV && !p.VInK)) && manyRows(p)
}

// manyRows reports whether p has more query rows per KV head than one
// item holds: each KV head's keys are then read by several items.
func manyRows(p *Problem) bool { return p.QLen*(p.Heads/p.KVHeads) > maxRows }

// pairsInPlace reports whether a Regroup of p only pairs V, leaving K
// where it is: bfloat16 K, which the loop reads in place as pairs, with
// V inside it (MLA's latent cache) or paged (which rounds never copies),
// and more query rows per KV head than one item holds. Without it each
// item paired every V block it read: a widening and PairBF16 over
// keys·dv per item, two items at MLA's 128 heads and at a cascade's 32
// sequences of 4 query heads per KV head.
func pairsInPlace(p *Problem) bool {
	return p.PairV && p.KVType == fallback.KVBFloat16 && (p.VInK || p.PageKeys > 0) && manyRows(p)
}

// roundsInF32 reports whether a Regroup of p rounds K and V into float32
// rows (the float32 kernels' copy: read in place, no widening per item)
// rather than bfloat16 ones.
func roundsInF32(p *Problem) bool { return rounds(p) && p.RoundInF32 }

// pairsV reports whether a Regroup of p pairs V (Problem.PairV): with a
// copy that rounds, or alone (pairsInPlace).
func pairsV(p *Problem) bool { return p.PairV && (rounds(p) || pairsInPlace(p)) }

// valueHalf is the key pairs of a VPairs copy of p's V.
func valueHalf(p *Problem) int { return (p.KVLen + 1) / 2 }

// valueColumnStride is the uint32s from one column of a VTPairs copy to
// the next: its key pairs rounded up to a cache line, one line more where
// that is a multiple of aliasBytes (an A tile's 16 rows would all fall in
// one set of L1 and L2).
func valueColumnStride(p *Problem) int {
	ld := (valueHalf(p) + 15) &^ 15
	if ld*4%aliasBytes == 0 {
		ld += 16
	}
	return ld
}

// valuePairWords is the uint32s of p's V paired for one batch's KV head:
// VTPairs' columns or VPairs' rows.
func valuePairWords(p *Problem) int {
	if p.PairVT {
		return p.ValueDim * valueColumnStride(p)
	}
	return valueHalf(p) * p.ValueDim
}

// copyType is the element type of a Regroup copy of p: float32 where it
// rounds into float32 rows, bfloat16 where it rounds, else p's.
func copyType(p *Problem) fallback.KVType {
	switch {
	case roundsInF32(p):
		return fallback.KVFloat32
	case rounds(p):
		return fallback.KVBFloat16
	}
	return p.KVType
}

// copyWidths is the length of one K row and one V row (0 with V inside K)
// in a Regroup copy of p: elements of its copyType, int4's bytes.
func copyWidths(p *Problem) (wk, wv int) {
	t := copyType(p)
	wk = fallback.StoredWidth(t, p.HeadDim)
	if !p.VInK {
		wv = fallback.StoredWidth(t, p.ValueDim)
	}
	return wk, wv
}

// CopyBytes is the memory a Regroup of p copies K and V into.
func CopyBytes(p *Problem) float64 {
	pairs := 0.0
	if pairsV(p) {
		pairs = float64(p.Batch) * float64(p.KVHeads) * float64(valuePairWords(p)) * 4
	}
	if pairsInPlace(p) {
		return pairs
	}
	rows := float64(p.Batch) * float64(p.KVLen) * float64(p.KVHeads)
	size := float64(kvSize(copyType(p)))
	wk, wv := copyWidths(p)
	return rows*float64(wk+wv)*size + pairs
}

// kvSize is the bytes of one K/V element of type t (int4: of one byte of
// its storage, two elements).
func kvSize(t fallback.KVType) int {
	switch t {
	case fallback.KVFloat32:
		return 4
	case fallback.KVInt8, fallback.KVInt4:
		return 1
	}
	return 2
}

// KVCopy is the heads-major storage a Regroup copies a problem's K and V
// into; its slices grow as needed and are reused.
type KVCopy struct {
	K, V     []float32
	K16, V16 []uint16
	K8, V8   []int8
	KS, VS   []float32
	VP       []uint32 // V paired over keys (Problem.VPairs or VTPairs)
}

// Regroup is the Work that copies P's BSHD K and V into Into heads-major
// ([B][Hkv][KVLen][d]); Use then points P at the copy. Make it with
// NewRegroup.
type Regroup struct {
	P    *Problem
	Into *KVCopy
}

// NewRegroup sizes into for p's K and V and returns the copy's Work.
func NewRegroup(p *Problem, into *KVCopy) Regroup {
	rows := p.Batch * p.KVLen * p.KVHeads
	wk, wv := copyWidths(p)
	nk, nv := rows*wk, rows*wv
	switch {
	case pairsInPlace(p):
		into.VP = grow(into.VP, p.Batch*p.KVHeads*valuePairWords(p))
	case roundsInF32(p):
		into.K, into.V = grow(into.K, nk), grow(into.V, nv)
	case rounds(p):
		into.K16, into.V16 = grow(into.K16, nk), grow(into.V16, nv)
		if pairsV(p) {
			into.VP = grow(into.VP, p.Batch*p.KVHeads*valuePairWords(p))
		}
	case p.KVType == fallback.KVFloat32:
		into.K, into.V = grow(into.K, nk), grow(into.V, nv)
	case p.KVType.Quantized():
		into.K8, into.V8 = grow(into.K8, nk), grow(into.V8, nv)
		sv := rows * fallback.Int8Blocks(p.ValueDim)
		if p.VInK {
			sv = 0
		}
		into.KS, into.VS = grow(into.KS, rows*fallback.Int8Blocks(p.HeadDim)), grow(into.VS, sv)
	default:
		into.K16, into.V16 = grow(into.K16, nk), grow(into.V16, nv)
	}
	return Regroup{P: p, Into: into}
}

// Items is one per batch and run of regroupKeys key positions.
func (r Regroup) Items() int {
	return r.P.Batch * ((r.P.KVLen + regroupKeys - 1) / regroupKeys)
}

// Run copies item n's key positions, each position's heads in turn (the
// source in address order when it is BSHD), rounding them to bfloat16
// if the copy rounds.
func (r Regroup) Run(ks *kernels.Set, n int, ws *Workspace) {
	p, c := r.P, r.Into
	chunks := (p.KVLen + regroupKeys - 1) / regroupKeys
	b, j0 := n/chunks, n%chunks*regroupKeys
	j1 := min(j0+regroupKeys, p.KVLen)
	if pairsInPlace(p) {
		r.pairValues(ks, ws, b, j0, j1)
		return
	}
	if roundsInF32(p) {
		r.roundF32(ks, ws, b, j0, j1)
		return
	}
	if rounds(p) {
		r.round(ks, ws, b, j0, j1)
		return
	}
	kb, vb := fallback.Int8Blocks(p.HeadDim), fallback.Int8Blocks(p.ValueDim)
	for j := j0; j < j1; j++ {
		for g := 0; g < p.KVHeads; g++ {
			from := (b*p.KVLen+j)*p.KVHeads + g // the row, BSHD
			to := (b*p.KVHeads+g)*p.KVLen + j   // and BHSD
			switch p.KVType {
			case fallback.KVFloat32:
				copyRow(c.K, p.K, to, from, p.HeadDim)
				if !p.VInK {
					copyRow(c.V, p.V, to, from, p.ValueDim)
				}
			case fallback.KVInt8, fallback.KVInt4:
				copyRow(c.K8, p.K8, to, from, fallback.StoredWidth(p.KVType, p.HeadDim))
				copyRow(c.KS, p.KS, to, from, kb)
				if !p.VInK {
					copyRow(c.V8, p.V8, to, from, fallback.StoredWidth(p.KVType, p.ValueDim))
					copyRow(c.VS, p.VS, to, from, vb)
				}
			default:
				copyRow(c.K16, p.K16, to, from, p.HeadDim)
				if !p.VInK {
					copyRow(c.V16, p.V16, to, from, p.ValueDim)
				}
			}
		}
	}
}

// copyRow copies row from of src into row to of dst, rows of d elements.
func copyRow[T any](dst, src []T, to, from, d int) {
	copy(dst[to*d:(to+1)*d], src[from*d:(from+1)*d])
}

// round is Run for a copy that rounds: key positions [j0, j1) of batch
// b, each head's K and V rows rounded into the copy — float32 rows a
// head's run at once, 16-bit and int8 rows one by one, widened or
// dequantized into ws's scratch first.
func (r Regroup) round(ks *kernels.Set, ws *Workspace, b, j0, j1 int) {
	p, c := r.P, r.Into
	ws.kb = grow(ws.kb, max(p.HeadDim, p.ValueDim))
	r.eachRun(b, j0, func(g int, value bool, dim, first int) {
		dst := c.K16
		if value {
			dst = c.V16
		}
		if p.KVType == fallback.KVFloat32 { // the head's run of rows in one call (a block's, if paged)
			for j := j0; j < j1; {
				n := p.pageRun(j, j1-j)
				src := p.kvRows(b, j, g, value)
				ks.NarrowRows(dst[(first+j-j0)*dim:], dim, src.F32, src.Ld, n, dim, fallback.KVBFloat16)
				j += n
			}
			return
		}
		row := ws.kb[:dim]
		for j := j0; j < j1; j++ {
			src := p.kvRows(b, j, g, value)
			if src.Type.Quantized() {
				ks.DequantRows(row, dim, src, 1, dim)
			} else {
				ks.Widen(row, src.U16[:dim], src.Type)
			}
			to := first + j - j0
			ks.Narrow(dst[to*dim:(to+1)*dim], row, fallback.KVBFloat16)
		}
	})
	if pairsV(p) {
		r.pairValues(ks, ws, b, j0, j1)
	}
}

// roundF32 is Run for a copy that rounds into float32 rows: key
// positions [j0, j1) of batch b, each row copied (widened, dequantized)
// into its place and rounded there.
func (r Regroup) roundF32(ks *kernels.Set, ws *Workspace, b, j0, j1 int) {
	p, c := r.P, r.Into
	r.eachRun(b, j0, func(g int, value bool, dim, first int) {
		dst := c.K
		if value {
			dst = c.V
		}
		run := dst[first*dim : (first+j1-j0)*dim]
		for j := j0; j < j1; { // the head's rows a run at a time (a block's, if paged)
			n := p.pageRun(j, j1-j)
			src := p.kvRows(b, j, g, value)
			out := run[(j-j0)*dim : (j-j0+n)*dim]
			switch {
			case src.Type == fallback.KVFloat32:
				rows, w := n, dim
				if src.Ld == dim { // a contiguous run (BHSD): one row of it
					rows, w = 1, n*dim
				}
				for c := range rows {
					roundInto(ks, ws, out[c*w:(c+1)*w], src.F32[c*src.Ld:c*src.Ld+w])
				}
			case src.Type.Quantized():
				ks.DequantRows(out, dim, src, n, dim)
				roundBF16(ks, ws, out)
			default:
				ks.WidenRows(out, dim, src.U16, src.Ld, n, dim, src.Type)
				if src.Type != fallback.KVBFloat16 { // bfloat16 rows widen exactly
					roundBF16(ks, ws, out)
				}
			}
			j += n
		}
	})
}

// eachRun calls f for each KV head g of batch b and each of its K and V
// (V of its own only): whether it is V, its row length and the copy's
// row of key j0 of that head (heads-major).
func (r Regroup) eachRun(b, j0 int, f func(g int, value bool, dim, first int)) {
	p := r.P
	for g := 0; g < p.KVHeads; g++ {
		first := (b*p.KVHeads+g)*p.KVLen + j0
		f(g, false, p.HeadDim, first)
		if !p.VInK {
			f(g, true, p.ValueDim, first)
		}
	}
}

// pairValues pairs the rounded V rows of key positions [j0, j1) of batch
// b (j0 even; j1 even or the last key) into the copy's VP: keys j and j+1
// of each column in one uint32, 0 for a key past the last; as VPairs'
// rows, or with PairVT as VTPairs' columns. Each head's rows are widened
// back to float32 (exactly) and paired by PairBF16, which rounds them to
// the same bits (they hold bfloat16 values, NaNs quiet), then for
// VTPairs transposed by Transpose32: kernels all, where a Go loop over
// the columns took 2.4 ns a pair on Zen 3.
func (r Regroup) pairValues(ks *kernels.Set, ws *Workspace, b, j0, j1 int) {
	p, vp, dv := r.P, r.Into.VP, r.P.ValueDim
	n, half := j1-j0, (j1-j0+1)/2
	ws.vb = grow(ws.vb, n*dv)
	ws.vp = grow(ws.vp, half*dv)
	for g := 0; g < p.KVHeads; g++ {
		bg := b*p.KVHeads + g
		r.widenValues(ks, ws.vb, b, g, j0, j1)
		if !p.PairVT {
			ks.PairBF16(vp[(bg*valueHalf(p)+j0/2)*dv:], dv, ws.vb, dv, n, dv)
			continue
		}
		ks.PairBF16(ws.vp, dv, ws.vb, dv, n, dv)
		ldt := valueColumnStride(p)
		ks.Transpose32(vp[bg*dv*ldt+j0/2:], ldt, ws.vp, dv, half, dv)
	}
}

// widenValues widens the bfloat16 V rows of keys [j0, j1) of batch b,
// KV head g into dst ([j1-j0][dv]) for pairValues: the copy's V rows,
// the copy's K rows where V lies inside K, or (pairsInPlace) p's own
// rows, a page's run at a time.
func (r Regroup) widenValues(ks *kernels.Set, dst []float32, b, g, j0, j1 int) {
	p, c, dv := r.P, r.Into, r.P.ValueDim
	first := (b*p.KVHeads+g)*p.KVLen + j0
	switch {
	case pairsInPlace(p):
		for j := j0; j < j1; {
			n := p.pageRun(j, j1-j)
			rows := p.kvRows(b, j, g, true)
			ks.WidenRows(dst[(j-j0)*dv:], dv, rows.U16, rows.Ld, n, dv, fallback.KVBFloat16)
			j += n
		}
	case p.VInK:
		ks.WidenRows(dst, dv, c.K16[first*p.HeadDim:], p.HeadDim, j1-j0, dv, fallback.KVBFloat16)
	default:
		ks.WidenRows(dst, dv, c.V16[first*dv:], dv, j1-j0, dv, fallback.KVBFloat16)
	}
}

// Use points the problem at the copy: K and V heads-major (and bfloat16,
// if the copy rounds).
func (r Regroup) Use() {
	p, c := r.P, r.Into
	if pairsInPlace(p) {
		r.useValuePairs()
		return
	}
	if roundsInF32(p) {
		p.KVHeadsMajor, p.KVType, p.K, p.V, p.KVRounded = true, fallback.KVFloat32, c.K, c.V, true
		p.K16, p.V16, p.K8, p.V8, p.KS, p.VS = nil, nil, nil, nil, nil, nil
		p.PageKeys, p.Pages = 0, nil // the copy is one run a head
		return
	}
	if rounds(p) {
		r.useValuePairs()
		p.KVHeadsMajor, p.KVType, p.K16, p.V16 = true, fallback.KVBFloat16, c.K16, c.V16
		p.PageKeys, p.Pages = 0, nil // the copy is one run a head
		return
	}
	p.KVHeadsMajor = true
	switch p.KVType {
	case fallback.KVFloat32:
		p.K, p.V = c.K, c.V
	case fallback.KVInt8, fallback.KVInt4:
		p.K8, p.V8, p.KS, p.VS = c.K8, c.V8, c.KS, c.VS
	default:
		p.K16, p.V16 = c.K16, c.V16
	}
}

// useValuePairs points the problem at the copy's paired V, if it has one.
func (r Regroup) useValuePairs() {
	p := r.P
	switch {
	case pairsV(p) && p.PairVT:
		p.VTPairs = r.Into.VP
	case pairsV(p):
		p.VPairs = r.Into.VP
	}
}
