// ScoresQ8AMX<ISA>: ScoresQ8's score tile (the int8 compute mode's flash
// blocks) on AMX-INT8 tiles, Intel Xeons from Sapphire Rapids on, with
// ScoresQ8's packed operands and bits.
//
// TDPBUSD c, a, b adds to each int32 c[m][n] the dot products of row m of
// A (unsigned bytes, 4 a dword) with dword column n of B (signed bytes,
// row t of B holding dword t of each column): with A one block of 16
// packed key rows (k+128, 32 bytes each: 16 rows × 32 bytes, read in place
// at the rows' stride) and B the same block of 16 query rows' dwords
// (ScoresQ8's Q: 8 dword rows × 64 bytes, read in place at 4·ldq bytes), C
// is the block's 16 × 16 integer dot products D(c, r, b), keys by rows,
// exact (as VPDPBUSD's, never saturating: |Σ| ≤ 32·255·128 < 2^31). Each
// C tile starts at the rows' corrections, a 64-byte row loaded 16 times
// (TILELOADD at stride 0).
//
// A block's sums need the block's scales before the next block's join
// them, so each block's C is stored (TILESTORED, 1 KiB) and AVX-512 turns
// it into the scores as ScoresQ8 does (per key: VCVTDQ2PS, the key's
// scale times the rows' scales, an FMA into the key's vector of 16
// scores, held in 16 zmm through the blocks). Two C tiles (and two A and
// two B) take alternate blocks, so that the tile unit computes one block
// while AVX-512 scales the other.
//
// The kernel takes whole groups of 16 keys and vectors of 16 rows; a
// caller runs the last nk%16 keys on ScoresQ8 (kernels.Set.ScoresQ8), with
// the same bits. Its Emu twin computes each tile instruction with AVX-512
// on a tile file in memory, TDPBUSD as VPDPBUSD row by row (AVX512_VNNI):
// exact integers both ways, so the twins' bits are equal, and equal to
// fallback.ScoresQ8's.

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// ScoresQ8AMX's tile registers: C (int32 sums, 16 keys × 16 rows), A (a
// block of 16 keys' bytes, 16 × 32 bytes) and B (a block of 16 rows'
// dwords, 8 × 64 bytes), two of each for alternate blocks; tiles 6 and 7
// are unconfigured and their slots of the tiles buffer hold the stored
// sums.
const (
	q8TileC, q8TileA, q8TileB = 0, 2, 4
	q8Slot                    = 6
	q8Keys                    = amxRows     // keys of a tile: C's and A's rows
	q8Dwords                  = q8Steps     // dwords of a block: A's columns, B's rows
	q8KeyBytes                = 4 * q8Steps // a block's bytes of a key: A's row
)

// tileConfigQ8 emits ScoresQ8AMX's LDTILECFG operand: palette 1, C tiles
// 0-1 of 16 rows × 64 bytes, A tiles 2-3 of 16 × 32, B tiles 4-5 of 8 × 64.
func (g *gen) tileConfigQ8() operand.Mem {
	cfg := g.StaticGlobal("tilecfgq8" + g.isa.suffix)
	g.DataAttributes(attr.RODATA | attr.NOPTR)
	colsb := [8]int{amxBytes, amxBytes, q8KeyBytes, q8KeyBytes, amxBytes, amxBytes}
	rows := [8]int{q8Keys, q8Keys, q8Keys, q8Keys, q8Dwords, q8Dwords}
	g.AddDatum(0, operand.U8(1))
	for t := 0; t < 8; t++ {
		g.AddDatum(16+2*t, operand.U16(colsb[t]))
	}
	for t := 0; t < 8; t++ {
		g.AddDatum(48+t, operand.U8(rows[t]))
	}
	g.AddDatum(56, operand.U64(0))
	return cfg
}

// loadShape is TILELOADD tile, [base + stride] of a tile of rows rows ×
// colsb bytes (the configuration's; the Emu twin copies only those bytes).
func (t amx) loadShape(tile, rows, colsb int, base, stride reg.GPVirtual) {
	if !t.emu {
		t.g.amxMem(tileloadd, tile, base, stride, t.ext())
		return
	}
	t.copyShape(tile, rows, colsb, base, stride, true)
}

// storeShape is TILESTORED [base + stride], tile.
func (t amx) storeShape(tile, rows, colsb int, base, stride reg.GPVirtual) {
	if !t.emu {
		t.g.amxMem(tilestored, tile, base, stride, t.ext())
		return
	}
	t.copyShape(tile, rows, colsb, base, stride, false)
}

