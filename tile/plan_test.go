package tile

import (
	"fmt"
	"testing"
)

// The planning code, tested directly: block sizes, how a problem is cut
// into items, which keys each item's rows see (the causal and window
// edges), and the split of a decode step into chunks. The numbers these
// plans produce are tested through the mha package against the oracle.

func TestBlocksFor(t *testing.T) {
	for _, d := range [][2]int{{1, 1}, {16, 16}, {64, 64}, {128, 128}, {192, 128}, {256, 512}, {1024, 1024}, {65536, 1}} {
		bl := BlocksFor(d[0], d[1])
		if bl.Rows < 16 || bl.Rows > maxRows || maxRows%bl.Rows != 0 {
			t.Errorf("dk=%d dv=%d: %d rows, want a power-of-two divisor of %d, at least 16", d[0], d[1], bl.Rows, maxRows)
		}
		if bl.Keys < 16 || bl.Keys > maxKeys || bl.Keys%16 != 0 {
			t.Errorf("dk=%d dv=%d: %d keys, want a multiple of 16 in [16, %d]", d[0], d[1], bl.Keys, maxKeys)
		}
		if max(d[0], d[1]) <= 64 && bl.Keys > smallHeadKeys {
			t.Errorf("dk=%d dv=%d: %d keys, more than %d for small heads", d[0], d[1], bl.Keys, smallHeadKeys)
		}
		if d[0]+d[1] <= 256 && bl.Rows != maxRows {
			t.Errorf("dk=%d dv=%d: %d rows, want %d for small heads", d[0], d[1], bl.Rows, maxRows)
		}
	}
	if a, b := BlocksFor(128, 128), BlocksFor(512, 512); b.Keys > a.Keys {
		t.Errorf("wider heads got longer key blocks: %d (dims 512) > %d (dims 128)", b.Keys, a.Keys)
	}
}

// TestEvenBlocks: n keys split by evenBlocks take as few blocks as bc
// allows, every block but the last of the returned length (a multiple of
// 16 when bc is one, at most bc), and the last block is shorter than the
// others by less than 16 keys per block.
func TestEvenBlocks(t *testing.T) {
	for _, bc := range []int{16, 48, 64, 256, 352, 512} {
		for n := 1; n <= 3*bc+17; n++ {
			step := evenBlocks(n, bc)
			blocks := (n + step - 1) / step
			if step > bc || step%16 != 0 || blocks != (n+bc-1)/bc {
				t.Fatalf("n=%d bc=%d: blocks of %d (%d of them), want at most %d, a multiple of 16, %d blocks", n, bc, step, blocks, bc, (n+bc-1)/bc)
			}
			if last := n - (blocks-1)*step; last <= step-16*blocks {
				t.Fatalf("n=%d bc=%d: blocks of %d and a last one of %d", n, bc, step, last)
			}
		}
	}
}

// planShapes are problems whose plans the tests below check: MHA, GQA and
// MQA, one and many positions, batches, block sizes that divide the rows
// and that do not.
func planShapes() []Problem {
	var ps []Problem
	for _, s := range [][5]int{ // batch, heads, KV heads, QLen, KVLen
		{1, 1, 1, 1, 1}, {1, 4, 4, 37, 91}, {2, 8, 2, 130, 130}, {3, 32, 8, 1, 700},
		{1, 16, 1, 5, 300}, {2, 6, 3, 200, 64}, {1, 64, 64, 2, 2000}, {1, 12, 4, 65, 65},
	} {
		ps = append(ps, Problem{Batch: s[0], Heads: s[1], KVHeads: s[2], QLen: s[3], KVLen: s[4], HeadDim: 64, ValueDim: 64})
	}
	return ps
}

