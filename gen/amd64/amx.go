// The AMX-BF16 kernels of the AVX-512 set (the bfloat16 compute mode on
// Intel Xeons from Sapphire Rapids on): GemmAMX, GemmBF16's bulk on tiles,
// and AMXPeak, the tile unit's throughput loop.
//
// AMX holds eight tile registers of up to 16 rows × 64 bytes. TDPBF16PS
// tmm_c, tmm_a, tmm_b adds to each float32 c[m][n] (16 × 16) the products
// of a row of A (16 pairs of bfloat16: 32 terms along k) with a column of
// B given in pairs (row p of B holds, for each of the 16 columns, the
// bfloat16 terms 2p and 2p+1): exactly GemmBF16's operands when A's pairs
// run along its rows (lka = 1: QK's K rows, a projection's activations)
// and B is paired (Qᵀ, V, weights). A tile is loaded from memory rows at
// any stride (TILELOADD [base + stride]), so the operands are read in
// place.
//
// Neither avo nor Go's assembler knows the tile instructions: they are
// VEX-encoded here (amxOp) and written as BYTE directives, their memory
// operands placeholders on avo registers until allocation (amxPass), each
// checked against binutils' disassembler (amx_test.go). Every kernel also
// has an Emu twin, the same code with each tile instruction computed by
// AVX-512F on a tile file in memory (8 tiles × 1 KiB, the tiles argument)
// and TDPBF16PS as VDPBF16PS's definition pair by pair: run by the tests
// on any AVX-512 CPU, bit for bit fallback.GemmBF16 on normal operands
// (denormals keep their value, as in the emulated VDPBF16PS). The native
// instruction sums in an order Intel does not document (with denormals
// read and written as zero), so only the Emu twin has a Go twin; the
// native kernel is held to the bfloat16 mode's bounds.
//
// No tile state survives a call: each call loads its configuration
// (LDTILECFG) and releases the tiles (TILERELEASE) before it returns, so
// goroutines moving between threads never see another's tiles.

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/ir"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// amxOp is one VEX-encoded tile instruction: VEX.128.pp.0F38.W0 opcode.
type amxOp struct {
	name   string // mnemonic
	pp     byte   // implied prefix: 0 none, 1 = 66, 2 = F3, 3 = F2
	opcode byte
}

var (
	// tileloadd is TILELOADD tmm, [base + index·1] (VEX.128.F2.0F38.W0 4B /r).
	tileloadd = amxOp{"TILELOADD", 3, 0x4b}
	// tilestored is TILESTORED [base + index·1], tmm (VEX.128.F3.0F38.W0 4B /r).
	tilestored = amxOp{"TILESTORED", 2, 0x4b}
	// tdpbf16ps is TDPBF16PS tmm1, tmm2, tmm3 (VEX.128.F3.0F38.W0 5C
	// 11:rrr:bbb, tmm3 in vvvv): tmm1 += tmm2 · tmm3 over bfloat16 pairs.
	tdpbf16ps = amxOp{"TDPBF16PS", 2, 0x5c}
	// tdpbusd is TDPBUSD tmm1, tmm2, tmm3 (VEX.128.66.0F38.W0 5E
	// 11:rrr:bbb, tmm3 in vvvv): tmm1's int32 += the dot products of
	// tmm2's unsigned bytes by tmm3's signed ones, 4 a dword (AMX-INT8).
	tdpbusd = amxOp{"TDPBUSD", 1, 0x5e}
	// tilezero is TILEZERO tmm (VEX.128.F2.0F38.W0 49 11:rrr:000).
	tilezero = amxOp{"TILEZERO", 3, 0x49}
	// ldtilecfg is LDTILECFG [base] (VEX.128.NP.0F38.W0 49 !(11):000:bbb).
	ldtilecfg = amxOp{"LDTILECFG", 0, 0x49}
	// tilerelease is TILERELEASE (VEX.128.NP.0F38.W0 49 C0).
	tilerelease = amxOp{"TILERELEASE", 0, 0x49}
)

