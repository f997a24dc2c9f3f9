// DecodeQ8AVX512: the fused decode step's scores over int8 K on integer
// dot products (AVX512_VNNI's VPDPBUSD), the rest as DecodeI8.

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// The scores of DecodeQ8, for a block of T = 16 keys:
//
//	transpose  once per block, the 16 K rows are loaded 64 bytes (16
//	           dwords) at a time, each byte's sign bit flipped (k+128,
//	           0..255: VPDPBUSD's unsigned operand), and transposed 16×16
//	           by dwords into the scratch: dword row i holds bytes
//	           4i..4i+3 of key c in lane c (Kt, 64 bytes a row);
//	scores     per row group (4, 2 or 1 rows) and scale block b (8 dword
//	           rows): the int32 sums start at the row's correction
//	           -128·Σ q8 of the block (undoing the +128), and each Kt row
//	           feeds one VPDPBUSD per row with the row's dword of q8
//	           broadcast from memory; then the sums (exact: |D| ≤
//	           32·127·127) are converted to float32, multiplied by the
//	           block's K scales (a vector over the keys, as fillScales
//	           left them) and added into the row's scores by an FMA with
//	           the row's q scale broadcast.
//
// So a block's scores come out as one vector per row, key c in lane c:
// no fold and no transpose of partial sums. Per 64 bytes of a K row the
// block pays a load, an XOR, 4 shuffles and a store (the transpose) once,
// and per row one VPDPBUSD, where DecodeI8 widens 4 vectors (load,
// convert, scale) and takes 4 FMAs per row.

// transposeQ8 copies the block's 16 K rows (lc.kp, ldk apart, krow bytes
// each: dk, a multiple of 4) into the scratch at lc.ktOff: dword row i
// (64 bytes at 64·i) holds key c's bytes 4i..4i+3, each plus 128, in lane
// c; 16 rows per 64 bytes of dk, the last chunk masked to the row's
// dwords (its lanes past dk hold 128s, which meet zero query bytes).
// Each line loaded has its twin decodeAhead blocks on prefetched into L2
// (strided K, as the other kernels prefetch it, decode.go; adjacent K has
// no distance, and the prefetch finds the line just loaded). Into L1 the
// MHA step over BSHD rows ran 15% slower than DecodeI8, burst before the
// loads or spread beside them alike.
func (g *gen) transposeQ8(lc decodeLocals, sp reg.GPVirtual) {
	const T = 16
	kt, k0, ld := g.GP64(), g.GP64(), g.GP64()
	g.MOVQ(lc.ktOff, kt)
	g.ADDQ(sp, kt)
	g.MOVQ(lc.kp, k0)
	g.MOVQ(lc.ldk, ld)
	keys := g.keyRows(k0, ld, T)
	ahead := g.aheadRows(keys, lc.kAhead) // the rows decodeAhead blocks on
	n := g.GP64()
	g.MOVQ(lc.krow, n)
	g.SHRQ(operand.U8(6), n) // whole chunks of 64 bytes
	flip := g.vec()
	g.VMOVDQU32(g.cst("byteSigns"), flip)
	chunk := func(mask reg.OpmaskVirtual) {
		x := make([]reg.VecVirtual, T)
		for c := range x {
			x[c] = g.vec()
			if mask == nil {
				g.VPXORD(keys.row(c), flip, x[c])
				continue
			}
			g.VMOVDQU32_Z(keys.row(c), mask, x[c])
			g.VPXORD(flip, x[c], x[c])
		}
		for c := range x {
			g.PREFETCHT1(ahead.row(c))
		}
		for i, y := range g.transpose16(x) {
			g.VMOVDQU32(y, operand.Mem{Base: kt, Disp: 64 * i})
		}
		g.ADDQ(operand.U32(64*T), kt)
		for _, b := range append(keys.bases, ahead.bases...) {
			g.ADDQ(operand.Imm(64), b)
		}
	}
	g.Label("q8_chunk")
	g.TESTQ(n, n)
	g.JZ(operand.LabelRef("q8_tail"))
	chunk(nil)
	g.DECQ(n)
	g.JMP(operand.LabelRef("q8_chunk"))
	g.Label("q8_tail")
	t := g.GP64()
	g.MOVQ(lc.krow, t)
	g.ANDQ(operand.Imm(63), t)
	g.JZ(operand.LabelRef("q8_done"))
	g.SHRQ(operand.U8(2), t) // the last chunk's dwords
	chunk(g.tailMask(t).kmask)
	g.Label("q8_done")
}

