// Dword shuffles checked by simulation: the transposes and folds of the
// int8 decode kernels emit their shuffles and adds through simVec, which
// carries, for each dword lane, the set of input lanes it holds (one for
// a shuffle's result, the union for a sum), so that a generator that
// gets an index wrong panics instead of emitting wrong code.

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// laneSet is a set of input-lane labels (row·lanes + dword: below 256).
type laneSet [4]uint64

// single is the set of one label.
func single(l int) laneSet {
	var s laneSet
	s[l/64] |= 1 << (l % 64)
	return s
}

// union is the labels of s and t.
func (s laneSet) union(t laneSet) laneSet {
	for i := range s {
		s[i] |= t[i]
	}
	return s
}

// simVec is a vector register with the labels each of its dword lanes
// holds.
type simVec struct {
	v   reg.VecVirtual
	lab []laneSet
}

// simInputs labels x: vector r's lane e is r·lanes + e.
func simInputs(x []reg.VecVirtual, lanes int) []simVec {
	in := make([]simVec, len(x))
	for r := range in {
		in[r] = simVec{v: x[r], lab: make([]laneSet, lanes)}
		for e := range in[r].lab {
			in[r].lab[e] = single(lanes*r + e)
		}
	}
	return in
}

// simShuffle emits one shuffle of a (Intel's first source) and b and
// returns its result with the lanes it holds: VPUNPCK{L,H}DQ ("ldq",
// "hdq") and VPUNPCK{L,H}QDQ ("lqdq", "hqdq") in each 128-bit lane,
// VSHUFI32X4 ("shuf": result lanes 0, 1 from a, 2, 3 from b, as imm
// selects) and VPERM2I128 ("perm2": imm's nibbles pick a's 128-bit lanes
// 0, 1 or b's 2, 3).
func (g *gen) simShuffle(name string, imm uint8, a, b simVec) simVec {
	n := len(a.lab)
	d := simVec{v: g.vec(), lab: make([]laneSet, n)}
	for L := 0; L < n/4; L++ {
		la, lb, out := a.lab[4*L:4*L+4], b.lab[4*L:4*L+4], d.lab[4*L:4*L+4]
		switch name {
		case "ldq":
			copy(out, []laneSet{la[0], lb[0], la[1], lb[1]})
		case "hdq":
			copy(out, []laneSet{la[2], lb[2], la[3], lb[3]})
		case "lqdq":
			copy(out, []laneSet{la[0], la[1], lb[0], lb[1]})
		case "hqdq":
			copy(out, []laneSet{la[2], la[3], lb[2], lb[3]})
		case "shuf":
			src, sel := a.lab, int(imm>>(2*L))&3
			if L >= 2 {
				src = b.lab
			}
			copy(out, src[4*sel:4*sel+4])
		case "perm2":
			sel := int(imm>>(4*L)) & 3
			src := a.lab
			if sel >= 2 {
				src = b.lab
			}
			copy(out, src[4*(sel&1):4*(sel&1)+4])
		default:
			panic("simShuffle: no shuffle " + name)
		}
	}
	switch name {
	case "ldq":
		g.VPUNPCKLDQ(b.v, a.v, d.v)
	case "hdq":
		g.VPUNPCKHDQ(b.v, a.v, d.v)
	case "lqdq":
		g.VPUNPCKLQDQ(b.v, a.v, d.v)
	case "hqdq":
		g.VPUNPCKHQDQ(b.v, a.v, d.v)
	case "shuf":
		g.VSHUFI32X4(operand.U8(imm), b.v, a.v, d.v)
	case "perm2":
		g.VPERM2I128(operand.U8(imm), b.v, a.v, d.v)
	}
	return d
}

// simAdd emits the dword sum a + b into a new register.
func (g *gen) simAdd(a, b simVec) simVec {
	d := simVec{v: g.vec(), lab: make([]laneSet, len(a.lab))}
	for e := range d.lab {
		d.lab[e] = a.lab[e].union(b.lab[e])
	}
	g.VPADDD(b.v, a.v, d.v)
	return d
}

