// DecodeQ8<ISA>: the fused decode step's scores over int8 K on integer
// dot products (AVX-512: AVX512_VNNI's VPDPBUSD; AVX2: VPSIGNB,
// VPMADDUBSW and VPMADDWD), the rest as DecodeI8.

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// q8Form is how a decode kernel multiplies int8 K by the int8 query rows.
type q8Form int

const (
	q8None   q8Form = iota // Decode: K dequantized to float32
	q8Sign                 // AVX2's DecodeQ8: VPSIGNB, VPMADDUBSW, VPMADDWD
	q8Dot                  // VPDPBUSD: AVX-512's DecodeQ8 (AVX512_VNNI), AVX2's DecodeQ8VNNI (AVX-VNNI)
	q8DotEmu               // DecodeQ8VNNIEmu: DecodeQ8VNNI on VPDPBUSD's EVEX ymm form, its twin on AVX-512 CPUs
)

// kernel is the name of the form's kernel on x (before the set's
// suffix): each set's DecodeQ8 is its form for every CPU of the set.
func (f q8Form) kernel(x isa) string {
	switch {
	case x.avx512() || f == q8Sign:
		return "DecodeQ8"
	case f == q8DotEmu:
		return "DecodeQ8VNNIEmu"
	}
	return "DecodeQ8VNNI"
}

// dot names the instruction of a dot form on x.
func (f q8Form) dot(x isa) string {
	switch {
	case x.avx512():
		return "VPDPBUSD"
	case f == q8DotEmu:
		return "VPDPBUSD in its EVEX ymm form, AVX512_VNNI and AVX512VL: the Emu twin of DecodeQ8VNNI"
	}
	return "AVX-VNNI's VPDPBUSD, VEX-encoded"
}

// The scores of DecodeQ8, for a block of T = lanes keys (16 or 8):
//
//	transpose  once per block, the T K rows are loaded 4·T bytes (T
//	           dwords) at a time and transposed T×T by dwords into the
//	           scratch: dword row i holds bytes 4i..4i+3 of key c in lane
//	           c (Kt, 4·T bytes a row). The VPDPBUSD forms flip each
//	           byte's sign bit on the way (k+128, 0..255: its unsigned
//	           operand); VPMADDUBSW's stores the bytes as they are;
//	scores     per row group (4, 2 or 1 rows) and scale block b (32/4 = 8
//	           dword rows): each Kt row meets each row's dword of q8,
//	           broadcast, and adds the 4 products of each lane into the
//	           row's int32 sums:
//	           VPDPBUSD  one (AVX2: after a broadcast of the dword), the
//	                     sums started at the row's correction
//	                     -128·Σ q8 of the block (undoing the +128);
//	           AVX2      the sign moved from k to q (VPSIGNB: q·sign(k);
//	                    VPABSB: |k|, once per Kt row for all rows), then
//	                    VPMADDUBSW of |k| (unsigned) by q·sign(k) (signed)
//	                    into 16-bit pairs, VPMADDWD by ones into dwords,
//	                    VPADDD. A pair is at most 2·128·127 = 32512 in
//	                    magnitude (q8 is never -128; k = -128 gives |k| =
//	                    128 as an unsigned byte), so VPMADDUBSW never
//	                    saturates and the sums stay exact (llama.cpp's
//	                    mul_sum_i8_pairs);
//	           then the sums (exact: |D| ≤ 32·128·127) are converted to
//	           float32, multiplied by the block's K scales (a vector over
//	           the keys, as fillScales left them) and added into the
//	           row's scores by an FMA with the row's q scale broadcast.
//
// So a block's scores come out as one vector per row, key c in lane c:
// no fold and no transpose of partial sums. Per 4·T bytes of a K row the
// block pays a load, 4 shuffles (AVX-512: and an XOR) and a store once;
// per row and 32 products AVX-512 takes one VPDPBUSD and AVX2 four
// integer ops, where DecodeI8 takes 32/lanes FMAs per row and widens
// (load, convert, scale) each K vector once for all rows.

// storeInts stores the integer vector y at m.
func (g *gen) storeInts(y reg.VecVirtual, m operand.Mem) {
	if g.isa.avx512() {
		g.VMOVDQU32(y, m)
		return
	}
	g.VMOVDQU(y, m)
}

