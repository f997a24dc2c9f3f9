// Decode<F32|F16|BF16>NEON: the fused decode step in blocks of 4 keys (one
// vector of scores per row). Scores: R = 4, 2 or 1 rows at a time, 4R
// accumulators V0..V15 (row × key), each K vector loaded and widened once
// per group; three FADDP fold a row's four into its scores in key order.
// PV: the group's R rows × ≤ 4 vectors of O, the weights used by lane.

package main

import (
	"fmt"

	. "github.com/fastattn/fastattn/gen/neon"
)

// Decode's general registers: the arguments, kept for the whole call,
// and the walkers of a row group.
const (
	dQ     R = 0  // q
	dRows  R = 1  // rows
	dQRow  R = 2  // bytes of a q row (dk·4)
	dK     R = 3  // the block's first K row
	dLdk   R = 4  // ldk, bytes
	dV     R = 5  // the block's first V row
	dCnt   R = 6  // the loop counter
	dLdv   R = 7  // ldv, bytes
	dRowQ  R = 8  // the group's first q row
	dRem   R = 9  // keys left, the block's included
	dORow  R = 10 // bytes of an O row (dv·4)
	dO     R = 11 // o
	dM     R = 12 // m
	dL     R = 13 // l
	dAlibi R = 14 // alibi (0: none)
	dSkip  R = 15 // the block's first keys already done (a moved-back last block)
	dRow   R = 16 // the group's first row
	dKw    R = 17 // K walker (in PV: V walker)
	dQw    R = 19 // q walker (in PV: the panel's first V row)
	dKback R = 20 // 4·ldk less one K vector's bytes
	dQback R = 21 // R q rows' bytes less one vector
	dT     R = 22 // temporary
	dT2    R = 23 // temporary
	dOw    R = 25 // the panel's O row 0 (DecodeQ8NEON's scores: the rows' q scales)
	dKs    R = 24 // DecodeQ8NEON's scores: the block's K scales of a scale block
)

// Decode's vector registers. Scores: accumulators V0..V15 (row r, key c
// in V(4r+c)), q vectors V16..V19, K vectors V20..V23; the folded scores,
// then the weights, of row r in V28+r. Softmax: exp's constants V16..V27,
// temporaries V0..V11, row r's rescale factor in V12+r. PV: row r's
// accumulators from decodeAcc(r, 0), the V row's vectors V20..V23.
const (
	dvScore V = 28 // V28..V31: the rows' scores, then weights
	dvAlpha V = 12 // V12..V15: the rows' alpha, broadcast
	dvK     V = 20 // V20..V23: K (scores) or V (PV) vectors
)

// decodeGroups are the row counts scored together, largest first.
var decodeGroups = []int{4, 2, 1}

// decodeAcc is PV's accumulator of row r, vector j: rows 0-2 in V0..V11,
// row 3 in V16..V19 (exp's constants are reloaded per group), so that
// each row's vectors are consecutive for VLD1/VST1.
func decodeAcc(r, j int) V {
	if r == 3 {
		return V(16 + j)
	}
	return V(4*r + j)
}

// neonElem is a storage type of K and V.
type neonElem struct {
	name  string // F32, F16, BF16
	goTyp string // the pointer type in the signature
	shift int    // log2 of its bytes
}

var neonElems = []neonElem{{"F32", "*float32", 2}, {"F16", "*uint16", 1}, {"BF16", "*uint16", 1}}

// neonInt8 is int8 K/V: the decode kernel dequantizes it (DecodeI8NEON).
var neonInt8 = neonElem{"I8", "*int8", 0}

// loadKV emits a VLD1 of n vectors' worth of e from (base), post-
// incremented by step, into the registers from v on, widened to float32
// in place.
func (g *gen) loadKV(e neonElem, base, step R, v V, n int) {
	arr := "S4"
	if e.shift == 1 {
		arr = "H4"
	}
	list := "["
	for i := 0; i < n; i++ {
		if i > 0 {
			list += ", "
		}
		list += fmt.Sprintf("V%d.%s", int(v)+i, arr)
	}
	g.Inst("VLD1.P (%s)(%s), %s]", base, step, list)
	for i := 0; i < n; i++ {
		switch e.name {
		case "F16":
			g.Emit(EncFCVTL(v+V(i), v+V(i), false))
		case "BF16":
			g.Emit(EncSHLL(v+V(i), v+V(i), false))
		}
	}
}