// vex3 returns the three VEX bytes of op: R̄ X̄ B̄ from the ModRM.reg,
// SIB.index and base (or ModRM.rm) register numbers' bit 3, map 0F38,
// W0, vvvv = ^v, L0.
func (op amxOp) vex3(r, x, b, v int) []byte {
	inv := func(n int) byte { return byte(n>>3&1) ^ 1 }
	return []byte{0xc4, inv(r)<<7 | inv(x)<<6 | inv(b)<<5 | 2, byte(^v&15)<<3 | op.pp}
}

// encodeMem returns op with a tile register and the memory operand
// [base + index·1] (TILELOADD, TILESTORED). RBP or R13 as base takes a
// zero disp8 (mod 01); RSP cannot be an index.
func (op amxOp) encodeMem(tmm, base, index int) []byte {
	if tmm < 0 || tmm > 7 || base < 0 || base > 15 || index < 0 || index > 15 || index == 4 {
		panic(fmt.Sprintf("%s: tmm%d, base %d, index %d", op.name, tmm, base, index))
	}
	mod, disp := byte(0), []byte(nil)
	if base&7 == 5 {
		mod, disp = 1, []byte{0}
	}
	b := append(op.vex3(tmm, index, base, 0), op.opcode, mod<<6|byte(tmm)<<3|4, byte(index&7)<<3|byte(base&7))
	return append(b, disp...)
}

// encodeRegs returns op on tile registers (TDPBF16PS c, a, b; TILEZERO t
// with a = b = 0).
func (op amxOp) encodeRegs(c, a, b int) []byte {
	for _, t := range []int{c, a, b} {
		if t < 0 || t > 7 {
			panic(fmt.Sprintf("%s: tmm%d", op.name, t))
		}
	}
	if (op == tdpbf16ps || op == tdpbusd) && (c == a || c == b || a == b) { // #UD: the three tiles must differ
		panic(fmt.Sprintf("%s: tmm%d, tmm%d, tmm%d are not distinct", op.name, c, a, b))
	}
	return append(op.vex3(c, 0, a, b), op.opcode, 0xc0|byte(c)<<3|byte(a))
}

// encodeCfg returns LDTILECFG [base].
func (op amxOp) encodeCfg(base int) []byte {
	if base < 0 || base > 15 {
		panic(fmt.Sprintf("%s: base %d", op.name, base))
	}
	b := append(op.vex3(0, 0, base, 0), op.opcode)
	switch base & 7 {
	case 4: // RSP, R12: a SIB byte with no index
		return append(b, 0x04, 0x24)
	case 5: // RBP, R13: mod 01, disp8 0
		return append(b, 0x45, 0)
	}
	return append(b, byte(base&7))
}

// bytesOf returns the BYTE directives of an encoding.
func bytesOf(b []byte) string {
	s := ""
	for i, x := range b {
		if i > 0 {
			s += "; "
		}
		s += fmt.Sprintf("BYTE $0x%02x", x)
	}
	return s
}

// amxRegs emits an instruction without register operands as its bytes.
func (g *gen) amxRegs(op amxOp, c, a, b int) {
	text := fmt.Sprintf("%s tmm%d, tmm%d, tmm%d", op.name, c, a, b)
	switch op {
	case tilezero:
		text = fmt.Sprintf("%s tmm%d", op.name, c)
	case tilerelease:
		g.Instruction(&ir.Instruction{Opcode: bytesOf([]byte{0xc4, 0xe2, 0x78, 0x49, 0xc0}) + " // TILERELEASE"})
		return
	}
	g.Instruction(&ir.Instruction{Opcode: bytesOf(op.encodeRegs(c, a, b)) + " // " + text})
}

// amxMem emits TILELOADD tmm, [base + stride] or TILESTORED [base +
// stride], tmm as a placeholder on avo registers, which amxPass encodes
// once they are allocated. Go's order: the memory operand's registers.
// feature is the kernel's AMX extension (AMX-BF16, AMX-INT8), named in
// its Requires line.
func (g *gen) amxMem(op amxOp, tmm int, base, stride reg.GPVirtual, feature string) {
	g.Instruction(&ir.Instruction{
		Opcode:   fmt.Sprintf("%s%d", op.name, tmm),
		Operands: []operand.Op{base, stride},
		Inputs:   []operand.Op{base, stride},
		ISA:      []string{"AMX-TILE", feature},
	})
}