// simVec is a vector register with the labels of its 16 dword lanes
// (row·16 + dword), so that transpose16 checks its own shuffles.
type simVec struct {
	v   reg.VecVirtual
	lab []int
}

// transpose16 transposes 16 vectors of 16 dwords (x[r] lane e: row r's
// dword e) into 16 vectors, result e holding dword e of rows 0..15 in
// order: unpack dwords of row pairs, then qwords of pair pairs (each
// 128-bit lane then holds 4 rows' dword), then two levels of VSHUFI32X4
// that gather the 4 lanes of one dword. 64 shuffles; the result's order
// is simulated and checked.
func (g *gen) transpose16(x []reg.VecVirtual) []reg.VecVirtual {
	in := make([]simVec, 16)
	for r := range in {
		in[r] = simVec{v: x[r], lab: make([]int, 16)}
		for e := range in[r].lab {
			in[r].lab[e] = 16*r + e
		}
	}
	// op emits one shuffle of a (Intel's first source) and b and returns
	// its result with the lanes it holds.
	op := func(name string, imm uint8, a, b simVec) simVec {
		d := simVec{v: g.vec(), lab: make([]int, 16)}
		for L := 0; L < 4; L++ {
			la, lb, out := a.lab[4*L:4*L+4], b.lab[4*L:4*L+4], d.lab[4*L:4*L+4]
			switch name {
			case "ldq":
				copy(out, []int{la[0], lb[0], la[1], lb[1]})
			case "hdq":
				copy(out, []int{la[2], lb[2], la[3], lb[3]})
			case "lqdq":
				copy(out, []int{la[0], la[1], lb[0], lb[1]})
			case "hqdq":
				copy(out, []int{la[2], la[3], lb[2], lb[3]})
			case "shuf":
				src, sel := a.lab, int(imm>>(2*L))&3
				if L >= 2 {
					src = b.lab
				}
				copy(out, src[4*sel:4*sel+4])
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
		}
		return d
	}
	// Rows 2i, 2i+1: t[2i] lane L = r0[4L] r1[4L] r0[4L+1] r1[4L+1], t[2i+1] the dwords 2, 3.
	t := make([]simVec, 16)
	for i := 0; i < 8; i++ {
		t[2*i], t[2*i+1] = op("ldq", 0, in[2*i], in[2*i+1]), op("hdq", 0, in[2*i], in[2*i+1])
	}
	// Rows 4q..4q+3: u[4q+m] lane L = dword 4L+m of the four rows.
	u := make([]simVec, 16)
	for q := 0; q < 4; q++ {
		lo01, hi01, lo23, hi23 := t[4*q], t[4*q+1], t[4*q+2], t[4*q+3]
		u[4*q] = op("lqdq", 0, lo01, lo23)
		u[4*q+1] = op("hqdq", 0, lo01, lo23)
		u[4*q+2] = op("lqdq", 0, hi01, hi23)
		u[4*q+3] = op("hqdq", 0, hi01, hi23)
	}
	out := make([]reg.VecVirtual, 16)
	for m := 0; m < 4; m++ {
		v0, v1 := op("shuf", 0x88, u[m], u[4+m]), op("shuf", 0xdd, u[m], u[4+m])
		w0, w1 := op("shuf", 0x88, u[8+m], u[12+m]), op("shuf", 0xdd, u[8+m], u[12+m])
		for _, r := range []simVec{op("shuf", 0x88, v0, w0), op("shuf", 0xdd, v0, w0), op("shuf", 0x88, v1, w1), op("shuf", 0xdd, v1, w1)} {
			e := r.lab[0] % 16
			for c, l := range r.lab {
				if l != 16*c+e {
					panic(fmt.Sprintf("transpose16: dword %d lane %d holds %d", e, c, l))
				}
			}
			if out[e] != nil {
				panic(fmt.Sprintf("transpose16: dword %d twice", e))
			}
			out[e] = r.v
		}
	}
	return out
}

// decodeScoresQ8 emits the scores and softmax of R rows (lc.row on) over
// the block's transposed K (transposeQ8): per scale block the int32
// sums start at the rows' corrections and take 8 Kt rows × R VPDPBUSD
// (one row: two sums per row, alternate Kt rows, so the chain is half as
// long), then are scaled into the rows' float32 scores.
func (g *gen) decodeScoresQ8(lc decodeLocals, sp reg.GPVirtual, R int) {
	lb := groupLabel("scoresq8", R, false)
	sums := 1
	if R == 1 {
		sums = 2
	}
	row := g.GP64()
	g.MOVQ(lc.row, row)
	// Row r of a [rows][ld] array from base: base + r·ld (r = 3 through
	// ld3 = 3·ld: an index scale of 3 does not exist).
	at := func(base, ld, ld3 reg.GPVirtual, r, disp int) operand.Mem {
		switch r {
		case 0:
			return operand.Mem{Base: base, Disp: disp}
		case 3:
			return operand.Mem{Base: base, Index: ld3, Scale: 1, Disp: disp}
		}
		return operand.Mem{Base: base, Index: ld, Scale: uint8(r), Disp: disp}
	}
	triple := func(ld reg.GPVirtual) reg.GPVirtual {
		if R < 4 {
			return nil
		}
		t := g.GP64()
		g.LEAQ(operand.Mem{Base: ld, Index: ld, Scale: 2}, t)
		return t
	}
	// q8 rows from row: q8 + row·ldq8.
	qb, ldq := g.param("q8"), g.param("ldq8")
	t := g.GP64()
	g.MOVQ(row, t)
	g.IMULQ(ldq, t)
	g.ADDQ(t, qb)
	ldq3 := triple(ldq)
	// Scales and corrections: nb = nbk per row, from row·nb.
	nb4 := g.GP64()
	g.MOVQ(lc.nbk, nb4)
	g.SHLQ(operand.U8(2), nb4)
	sb, cb := g.param("qs"), g.param("qc")
	g.IMULQ(nb4, row)
	g.ADDQ(row, sb)
	g.ADDQ(row, cb)
	nb12 := triple(nb4)
	kt, ksc, cnt := g.GP64(), g.GP64(), g.GP64()
	g.MOVQ(lc.ktOff, kt)
	g.ADDQ(sp, kt)
	g.LEAQ(operand.Mem{Base: sp, Disp: 4 * g.decodeLayout().total}, ksc)
	g.MOVQ(lc.nbk, cnt)
	score := make([]reg.VecVirtual, R)
	for r := range score {
		score[r] = g.vec()
		g.zero(score[r])
	}
	g.Label(lb)
	acc := make([][]reg.VecVirtual, R)
	for r := range acc {
		acc[r] = make([]reg.VecVirtual, sums)
		for a := range acc[r] {
			acc[r][a] = g.vec()
			if a == 0 {
				g.VPBROADCASTD(at(cb, nb4, nb12, r, 0), acc[r][a])
			} else {
				g.zero(acc[r][a])
			}
		}
	}
	y := g.vec()
	for i := 0; i < 8; i++ {
		g.VMOVDQU32(operand.Mem{Base: kt, Disp: 64 * i}, y)
		for r := range acc {
			// acc += Σ_4 (k+128)[c]·q8[r] over dword i: y unsigned, q signed.
			g.VPDPBUSD_BCST(at(qb, ldq, ldq3, r, 4*i), y, acc[r][i%sums])
		}
	}
	for r := range acc {
		a := acc[r][0]
		for _, b := range acc[r][1:] {
			g.VPADDD(b, a, a)
		}
		g.VCVTDQ2PS(a, a)
		g.VMULPS(operand.Mem{Base: ksc}, a, a)
		g.VFMADD231PS_BCST(at(sb, nb4, nb12, r, 0), a, score[r])
	}
	g.ADDQ(operand.Imm(32), qb)
	g.ADDQ(operand.U32(8*64), kt)
	g.ADDQ(operand.Imm(64), ksc)
	g.ADDQ(operand.Imm(4), sb)
	g.ADDQ(operand.Imm(4), cb)
	g.DECQ(cnt)
	g.JNZ(operand.LabelRef(lb))
	for i, sv := range score {
		g.decodeSoftmax(lc, sp, sv, i, label(lb, "row", i))
	}
}