// decode emits Decode<E>NEON. Int8 K and V (DecodeI8NEON) are
// dequantized a block at a time (dequantBlock) into the scratch s as
// float32 rows, and the block is then scored and summed as float32 from
// there: every row of the call reads the block from L1, and the result is
// bit for bit that of the float32 kernel on the dequantized K and V.
func (g *gen) decode(e neonElem, q8 bool) {
	name := "Decode" + e.name + "NEON"
	if q8 {
		name = "DecodeQ8NEON"
	}
	int8 := e.name == "I8"
	sig, size := fmt.Sprintf("(q *float32, rows, dk int, k %s, ldk int, v %s, ldv int, nk, dv int, o, m, l, alibi *float32)", e.goTyp, e.goTyp), 104
	doc := []string{
		name + " is fallback.Decode in blocks of 4 keys:",
		"",
		"\tfor each block of 4 keys c, for r := 0; r < rows; r++ {",
		"\t\tsc = Σ_d k[c*ldk+d]·q[r*dk+d]   (+ alibi[r]·(alibi[rows+r] + c) if alibi != nil)",
		"\t\tmNew = max(m[r], max_c sc);  base = max(mNew, -MaxFloat32)",
		"\t\tp[c] = fallback.WeightExp32(sc - base);  alpha = fallback.WeightExp32(m[r] - base)",
		"\t\tl[r] = l[r]·alpha + Σ_c p[c];  m[r] = mNew",
		"\t\to[r*dv+j] = alpha·o[r*dv+j] + Σ_c p[c]·v[c*ldv+j]",
		"",
		"with rows in 1..16, nk >= 4, dk and dv multiples of 4, strides in",
		"elements of k's type (16-bit: widened in registers). The last partial",
		"block is moved back to end at nk and its first keys masked.",
	}
	if int8 {
		sig, size = sig[:len(sig)-1]+", ks *float32, ldks int, vs *float32, ldvs int, s *float32)", 144
		doc = append(doc,
			"K and V are int8, element d of row c standing for float32(k[c*ldk+d]) ·",
			"ks[c*ldks+d/32] (V likewise), rounded once: each block's rows are",
			"dequantized into s (4·dk then 4·dv floats) and read from there.")
	}
	if q8 {
		sig, size = sig[:len(sig)-1]+", q8 *int8, ldq8 int, qs *float32)", 168
		doc = doc[:len(doc)-3]
		doc[3] = "\t\tsc = Σ_b fma(float32(D_b)·ks[c*ldks+b], qs[r*nb+b], sc), D_b = Σ_{d in block b} k[c*ldk+d]·q8[r*ldq8+d]"
		doc = append(doc,
			"K and V are int8 as DecodeI8NEON's; the scores are integer dot products",
			"(SDOT, FEAT_DotProd): q8 holds the rows quantized (ldq8 bytes apart, nb =",
			"⌈dk/32⌉ blocks of 32, zeros past dk), qs their scales; q is not read. The",
			"block's 4 K rows are read a dword of each key into each lane (LD4 by",
			"lane), so that each SDOT by element sums key c's 4 products in lane c",
			"exactly in int32; V is dequantized into s (4·dv floats) as DecodeI8NEON's.")
	}
	g.Func(name, sig, size, doc...)
	g.loadArgs(arg{"q", dQ}, arg{"rows", dRows}, arg{"dk", dQRow}, arg{"k", dK}, arg{"ldk", dLdk},
		arg{"v", dV}, arg{"ldv", dLdv}, arg{"nk", dRem}, arg{"dv", dORow}, arg{"o", dO}, arg{"m", dM},
		arg{"l", dL}, arg{"alibi", dAlibi})
	g.toBytes(dQRow, dORow)
	body := e
	if q8 {
		// V is read from s as float32 rows; K as it is (dLdk bytes apart,
		// dKback = 4·ldk - 16: a chunk of 16 bytes of the 4 rows); q8 rows
		// ldq8 bytes apart (dQRow), from dQ.
		body = neonElems[0]
		g.loadArgs(arg{"s", dV}, arg{"q8", dQ}, arg{"ldq8", dQRow})
		g.Inst("MOVD %s, %s", dORow, dLdv)
		g.Inst("LSL $2, %s, %s", dLdk, dKback)
		g.Inst("SUB $16, %s, %s", dKback, dKback)
	} else if int8 {
		// The block is read from s as float32 rows: K at s, V after 4 K rows.
		body = neonElems[0]
		g.loadArgs(arg{"s", dK})
		g.Inst("MOVD %s, %s", dQRow, dLdk)
		g.Inst("MOVD %s, %s", dORow, dLdv)
		g.Inst("ADD %s<<2, %s, %s", dLdk, dK, dV)
	} else {
		g.Inst("LSL $%d, %s, %s", e.shift, dLdk, dLdk)
		g.Inst("LSL $%d, %s, %s", e.shift, dLdv, dLdv)
	}
	if !q8 {
		// kback = 4·ldk - (one K vector: 4 elements).
		g.Inst("LSL $2, %s, %s", dLdk, dKback)
		g.Inst("SUB $%d, %s, %s", 4<<body.shift, dKback, dKback)
	}

	g.Comment("A block of 4 keys. The last one, if partial, is moved back to end at nk;")
	g.Comment("its first skip keys (already done) are masked.")
	g.Label("block")
	g.Inst("MOVD $0, %s", dSkip)
	g.Inst("CMP $4, %s", dRem)
	g.Inst("BGE whole")
	g.Inst("MOVD $4, %s", dSkip)
	g.Inst("SUB %s, %s, %s", dRem, dSkip, dSkip)
	g.Inst("MOVD $4, %s", dRem)
	if int8 {
		g.stepInt8Rows(dSkip, true)
	} else {
		g.Inst("MUL %s, %s, %s", dSkip, dLdk, dT)
		g.Inst("SUB %s, %s, %s", dT, dK, dK)
		g.Inst("MUL %s, %s, %s", dSkip, dLdv, dT)
		g.Inst("SUB %s, %s, %s", dT, dV, dV)
	}
	g.Label("whole")
	if q8 {
		g.Inst("MOVD %s, %s", g.Arg("k"), dK)
		g.dequantBlock(false)
	} else if int8 {
		g.dequantBlock(true)
	} else {
		g.touchBlock(e)
	}
	g.Inst("MOVD $0, %s", dRow)
	g.Inst("MOVD %s, %s", dQ, dRowQ)

	g.Comment(fmt.Sprintf("Row groups of %v rows: scores, softmax, PV.", decodeGroups))
	g.Label("group")
	g.Inst("SUB %s, %s, %s", dRow, dRows, dT)
	g.Inst("CBZ %s, next", dT)
	for _, R := range decodeGroups[:len(decodeGroups)-1] {
		g.Inst("CMP $%d, %s", R, dT)
		g.Inst("BGE rows%d", R)
	}
	g.Inst("B rows%d", decodeGroups[len(decodeGroups)-1])
	for _, R := range decodeGroups {
		g.Label(fmt.Sprintf("rows%d", R))
		if q8 {
			g.decodeScoresQ8(R)
		} else {
			g.decodeScores(body, R)
		}
		g.loadWeightExpConsts()
		for r := 0; r < R; r++ {
			g.decodeSoftmax(R, r)
		}
		g.decodePV(body, R)
		g.Inst("ADD $%d, %s, %s", R, dRow, dRow)
		for range R {
			g.Inst("ADD %s, %s, %s", dQRow, dRowQ, dRowQ)
		}
		g.Inst("B group")
	}

	g.Comment("The next block.")
	g.Label("next")
	if int8 {
		g.Inst("MOVD $4, %s", dT2)
		g.stepInt8Rows(dT2, false)
	} else {
		g.Inst("ADD %s<<2, %s, %s", dLdk, dK, dK)
		g.Inst("ADD %s<<2, %s, %s", dLdv, dV, dV)
	}
	g.Inst("SUBS $4, %s, %s", dRem, dRem)
	g.Inst("BNE block")
	g.Inst("RET")
}

