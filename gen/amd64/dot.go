// Dot<ISA>: the scores of 1-4 query rows against a group of keys. rows ×
// keys accumulators (keys 4, or 2 for 3-4 rows on AVX2), one K vector
// loaded per step and shared by every row, then each accumulator reduced
// across lanes.

package main

import (
	"fmt"

	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// dotRegs are the registers Dot keeps across key groups.
type dotRegs struct {
	sp, lds  reg.GPVirtual // scores of the current key; their stride in bytes
	kp       reg.GPVirtual // K row of the current key group
	k, q     rowStride     // K's rows (up to 4 keys) and q's (up to 4 rows)
	tailRegs               // the last vector's mask
}

// dotRows is the most query rows of a Dot call.
const dotRows = 4

// dotKeys is how many keys a Dot group scores at once for rows query rows:
// rows·keys accumulators, rows q vectors and one K vector must fit the
// registers (16 on AVX2).
func (g *gen) dotKeys(rows int) int {
	if g.isa.avx512() || rows <= 2 {
		return 4
	}
	return 2
}

// dot emits Dot<ISA>: the scores of 1-4 query rows against nk keys as dot
// products along d, for the decode steps whose few rows would waste most
// lanes of QK's row vectors. Each K vector is loaded once for all rows.
func (g *gen) dot() {
	g.fn("Dot", "func(s *float32, lds int, k *float32, ldk int, q *float32, ldq, rows, nk, nvec, tail int)",
		"",
		"\tfor c := 0; c < nk; c++ {",
		"\t\tfor r := 0; r < rows; r++ {",
		"\t\t\ts[c*lds+r] = Σ_{d<(nvec-1)*lanes+tail} k[c*ldk+d] · q[r*ldq+d]",
		"",
		"with rows in 1..4, nvec >= 1, tail in 1..lanes, strides in elements;",
		"nothing past element (nvec-1)*lanes+tail of a q or K row is read",
		"(masked last vector). A group of keys (4, or 2 for 3-4 rows on AVX2)",
		"at a time: rows × keys accumulators, the K rows as loads shared by all",
		"rows, then each accumulator reduced across lanes. The K rows 16 keys",
		"on are prefetched (page-strided rows defeat the hardware prefetchers).",
	)
	var r dotRegs
	r.sp = g.param("s")
	r.lds = g.stride("lds")
	r.kp = g.param("k")
	r.k = g.strided("ldk", 4)
	r.q = g.strided("ldq", 4)
	tail := g.param("tail")
	r.tailRegs = g.tailMask(tail)
	keys := g.param("nk")
	rows := g.param("rows")
	g.CMPQ(tail, operand.Imm(uint64(g.isa.lanes)))
	g.JNE(operand.LabelRef("tail_masked"))
	for _, masked := range []bool{false, true} {
		if masked {
			g.Label("tail_masked")
		}
		for nr := dotRows; nr >= 1; nr-- {
			g.CMPQ(rows, operand.Imm(uint64(nr)))
			g.JEQ(operand.LabelRef(label("rows", nr, maskWord(masked))))
		}
		g.ret()
	}
	for _, masked := range []bool{false, true} {
		for nr := dotRows; nr >= 1; nr-- {
			l := label("rows", nr, maskWord(masked))
			kg := g.dotKeys(nr)
			g.Comment(fmt.Sprintf("%d query rows, the last vector %s: groups of %d keys, then one at a time.", nr, maskWord(masked), kg))
			g.Label(l)
			g.Label(label(l, "groups"))
			g.CMPQ(keys, operand.Imm(uint64(kg)))
			g.JLT(operand.LabelRef(label(l, "one")))
			g.dotBlock(r, kg, nr, masked, label(l, "group"))
			g.SUBQ(operand.Imm(uint64(kg)), keys)
			g.JMP(operand.LabelRef(label(l, "groups")))
			g.Label(label(l, "one"))
			g.TESTQ(keys, keys)
			g.JZ(operand.LabelRef(label(l, "done")))
			g.dotBlock(r, 1, nr, masked, label(l, "single"))
			g.DECQ(keys)
			g.JMP(operand.LabelRef(label(l, "one")))
			g.Label(label(l, "done"))
			g.ret()
		}
	}
}

// dotAheadLog is log2 of how many keys ahead Dot prefetches.
const dotAheadLog = 4

// dotBlock emits the scores of n keys (1, 2 or 4) for nr query rows, then
// advances kp and sp.
func (g *gen) dotBlock(r dotRegs, n, nr int, masked bool, lbl string) {
	b := g.isa.bytes()
	acc := make([][]reg.VecVirtual, n)
	for i := range acc {
		acc[i] = make([]reg.VecVirtual, nr)
		for j := range acc[i] {
			acc[i][j] = g.vec()
			g.zero(acc[i][j])
		}
	}
	qq, kk, v := g.GP64(), g.GP64(), g.GP64()
	g.Load(g.Param("q"), qq)
	g.MOVQ(r.kp, kk)
	g.Load(g.Param("nvec"), v)
	kf := g.GP64() // the rows 16 keys on, for the prefetches
	g.MOVQ(r.k.ld, kf)
	g.SHLQ(operand.U8(dotAheadLog), kf)
	g.ADDQ(kk, kf)
	step := func(last bool) {
		qv := make([]reg.VecVirtual, nr)
		for j := range qv {
			qv[j] = g.vec()
			g.loadVec(r.tailRegs, r.q.at(qq, j), 0, 1, last, qv[j])
		}
		for i := 0; i < n; i++ {
			if !last {
				g.PREFETCHT0(r.k.at(kf, i))
			}
			kv := g.vec()
			g.loadVec(r.tailRegs, r.k.at(kk, i), 0, 1, last, kv)
			for j := 0; j < nr; j++ {
				g.VFMADD231PS(kv, qv[j], acc[i][j])
			}
		}
	}
	if masked {
		g.DECQ(v) // the last vector is done apart, masked
	}
	g.TESTQ(v, v)
	g.JZ(operand.LabelRef(label(lbl, "last")))
	g.Label(lbl)
	step(false)
	g.ADDQ(operand.Imm(uint64(b)), qq)
	g.ADDQ(operand.Imm(uint64(b)), kk)
	g.ADDQ(operand.Imm(uint64(b)), kf)
	g.DECQ(v)
	g.JNZ(operand.LabelRef(lbl))
	g.Label(label(lbl, "last"))
	if masked {
		step(true)
	}
	// Reduce each accumulator across its lanes and store the scores.
	for i := 0; i < n; i++ {
		for j := 0; j < nr; j++ {
			x := g.reduce(acc[i][j])
			g.VMOVSS(x, operand.Mem{Base: r.sp, Disp: 4 * j})
		}
		g.ADDQ(r.lds, r.sp)
	}
	g.advance(r.kp, r.k, n)
}

// reduce returns an xmm register whose lane 0 is the sum of v's lanes.
// On AVX-512 it stays in zmm instructions (AVX512F only: the VEX forms
// cannot name registers 16-31): swap halves, quarters, pairs and
// neighbours, adding each time, so every lane ends with the sum.
func (g *gen) reduce(v reg.VecVirtual) reg.Register {
	if g.isa.avx512() {
		g.butterfly(v, g.VADDPS)
		return v.AsX()
	}
	y := v
	x := g.XMM()
	g.VEXTRACTF128(operand.U8(1), y, x)
	g.VADDPS(x, y.AsX(), x)
	g.VHADDPS(x, x, x)
	g.VHADDPS(x, x, x)
	return x
}