// transposeQ8 copies the block's T K rows (lc.kp, ldk apart, krow bytes
// each: dk, a multiple of 4) into the scratch at lc.ktOff: dword row i
// (4·T bytes at 4·T·i) holds key c's bytes 4i..4i+3 (AVX-512: each plus
// 128) in lane c; T rows per 4·T bytes of dk, the last chunk masked to
// the row's dwords (its lanes past dk hold 128s on AVX-512, zeros on
// AVX2, which meet zero query bytes). Each line loaded has its twin
// decodeAhead blocks on prefetched into L2 (strided K, as the other
// kernels prefetch it, decode.go; adjacent K has no distance, and the
// prefetch finds the line just loaded). Into L1 the MHA step over BSHD
// rows ran 15% slower than DecodeI8, burst before the loads or spread
// beside them alike.
func (g *gen) transposeQ8(lc decodeLocals, sp reg.GPVirtual, form q8Form) {
	T := g.isa.lanes
	chunkBytes := 4 * T
	kt, k0, ld := g.GP64(), g.GP64(), g.GP64()
	g.MOVQ(lc.ktOff, kt)
	g.ADDQ(sp, kt)
	g.MOVQ(lc.kp, k0)
	g.MOVQ(lc.ldk, ld)
	keys := g.keyRows(k0, ld, T)
	ahead := g.aheadRows(keys, lc.kAhead) // the rows decodeAhead blocks on
	n := g.GP64()
	g.MOVQ(lc.krow, n)
	g.SHRQ(operand.U8(g.lanesLog()+2), n) // whole chunks
	var flip reg.VecVirtual
	switch {
	case g.isa.avx512():
		flip = g.vec()
		g.VMOVDQU32(g.cst("byteSigns"), flip)
	case form != q8Sign:
		flip = g.vec()
		g.VMOVDQU(g.cst("byteSigns"), flip)
	}
	// chunk transposes the next 4·T bytes of each row; masked: the
	// tail's dwords only (tail's kmask or, AVX2, ymask in a register).
	chunk := func(masked bool, tail tailRegs, ymask reg.VecVirtual) {
		x := make([]reg.VecVirtual, T)
		for c := range x {
			x[c] = g.vec()
			switch {
			case !masked && g.isa.avx512():
				g.VPXORD(keys.row(c), flip, x[c])
			case !masked && flip != nil:
				g.VPXOR(keys.row(c), flip, x[c])
			case !masked:
				g.VMOVDQU(keys.row(c), x[c])
			case g.isa.avx512():
				g.VMOVDQU32_Z(keys.row(c), tail.kmask, x[c])
				g.VPXORD(flip, x[c], x[c])
			default:
				// Masked dwords load as zeros; flipped, 128s (as AVX-512's).
				g.VPMASKMOVD(keys.row(c), ymask, x[c])
				if flip != nil {
					g.VPXOR(flip, x[c], x[c])
				}
			}
		}
		for c := range x {
			g.PREFETCHT1(ahead.row(c))
		}
		for i, y := range g.transposeDwords(x) {
			g.storeInts(y, operand.Mem{Base: kt, Disp: chunkBytes * i})
		}
		g.ADDQ(operand.U32(uint64(chunkBytes*T)), kt)
		for _, b := range append(keys.bases, ahead.bases...) {
			g.ADDQ(operand.Imm(uint64(chunkBytes)), b)
		}
	}
	g.Label("q8_chunk")
	g.TESTQ(n, n)
	g.JZ(operand.LabelRef("q8_tail"))
	chunk(false, tailRegs{}, nil)
	g.DECQ(n)
	g.JMP(operand.LabelRef("q8_chunk"))
	g.Label("q8_tail")
	t := g.GP64()
	g.MOVQ(lc.krow, t)
	g.ANDQ(operand.Imm(uint64(chunkBytes-1)), t)
	g.JZ(operand.LabelRef("q8_done"))
	g.SHRQ(operand.U8(2), t) // the last chunk's dwords
	tail := g.tailMask(t)
	var ymask reg.VecVirtual
	if !g.isa.avx512() {
		ymask = g.vec()
		g.VMOVDQU(tail.ymask, ymask)
	}
	chunk(true, tail, ymask)
	g.Label("q8_done")
}

