// DecodeQ8<ISA>: the fused decode step's scores over int8 K on integer
// dot products (AVX-512: AVX512_VNNI's VPDPBUSD; AVX2: VPSIGNB,
// VPMADDUBSW and VPMADDWD), the rest as DecodeI8.

package main

import (
	"math/bits"

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
func (g *gen) transposeQ8(e elem, lc decodeLocals, sp reg.GPVirtual, form q8Form) {
	T := g.isa.lanes
	chunkBytes := 4 * T // of a Kt row, and of an int8 K row
	kBytes := chunkBytes
	if e == i4 {
		kBytes /= 2
	}
	kt, k0, ld := g.GP64(), g.GP64(), g.GP64()
	g.MOVQ(lc.ktOff, kt)
	g.ADDQ(sp, kt)
	g.MOVQ(lc.kp, k0)
	g.MOVQ(lc.ldk, ld)
	keys := g.keyRows(k0, ld, T)
	ahead := g.aheadRows(keys, lc.kAhead) // the rows decodeAhead blocks on
	n := g.GP64()
	g.MOVQ(lc.krow, n)
	g.SHRQ(operand.U8(bits.TrailingZeros(uint(kBytes))), n) // whole chunks
	// flip: k+128's sign bits (int8); nib: each byte's low nibble (int4).
	var flip, nib reg.VecVirtual
	switch {
	case e == i4:
		nib = g.vec()
		g.loadConst("nibbles", nib)
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
			case e == i4:
				g.unpackI4(keys.row(c), tail.kmask, nib, x[c])
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
			g.ADDQ(operand.Imm(uint64(kBytes)), b)
		}
	}
	if e == i4 {
		g.chunksI4("q8", n, lc.krow, func(half reg.OpmaskVirtual) {
			chunk(half != nil, tailRegs{kmask: half}, nil)
		})
		return
	}
	g.chunks("q8", n, lc.krow, func(masked bool, tail tailRegs, ymask reg.VecVirtual, _ reg.GPVirtual) {
		chunk(masked, tail, ymask)
	})
}

// chunks emits the loop over a K row's chunks of 4·T bytes: n (a
// register, counted down) whole ones, then, if the row's bytes (krow)
// leave a part, that part masked to its dwords (the tail's kmask, or
// AVX2's ymask loaded into a register; dwords holds their count).
func (g *gen) chunks(name string, n reg.GPVirtual, krow operand.Mem, chunk func(masked bool, tail tailRegs, ymask reg.VecVirtual, dwords reg.GPVirtual)) {
	g.Label(name + "_chunk")
	g.TESTQ(n, n)
	g.JZ(operand.LabelRef(name + "_tail"))
	chunk(false, tailRegs{}, nil, nil)
	g.DECQ(n)
	g.JMP(operand.LabelRef(name + "_chunk"))
	g.Label(name + "_tail")
	t := g.GP64()
	g.MOVQ(krow, t)
	g.ANDQ(operand.Imm(uint64(4*g.isa.lanes-1)), t)
	g.JZ(operand.LabelRef(name + "_done"))
	g.SHRQ(operand.U8(2), t) // the last chunk's dwords
	tail := g.tailMask(t)
	var ymask reg.VecVirtual
	if !g.isa.avx512() {
		ymask = g.vec()
		g.VMOVDQU(tail.ymask, ymask)
	}
	chunk(true, tail, ymask, t)
	g.Label(name + "_done")
}