// TestPlanCovers checks that a plan's items cover every (batch, head,
// position) row exactly once, each item within one batch and one KV
// group, at most Blocks.Rows rows per item (or one position of a group
// larger than that), and the last positions first.
func TestPlanCovers(t *testing.T) {
	for _, p := range planShapes() {
		for _, rows := range []int{16, 32, 64} {
			name := fmt.Sprintf("B%d_H%d_Hkv%d_L%d_rows%d", p.Batch, p.Heads, p.KVHeads, p.QLen, rows)
			t.Run(name, func(t *testing.T) {
				pl := NewPlan(&p, Blocks{Rows: rows, Keys: 64})
				seen := make([]int, p.Batch*p.Heads*p.QLen)
				group := p.Heads / p.KVHeads
				prevPos := -1
				for n := 0; n < pl.Items(&p); n++ {
					it := pl.item(&p, n)
					if it.nh < 1 || it.nq < 1 {
						t.Fatalf("item %d is empty: %+v", n, it)
					}
					if it.h0/group != it.g || (it.h0+it.nh-1)/group != it.g {
						t.Fatalf("item %d spans KV groups: heads %d..%d, KV head %d", n, it.h0, it.h0+it.nh-1, it.g)
					}
					if it.nh*it.nq > max(rows, group) && it.nq > 1 {
						t.Fatalf("item %d has %d rows, blocks of %d", n, it.nh*it.nq, rows)
					}
					if it.nq == pl.PosPer && n%pl.posRuns > 0 && it.i0 >= prevPos {
						t.Fatalf("item %d starts at position %d after %d: the last positions must come first", n, it.i0, prevPos)
					}
					prevPos = it.i0
					for hh := 0; hh < it.nh; hh++ {
						for ii := 0; ii < it.nq; ii++ {
							seen[(it.b*p.Heads+it.h0+hh)*p.QLen+it.i0+ii]++
						}
					}
				}
				for i, c := range seen {
					if c != 1 {
						t.Fatalf("row %d (batch %d, head %d, position %d) run %d times", i, i/(p.Heads*p.QLen), i/p.QLen%p.Heads, i%p.QLen, c)
					}
				}
			})
		}
	}
}

// TestKeySpans checks an item's key spans against keyRange, row by row,
// under causal masks (both alignments), windows and key lengths: every
// key in [allLo, allHi) is seen by every row, every key a row sees is in
// [lo, hi), and posRange is keyRange's inverse.
func TestKeySpans(t *testing.T) {
	off := -3
	for _, base := range planShapes() {
		for _, o := range []struct {
			causal  bool
			offset  *int
			window  int
			kvShort int
		}{{}, {causal: true}, {causal: true, offset: &off}, {causal: true, window: 17}, {window: 9}, {causal: true, kvShort: 5}} {
			p := base
			p.Causal, p.Window = o.causal, o.window
			if o.offset != nil {
				p.OffsetSet, p.Offset = true, *o.offset
			}
			if o.kvShort > 0 {
				p.KVLens = make([]int, p.Batch)
				for b := range p.KVLens {
					p.KVLens[b] = max(0, p.KVLen-o.kvShort*(b+1))
				}
			}
			pl := NewPlan(&p, BlocksFor(p.HeadDim, p.ValueDim))
			for n := 0; n < pl.Items(&p); n++ {
				it := pl.item(&p, n)
				lo, allLo, allHi, hi := keySpans(&p, it)
				if allLo < allHi && (allLo < lo || allHi > hi) {
					t.Fatalf("%+v item %+v: the all-rows span [%d,%d) is not inside [%d,%d)", o, it, allLo, allHi, lo, hi)
				}
				for i := it.i0; i < it.i0+it.nq; i++ {
					klo, khi := p.keyRange(it.b, i)
					for j := 0; j < p.KVLen; j++ {
						sees := j >= klo && j < khi
						if j >= allLo && j < allHi && !sees {
							t.Fatalf("%+v: key %d in the all-rows span [%d,%d) but position %d sees [%d,%d)", o, j, allLo, allHi, i, klo, khi)
						}
						if sees && (j < lo || j >= hi) {
							t.Fatalf("%+v: position %d sees key %d outside the item's span [%d,%d)", o, i, j, lo, hi)
						}
						if j < p.keyLen(it.b) {
							plo, phi := p.posRange(it.b, j)
							if sees != (i >= plo && i < phi) {
								t.Fatalf("%+v: keyRange and posRange disagree on position %d, key %d", o, i, j)
							}
						}
					}
				}
			}
		}
	}
}