// stepInt8Rows moves DecodeI8NEON's int8 K and V rows and their scales,
// kept in the argument slots k, v, ks and vs, by n rows (back with back):
// registers are short, and this happens once a block.
func (g *gen) stepInt8Rows(n R, back bool) {
	op := "ADD"
	if back {
		op = "SUB"
	}
	for _, p := range []struct {
		ptr, ld string
		shift   int
	}{{"k", "ldk", 0}, {"v", "ldv", 0}, {"ks", "ldks", 2}, {"vs", "ldvs", 2}} {
		g.Inst("MOVD %s, %s", g.Arg(p.ld), dT)
		g.Inst("MUL %s, %s, %s", n, dT, dT)
		g.Inst("MOVD %s, %s", g.Arg(p.ptr), dKw)
		g.Inst("%s %s<<%d, %s, %s", op, dT, p.shift, dKw, dKw)
		g.Inst("MOVD %s, %s", dKw, g.Arg(p.ptr))
	}
}

// dequantBlock emits DecodeI8NEON's dequantization of the block's 4 K
// rows (dk elements each; withK, else DecodeQ8NEON's V only) into the
// float32 rows at dK, then its 4 V rows (dv) at dV: per scale block of 32 elements the scale broadcast (V24),
// then 16 elements at a time (a 16-byte load, SXTL/SXTL2 to halfwords and
// words, SCVTF, FMUL by the scale, one 64-byte store), the rest 4 at a
// time. Rows in order, each in address order: when they are adjacent the
// block is read as one stream, the first touch of every line in address
// order (as touchBlock orders it for the other types). Uses dT, dT2,
// dKw, dQw, dCnt, dOw, dQback and dRowQ, free here.
func (g *gen) dequantBlock(withK bool) {
	tensors := []struct {
		ptr, ld, scales, ldS, name string
		dst, n                     R
	}{{"k", "ldk", "ks", "ldks", "dqk", dK, dQRow}, {"v", "ldv", "vs", "ldvs", "dqv", dV, dORow}}
	if !withK { // DecodeQ8NEON: V only
		tensors = tensors[1:]
	}
	for _, t := range tensors {
		g.Inst("MOVD %s, %s", g.Arg(t.ptr), dOw)
		g.Inst("MOVD %s, %s", g.Arg(t.scales), dQback)
		g.Inst("MOVD %s, %s", t.dst, dKw)
		g.Inst("MOVD $4, %s", dRowQ)
		g.Label(t.name + "_row")
		g.Inst("MOVD %s, %s", dOw, dT)
		g.Inst("MOVD %s, %s", dQback, dT2)
		g.Inst("LSR $2, %s, %s", t.n, dCnt) // elements of the row
		g.Label(t.name + "_block")
		g.Inst("VLD1R.P 4(%s), [%s]", dT2, V(24).S4())
		g.Inst("MOVD $32, %s", dQw)
		g.Inst("CMP $32, %s", dCnt)
		g.Inst("CSEL LT, %s, %s, %s", dCnt, dQw, dQw)
		g.Inst("SUB %s, %s, %s", dQw, dCnt, dCnt)
		g.Label(t.name + "_16")
		g.Inst("CMP $16, %s", dQw)
		g.Inst("BLT %s_4", t.name)
		g.dequantStep(dT, 4)
		g.Inst("SUB $16, %s, %s", dQw, dQw)
		g.Inst("B %s_16", t.name)
		g.Label(t.name + "_4")
		g.Inst("CBZ %s, %s_next", dQw, t.name)
		g.dequantStep(dT, 1)
		g.Inst("SUB $4, %s, %s", dQw, dQw)
		g.Inst("B %s_4", t.name)
		g.Label(t.name + "_next")
		g.Inst("CBNZ %s, %s_block", dCnt, t.name)
		g.Inst("MOVD %s, %s", g.Arg(t.ld), dT)
		g.Inst("ADD %s, %s, %s", dT, dOw, dOw)
		g.Inst("MOVD %s, %s", g.Arg(t.ldS), dT)
		g.Inst("ADD %s<<2, %s, %s", dT, dQback, dQback)
		g.Inst("SUBS $1, %s, %s", dRowQ, dRowQ)
		g.Inst("BNE %s_row", t.name)
	}
}

