// HeadScores<E>AVX2, HeadPV<E>AVX2: a decode step of one query row per KV
// head over BSHD K/V, read key by key across the heads: each key's rows of
// every head of the item lie side by side, so walking keys outer and
// heads inner reads K and V in address order, one ascending stream each.
// Walked head by head instead, each head's rows are a page apart (BSHD's
// stride is heads × row bytes), which no hardware prefetcher follows and
// which fall in one L1 set. Generated for AVX2, which the AVX-512 set
// runs as they are, but for float32: HeadScoresF32AVX512 and
// HeadPVF32AVX512 step in zmm vectors (the Go side gives them head dims
// of whole zmm vectors, the ymm ones the rest), and HeadScores there
// takes keys four a pass. Zen 4, one thread, 1,32,32,1,4096,128 BSHD
// float32 on the key-major path (which the avx512 set takes on Intel;
// on AMD it runs head groups), in-process rounds, 64 KiB ahead: 6.15 ms
// on the ymm kernels, 5.52 on these (head groups 5.43, BHSD 5.02). The
// zmm kernels alone, from memory: scores 23.0 → 25.4 GB/s, PV 26.6 →
// 27.4, where a plain Go loop read 31–32.

package main

import (
	"fmt"
	"math/bits"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// The head kernels prefetch the rows ahead of the ones they read
// (PREFETCHT1, to L2): key j's loads name key j+ahead's lines too, at the
// same offsets, for the call's first pfn keys (the Go wrapper keeps those
// rows inside the slice: kernels.headAhead). The arguments ahead (bytes
// from a row to the one prefetched) and pfn end every head kernel's
// argument list. The stream is in address order, which the hardware
// prefetchers follow, but their reach was short of what one thread's
// loads need at these kernels' work per byte: on Zen 4 each kernel read
// 16–17 GB/s from memory where a plain summing loop reads 28. Prefetched
// 32 KiB ahead (kernels.headAheadBytes), the MHA step 1,32,32,1,4096,128
// BSHD at one thread (15 alternated rounds in one process, medians) went
// from 3.90 to 2.91 ms in float16, 4.15 to 2.94 in bfloat16, 3.28 to
// 2.41 in int8 (avx512 set; avx2 set int8 3.10 to 2.30); float32, at
// 20–21 GB/s already, was level (avx2 set 6.43 and 6.32 ms). PREFETCHT0
// 1–4 KiB ahead, or a touch of the next rows by loads, ran slower.

// headPrefetch returns the distance register of the head kernels'
// prefetch for the next key (or block of n keys): the argument ahead
// while the pfn budget allows (it is counted down by n in place), else 0
// (the prefetch then names the lines being loaded, which costs a slot
// and nothing more).
func (g *gen) headPrefetch(n int) reg.GPVirtual {
	zero, off := g.GP64(), g.GP64()
	g.XORQ(zero, zero)
	g.Load(g.Param("ahead"), off)
	g.SUBQ(operand.Imm(uint64(n)), g.arg("pfn"))
	g.CMOVQLT(zero, off)
	return off
}

// prefetchStep emits PREFETCHT1 at every 64 bytes of n bytes from m
// (whole lines of a step's loads).
func (g *gen) prefetchStep(m operand.Mem, n int) {
	for l := 0; l < n; l += 64 {
		mm := m
		mm.Disp += l
		g.PREFETCHT1(mm)
	}
}

// headUnroll is the vectors of a head's row each step of the head loops
// takes: four independent FMA chains (the scores' accumulators, the PV's
// output vectors).
const headUnroll = 4

// headScores emits HeadScores<E>AVX2.
func (g *gen) headScores(e elem) {
	g.fn("HeadScores"+e.name(), fmt.Sprintf("func(s *float32, lds int, q *float32, k %s, ldk int, nk, heads, nvec, ahead, pfn int)", e.goType()),
		"",
		"\tfor j := 0; j < nk; j++ {",
		"\t\tfor h := 0; h < heads; h++ {",
		"\t\t\ts[j*lds+h] = Σ_{d<nvec*lanes} q[h*nvec*lanes+d] · widen(k[j*ldk+h*nvec*lanes+d])",
		"",
		"with nk, heads, nvec >= 1, strides in elements: key j's rows of the",
		fmt.Sprintf("heads side by side, read in address order, keys %s a pass (each q", map[bool]string{false: "two", true: "four, then two,"}[g.isa.avx512()]),
		"vector loaded once for them). Four accumulators a key take vectors",
		"4i..4i+3 of a row (the rest go to the first), summed as",
		"(a0+a1)+(a2+a3), then across lanes. Keys j < pfn prefetch the lines",
		"ahead bytes on from those they load.",
	)
	sp, lds := g.param("s"), g.stride("lds")
	kp, ldk := g.param("k"), g.param("ldk")
	g.SHLQ(operand.U8(e.log()), ldk)
	nk := g.param("nk")
	zr := g.vec()
	g.zero(zr)
	eb := g.isa.lanes * e.bytes()
	if g.isa.avx512() {
		g.headScoresKeys(e, sp, lds, kp, ldk, nk, zr, 4, "keys4")
	}
	g.headScoresKeys(e, sp, lds, kp, ldk, nk, zr, 2, "pair")
	g.TESTQ(nk, nk)
	g.JZ(operand.LabelRef("done"))
	g.Comment("The last key, if nk is odd.")
	g.Label("key")
	off := g.headPrefetch(1)
	qp, kr, so, h := g.param("q"), g.GP64(), g.GP64(), g.param("heads")
	g.MOVQ(kp, kr)
	g.MOVQ(sp, so)
	g.Label("head")
	acc := make([]reg.VecVirtual, headUnroll)
	for i := range acc {
		acc[i] = g.vec()
		g.zeroFrom(zr, acc[i])
	}
	nv := g.param("nvec")
	g.Label("quad")
	g.CMPQ(nv, operand.Imm(headUnroll))
	g.JLT(operand.LabelRef("single"))
	g.prefetchStep(operand.Mem{Base: kr, Index: off, Scale: 1}, headUnroll*eb)
	for i := range acc {
		kv := g.vec()
		g.widen(e, operand.Mem{Base: kr, Disp: i * eb}, kv)
		g.VFMADD231PS(operand.Mem{Base: qp, Disp: i * g.isa.bytes()}, kv, acc[i])
	}
	g.ADDQ(operand.U32(headUnroll*g.isa.bytes()), qp)
	g.ADDQ(operand.U32(headUnroll*eb), kr)
	g.SUBQ(operand.Imm(headUnroll), nv)
	g.JMP(operand.LabelRef("quad"))
	g.Label("single")
	g.TESTQ(nv, nv)
	g.JZ(operand.LabelRef("sum"))
	kv := g.vec()
	g.widen(e, operand.Mem{Base: kr}, kv)
	g.VFMADD231PS(operand.Mem{Base: qp}, kv, acc[0])
	g.ADDQ(operand.Imm(uint64(g.isa.bytes())), qp)
	g.ADDQ(operand.Imm(uint64(eb)), kr)
	g.DECQ(nv)
	g.JMP(operand.LabelRef("single"))
	g.Label("sum")
	g.VADDPS(acc[1], acc[0], acc[0])
	g.VADDPS(acc[3], acc[2], acc[2])
	g.VADDPS(acc[2], acc[0], acc[0])
	x := g.reduce(acc[0])
	g.VMOVSS(x, operand.Mem{Base: so})
	g.loopBack(h, "head", add{operand.Imm(4), so})
	g.loopBack(nk, "key", add{lds, sp}, add{ldk, kp})
	g.Label("done")
	g.ret()
}

// headScoresKeys emits HeadScores' loop over runs of keys keys (2, or 4
// on AVX-512, whose 32 registers hold four keys' accumulators) while nk
// holds that many, under labels prefixed pre: each q vector loaded once
// for the run's rows (a key row apart: key 3's from kr + ldk + 2·ldk),
// a set of four accumulators a key, the same sums in the same order as
// one key a pass (the same bits); it leaves s, k and nk at the first key
// after them. One key a pass loaded a q vector for every K vector: 32
// loads a head's row of 128 dims, which held the float16 kernel at 24.8
// cycles a row in L2 on Zen 4; in pairs, 24 loads, 18.5 cycles (L3 20.1
// → 18.2, memory 46 → 41; the MHA step from memory, bound by the bytes
// since the prefetch, level: f16 3.00 and 3.02 ms).
func (g *gen) headScoresKeys(e elem, sp, lds, kp, ldk, nk reg.GPVirtual, zr reg.VecVirtual, keys int, pre string) {
	eb := g.isa.lanes * e.bytes()
	g.runStart(nk, keys, pre)
	off := g.headPrefetch(keys)
	qp, kr, so, h := g.param("q"), g.GP64(), g.GP64(), g.param("heads")
	g.MOVQ(kp, kr)
	g.MOVQ(sp, so)
	g.Label(pre + "_head")
	acc := make([][]reg.VecVirtual, keys)
	for k := range acc {
		acc[k] = make([]reg.VecVirtual, headUnroll)
		for i := range acc[k] {
			acc[k][i] = g.vec()
			g.zeroFrom(zr, acc[k][i])
		}
	}
	nv := g.param("nvec")
	step := func(n int) {
		t := g.GP64()
		if keys == 4 {
			if n == headUnroll {
				g.LEAQ(operand.Mem{Base: kr, Index: off, Scale: 1}, t)
				g.prefetchStep(operand.Mem{Base: t}, n*eb)
				g.prefetchStep(operand.Mem{Base: t, Index: ldk, Scale: 1}, n*eb)
				g.prefetchStep(operand.Mem{Base: t, Index: ldk, Scale: 2}, n*eb)
				g.LEAQ(operand.Mem{Base: t, Index: ldk, Scale: 1}, t)
				g.prefetchStep(operand.Mem{Base: t, Index: ldk, Scale: 2}, n*eb)
			}
			g.LEAQ(operand.Mem{Base: kr, Index: ldk, Scale: 1}, t)
		} else {
			g.LEAQ(operand.Mem{Base: kr, Index: ldk, Scale: 1}, t)
			if n == headUnroll {
				g.prefetchStep(operand.Mem{Base: kr, Index: off, Scale: 1}, n*eb)
				g.prefetchStep(operand.Mem{Base: t, Index: off, Scale: 1}, n*eb)
			}
		}
		rows := []operand.Mem{{Base: kr}, {Base: t}, {Base: kr, Index: ldk, Scale: 2}, {Base: t, Index: ldk, Scale: 2}}[:keys]
		for i := 0; i < n; i++ {
			qv := g.vec()
			kv := make([]reg.VecVirtual, keys)
			g.VMOVUPS(operand.Mem{Base: qp, Disp: i * g.isa.bytes()}, qv)
			for k := range kv {
				kv[k] = g.vec()
				m := rows[k]
				m.Disp = i * eb
				g.widen(e, m, kv[k])
			}
			for k := range kv {
				g.VFMADD231PS(qv, kv[k], acc[k][i])
			}
		}
		g.ADDQ(operand.U32(n*g.isa.bytes()), qp)
		g.ADDQ(operand.U32(n*eb), kr)
	}
	g.rowSteps(nv, pre+"_", step)
	g.Label(pre + "_next")
	for k := range acc {
		g.VADDPS(acc[k][1], acc[k][0], acc[k][0])
		g.VADDPS(acc[k][3], acc[k][2], acc[k][2])
		g.VADDPS(acc[k][2], acc[k][0], acc[k][0])
	}
	outs := []operand.Mem{{Base: so}, {Base: so, Index: lds, Scale: 1}, {Base: so, Index: lds, Scale: 2}}
	for k := range acc {
		x := g.reduce(acc[k][0])
		if k == 3 {
			t := g.GP64()
			g.LEAQ(operand.Mem{Base: so, Index: lds, Scale: 1}, t)
			g.VMOVSS(x, operand.Mem{Base: t, Index: lds, Scale: 2})
			continue
		}
		g.VMOVSS(x, outs[k])
	}
	g.loopBack(h, pre+"_head", add{operand.Imm(4), so})
	g.runEnd(nk, keys, pre, add{lds, sp}, add{ldk, kp})
}

// headPVKeys is the keys a block of HeadPV's loop takes at once: each
// head's output vectors are loaded once a block, take the block's keys
// one after another (the same FMAs in the same order as key by key, so
// the same bits) and are stored once, where key by key loaded and
// stored every output vector for every key: on Zen 4 that loop ran an
// MHA step's PV at about 4.4 cycles a vector, below V's bytes' rate. The
// block's V rows are read as four streams a key row apart. Zen 4, one
// thread, 1,32,32,1,4096,128 BSHD, three alternated rounds: float16
// 3.95–4.20 → 3.49–3.67 ms, bfloat16 4.32–4.51 → 3.73–3.81 (avx512
// set); avx2 set float32 6.31–7.35 → 5.86–6.04, float16 4.02–5.02 →
// 3.48–3.69.
const headPVKeys = 4

// headPV emits HeadPV<E>AVX2.
func (g *gen) headPV(e elem) {
	g.fn("HeadPV"+e.name(), fmt.Sprintf("func(o *float32, ldo int, p *float32, ldp int, v %s, ldv int, alpha *float32, nk, heads, nvec, ahead, pfn int)", e.goType()),
		"",
		"\tfor h := 0; h < heads; h++ {",
		"\t\to[h*ldo+d] *= alpha[h]                       for d < nvec*lanes",
		"\tfor j := 0; j < nk; j++ {",
		"\t\tfor h := 0; h < heads; h++ {",
		"\t\t\to[h*ldo+d] += p[j*ldp+h] · widen(v[j*ldv+h*nvec*lanes+d])   for d < nvec*lanes",
		"",
		"with nk, heads, nvec >= 1, strides in elements: one multiply and one",
		fmt.Sprintf("FMA an element, key j's rows of the heads read in address order; keys in blocks of %d,", headPVKeys),
		"each output vector held in a register across a block's keys. Blocks",
		"whose keys are all below pfn prefetch the lines ahead bytes on from",
		"those they load.",
	)
	op, ldo := g.param("o"), g.stride("ldo")
	g.scaleHeadRows(op, ldo, "nvec", 0)
	pp, ldp := g.param("p"), g.stride("ldp")
	vp, ldv := g.param("v"), g.param("ldv")
	g.SHLQ(operand.U8(e.log()), ldv)
	// ldo less a row's bytes: each head's loop leaves its output pointer
	// at the row's end.
	row := g.param("nvec")
	g.SHLQ(operand.U8(bits.TrailingZeros(uint(g.isa.bytes()))), row)
	g.SUBQ(row, ldo)
	nk := g.param("nk")
	g.headPVPass(e, pp, ldp, vp, ldv, op, ldo, nk, headPVKeys, "block")
	g.headPVPass(e, pp, ldp, vp, ldv, op, ldo, nk, 1, "key")
	g.ret()
}

// headPVPass emits HeadPV's loop over whole runs of keys keys (1 or
// headPVKeys) while nk holds that many, leaving p, v and nk at the first
// key after them; labels take the prefix pre.
func (g *gen) headPVPass(e elem, pp, ldp, vp, ldv, op, ldo, nk reg.GPVirtual, keys int, pre string) {
	b, eb := g.isa.bytes(), g.isa.lanes*e.bytes()
	g.runStart(nk, keys, pre)
	pr, vr, orow, h := g.GP64(), g.GP64(), g.GP64(), g.param("heads")
	g.MOVQ(pp, pr)
	g.MOVQ(vp, vr)
	g.MOVQ(op, orow)
	// vo runs beside vr, ahead bytes on (the block's keys' rows then from
	// vo and vo + 2·ldv, as from vr and v2); the one-key pass prefetches
	// nothing.
	var vo reg.GPVirtual
	if keys > 1 {
		vo = g.headPrefetch(keys)
		g.ADDQ(vr, vo)
	}
	// Key j of the block (j < keys) reads its weight at pr + j·ldp and its
	// V row at vr + j·ldv: keys 0 and 1 from pr and vr, keys 2 and 3 from
	// t = pr + 2·ldp and v2 = vr + 2·ldv (an index scale of 3 does not
	// exist, and the strides are runtime values).
	ws, rows := []operand.Mem{{Base: pr}}, []operand.Mem{{Base: vr}}
	var v2 reg.GPVirtual
	if keys > 1 {
		v2 = g.GP64()
		g.LEAQ(operand.Mem{Base: vp, Index: ldv, Scale: 2}, v2)
		rows = append(rows, operand.Mem{Base: vr, Index: ldv, Scale: 1}, operand.Mem{Base: v2}, operand.Mem{Base: v2, Index: ldv, Scale: 1})
	}
	g.Label(pre + "_head")
	if keys > 1 {
		t := g.GP64()
		g.LEAQ(operand.Mem{Base: pr, Index: ldp, Scale: 2}, t)
		ws = append(ws, operand.Mem{Base: pr, Index: ldp, Scale: 1}, operand.Mem{Base: t}, operand.Mem{Base: t, Index: ldp, Scale: 1})
	}
	w := make([]reg.VecVirtual, keys)
	for j := range w {
		w[j] = g.vec()
		g.VBROADCASTSS(ws[j], w[j])
	}
	nv := g.param("nvec")
	step := func(n int) {
		acc := make([]reg.VecVirtual, n)
		for i := range acc {
			acc[i] = g.vec()
			g.VMOVUPS(operand.Mem{Base: orow, Disp: i * b}, acc[i])
		}
		if keys > 1 && n == headUnroll {
			t := g.GP64()
			g.LEAQ(operand.Mem{Base: vo, Index: ldv, Scale: 2}, t)
			for _, m := range []operand.Mem{{Base: vo}, {Base: vo, Index: ldv, Scale: 1}, {Base: t}, {Base: t, Index: ldv, Scale: 1}} {
				g.prefetchStep(m, n*eb)
			}
		}
		for j := range w {
			for i := range acc {
				vv := g.vec()
				m := rows[j]
				m.Disp = i * eb
				g.widen(e, m, vv)
				g.VFMADD231PS(vv, w[j], acc[i])
			}
		}
		for i := range acc {
			g.VMOVUPS(acc[i], operand.Mem{Base: orow, Disp: i * b})
		}
		g.ADDQ(operand.U32(n*b), orow)
		g.ADDQ(operand.U32(n*eb), vr)
		if keys > 1 {
			g.ADDQ(operand.U32(n*eb), v2)
			g.ADDQ(operand.U32(n*eb), vo)
		}
	}
	g.rowSteps(nv, pre+"_", step)
	g.Label(pre + "_next")
	g.loopBack(h, pre+"_head", add{operand.Imm(4), pr}, add{ldo, orow})
	g.runEnd(nk, keys, pre, add{ldp, pp}, add{ldv, vp})
}

// headScoresI8 emits HeadScoresI8AVX2: HeadScores over int8 K rows (ggml's
// q8_0 values, their scales apart), head dims whole blocks of 32.
func (g *gen) headScoresI8() {
	e := i8
	g.fn("HeadScoresI8", "func(s *float32, lds int, q *float32, k *int8, ldk int, ks *float32, ldks int, nk, heads, nblk, ahead, pfn int)",
		"",
		"\tfor j := 0; j < nk; j++ {",
		"\t\tfor h := 0; h < heads; h++ {",
		"\t\t\ts[j*lds+h] = Σ_{b<nblk} ks[j*ldks+h*nblk+b] · Σ_{d<32} q[h*nblk*32+b*32+d] · k[j*ldk+h*nblk*32+b*32+d]",
		"",
		"with nk, heads, nblk >= 1, strides in elements: key j's rows of the",
		"heads side by side, read in address order (values and scales). A",
		"block's four vectors of products are summed in one vector, scaled by",
		"its scale into one of two accumulators (even and odd blocks), their",
		"sum then summed across lanes. Keys j < pfn prefetch the values'",
		"lines ahead bytes on from those they load.",
	)
	sp, lds := g.param("s"), g.stride("lds")
	kp, ldk := g.param("k"), g.param("ldk")
	cp, ldc := g.param("ks"), g.stride("ldks")
	nk := g.param("nk")
	zr := g.vec()
	g.zero(zr)
	vb := g.isa.bytes()
	g.Label("key")
	off := g.headPrefetch(1)
	qp, kr, cr, so, h := g.param("q"), g.GP64(), g.GP64(), g.GP64(), g.param("heads")
	g.MOVQ(kp, kr)
	g.MOVQ(cp, cr)
	g.MOVQ(sp, so)
	g.Label("head")
	acc := []reg.VecVirtual{g.vec(), g.vec()}
	for _, a := range acc {
		g.zeroFrom(zr, a)
	}
	nb := g.param("nblk")
	block := func(a reg.VecVirtual) {
		t := g.vec()
		for i := 0; i < headUnroll; i++ {
			kv := g.vec()
			g.widen(e, operand.Mem{Base: kr, Disp: i * g.isa.lanes}, kv)
			if i == 0 {
				g.VMULPS(operand.Mem{Base: qp}, kv, t)
				continue
			}
			g.VFMADD231PS(operand.Mem{Base: qp, Disp: i * vb}, kv, t)
		}
		sc := g.vec()
		g.VBROADCASTSS(operand.Mem{Base: cr}, sc)
		g.VFMADD231PS(sc, t, a)
		g.ADDQ(operand.Imm(uint64(headUnroll*vb)), qp)
		g.ADDQ(operand.Imm(uint64(headUnroll*g.isa.lanes)), kr)
		g.ADDQ(operand.Imm(4), cr)
	}
	g.Label("pair")
	g.CMPQ(nb, operand.Imm(2))
	g.JLT(operand.LabelRef("last"))
	g.prefetchStep(operand.Mem{Base: kr, Index: off, Scale: 1}, 2*headUnroll*g.isa.lanes)
	block(acc[0])
	block(acc[1])
	g.SUBQ(operand.Imm(2), nb)
	g.JMP(operand.LabelRef("pair"))
	g.Label("last")
	g.TESTQ(nb, nb)
	g.JZ(operand.LabelRef("sum"))
	block(acc[0])
	g.Label("sum")
	g.VADDPS(acc[1], acc[0], acc[0])
	x := g.reduce(acc[0])
	g.VMOVSS(x, operand.Mem{Base: so})
	g.loopBack(h, "head", add{operand.Imm(4), so})
	g.loopBack(nk, "key", add{lds, sp}, add{ldk, kp}, add{ldc, cp})
	g.ret()
}

// headPVI8 emits HeadPVI8AVX2: HeadPV over int8 V rows, head dims whole
// blocks of 32.
func (g *gen) headPVI8() {
	e := i8
	g.fn("HeadPVI8", "func(o *float32, ldo int, p *float32, ldp int, v *int8, ldv int, vs *float32, ldvs int, alpha *float32, nk, heads, nblk, ahead, pfn int)",
		"",
		"\tfor h := 0; h < heads; h++ {",
		"\t\to[h*ldo+d] *= alpha[h]                       for d < nblk*32",
		"\tfor j := 0; j < nk; j++ {",
		"\t\tfor h := 0; h < heads; h++ {",
		"\t\t\tw := p[j*ldp+h] · vs[j*ldvs+h*nblk+b]           for each block b",
		"\t\t\to[h*ldo+b*32+d] += w · v[j*ldv+h*nblk*32+b*32+d]   for d < 32",
		"",
		"with nk, heads, nblk >= 1, strides in elements: the weight scaled once",
		"per block, then one FMA an element; values and scales in address order.",
		"Keys j < pfn prefetch the values' lines ahead bytes on from those they",
		"load.",
	)
	op, ldo := g.param("o"), g.stride("ldo")
	vb := g.isa.bytes()
	g.scaleHeadRows(op, ldo, "nblk", 2) // four vectors a block
	// The key's rows start where the arguments p, v and vs point: each
	// advanced in place by its stride after the key (registers are short).
	ldp, ldv, ldc := g.stride("ldp"), g.param("ldv"), g.stride("ldvs")
	nk := g.param("nk")
	g.Label("key")
	off := g.headPrefetch(1)
	pr, vr, cr, orow, h := g.param("p"), g.param("v"), g.param("vs"), g.GP64(), g.param("heads")
	g.MOVQ(op, orow)
	g.ADDQ(vr, off) // the prefetch's base, beside vr
	g.Label("head")
	p := g.vec()
	g.VBROADCASTSS(operand.Mem{Base: pr}, p)
	nb, at := g.param("nblk"), g.GP64()
	g.MOVQ(orow, at)
	g.Label("block")
	g.prefetchStep(operand.Mem{Base: off}, headUnroll*g.isa.lanes) // half a line: each line twice
	w := g.vec()
	g.VMULPS(operand.Mem{Base: cr}, p, w) // lane 0 only matters: broadcast below
	g.VBROADCASTSS(w.AsX(), w)
	for i := 0; i < headUnroll; i++ {
		vv, t := g.vec(), g.vec()
		g.widen(e, operand.Mem{Base: vr, Disp: i * g.isa.lanes}, vv)
		g.VMOVUPS(operand.Mem{Base: at, Disp: i * vb}, t)
		g.VFMADD231PS(vv, w, t)
		g.VMOVUPS(t, operand.Mem{Base: at, Disp: i * vb})
	}
	g.loopBack(nb, "block", add{operand.Imm(uint64(headUnroll * vb)), at},
		add{operand.Imm(uint64(headUnroll * g.isa.lanes)), vr}, add{operand.Imm(uint64(headUnroll * g.isa.lanes)), off}, add{operand.Imm(4), cr})
	g.loopBack(h, "head", add{operand.Imm(4), pr}, add{ldo, orow})
	g.loopBack(nk, "key", add{ldp, g.arg("p")}, add{ldv, g.arg("v")}, add{ldc, g.arg("vs")})
	g.ret()
}

// scaleHeadRows emits the rescale of HeadPV: each head's row of O (ldo
// bytes apart, heads of them) times its alpha, the row's vectors counted
// by the argument count times 2^shift.
func (g *gen) scaleHeadRows(op, ldo reg.GPVirtual, count string, shift uint8) {
	ap, h, or := g.param("alpha"), g.param("heads"), g.GP64()
	g.MOVQ(op, or)
	g.Label("scale_head")
	a := g.vec()
	g.VBROADCASTSS(operand.Mem{Base: ap}, a)
	nv, at := g.param(count), g.GP64()
	if shift > 0 {
		g.SHLQ(operand.U8(shift), nv)
	}
	g.MOVQ(or, at)
	g.Label("scale_vec")
	t := g.vec()
	g.VMULPS(operand.Mem{Base: at}, a, t)
	g.VMOVUPS(t, operand.Mem{Base: at})
	g.loopBack(nv, "scale_vec", add{operand.Imm(uint64(g.isa.bytes())), at})
	g.loopBack(h, "scale_head", add{ldo, or}, add{operand.Imm(4), ap})
}

// rowSteps emits the loop over a head row's nv vectors: step(headUnroll)
// while a whole unrolled step remains, then step(1) for each vector
// left, then a jump to label pre+"next" (which the caller places);
// labels take the prefix pre.
func (g *gen) rowSteps(nv reg.GPVirtual, pre string, step func(n int)) {
	g.Label(pre + "quad")
	g.CMPQ(nv, operand.Imm(headUnroll))
	g.JLT(operand.LabelRef(pre + "single"))
	step(headUnroll)
	g.SUBQ(operand.Imm(headUnroll), nv)
	g.JMP(operand.LabelRef(pre + "quad"))
	g.Label(pre + "single")
	g.TESTQ(nv, nv)
	g.JZ(operand.LabelRef(pre + "next"))
	step(1)
	g.DECQ(nv)
	g.JMP(operand.LabelRef(pre + "single"))
}

// runStart and runEnd bracket a head kernel's loop over runs of keys keys
// (labels prefixed pre): runStart leaves for pre+"_end" once nk holds
// fewer; runEnd applies each add keys times (a key's strides, key by
// key), counts nk down and jumps back to pre.
func (g *gen) runStart(nk reg.GPVirtual, keys int, pre string) {
	g.Label(pre)
	g.CMPQ(nk, operand.Imm(uint64(keys)))
	g.JLT(operand.LabelRef(pre + "_end"))
}

func (g *gen) runEnd(nk reg.GPVirtual, keys int, pre string, adds ...add) {
	for range keys {
		for _, a := range adds {
			g.ADDQ(a.by, a.to)
		}
	}
	g.SUBQ(operand.Imm(uint64(keys)), nk)
	g.JMP(operand.LabelRef(pre))
	g.Label(pre + "_end")
}

// add is one pointer step at a loop's end: ADDQ by, to.
type add struct{ by, to operand.Op }

// loopBack emits a loop's end: each add, then DECQ n and JNZ back to lbl.
func (g *gen) loopBack(n reg.GPVirtual, lbl string, adds ...add) {
	for _, a := range adds {
		g.ADDQ(a.by, a.to)
	}
	g.DECQ(n)
	g.JNZ(operand.LabelRef(lbl))
}