// transposeDwords transposes n = lanes vectors of n dwords (x[r] lane e:
// row r's dword e) into n vectors, result e holding dword e of rows
// 0..n-1 in order: unpack dwords of row pairs, then qwords of pair pairs
// (each 128-bit lane then holds 4 rows' dword), then gather the 128-bit
// lanes of one dword: two levels of VSHUFI32X4 (16 lanes: 64 shuffles)
// or one of VPERM2I128 (8 lanes: 24 shuffles). The result's order is
// simulated and checked.
func (g *gen) transposeDwords(x []reg.VecVirtual) []reg.VecVirtual {
	n := len(x)
	in := simInputs(x, n)
	op := g.simShuffle
	// Rows 2i, 2i+1: t[2i] lane L = r0[4L] r1[4L] r0[4L+1] r1[4L+1], t[2i+1] the dwords 2, 3.
	t := make([]simVec, n)
	for i := 0; i < n/2; i++ {
		t[2*i], t[2*i+1] = op("ldq", 0, in[2*i], in[2*i+1]), op("hdq", 0, in[2*i], in[2*i+1])
	}
	// Rows 4q..4q+3: u[4q+m] lane L = dword 4L+m of the four rows.
	u := make([]simVec, n)
	for q := 0; q < n/4; q++ {
		lo01, hi01, lo23, hi23 := t[4*q], t[4*q+1], t[4*q+2], t[4*q+3]
		u[4*q] = op("lqdq", 0, lo01, lo23)
		u[4*q+1] = op("hqdq", 0, lo01, lo23)
		u[4*q+2] = op("lqdq", 0, hi01, hi23)
		u[4*q+3] = op("hqdq", 0, hi01, hi23)
	}
	var res []simVec
	for m := 0; m < 4; m++ {
		if n == 8 {
			// Rows 0..3 of dwords m and 4+m in u[m], rows 4..7 in u[4+m].
			res = append(res, op("perm2", 0x20, u[m], u[4+m]), op("perm2", 0x31, u[m], u[4+m]))
			continue
		}
		v0, v1 := op("shuf", 0x88, u[m], u[4+m]), op("shuf", 0xdd, u[m], u[4+m])
		w0, w1 := op("shuf", 0x88, u[8+m], u[12+m]), op("shuf", 0xdd, u[8+m], u[12+m])
		res = append(res, op("shuf", 0x88, v0, w0), op("shuf", 0xdd, v0, w0), op("shuf", 0x88, v1, w1), op("shuf", 0xdd, v1, w1))
	}
	out := make([]reg.VecVirtual, n)
	for _, r := range res {
		e := -1
		for l := 0; l < n*n; l++ {
			if r.lab[0] == single(l) {
				e = l % n
			}
		}
		for c, l := range r.lab {
			if e < 0 || l != single(n*c+e) {
				panic(fmt.Sprintf("transposeDwords: dword %d lane %d holds %v", e, c, l))
			}
		}
		if out[e] != nil {
			panic(fmt.Sprintf("transposeDwords: dword %d twice", e))
		}
		out[e] = r.v
	}
	return out
}

// foldKeys folds T = lanes accumulators of int32 sums (acc[c]: key c's
// partial sums over a chunk of 4·T bytes, lanes 8b..8b+7 from scale block
// b of the chunk) into one vector per scale block of the chunk (AVX-512
// 2, AVX2 1), lane c holding the sum of key c's 8 lanes of that block:
// unpack and add dwords of key pairs, then qwords of pair pairs (each
// 128-bit lane then holds 4 keys' sums of 4 lanes), then add the 128-bit
// lanes of one block (VPERM2I128; AVX-512: VSHUFI32X4, and a last
// VSHUFI32X4 level that only reorders). T = 16: 30 shuffles and 14 adds;
// T = 8: 14 and 7. The result is simulated and checked.
func (g *gen) foldKeys(acc []reg.VecVirtual) []reg.VecVirtual {
	n := len(acc)
	in := simInputs(acc, n)
	pairs := func(a []simVec, lo, hi string) []simVec {
		out := make([]simVec, len(a)/2)
		for i := range out {
			out[i] = g.simAdd(g.simShuffle(lo, 0, a[2*i], a[2*i+1]), g.simShuffle(hi, 0, a[2*i], a[2*i+1]))
		}
		return out
	}
	s := pairs(pairs(in, "ldq", "hdq"), "lqdq", "hqdq") // s[i]: keys 4i..4i+3
	var res []simVec
	if n == 8 {
		res = []simVec{g.simAdd(g.simShuffle("perm2", 0x20, s[0], s[1]), g.simShuffle("perm2", 0x31, s[0], s[1]))}
	} else {
		// 128-bit lanes 0, 1 of s[i] hold block 0's halves, 2, 3 block 1's:
		// sum them, two vectors of 4 keys at a time, then gather.
		u := make([]simVec, 2)
		for i := range u {
			a, b := s[2*i], s[2*i+1]
			u[i] = g.simAdd(g.simShuffle("shuf", 0x88, a, b), g.simShuffle("shuf", 0xdd, a, b))
		}
		res = []simVec{g.simShuffle("shuf", 0x88, u[0], u[1]), g.simShuffle("shuf", 0xdd, u[0], u[1])}
	}
	out := make([]reg.VecVirtual, len(res))
	for b, r := range res {
		for c, l := range r.lab {
			var want laneSet
			for j := range 8 {
				want = want.union(single(n*c + 8*b + j))
			}
			if l != want {
				panic(fmt.Sprintf("foldKeys: block %d lane %d holds %v", b, c, l))
			}
		}
		out[b] = r.v
	}
	return out
}