// dequantStep dequantizes nv·4 int8 values from (src) by the scale in
// V24 into V25.. (widenBytes), stores them at dKw and moves src and dKw
// past them.
func (g *gen) dequantStep(src R, nv int) {
	g.widenBytes(src, nv, false, 25)
	g.Inst("ADD $%d, %s, %s", 4*nv, src, src)
	for j := 0; j < nv; j++ {
		g.Emit(EncFMUL(V(25+j), V(25+j), 24))
	}
	g.Inst("VST1.P %s, %d(%s)", vlist(25, nv), 16*nv, dKw)
}

// touchBlock emits, for K and then V if its rows are adjacent (stride =
// row bytes), a byte load at every 64-byte offset of each of the block's
// 4 rows, row after row: the block's lines requested in address order
// before the scores load them 16 bytes of each row at a time (the order
// gen/amd64's Decode uses, docs/DESIGN.md "Why the touch"; a
// byte, so no load passes a row's end). Strided rows (BSHD) are left to
// the hardware, as before. Uses dT, dT2, dCnt, dKw and dQw, free here.
func (g *gen) touchBlock(e neonElem) {
	for _, t := range []struct {
		ptr, ld, f32Row R // the block's first row, its stride, a float32 row of the same length
		name            string
	}{{dK, dLdk, dQRow, "touchk"}, {dV, dLdv, dORow, "touchv"}} {
		// dQw = the row's bytes (its float32 length's bytes scaled to e).
		g.Inst("LSR $%d, %s, %s", 2-e.shift, t.f32Row, dQw)
		g.Inst("CMP %s, %s", dQw, t.ld)
		g.Inst("BNE %s_done", t.name)
		g.Inst("MOVD %s, %s", t.ptr, dKw)
		g.Inst("MOVD $4, %s", dCnt)
		g.Label(t.name)
		g.Inst("MOVD $0, %s", dT)
		g.Label(t.name + "_line")
		g.Inst("MOVBU (%s)(%s), %s", dKw, dT, dT2)
		g.Inst("ADD $64, %s, %s", dT, dT)
		g.Inst("CMP %s, %s", dQw, dT)
		g.Inst("BLT %s_line", t.name)
		g.Inst("ADD %s, %s, %s", t.ld, dKw, dKw)
		g.Inst("SUBS $1, %s, %s", dCnt, dCnt)
		g.Inst("BNE %s", t.name)
		g.Label(t.name + "_done")
	}
}