// amxCfg emits LDTILECFG [base] as a placeholder.
func (g *gen) amxCfg(base reg.GPVirtual) {
	g.Instruction(&ir.Instruction{
		Opcode:   ldtilecfg.name,
		Operands: []operand.Op{base},
		Inputs:   []operand.Op{base},
		ISA:      []string{"AMX-TILE"},
	})
}

// amxPass replaces the tile placeholders of f by their bytes, once avo
// has allocated the registers.
func amxPass(f *ir.File) error {
	for _, fn := range f.Functions() {
		for _, n := range fn.Nodes {
			i, ok := n.(*ir.Instruction)
			if !ok {
				continue
			}
			var op amxOp
			tmm := -1
			switch {
			case i.Opcode == ldtilecfg.name:
				op = ldtilecfg
			case len(i.Opcode) == len(tileloadd.name)+1 && i.Opcode[:len(tileloadd.name)] == tileloadd.name:
				op, tmm = tileloadd, int(i.Opcode[len(i.Opcode)-1]-'0')
			case len(i.Opcode) == len(tilestored.name)+1 && i.Opcode[:len(tilestored.name)] == tilestored.name:
				op, tmm = tilestored, int(i.Opcode[len(i.Opcode)-1]-'0')
			default:
				continue
			}
			var num []int
			var names []string
			for k, o := range i.Operands {
				r, ok := o.(reg.Register)
				p := reg.ToPhysical(r)
				if !ok || p == nil || p.Kind() != reg.KindGP || p.Size() != 8 {
					return fmt.Errorf("%s: %s: operand %d is %v, not an allocated 64-bit register", fn.Name, op.name, k, o)
				}
				num, names = append(num, int(p.PhysicalIndex())), append(names, p.Asm())
			}
			var b []byte
			var text string
			switch op {
			case ldtilecfg:
				b, text = op.encodeCfg(num[0]), fmt.Sprintf("LDTILECFG (%s)", names[0])
			case tileloadd:
				if num[1] == 4 {
					return fmt.Errorf("%s: %s: SP cannot be an index", fn.Name, op.name)
				}
				b, text = op.encodeMem(tmm, num[0], num[1]), fmt.Sprintf("TILELOADD tmm%d, (%s)(%s*1)", tmm, names[0], names[1])
			case tilestored:
				if num[1] == 4 {
					return fmt.Errorf("%s: %s: SP cannot be an index", fn.Name, op.name)
				}
				b, text = op.encodeMem(tmm, num[0], num[1]), fmt.Sprintf("TILESTORED (%s)(%s*1), tmm%d", names[0], names[1], tmm)
			}
			i.Opcode = bytesOf(b) + " // " + text
			i.Operands = nil
		}
	}
	return nil
}

// amxTile is the tile shape every GemmAMX tile has: 16 rows of 64 bytes
// (16 float32 of C, 16 pairs of A, 16 columns of paired B).
const (
	amxRows  = 16
	amxBytes = 64
	// amxBlock is the C block of one step of GemmAMX: 2×2 tiles.
	amxBlock = 2 * amxRows
)

// tileConfig emits, once per set, the 64-byte LDTILECFG operand: palette
// 1, tiles 0..7 of amxRows rows × amxBytes bytes.
func (g *gen) tileConfig() operand.Mem {
	cfg := g.StaticGlobal("tilecfg" + g.isa.suffix)
	g.DataAttributes(attr.RODATA | attr.NOPTR)
	// Palette 1, then the columns' bytes and the rows of tiles 0..7, in
	// increasing offsets, as Go's assembler wants them.
	g.AddDatum(0, operand.U8(1))
	for t := 0; t < 8; t++ {
		g.AddDatum(16+2*t, operand.U16(amxBytes))
	}
	for t := 0; t < 8; t++ {
		g.AddDatum(48+t, operand.U8(amxRows))
	}
	g.AddDatum(56, operand.U64(0)) // rows 8..15 and the rest: zero (64 bytes in all)
	return cfg
}