// TestNewSplit checks when a decode step is split and how: at most
// splitRows rows per KV head and at least 2·splitMinKeys keys; chunks of
// a power of two keys in [splitMinKeys, splitMaxKeys] that cover the
// longest key length once; items of a group of KV heads over BSHD K/V
// (headGroup), of one head over BHSD; shorter chunks only while there are
// fewer than splitItems items.
func TestNewSplit(t *testing.T) {
	for _, c := range []struct {
		batch, heads, kvHeads, qLen, kvLen int
		lens                               []int
		split                              bool
	}{
		{1, 32, 8, 1, 4096, nil, true},
		{1, 32, 32, 1, 128, nil, true},
		{1, 32, 32, 1, 127, nil, false}, // too few keys
		{1, 32, 2, 1, 4096, nil, true},  // 16 heads share one KV head: 16 rows, the limit
		{1, 32, 1, 1, 4096, nil, false}, // 32 rows
		{1, 32, 4, 2, 4096, nil, true},  // 8 heads × 2 positions is 16 too
		{1, 32, 4, 3, 4096, nil, false}, // 24
		{1, 8, 8, 17, 4096, nil, false}, // prefill
		{4, 8, 8, 1, 10000, nil, true},  // long
		{2, 8, 8, 1, 5000, []int{3, 900}, true},
		{2, 8, 8, 1, 5000, []int{3, 100}, false}, // the longest is too short
	} {
		for _, major := range []bool{false, true} {
			p := Problem{Batch: c.batch, Heads: c.heads, KVHeads: c.kvHeads, QLen: c.qLen, KVLen: c.kvLen, HeadDim: 64, ValueDim: 64, KVLens: c.lens, KVHeadsMajor: major}
			sp, ok := NewSplit(&p)
			name := fmt.Sprintf("%+v major=%v", c, major)
			if ok != c.split {
				t.Errorf("%s: split %v, want %v", name, ok, c.split)
				continue
			}
			if !ok {
				continue
			}
			n := p.maxKeyLen()
			if sp.Keys < splitMinKeys || sp.Keys > splitMaxKeys || sp.Keys&(sp.Keys-1) != 0 {
				t.Errorf("%s: chunks of %d keys", name, sp.Keys)
			}
			if sp.Chunks*sp.Keys < n || (sp.Chunks-1)*sp.Keys >= n {
				t.Errorf("%s: %d chunks of %d keys for %d keys", name, sp.Chunks, sp.Keys, n)
			}
			groups := (p.KVHeads + sp.Group - 1) / sp.Group
			if sp.Group != headGroup(&p) || sp.Group < 1 || (p.KVHeadsMajor || p.KVHeads == 1) && sp.Group != 1 {
				t.Errorf("%s: groups of %d KV heads", name, sp.Group)
			}
			if sp.Keys < splitMaxKeys && p.Batch*groups*((n+2*sp.Keys-1)/(2*sp.Keys)) >= splitItems {
				t.Errorf("%s: chunks of %d keys, but %d would give %d items already", name, sp.Keys, 2*sp.Keys, splitItems)
			}
			if got, want := sp.Items(&p), p.Batch*groups*sp.Chunks; got != want {
				t.Errorf("%s: %d items, want %d", name, got, want)
			}
			a := NewAttention(&p)
			if a.PartLen() != sp.PartLen(&p) || a.Items() != sp.Items(&p) || a.Merging().Items() != p.Batch*p.Heads {
				t.Errorf("%s: the Attention's counts (%d parts, %d items, %d merges) are not the split's", name, a.PartLen(), a.Items(), a.Merging().Items())
			}
		}
	}
}

// TestGemmItems checks that a Gemm's items tile C exactly, whatever its
// shape, and that Items is the same however often it is asked; on AMX
// tiles (Tiles, bfloat16 pairs) the row blocks start on 32-row tile
// blocks and hold at most gemmRowsTiles rows.
func TestGemmItems(t *testing.T) {
	for _, tiles := range []bool{false, true} {
		for _, mn := range [][2]int{{1, 1}, {72, 256}, {73, 257}, {500, 100}, {7, 1000}, {512, 4096}, {2049, 512}, {300, 1}, {793, 1}, {100001, 4096}, {0, 10}} {
			g := Gemm{M: mn[0], B: Packed{N: mn[1]}, Tiles: tiles, BF16: tiles}
			g.B.Ld = 64
			if tiles {
				g.B.P = []uint32{}
			}
			n := g.Items()
			if n != g.Items() {
				t.Fatalf("%v: Items changed between calls", mn)
			}
			most, width := 288+6, g.colWidth()
			if g.onTiles() {
				most = gemmRowsTiles
			}
			covered := 0
			next := 0 // the row the next row block must start at
			for i := 0; i < n; i++ {
				m0, mc := g.rowSpan(i / g.colBlocks())
				n0 := i % g.colBlocks() * width
				if m0 >= g.M || n0 >= g.B.N || mc <= 0 {
					t.Fatalf("%v tiles %v: item %d starts at (%d, %d), %d rows: outside C", mn, tiles, i, m0, n0, mc)
				}
				if i%g.colBlocks() == 0 {
					if m0 != next || mc > most || g.M > 6 && mc <= gemvRows || g.onTiles() && m0%gemmTileRows != 0 {
						t.Fatalf("%v tiles %v: row block at %d of %d rows after row %d", mn, tiles, m0, mc, next)
					}
					next = m0 + mc
				}
				covered += mc * min(width, g.B.N-n0)
			}
			if covered != g.M*g.B.N {
				t.Errorf("%v tiles %v: the items cover %d elements of %d", mn, tiles, covered, g.M*g.B.N)
			}
		}
	}
}