// decodeScores emits the scores of R rows from dRow over the block: per
// step of 4 dims, the R q vectors, the 4 keys' K vectors, 4R FMAs; then
// each row's fold into dvScore+r (key c in lane c).
func (g *gen) decodeScores(e neonElem, R int) {
	l := fmt.Sprintf("rows%d_", R)
	g.Comment(fmt.Sprintf("Scores of %d rows: %d accumulators, a K vector loaded once per group.", R, 4*R))
	for a := 0; a < 4*R; a++ {
		g.zero(V(a))
	}
	// qback = R·(q row) - 16.
	g.Inst("MOVD $%d, %s", R, dT)
	g.Inst("MUL %s, %s, %s", dQRow, dT, dQback)
	g.Inst("SUB $16, %s, %s", dQback, dQback)
	g.Inst("MOVD %s, %s", dK, dKw)
	g.Inst("MOVD %s, %s", dRowQ, dQw)
	g.Inst("LSR $4, %s, %s", dQRow, dCnt) // steps of 4 dims
	g.Label(l + "dims")
	for r := 0; r < R; r++ {
		g.Inst("VLD1.P (%s)(%s), [%s]", dQw, dQRow, V(16+r).S4())
	}
	g.Inst("SUB %s, %s, %s", dQback, dQw, dQw)
	for c := 0; c < 4; c++ {
		g.loadKV(e, dKw, dLdk, dvK+V(c), 1)
	}
	g.Inst("SUB %s, %s, %s", dKback, dKw, dKw)
	for c := 0; c < 4; c++ {
		for r := 0; r < R; r++ {
			g.VFMLA(V(4*r+c), dvK+V(c), V(16+r))
		}
	}
	g.Inst("SUBS $1, %s, %s", dCnt, dCnt)
	g.Inst("BNE %sdims", l)
	for r := 0; r < R; r++ {
		g.Emit(EncFADDP(V(4*r), V(4*r), V(4*r+1)))
		g.Emit(EncFADDP(V(4*r+2), V(4*r+2), V(4*r+3)))
		g.Emit(EncFADDP(dvScore+V(r), V(4*r), V(4*r+2)))
	}
}

