// DecodeQ8NEON's scores: int8 K on integer dot products (SDOT by element,
// FEAT_DotProd), the rest as DecodeI8NEON.

package main

import (
	"fmt"

	. "github.com/fastattn/fastattn/gen/neon"
)

// decodeScoresQ8 emits DecodeQ8NEON's scores of R rows from dRow over the
// block's 4 K rows as they are (dK, dLdk bytes apart). Per scale block of
// 32 dims the rows' int32 sums V0..V(R-1) take, per chunk of 16 bytes,
// the chunk of every key by lane (LD4 by lane: V20+i lane c holds key c's
// dword i), the R rows' q8 chunks (V16+r) and 4R SDOT by element (lane c
// gains key c's 4 products with the row's dword i), exact in int32; a
// row whose dk is not a multiple of 16 loads its last 1..3 dwords a lane
// at a time (the q8 chunk is read whole: its block's 32 bytes are there).
// Then each sum is converted, multiplied by the 4 keys' K scales of the
// block (V24, a lane each) and added into the row's scores (dvScore+r)
// by an FMA with the row's q scale (V25, broadcast). Per 16 bytes of the
// 4 keys: 4 loads shared by the rows, and 4 SDOT per row, where
// DecodeI8NEON dequantizes (widens, converts, scales) 16 vectors once and
// takes 16 FMAs per row.
func (g *gen) decodeScoresQ8(R int) {
	l := fmt.Sprintf("rows%d_q8_", R)
	g.Comment(fmt.Sprintf("Scores of %d rows on SDOT: K read a dword of each key per lane.", R))
	for r := 0; r < R; r++ {
		g.zero(dvScore + V(r))
	}
	// dQback = R·ldq8 - 16: back to the group's first row, a chunk on.
	g.Inst("MOVD $%d, %s", R, dT)
	g.Inst("MUL %s, %s, %s", dQRow, dT, dQback)
	g.Inst("SUB $16, %s, %s", dQback, dQback)
	g.Inst("MOVD %s, %s", dK, dKw)
	g.Inst("MOVD %s, %s", dRowQ, dQw)
	// dKs = the block's K scales; dOw = qs + row·nb·4; dCnt = dwords of dk.
	g.Inst("MOVD %s, %s", g.Arg("ks"), dKs)
	g.Inst("MOVD %s, %s", g.Arg("dk"), dCnt)
	g.Inst("MOVD %s, %s", dCnt, dT)
	g.nb4(dT)
	g.Inst("MUL %s, %s, %s", dRow, dT, dOw)
	g.Inst("MOVD %s, %s", g.Arg("qs"), dT2)
	g.Inst("ADD %s, %s, %s", dT2, dOw, dOw)
	g.Inst("LSR $2, %s, %s", dCnt, dCnt)
	g.Label(l + "block")
	for r := 0; r < R; r++ {
		g.zero(V(r))
	}
	// dT = the scale block's dwords: min(8, dCnt).
	g.Inst("MOVD $8, %s", dT)
	g.Inst("CMP $8, %s", dCnt)
	g.Inst("CSEL LT, %s, %s, %s", dCnt, dT, dT)
	g.Inst("SUB %s, %s, %s", dT, dCnt, dCnt)
	loadQ := func() {
		for r := 0; r < R; r++ {
			g.Inst("VLD1.P (%s)(%s), [%s]", dQw, dQRow, V(16+r).B16())
		}
		g.Inst("SUB %s, %s, %s", dQback, dQw, dQw)
	}
	sdot := func(i int) {
		for r := 0; r < R; r++ {
			g.Emit(EncSDOTElem(V(r), V(20+i), V(16+r), i))
		}
	}
	g.Label(l + "chunk")
	g.Inst("CMP $4, %s", dT)
	g.Inst("BLT %stail", l)
	for c := 0; c < 4; c++ {
		g.Emit(EncLD4Lane(20, c, dKw, dLdk))
	}
	g.Inst("SUB %s, %s, %s", dKback, dKw, dKw)
	loadQ()
	for i := 0; i < 4; i++ {
		sdot(i)
	}
	g.Inst("SUB $4, %s, %s", dT, dT)
	g.Inst("B %schunk", l)
	// The last 1..3 dwords of the row: dword i of each key into V20+i.
	g.Label(l + "tail")
	g.Inst("CBZ %s, %sscale", dT, l)
	loadQ()
	for i := 0; i < 3; i++ {
		if i > 0 {
			g.Inst("CMP $%d, %s", i, dT)
			g.Inst("BLE %sscale", l)
		}
		for c := 0; c < 4; c++ {
			g.Inst("VLD1.P (%s)(%s), %s", dKw, dLdk, V(20+i).S(c))
		}
		// Back 4 rows, a dword on: 4·ldk - 4 = dKback + 12.
		g.Inst("SUB %s, %s, %s", dKback, dKw, dKw)
		g.Inst("SUB $12, %s, %s", dKw, dKw)
		sdot(i)
	}
	g.Label(l + "scale")
	// V24 lane c = key c's K scale of the block (ks rows ldks apart).
	g.Inst("MOVD %s, %s", g.Arg("ldks"), dT2)
	g.Inst("LSL $2, %s, %s", dT2, dT2)
	g.Inst("MOVD %s, %s", dKs, dT)
	for c := 0; c < 4; c++ {
		g.Inst("VLD1.P (%s)(%s), %s", dT, dT2, V(24).S(c))
	}
	g.Inst("ADD $4, %s, %s", dKs, dKs)
	// Row r's q scale of the block at dOw + r·nb·4.
	g.Inst("MOVD %s, %s", g.Arg("dk"), dT2)
	g.nb4(dT2)
	g.Inst("MOVD %s, %s", dOw, dT)
	for r := 0; r < R; r++ {
		g.Emit(EncSCVTF(V(r), V(r), false))
		g.Emit(EncFMUL(V(r), V(r), 24))
		g.Inst("VLD1R.P (%s)(%s), [%s]", dT, dT2, V(25).S4())
		g.VFMLA(dvScore+V(r), V(r), 25)
	}
	g.Inst("ADD $4, %s, %s", dOw, dOw)
	g.Inst("CBNZ %s, %sblock", dCnt, l)
}

// nb4 turns r, holding dk, into the bytes of a row's float32 scales:
// ⌈dk/32⌉·4.
func (g *gen) nb4(r R) {
	g.Inst("ADD $31, %s, %s", r, r)
	g.Inst("LSR $5, %s, %s", r, r)
	g.Inst("LSL $2, %s, %s", r, r)
}