// amx is the code of one tile kernel, native or through the tile file.
type amx struct {
	g       *gen
	emu     bool
	tiles   reg.GPVirtual // the Emu twin's tile file
	feature string        // the tile unit's extension: "AMX-BF16" (default) or "AMX-INT8"
	loops   *int          // the Emu twin's tile products so far (their labels)
}

// ext is the extension the kernel's tile loads and stores belong to.
func (t amx) ext() string {
	if t.feature == "" {
		return "AMX-BF16"
	}
	return t.feature
}

// tileAddr returns the Emu tile file's row r of tile t.
func (t amx) tileAddr(tile, row int) operand.Mem {
	return operand.Mem{Base: t.tiles, Disp: tile*amxRows*amxBytes + row*amxBytes}
}

// load is TILELOADD tile, [base + stride] (stride in bytes).
func (t amx) load(tile int, base, stride reg.GPVirtual) {
	if !t.emu {
		t.g.amxMem(tileloadd, tile, base, stride, t.ext())
		return
	}
	t.copyRows(tile, base, stride, true)
}

// store is TILESTORED [base + stride], tile.
func (t amx) store(tile int, base, stride reg.GPVirtual) {
	if !t.emu {
		t.g.amxMem(tilestored, tile, base, stride, t.ext())
		return
	}
	t.copyRows(tile, base, stride, false)
}

// copyRows is the Emu twin's tile load (toTile) or store: the tile's 16
// rows of 64 bytes from or to memory rows at base, stride bytes apart.
func (t amx) copyRows(tile int, base, stride reg.GPVirtual, toTile bool) {
	t.copyShape(tile, amxRows, amxBytes, base, stride, toTile)
}

// copyShape is copyRows for a tile configured as rows rows of colsb
// bytes (32 or 64): only those bytes of memory are read or written.
func (t amx) copyShape(tile, rows, colsb int, base, stride reg.GPVirtual, toTile bool) {
	g := t.g
	p := g.GP64()
	v := reg.VecVirtual(g.ZMM())
	if colsb == amxBytes/2 {
		v = g.YMM()
	} else if colsb != amxBytes {
		panic(fmt.Sprintf("copyShape: %d bytes a row", colsb))
	}
	g.MOVQ(base, p)
	for r := 0; r < rows; r++ {
		mem, file := operand.Mem{Base: p}, t.tileAddr(tile, r)
		if toTile {
			g.VMOVUPS(mem, v)
			g.VMOVUPS(v, file)
		} else {
			g.VMOVUPS(file, v)
			g.VMOVUPS(v, mem)
		}
		if r < rows-1 {
			g.ADDQ(stride, p)
		}
	}
}

// zero is TILEZERO tile.
func (t amx) zero(tile int) {
	g := t.g
	if !t.emu {
		g.amxRegs(tilezero, tile, 0, 0)
		return
	}
	v := g.ZMM()
	g.zero(v)
	for r := 0; r < amxRows; r++ {
		g.VMOVUPS(v, t.tileAddr(tile, r))
	}
}

// dot is TDPBF16PS c, a, b; the Emu twin adds, row by row of C, the 16
// pairs of A's row in order, each as VDPBF16PS's definition does (the
// high terms' product, then the low ones').
func (t amx) dot(c, a, b int) {
	if !t.emu {
		t.g.amxRegs(tdpbf16ps, c, a, b)
		return
	}
	t.emuProduct(c, a, b, amxRows, fmt.Sprintf("tdp_%d_%d_%d", c, a, b), func(acc, bc reg.VecVirtual, bRow operand.Mem) {
		bv := t.g.ZMM()
		t.g.VMOVUPS(bRow, bv)
		t.g.dpbf16(acc, bc, bv, true)
	})
}