// simVec is a vector register with the labels of its dword lanes
// (row·lanes + dword), so that transposeDwords checks its own shuffles.
type simVec struct {
	v   reg.VecVirtual
	lab []int
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
	in := make([]simVec, n)
	for r := range in {
		in[r] = simVec{v: x[r], lab: make([]int, n)}
		for e := range in[r].lab {
			in[r].lab[e] = n*r + e
		}
	}
	// op emits one shuffle of a (Intel's first source) and b and returns
	// its result with the lanes it holds.
	op := func(name string, imm uint8, a, b simVec) simVec {
		d := simVec{v: g.vec(), lab: make([]int, n)}
		for L := 0; L < n/4; L++ {
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
			case "shuf": // VSHUFI32X4: lanes 0, 1 from a, 2, 3 from b
				src, sel := a.lab, int(imm>>(2*L))&3
				if L >= 2 {
					src = b.lab
				}
				copy(out, src[4*sel:4*sel+4])
			case "perm2": // VPERM2I128: 0, 1 a's lanes, 2, 3 b's
				sel := int(imm>>(4*L)) & 3
				src := a.lab
				if sel >= 2 {
					src = b.lab
				}
				copy(out, src[4*(sel&1):4*(sel&1)+4])
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
		e := r.lab[0] % n
		for c, l := range r.lab {
			if l != n*c+e {
				panic(fmt.Sprintf("transposeDwords: dword %d lane %d holds %d", e, c, l))
			}
		}
		if out[e] != nil {
			panic(fmt.Sprintf("transposeDwords: dword %d twice", e))
		}
		out[e] = r.v
	}
	return out
}

// decodeScoresQ8 emits the scores and softmax of R rows (lc.row on) over
// the block's transposed K (transposeQ8): per scale block the int32
// sums (AVX-512: started at the rows' corrections) take 8 Kt rows × R
// dot steps (one row: two sums per row, alternate Kt rows, so the chain
// is half as long), then are scaled into the rows' float32 scores.
func (g *gen) decodeScoresQ8(lc decodeLocals, sp reg.GPVirtual, R int, form q8Form) {
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
	avx512, sign := g.isa.avx512(), form == q8Sign
	var ones reg.VecVirtual
	if sign {
		ones = g.vec()
		g.VMOVDQU(g.cst("wordOnes"), ones)
	}
	g.Label(lb)
	acc := make([][]reg.VecVirtual, R)
	for r := range acc {
		acc[r] = make([]reg.VecVirtual, sums)
		for a := range acc[r] {
			acc[r][a] = g.vec()
			if a == 0 && !sign {
				g.VPBROADCASTD(at(cb, nb4, nb12, r, 0), acc[r][a])
			} else {
				g.zero(acc[r][a])
			}
		}
	}
	rowBytes := 4 * g.isa.lanes // a Kt row
	y, abs := g.vec(), g.vec()
	for i := 0; i < 8; i++ {
		ktRow := operand.Mem{Base: kt, Disp: rowBytes * i}
		if avx512 {
			g.VMOVDQU32(ktRow, y)
		} else {
			g.VMOVDQU(ktRow, y)
		}
		if sign {
			g.VPABSB(y, abs)
		}
		for r := range acc {
			q, sum := at(qb, ldq, ldq3, r, 4*i), acc[r][i%sums]
			// VPDPBUSD: sum += Σ_4 (k+128)[c]·q8[r] over dword i, y
			// unsigned, q signed.
			if avx512 {
				g.VPDPBUSD_BCST(q, y, sum)
				continue
			}
			t := g.vec()
			g.VPBROADCASTD(q, t)
			switch form {
			case q8Dot:
				g.raw(vpdpbusdVEX, sum, y, t)
				continue
			case q8DotEmu:
				g.raw(vpdpbusdEVEX256, sum, y, t)
				continue
			}
			// VPMADDUBSW: sum += Σ_4 |k|·(q8[r]·sign(k)) over dword i.
			g.VPSIGNB(y, t, t)
			g.VPMADDUBSW(t, abs, t)
			g.VPMADDWD(ones, t, t)
			g.VPADDD(t, sum, sum)
		}
	}
	for r := range acc {
		a := acc[r][0]
		for _, b := range acc[r][1:] {
			g.VPADDD(b, a, a)
		}
		g.VCVTDQ2PS(a, a)
		g.VMULPS(operand.Mem{Base: ksc}, a, a)
		if avx512 {
			g.VFMADD231PS_BCST(at(sb, nb4, nb12, r, 0), a, score[r])
			continue
		}
		qs := g.vec()
		g.VBROADCASTSS(at(sb, nb4, nb12, r, 0), qs)
		g.VFMADD231PS(qs, a, score[r])
	}
	g.ADDQ(operand.Imm(32), qb)
	g.ADDQ(operand.U32(uint64(8*rowBytes)), kt)
	g.ADDQ(operand.Imm(uint64(rowBytes)), ksc)
	g.ADDQ(operand.Imm(4), sb)
	g.ADDQ(operand.Imm(4), cb)
	g.DECQ(cnt)
	g.JNZ(operand.LabelRef(lb))
	for i, sv := range score {
		g.decodeSoftmax(lc, sp, sv, i, label(lb, "row", i))
	}
}