// dotQ8 is TDPBUSD c, a, b on ScoresQ8AMX's shapes; the Emu twin adds, row
// m of C by row, each dword k of A's row m (broadcast, unsigned) times B's
// row k (signed) by VPDPBUSD, k = 0..7.
func (t amx) dotQ8(c, a, b int) {
	if !t.emu {
		t.g.amxRegs(tdpbusd, c, a, b)
		return
	}
	*t.loops++
	t.emuProduct(c, a, b, q8Dwords, fmt.Sprintf("tdpbusd%d", *t.loops), func(acc, bc reg.VecVirtual, bRow operand.Mem) {
		t.g.VPDPBUSD(bRow, bc, acc)
	})
}

// scoresQ8AMXRegs are the registers ScoresQ8AMX's block loop keeps.
type scoresQ8AMXRegs struct {
	kb   reg.GPVirtual // block b of the group's first packed key row
	bo   reg.GPVirtual // b·4·ldq: block b's scale and correction row, bytes
	ldk  reg.GPVirtual // the packed key rows' stride, bytes
	ldq4 reg.GPVirtual // Q's dword row stride, bytes
	zero reg.GPVirtual // 0: the corrections' row stride
}

// scoresQ8AMX emits ScoresQ8AMX<ISA> (or its Emu twin).
func (g *gen) scoresQ8AMX(cfg operand.Mem, emu bool) {
	doc := []string{"",
		"\tfor c := 0; c < 16*kg; c++ {",
		"\t\tfor r := 0; r < 16*nv; r++ {",
		"\t\t\ts[c*lds+r] = Σ_{b<nb} float32(Σ_{d<32} (k8(c, b, d)+128)·q8(r, 32b+d) + qc[b*ldq+r]) · (qs[b*ldq+r]·ks(c, b))",
		"",
		"ScoresQ8's tile (the same operands, strides and bits) for kg groups of",
		"16 keys and nv vectors of 16 rows, each block's integer sums on AMX-INT8",
		"tiles (TDPBUSD), their scaling on AVX-512. kg, nv, nb >= 1. tiles is 8",
		"KiB of scratch: the stored sums at 6 and 7 KiB. The tiles are",
		"configured and released within the call.",
	}
	if emu {
		doc = append(doc, "This twin computes each tile instruction with AVX-512 on the tile file",
			"tiles, TDPBUSD by VPDPBUSD (AVX512_VNNI): the native kernel's bits.")
	}
	g.fn("ScoresQ8AMX"+emuName(emu), "func(s *float32, lds int, k *uint8, ldk int, q *int8, qs *float32, qc *int32, ldq, kg, nv, nb int, tiles *uint32)", doc...)
	loops := 0
	t := amx{g: g, emu: emu, feature: "AMX-INT8", loops: &loops}
	t.tiles = g.param("tiles")
	if !emu {
		cp := g.GP64()
		g.LEAQ(cfg, cp)
		g.amxCfg(cp)
	}
	// Little stays in registers through the loops (the Emu twin's tile
	// instructions need their own): the group's key row and score row
	// live in locals, the vectors' bases advance in their argument slots.
	groups, kpL, spL := g.AllocLocal(8), g.AllocLocal(8), g.AllocLocal(8)
	g.Comment("Vectors of 16 rows.")
	g.Label("vec")
	for _, l := range []struct {
		to   operand.Mem
		from string
	}{{groups, "kg"}, {kpL, "k"}, {spL, "s"}} {
		x := g.param(l.from)
		g.MOVQ(x, l.to)
	}
	g.Comment("Groups of 16 keys: 16 score vectors, from zero.")
	g.Label("group")
	out := make([]reg.VecVirtual, q8Keys)
	for i := range out {
		out[i] = g.ZMM()
		g.VPXORD(out[i], out[i], out[i])
	}
	var r scoresQ8AMXRegs
	r.kb, r.bo, r.zero = g.GP64(), g.GP64(), g.GP64()
	g.MOVQ(kpL, r.kb)
	g.XORQ(r.bo, r.bo)
	g.XORQ(r.zero, r.zero)
	r.ldk, r.ldq4 = g.stride("ldk"), g.stride("ldq")
	pairs := g.param("nb")
	g.SHRQ(operand.U8(1), pairs)
	g.JZ(operand.LabelRef("single"))
	g.Comment("Two blocks a step, on alternate tiles: both products, then both blocks' scaling.")
	g.Label("pair")
	g.q8TileProduct(t, r, 0)
	g.q8TileProduct(t, r, 1)
	g.q8BlockScores(t, r, out, 0)
	g.q8BlockScores(t, r, out, 1)
	g.ADDQ(operand.U32(2*q8BlockBytes), r.kb)
	g.LEAQ(operand.Mem{Base: r.bo, Index: r.ldq4, Scale: 2}, r.bo)
	g.DECQ(pairs)
	g.JNZ(operand.LabelRef("pair"))
	g.Label("single")
	g.TESTQ(operand.U32(1), g.arg("nb"))
	g.JZ(operand.LabelRef("store"))
	g.Comment("An odd number of blocks: the last one.")
	g.q8TileProduct(t, r, 0)
	g.q8BlockScores(t, r, out, 0)
	g.Label("store")
	g.Comment("Store the group's scores key by key; the next group.")
	sp, lds := g.GP64(), g.stride("lds")
	g.MOVQ(spL, sp)
	for i := range out {
		g.VMOVUPS(out[i], operand.Mem{Base: sp})
		g.ADDQ(lds, sp)
	}
	g.MOVQ(sp, spL)
	next := g.stride("ldk")
	g.SHLQ(operand.U8(4), next)
	g.ADDQ(next, kpL)
	g.DECQ(groups)
	g.JNZ(operand.LabelRef("group"))
	g.Comment("The next 16 rows: s, q, qs and qc advance in their argument slots.")
	for _, name := range []string{"s", "q", "qs", "qc"} {
		g.ADDQ(operand.U32(amxBytes), g.arg(name))
	}
	g.DECQ(g.arg("nv"))
	g.JNZ(operand.LabelRef("vec"))
	if !emu {
		g.amxRegs(tilerelease, 0, 0, 0)
	}
	g.ret()
}