// decodeSoftmax emits row dRow+r's online-softmax step on its scores in
// dvScore+r, leaving the weights there and alpha in dvAlpha+r (V0..V11
// temporaries, exp's constants in V16..V27).
func (g *gen) decodeSoftmax(R, r int) {
	l := fmt.Sprintf("rows%d_row%d_", R, r)
	s := dvScore + V(r)
	// dT = the row's offset in floats, times 4.
	g.Inst("ADD $%d, %s, %s", r, dRow, dT2)
	g.Inst("LSL $2, %s, %s", dT2, dT2)

	// ALiBi: sc += slope·(dist + key), the key's index c0 + c with c0 =
	// nk - rem; integers, exact in float32; the product rounded once.
	g.Inst("CBZ %s, %snoalibi", dAlibi, l)
	g.Inst("MOVD %s, %s", g.Arg("nk"), dT)
	g.Inst("SUB %s, %s, %s", dRem, dT, dT)
	g.Inst("SCVTFS %s, %s", dT, V(9).F())
	g.Inst("VDUP %s, %s", V(9).S(0), V(9).S4())
	g.constAddr("iota0", rConst)
	g.Inst("VLD1 (%s), [%s]", rConst, V(10).S4())
	g.Emit(EncFADD(9, 9, 10))
	g.Inst("ADD %s<<2, %s, %s", dRows, dAlibi, dT)
	g.Inst("ADD %s, %s, %s", dT2, dT, dT)
	g.Inst("VLD1R (%s), [%s]", dT, V(10).S4()) // dist
	g.Emit(EncFADD(9, 9, 10))
	g.Inst("ADD %s, %s, %s", dT2, dAlibi, dT)
	g.Inst("VLD1R (%s), [%s]", dT, V(10).S4()) // slope
	g.Emit(EncFMUL(9, 9, 10))
	g.Emit(EncFADD(s, s, 9))
	g.Label(l + "noalibi")

	// Keys before the block's start (a moved-back last block) are -Inf:
	// lanes below skip, by a select, so a NaN there cannot leak.
	g.Inst("CBZ %s, %snoskip", dSkip, l)
	g.Inst("SCVTFS %s, %s", dSkip, V(9).F())
	g.Inst("VDUP %s, %s", V(9).S(0), V(9).S4())
	g.constAddr("iota0", rConst)
	g.Inst("VLD1 (%s), [%s]", rConst, V(10).S4())
	g.Emit(EncFCMGT(9, 9, 10)) // skip > lane
	g.loadConst("negInf", 10)
	g.VBSL(9, 10, s)
	g.VMOV(s, 9)
	g.Label(l + "noskip")

	// mNew = max(m, max_c sc) (V2), base = max(mNew, -MaxFloat32) (V4).
	g.Emit(EncFMAXP(0, s, s))
	g.Emit(EncFMAXP(0, 0, 0))
	g.Inst("ADD %s, %s, %s", dT2, dM, dT)
	g.Inst("VLD1R (%s), [%s]", dT, V(1).S4())
	g.Emit(EncFMAX(2, 1, 0))
	g.loadConst("negMax", 3)
	g.Emit(EncFMAX(4, 2, 3))
	// The weights, and alpha = exp(m - base) (the weights' exp).
	g.Emit(EncFSUB(s, s, 4))
	g.VMOV(s, g.weightExp(s, 5, 6, 7, 8))
	g.Emit(EncFSUB(1, 1, 4))
	g.VMOV(dvAlpha+V(r), g.weightExp(1, 5, 6, 7, 8))
	// l = l·alpha + Σ p; m = mNew.
	g.Emit(EncFADDP(0, s, s))
	g.Emit(EncFADDP(0, 0, 0))
	g.Inst("ADD %s, %s, %s", dT2, dL, dT)
	g.Inst("VLD1R (%s), [%s]", dT, V(9).S4())
	g.VFMLA(0, 9, dvAlpha+V(r))
	g.Inst("FMOVS %s, (%s)", V(0).F(), dT)
	g.Inst("ADD %s, %s, %s", dT2, dM, dT)
	g.Inst("FMOVS %s, (%s)", V(2).F(), dT)
}

