package main

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// dotRegs are the registers Dot keeps across key groups.
type dotRegs struct {
	sp, lds   reg.GPVirtual // score of the current key; its stride in bytes
	kp        reg.GPVirtual // K row of the current key group
	ldk, ldk3 reg.GPVirtual // K row stride and 3 strides, in bytes
	tailRegs                // the last vector's mask
}

// dot emits Dot<ISA>: the scores of one query row against nk keys as dot
// products along d, for the decode steps whose few rows would waste most
// lanes of QK's row vectors.
func (g *gen) dot() {
	g.fn("Dot", "func(s *float32, lds int, k *float32, ldk int, q *float32, nk, nvec, tail int)",
		"",
		"\tfor c := 0; c < nk; c++ {",
		"\t\ts[c*lds] = Σ_{d<(nvec-1)*lanes+tail} k[c*ldk+d] · q[d]",
		"",
		"with nvec >= 1, tail in 1..lanes, strides in elements; nothing past",
		"element (nvec-1)*lanes+tail of q or of a K row is read (masked last",
		"vector). Four keys at a time: four accumulators (the K rows are FMA",
		"memory operands, q one register), then each reduced across lanes.",
	)
	var r dotRegs
	r.sp = g.GP64()
	g.Load(g.Param("s"), r.sp)
	r.lds = g.GP64()
	g.Load(g.Param("lds"), r.lds)
	g.SHLQ(operand.U8(2), r.lds)
	r.kp = g.GP64()
	g.Load(g.Param("k"), r.kp)
	r.ldk = g.GP64()
	g.Load(g.Param("ldk"), r.ldk)
	g.SHLQ(operand.U8(2), r.ldk)
	r.ldk3 = g.GP64()
	g.LEAQ(operand.Mem{Base: r.ldk, Index: r.ldk, Scale: 2}, r.ldk3)
	tail := g.GP64()
	g.Load(g.Param("tail"), tail)
	r.tailRegs = g.tailMask(tail)
	keys := g.GP64()
	g.Load(g.Param("nk"), keys)
	g.CMPQ(tail, operand.Imm(uint64(g.x.lanes)))
	g.JNE(operand.LabelRef("masked"))
	for _, masked := range []bool{false, true} {
		l := label("m", masked)
		if masked {
			g.Label("masked")
		}
		g.Label(l + "groups")
		g.CMPQ(keys, operand.Imm(4))
		g.JLT(operand.LabelRef(l + "one"))
		g.dotBlock(r, 4, masked, l+"four")
		g.SUBQ(operand.Imm(4), keys)
		g.JMP(operand.LabelRef(l + "groups"))
		g.Label(l + "one")
		g.TESTQ(keys, keys)
		g.JZ(operand.LabelRef(l + "done"))
		g.dotBlock(r, 1, masked, l+"single")
		g.DECQ(keys)
		g.JMP(operand.LabelRef(l + "one"))
		g.Label(l + "done")
		g.ret()
	}
}

// kAddr is element d of key row i of the group, kk pointing at row 0's.
func (r dotRegs) kAddr(kk reg.GPVirtual, i int) operand.Mem {
	switch i {
	case 0:
		return operand.Mem{Base: kk}
	case 1:
		return operand.Mem{Base: kk, Index: r.ldk, Scale: 1}
	case 2:
		return operand.Mem{Base: kk, Index: r.ldk, Scale: 2}
	case 3:
		return operand.Mem{Base: kk, Index: r.ldk3, Scale: 1}
	}
	panic("kAddr: at most 4 rows")
}

// dotAheadLog is log2 of how many keys ahead Dot prefetches.
const dotAheadLog = 4

// dotBlock emits the scores of n keys (1 or 4), then advances kp and sp.
func (g *gen) dotBlock(r dotRegs, n int, masked bool, lbl string) {
	b := g.x.bytes()
	acc := make([]reg.VecVirtual, n)
	for i := range acc {
		acc[i] = g.vec()
		g.zero(acc[i])
	}
	qp, kk, v := g.GP64(), g.GP64(), g.GP64()
	g.Load(g.Param("q"), qp)
	g.MOVQ(r.kp, kk)
	// K rows are usually a page or more apart (a BSHD cache), which the
	// hardware prefetchers do not follow: fetch the rows dotAhead keys on,
	// line by line alongside the rows in use.
	kf := g.GP64()
	g.MOVQ(r.ldk, kf)
	g.SHLQ(operand.U8(dotAheadLog), kf)
	g.ADDQ(kk, kf)
	g.Load(g.Param("nvec"), v)
	if masked {
		g.DECQ(v) // the last vector is done apart, masked
	}
	g.TESTQ(v, v)
	g.JZ(operand.LabelRef(lbl + "last"))
	g.Label(lbl)
	qv := g.vec()
	g.VMOVUPS(operand.Mem{Base: qp}, qv)
	for i := range acc {
		g.PREFETCHT0(r.kAddr(kf, i))
		g.VFMADD231PS(r.kAddr(kk, i), qv, acc[i])
	}
	g.ADDQ(operand.Imm(uint64(b)), qp)
	g.ADDQ(operand.Imm(uint64(b)), kk)
	g.ADDQ(operand.Imm(uint64(b)), kf)
	g.DECQ(v)
	g.JNZ(operand.LabelRef(lbl))
	g.Label(lbl + "last")
	if masked {
		qv := g.vec()
		g.loadVec(r.tailRegs, operand.Mem{Base: qp}, 0, 1, true, qv)
		for i := range acc {
			kv := g.vec()
			g.loadVec(r.tailRegs, r.kAddr(kk, i), 0, 1, true, kv)
			g.VFMADD231PS(kv, qv, acc[i])
		}
	}
	// Reduce each accumulator across its lanes and store the score.
	for i := range acc {
		x := g.reduce(acc[i])
		g.VMOVSS(x, operand.Mem{Base: r.sp})
		g.ADDQ(r.lds, r.sp)
	}
	if n == 4 {
		g.LEAQ(operand.Mem{Base: r.kp, Index: r.ldk, Scale: 4}, r.kp)
	} else {
		g.ADDQ(r.ldk, r.kp)
	}
}

// reduce returns an xmm register whose lane 0 is the sum of v's lanes.
func (g *gen) reduce(v reg.VecVirtual) reg.VecVirtual {
	y := v
	if g.x.avx512() {
		y = g.YMM()
		g.VEXTRACTF64X4(operand.U8(1), v, y)
		g.VADDPS(y, v.AsY(), y)
	}
	x := g.XMM()
	g.VEXTRACTF128(operand.U8(1), y, x)
	g.VADDPS(x, y.AsX(), x)
	g.VHADDPS(x, x, x)
	g.VHADDPS(x, x, x)
	return x
}