// q8TileProduct loads block kb (second: the block after it) of the
// group's keys, of the rows and of their corrections into the tiles of
// parity second and multiplies them.
func (g *gen) q8TileProduct(t amx, r scoresQ8AMXRegs, second int) {
	c, a, b := q8TileC+second, q8TileA+second, q8TileB+second
	p := g.GP64()
	g.MOVQ(g.arg("qc"), p)
	g.ADDQ(r.bo, p)
	if second == 1 {
		g.ADDQ(r.ldq4, p)
	}
	t.loadShape(c, q8Keys, amxBytes, p, r.zero) // every key's row: the rows' corrections
	kp := r.kb
	if second == 1 {
		kp = g.GP64()
		g.LEAQ(operand.Mem{Base: r.kb, Disp: q8BlockBytes}, kp)
	}
	t.loadShape(a, q8Keys, q8KeyBytes, kp, r.ldk)
	qp := g.GP64()
	g.MOVQ(g.arg("q"), qp)
	g.LEAQ(operand.Mem{Base: qp, Index: r.bo, Scale: 8}, qp)
	if second == 1 {
		g.LEAQ(operand.Mem{Base: qp, Index: r.ldq4, Scale: 8}, qp)
	}
	t.loadShape(b, q8Dwords, amxBytes, qp, r.ldq4)
	t.dotQ8(c, a, b)
}

// q8BlockScores stores the sums of the tiles of parity second to their
// slot and adds them to the scores: per key, the sums to float32, times
// the key's scale × the rows' scales (ScoresQ8's order), by an FMA.
func (g *gen) q8BlockScores(t amx, r scoresQ8AMXRegs, out []reg.VecVirtual, second int) {
	slot, stride := g.GP64(), g.GP64()
	g.LEAQ(operand.Mem{Base: t.tiles, Disp: (q8Slot + second) * amxRows * amxBytes}, slot)
	g.MOVQ(operand.U32(amxBytes), stride)
	t.storeShape(q8TileC+second, q8Keys, amxBytes, slot, stride)
	qsp, w := g.GP64(), g.ZMM()
	g.MOVQ(g.arg("qs"), qsp)
	g.ADDQ(r.bo, qsp)
	if second == 1 {
		g.ADDQ(r.ldq4, qsp)
	}
	g.VMOVUPS(operand.Mem{Base: qsp}, w)
	kt := g.GP64()
	g.MOVQ(r.kb, kt)
	for i := range out {
		ksc, d := g.ZMM(), g.ZMM()
		g.VBROADCASTSS(operand.Mem{Base: kt, Disp: second*q8BlockBytes + q8ScaleAt}, ksc)
		g.VMULPS(w, ksc, ksc)
		g.VCVTDQ2PS(operand.Mem{Base: slot, Disp: i * amxBytes}, d)
		g.VFMADD231PS(d, ksc, out[i])
		if i < len(out)-1 {
			g.ADDQ(r.ldk, kt)
		}
	}
}