// decodePV emits O = alpha·O + Σ_c p[c]·V[c] for the group's R rows, in
// panels of up to 4 vectors of dv, over the block's keys skip..3 (the
// keys are unrolled: FMLA by element takes the weight's lane as an
// immediate, so a moved-back block enters the unrolled keys at skip).
func (g *gen) decodePV(e neonElem, R int) {
	l := fmt.Sprintf("rows%d_pv_", R)
	g.Comment(fmt.Sprintf("PV of %d rows, panels of up to 4 vectors of dv.", R))
	// dOw = o + row·(O row); dQw = V + skip·ldv; dCnt = vectors left.
	g.Inst("MUL %s, %s, %s", dRow, dORow, dOw)
	g.Inst("ADD %s, %s, %s", dO, dOw, dOw)
	g.Inst("MUL %s, %s, %s", dSkip, dLdv, dQw)
	g.Inst("ADD %s, %s, %s", dV, dQw, dQw)
	g.Inst("LSR $4, %s, %s", dORow, dCnt)
	g.Label(l + "panel")
	for nv := 4; nv > 1; nv-- {
		g.Inst("CMP $%d, %s", nv, dCnt)
		g.Inst("BGE %svecs%d", l, nv)
	}
	g.Inst("B %svecs1", l)
	for nv := 4; nv >= 1; nv-- {
		lv := fmt.Sprintf("%svecs%d", l, nv)
		g.Label(lv)
		// Load the O rows, times alpha.
		g.Inst("MOVD %s, %s", dOw, dT)
		for r := 0; r < R; r++ {
			g.Inst("VLD1 (%s), %s", dT, vlist(decodeAcc(r, 0), nv))
			if r < R-1 {
				g.Inst("ADD %s, %s, %s", dORow, dT, dT)
			}
			for j := 0; j < nv; j++ {
				g.Emit(EncFMUL(decodeAcc(r, j), decodeAcc(r, j), dvAlpha+V(r)))
			}
		}
		g.Inst("MOVD %s, %s", dQw, dKw)
		for c := 1; c < 4; c++ {
			g.Inst("CMP $%d, %s", c, dSkip)
			g.Inst("BEQ %s_key%d", lv, c)
		}
		for c := 0; c < 4; c++ {
			g.Label(fmt.Sprintf("%s_key%d", lv, c))
			g.loadKV(e, dKw, dLdv, dvK, nv)
			for r := 0; r < R; r++ {
				for j := 0; j < nv; j++ {
					g.Emit(EncFMLAElem(decodeAcc(r, j), dvK+V(j), dvScore+V(r), c))
				}
			}
		}
		g.Inst("MOVD %s, %s", dOw, dT)
		for r := 0; r < R; r++ {
			g.Inst("VST1 %s, (%s)", vlist(decodeAcc(r, 0), nv), dT)
			if r < R-1 {
				g.Inst("ADD %s, %s, %s", dORow, dT, dT)
			}
		}
		g.Inst("ADD $%d, %s, %s", 16*nv, dOw, dOw)
		g.Inst("ADD $%d, %s, %s", (4*nv)<<e.shift, dQw, dQw)
		g.Inst("SUBS $%d, %s, %s", nv, dCnt, dCnt)
		g.Inst("BNE %spanel", l)
		if nv > 1 {
			g.Inst("B %sdone", l)
		}
	}
	g.Label(l + "done")
}