// decodeScoresQ8 emits the scores and softmax of R rows (lc.row on) over
// the block's transposed K (transposeQ8): per scale block the int32
// sums (AVX-512: started at the rows' corrections) take 8 Kt rows × R
// dot steps (one row: two sums per row, alternate Kt rows, so the chain
// is half as long), then are scaled into the rows' float32 scores.
func (g *gen) decodeScoresQ8(e elem, lc decodeLocals, sp reg.GPVirtual, R int, form q8Form) {
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
			if a == 0 && (!sign || e == i4) { // int4: -8·Σ q8 in every form
				g.VPBROADCASTD(at(cb, nb4, nb12, r, 0), acc[r][a])
			} else {
				g.zero(acc[r][a])
			}
		}
	}
	rowBytes := 4 * g.isa.lanes // a Kt row
	y := g.vec()
	var abs reg.VecVirtual // VPMADDUBSW's |k| (int4's nibbles are unsigned as they are)
	if sign && e != i4 {
		abs = g.vec()
	}
	for i := 0; i < 8; i++ {
		ktRow := operand.Mem{Base: kt, Disp: rowBytes * i}
		if avx512 {
			g.VMOVDQU32(ktRow, y)
		} else {
			g.VMOVDQU(ktRow, y)
		}
		if abs != nil {
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
			// VPMADDUBSW: sum += Σ_4 |k|·(q8[r]·sign(k)) over dword i
			// (int4: Σ_4 u·q8[r], u unsigned).
			if e == i4 {
				g.VPMADDUBSW(t, y, t)
			} else {
				g.VPSIGNB(y, t, t)
				g.VPMADDUBSW(t, abs, t)
			}
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
	g.decodeSoftmaxRows(lc, sp, score, lb)
}

// decodeRowQ8 emits the scores and softmax of a one-row DecodeQ8 call
// over the block's K rows as they are, without decodeScoresQ8's
// transpose (whose stores and reloads cost a one-row call more than the
// float32 kernel's widening): per chunk of 4·T bytes (the last masked to
// the row's dwords), key c's int32 sums acc[c] take the chunk's products
// in one dot step (as decodeScoresQ8's: VPDPBUSD of k+128 by q8, or
// VPMADDUBSW of |k| by q8·sign(k) and VPMADDWD), foldKeys turns the T
// vectors into one per scale block (lane c: key c), and each is
// corrected (VPDPBUSD: qc), converted and scaled into the row's scores
// as decodeScoresQ8 does. Per 64 bytes of a K row: a load and an XOR,
// one VPDPBUSD, and a share of the fold (under 3 operations per key),
// where the float32 kernel converts and multiplies 4 vectors.
func (g *gen) decodeRowQ8(e elem, lc decodeLocals, sp reg.GPVirtual, form q8Form) {
	T := g.isa.lanes
	chunkBytes := 4 * T       // of q8, and of int8 K
	blocks := chunkBytes / 32 // scale blocks per chunk
	kBytes := chunkBytes      // of a K row per chunk
	if e == i4 {
		kBytes /= 2
	}
	avx512, sign := g.isa.avx512(), form == q8Sign
	k0, ld := g.GP64(), g.GP64()
	g.MOVQ(lc.kp, k0)
	g.MOVQ(lc.ldk, ld)
	keys := g.keyRows(k0, ld, T)
	qb := g.param("q8")
	// The row's q scales and corrections and the K scale rows advance
	// per chunk; kept in the frame, out of the key loop's registers.
	for _, t := range []struct {
		ptr operand.Mem
		reg reg.GPVirtual
	}{{lc.qsp, g.param("qs")}, {lc.qcp, g.param("qc")}} {
		g.MOVQ(t.reg, t.ptr)
	}
	ksc := g.GP64()
	g.LEAQ(operand.Mem{Base: sp, Disp: 4 * g.decodeLayout().total}, ksc)
	g.MOVQ(ksc, lc.kscp)
	n := g.GP64()
	g.MOVQ(lc.krow, n)
	g.SHRQ(operand.U8(bits.TrailingZeros(uint(kBytes))), n) // whole chunks
	// flip: k+128's sign bits (int8 on VPDPBUSD); nib: each byte's low
	// nibble (int4); ones: VPMADDWD's (the VPMADDUBSW form).
	var flip, nib, ones reg.VecVirtual
	switch {
	case e == i4:
		nib = g.vec()
		g.loadConst("nibbles", nib)
	case !sign:
		flip = g.vec()
		g.loadConst("byteSigns", flip)
	}
	if sign {
		ones = g.vec()
		g.VMOVDQU(g.cst("wordOnes"), ones)
	}
	score := g.vec()
	g.zero(score)
	// zr: zero, cleared once, from which the dot forms clear their sums
	// (zeroFrom: no load each). q8Sign's VPMADDWD writes its sums whole.
	var zr reg.VecVirtual
	if !sign {
		zr = g.vec()
		g.zero(zr)
	}
	// chunk adds the next 4·T bytes of each key to the scores; masked:
	// the tail's dwords only (its kmask, or AVX2's ymask in a register),
	// with a second scale block only if tail2 (a count of dwords) is
	// above 8.
	chunk := func(masked bool, tail tailRegs, ymask reg.VecVirtual, tail2 reg.GPVirtual, lb string) {
		// The chunk of q8, loaded once for the T keys.
		q := g.vec()
		switch {
		// The row's last block may end the buffer (DecodeQ8I4's q8 row is
		// whole chunks of 64 bytes: loaded whole).
		case masked && avx512 && e != i4:
			g.VMOVDQU32_Z(operand.Mem{Base: qb}, tail.kmask, q)
		case avx512:
			g.VMOVDQU32(operand.Mem{Base: qb}, q)
		default: // a whole block: in bounds (QueryQ8Ld)
			g.VMOVDQU(operand.Mem{Base: qb}, q)
		}
		acc := make([]reg.VecVirtual, T)
		for c := range acc {
			acc[c] = g.vec()
			if e == i4 {
				g.unpackI4Row(form, keys.row(c), tail.kmask, nib, ones, zr, q, acc[c])
				continue
			}
			var k operand.Op = keys.row(c)
			if masked {
				kv := g.vec()
				if avx512 {
					g.VMOVDQU32_Z(k, tail.kmask, kv)
				} else {
					g.VPMASKMOVD(k, ymask, kv)
				}
				k = kv
			}
			t := g.vec()
			switch {
			case sign: // |k|·(q8·sign(k)), pairs of words added
				abs := g.vec()
				g.VPABSB(k, abs)
				g.VPSIGNB(k, q, t)
				g.VPMADDUBSW(t, abs, t)
				g.VPMADDWD(ones, t, acc[c])
				continue
			case avx512:
				g.VPXORD(k, flip, t)
			default:
				g.VPXOR(k, flip, t)
			}
			g.zeroFrom(zr, acc[c])
			switch form {
			case q8Dot:
				if avx512 {
					g.VPDPBUSD(q, t, acc[c])
				} else {
					g.raw(vpdpbusdVEX, acc[c], t, q)
				}
			case q8DotEmu:
				g.raw(vpdpbusdEVEX256, acc[c], t, q)
			}
		}
		ahead := g.aheadRows(keys, lc.kAhead) // strided K: decodeAhead blocks on
		for c := range T {
			g.PREFETCHT1(ahead.row(c))
		}
		sb, cb, ks := g.GP64(), g.GP64(), g.GP64()
		g.MOVQ(lc.qsp, sb)
		g.MOVQ(lc.qcp, cb)
		g.MOVQ(lc.kscp, ks)
		for b, sv := range g.foldKeys(acc) {
			if b > 0 && masked && e == i4 { // the last chunk of int4 K: one block
				break
			}
			if b > 0 && masked {
				g.CMPQ(tail2, operand.Imm(8))
				g.JLE(operand.LabelRef(lb))
			}
			if !sign || e == i4 { // undo the +128 (-128·Σ q8 of the block), int4's 8 (-8·Σ q8)
				if avx512 {
					g.VPADDD_BCST(operand.Mem{Base: cb, Disp: 4 * b}, sv, sv)
				} else {
					c := g.vec()
					g.VPBROADCASTD(operand.Mem{Base: cb, Disp: 4 * b}, c)
					g.VPADDD(c, sv, sv)
				}
			}
			g.VCVTDQ2PS(sv, sv)
			g.VMULPS(operand.Mem{Base: ks, Disp: 4 * T * b}, sv, sv)
			if avx512 {
				g.VFMADD231PS_BCST(operand.Mem{Base: sb, Disp: 4 * b}, sv, score)
				continue
			}
			s := g.vec()
			g.VBROADCASTSS(operand.Mem{Base: sb, Disp: 4 * b}, s)
			g.VFMADD231PS(s, sv, score)
		}
		if masked {
			g.Label(lb)
			return
		}
		g.ADDQ(operand.Imm(uint64(4*blocks)), sb)
		g.ADDQ(operand.Imm(uint64(4*blocks)), cb)
		g.ADDQ(operand.U32(uint64(4*T*blocks)), ks)
		g.MOVQ(sb, lc.qsp)
		g.MOVQ(cb, lc.qcp)
		g.MOVQ(ks, lc.kscp)
		g.ADDQ(operand.Imm(uint64(chunkBytes)), qb)
		for _, b := range keys.bases {
			g.ADDQ(operand.Imm(uint64(kBytes)), b)
		}
	}
	if e == i4 {
		g.chunksI4("q8row", n, lc.krow, func(half reg.OpmaskVirtual) {
			chunk(half != nil, tailRegs{kmask: half}, nil, nil, "q8row_tailed")
		})
	} else {
		g.chunks("q8row", n, lc.krow, func(masked bool, tail tailRegs, ymask reg.VecVirtual, dwords reg.GPVirtual) {
			chunk(masked, tail, ymask, dwords, "q8row_tailed")
		})
	}
	g.decodeSoftmax(lc, sp, score, 0, "q8row_softmax")
}