// emuProduct is the Emu twin's tile product c += a · b: for each of C's
// 16 rows (a loop at label lbl, unique in the function), the row from
// the tile file, then for k < steps the dword k of A's row broadcast and
// step(acc, that broadcast, B's row k), then the row back.
func (t amx) emuProduct(c, a, b, steps int, lbl string, step func(acc, bc reg.VecVirtual, bRow operand.Mem)) {
	g := t.g
	row, n := g.GP64(), g.GP64()
	g.MOVQ(t.tiles, row)
	g.MOVQ(operand.U32(amxRows), n)
	g.Label(lbl)
	acc := g.ZMM()
	g.VMOVUPS(operand.Mem{Base: row, Disp: c * amxRows * amxBytes}, acc)
	for k := 0; k < steps; k++ {
		bc := g.ZMM()
		g.VPBROADCASTD(operand.Mem{Base: row, Disp: a*amxRows*amxBytes + 4*k}, bc)
		step(acc, bc, operand.Mem{Base: t.tiles, Disp: b*amxRows*amxBytes + k*amxBytes})
	}
	g.VMOVUPS(acc, operand.Mem{Base: row, Disp: c * amxRows * amxBytes})
	g.ADDQ(operand.U32(amxBytes), row)
	g.DECQ(n)
	g.JNZ(operand.LabelRef(lbl))
}

// gemmAMX emits GemmAMX<ISA> (or its Emu twin).
func (g *gen) gemmAMX(cfg operand.Mem, emu bool) {
	doc := []string{"",
		"\tfor i := 0; i < 32*mb; i++ {",
		"\t\tfor j := 0; j < 32*nb; j++ {",
		"\t\t\tc[i*ldc+j] = (acc != 0 ? c[i*ldc+j] : 0) ⊕_{p<16*kb} dot2(a[i*lda+p], b[p*ldb+j])",
		"",
		"GemmBF16's bulk on AMX tiles (A's pairs along its rows: lka = 1), in blocks",
		"of 32×32 of C (four accumulator tiles), 16 pairs of k a step (two tiles of",
		"A, two of B, four TDPBF16PS). Strides in uint32 (C: float32). The tiles",
		"are configured and released within the call. mb, nb, kb >= 1.",
	}
	if emu {
		doc = append(doc, "This twin computes each tile instruction with AVX-512F on the tile file",
			"tiles (8 KiB), TDPBF16PS pair by pair as VDPBF16PS's definition: the",
			"bits of fallback.GemmBF16 on normal numbers.")
	} else {
		doc = append(doc, "tiles is unused (the Emu twin's tile file).")
	}
	g.fn("GemmAMX"+emuName(emu), "func(c *float32, ldc int, a *uint32, lda int, b *uint32, ldb int, mb, nb, kb, acc int, tiles *uint32)", doc...)
	t := amx{g: g, emu: emu}
	if emu {
		t.tiles = g.param("tiles")
	} else {
		cp := g.GP64()
		g.LEAQ(cfg, cp)
		g.amxCfg(cp)
	}
	// Few registers stay live through the k loop (the Emu twin's tile
	// instructions need their own): the row blocks' bases c and a and the
	// counters live in the argument slots and a local.
	lda, ldb := g.stride("lda"), g.stride("ldb")
	cols := g.AllocLocal(8) // column blocks left in this row block
	g.Comment("Blocks of 32 rows of C and A.")
	g.Label("rows")
	cb, bb := g.param("c"), g.param("b")
	nb := g.param("nb")
	g.MOVQ(nb, cols)
	g.Comment("Blocks of 32 columns of C and B: the accumulators from C, or zero.")
	g.Label("cols")
	// cTiles runs f on each accumulator tile's first element and C's stride.
	cTiles := func(f func(tile int, at, ldc reg.GPVirtual)) {
		ldc, at := g.stride("ldc"), g.GP64()
		g.MOVQ(cb, at)
		f(0, at, ldc)
		g.ADDQ(operand.U32(amxBytes), at)
		f(1, at, ldc)
		g.MOVQ(ldc, at)
		g.SHLQ(operand.U8(4), at)
		g.ADDQ(cb, at)
		f(2, at, ldc)
		g.ADDQ(operand.U32(amxBytes), at)
		f(3, at, ldc)
	}
	g.CMPQ(g.arg("acc"), operand.U32(0))
	g.JE(operand.LabelRef("zero"))
	cTiles(t.load)
	g.JMP(operand.LabelRef("k"))
	g.Label("zero")
	for tile := 0; tile < 4; tile++ {
		t.zero(tile)
	}
	g.Label("k")
	ap, a16, bp := g.param("a"), g.GP64(), g.GP64()
	g.MOVQ(lda, a16)
	g.SHLQ(operand.U8(4), a16)
	g.ADDQ(ap, a16)
	g.MOVQ(bb, bp)
	kb := g.param("kb")
	g.Comment("The k loop: 16 pairs a step, two tiles of A (rows 0-15, 16-31) and of B (columns 0-15, 16-31).")
	g.Label("kstep")
	t.load(4, ap, lda)
	t.load(5, a16, lda)
	br := g.GP64()
	g.LEAQ(operand.Mem{Base: bp, Disp: amxBytes}, br)
	t.load(6, bp, ldb)
	t.load(7, br, ldb)
	t.dot(0, 4, 6)
	t.dot(1, 4, 7)
	t.dot(2, 5, 6)
	t.dot(3, 5, 7)
	g.ADDQ(operand.U32(amxBytes), ap)
	g.ADDQ(operand.U32(amxBytes), a16)
	step := g.GP64()
	g.MOVQ(ldb, step)
	g.SHLQ(operand.U8(4), step)
	g.ADDQ(step, bp)
	g.DECQ(kb)
	g.JNZ(operand.LabelRef("kstep"))
	g.Comment("Store the four accumulator tiles.")
	cTiles(t.store)
	g.ADDQ(operand.U32(2*amxBytes), cb)
	g.ADDQ(operand.U32(2*amxBytes), bb)
	g.DECQ(cols)
	g.JNZ(operand.LabelRef("cols"))
	g.Comment("The next 32 rows: c and a advance in their argument slots.")
	next := g.stride("ldc")
	g.SHLQ(operand.U8(5), next)
	g.ADDQ(next, g.arg("c"))
	next = g.GP64()
	g.MOVQ(lda, next)
	g.SHLQ(operand.U8(5), next)
	g.ADDQ(next, g.arg("a"))
	g.DECQ(g.arg("mb"))
	g.JNZ(operand.LabelRef("rows"))
	if !emu {
		g.amxRegs(tilerelease, 0, 0, 0)
	}
	g.ret()
}

// amxPeak emits AMXPeak<ISA>: iters iterations of 4 independent
// TDPBF16PS on register tiles (tiles 0-3 += 4,5 × 6,7), configured and
// released in the call: the tile unit's bfloat16 throughput, 4 · 16·16·32
// · 2 floating-point operations an iteration.
func (g *gen) amxPeak(cfg operand.Mem) {
	g.fn("AMXPeak", "func(iters int)", "",
		"\titers iterations of 4 independent TDPBF16PS on zeroed tiles (the AMX",
		"\tbfloat16 peak: 4·16·16·32·2 flops an iteration).")
	cp := g.GP64()
	g.LEAQ(cfg, cp)
	g.amxCfg(cp)
	for tile := 0; tile < 8; tile++ {
		g.amxRegs(tilezero, tile, 0, 0)
	}
	n := g.param("iters")
	g.TESTQ(n, n)
	g.JZ(operand.LabelRef("done"))
	g.Label("loop")
	for c := 0; c < 4; c++ {
		g.amxRegs(tdpbf16ps, c, 4+c/2, 6+c%2)
	}
	g.DECQ(n)
	g.JNZ(operand.LabelRef("loop"))
	g.Label("done")
	g.amxRegs(tilerelease, 0, 0, 0)
	g.ret()
}

// amxBlockOf and amxPairsOf are GemmAMX's block and k step for set x (0
// for a set without AMX kernels).
func amxBlockOf(x isa) int {
	if !x.avx512() {
		return 0
	}
	return amxBlock
}

func amxPairsOf(x isa) int {
	if !x.avx512() {
		return 0
	}
	return amxRows
}
