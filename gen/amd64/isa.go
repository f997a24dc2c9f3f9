// The two instruction sets' parameters (lanes, register tile), the
// generator state shared by every kernel (the avo context, the constant
// table) and the small emitters every kernel uses (arguments, strides,
// function headers, labels).

package main

import (
	"fmt"
	"math"

	"github.com/fastattn/fastattn/gen/expconst"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// isa describes one instruction set's vectors and register blocking.
type isa struct {
	name   string // file and FASTATTN_ISA name
	suffix string // function name suffix
	lanes  int    // float32 per vector
	// The FMA tile of QK, PV and the GEMM: mk broadcast rows × nv vectors
	// of accumulators, plus nv vector operands and one broadcast register.
	//   AVX-512, 32 zmm: 6×4 = 24 accumulators + 4 + 1 = 29 registers. Per
	//   step 10 loads feed 24 FMAs: the loads (2-3 per cycle) never limit
	//   the FMAs (1-2 zmm per cycle), and 24 independent chains cover the
	//   4-cycle FMA latency twice over.
	//   AVX2, 16 ymm: 6×2 = 12 accumulators + 2 + 1 = 15 (the tail mask
	//   stays in memory). 8 loads per 12 FMAs (2 per cycle on every AVX2
	//   core); measured better than 4×3 (fewer broadcasts, 24-column
	//   panels) on Zen 4.
	mk, nv int
	// softNV is the most row vectors one Softmax (or ScoreBias) call
	// processes per key: independent max/exp chains for the out-of-order
	// core (AVX2 2, so that their exps fit side by side: expInterleave).
	softNV int
	// expInterleave is how many of those vectors' exps the Softmax emits
	// step by step side by side (exps): AVX-512 all 4 (with the weights'
	// exp, 3 registers a vector, they fit beside the 10 held constants, 4
	// bases and 4 sums: on Zen 5, BenchmarkKernels' Softmax at 64 and 256
	// keys 9.8–9.9 and 8.8–9.0 Gelem/s with 2, 9.9–10.5 and 9.2–9.4 with
	// all 4, three alternated runs);
	// AVX2 2 of 2 (two exps beside 4 bases and 4 sums do not fit in 16
	// registers, beside 2 and 2 they do, and ran 3.12–3.21 → 3.26–3.30).
	expInterleave int
}

var isas = []isa{
	{name: "avx512", suffix: "AVX512", lanes: 16, mk: 6, nv: 4, softNV: 4, expInterleave: 4},
	{name: "avx2", suffix: "AVX2", lanes: 8, mk: 6, nv: 2, softNV: 2, expInterleave: 2},
}

func (x isa) bytes() int   { return 4 * x.lanes }
func (x isa) avx512() bool { return x.lanes == 16 }

// gen emits one ISA's kernels into an avo context.
type gen struct {
	*build.Context
	isa     isa
	consts  operand.Mem               // the constant table
	iotas   operand.Mem               // the vector 0, 1, ..., lanes-1
	firsts  operand.Mem               // AVX-512: the indices 0, 4, 8, 12 (then 0s): each 128-bit block's first lane
	index   map[string]int            // constant name → slot
	held    map[string]reg.VecVirtual // constants held in registers (see hold)
	packIdx *operand.Mem              // AVX2's byte-narrowing permutation, once emitted (quantq8.go)
	pairIdx *operand.Mem              // SoftmaxPairsBF16's word interleave, once emitted (softmax.go)
}

// Constants, each stored as a full vector of identical lanes (so any
// instruction can take it as a memory operand, no broadcast form needed):
// exp's (gen/expconst), AVX2 exp's rounding constant and softcap's bit
// masks.
var constants = append(append([]expconst.Const(nil), expconst.Table...),
	expconst.Const{Name: "minusTwo", Bits: math.Float32bits(-2)},
	expconst.Const{Name: "absMask", Bits: 0x7fffffff},
	expconst.Const{Name: "signMask", Bits: 0x80000000},
	// AVX2 exp's rounding constant: 1.5·2^23 + 127 (see exps).
	expconst.Const{Name: "roundMagic", Bits: math.Float32bits(1.5*(1<<23) + 127)},
	expconst.Const{Name: "zero", Bits: 0},
	// bfloat16 rounding (narrowBF16).
	expconst.Const{Name: "intOne", Bits: 1},
	expconst.Const{Name: "round7fff", Bits: 0x7fff},
	expconst.Const{Name: "infBits", Bits: 0x7f800000},
	expconst.Const{Name: "quietBF16", Bits: 0x40},
	// int4 weights: a nibble's mask (gemv4.go).
	expconst.Const{Name: "nibble", Bits: 15},
	// bfloat16 pairs: the high halves (the Emu twin of VDPBF16PS, bf16.go).
	expconst.Const{Name: "hiHalves", Bits: 0xffff0000},
	// int8 K on VPDPBUSD: each byte's sign bit, flipped to make k+128
	// unsigned (decodeq8.go).
	expconst.Const{Name: "byteSigns", Bits: 0x80808080},
	// int8 K on VPMADDUBSW (AVX2): the ones VPMADDWD adds 16-bit pairs by.
	expconst.Const{Name: "wordOnes", Bits: 0x00010001},
	// int4 K/V widened to int8: each byte's low nibble, and the 8
	// subtracted from it (widen4kv.go).
	expconst.Const{Name: "nibbles", Bits: 0x0f0f0f0f},
	expconst.Const{Name: "eights", Bits: 0x08080808},
	// int4 K/V dequantized: the 8 subtracted from each dword (dequant.go).
	expconst.Const{Name: "intEight", Bits: 8},
	// int4 K/V as float32 (int4kv.go: DecodeQ8I4's V, DecodeI4's K and V):
	// a nibble u or'ed into 2^23's mantissa is the float 2^23 + u; less
	// 2^23 + 8, exactly u - 8.
	expconst.Const{Name: "twoTo23", Bits: math.Float32bits(1 << 23)},
	expconst.Const{Name: "twoTo23Plus8", Bits: math.Float32bits(1<<23 + 8)},
	// The int8 mode's query rows (quantq8.go): the scale's divisor and
	// the bytes' bounds.
	expconst.Const{Name: "f127", Bits: math.Float32bits(127)},
	expconst.Const{Name: "int127", Bits: 127},
	expconst.Const{Name: "intMinus127", Bits: 0xffffff81},
)

func newGen(c *build.Context, x isa) *gen {
	g := &gen{Context: c, isa: x, index: map[string]int{}}
	g.consts = c.StaticGlobal("consts" + x.suffix)
	c.DataAttributes(attr.RODATA | attr.NOPTR)
	off := 0
	for i, k := range constants {
		g.index[k.Name] = i
		for l := 0; l < x.lanes; l++ {
			c.AddDatum(off, operand.U32(k.Bits))
			off += 4
		}
	}
	if x.avx512() {
		// Tail masks for KMOVW: entry t (16 bits) is (1 << t) - 1, t = 0..16.
		for t := 0; t <= 16; t++ {
			c.AddDatum(off, operand.U16(uint16(1<<t-1)))
			off += 2
		}
	} else {
		// Tail masks for VMASKMOVPS: 8 all-ones lanes then 8 zero lanes;
		// the 8 lanes starting at (8 - n) have their first n lanes set.
		for l := 0; l < 16; l++ {
			v := uint32(0)
			if l < 8 {
				v = 0xffffffff
			}
			c.AddDatum(off, operand.U32(v))
			off += 4
		}
	}
	// The lane numbers as float32, for the ALiBi distances of a key block.
	g.iotas = c.StaticGlobal("iota" + x.suffix)
	c.DataAttributes(attr.RODATA | attr.NOPTR)
	for l := 0; l < x.lanes; l++ {
		c.AddDatum(4*l, operand.U32(math.Float32bits(float32(l))))
	}
	if x.avx512() {
		g.firsts = c.StaticGlobal("blockFirsts" + x.suffix)
		c.DataAttributes(attr.RODATA | attr.NOPTR)
		for l := 0; l < x.lanes; l++ {
			first := 0
			if l < 4 {
				first = 4 * l
			}
			c.AddDatum(4*l, operand.U32(uint32(first)))
		}
	}
	return g
}

// iota returns the memory operand of the vector 0, 1, ..., lanes-1.
func (g *gen) iota() operand.Mem { return g.iotas }

// cst returns the memory operand of a constant vector.
func (g *gen) cst(name string) operand.Mem {
	i, ok := g.index[name]
	if !ok {
		panic("no constant " + name)
	}
	return g.consts.Offset(i * g.isa.bytes())
}

// maskTable returns the tail-mask table.
func (g *gen) maskTable() operand.Mem {
	return g.consts.Offset(len(constants) * g.isa.bytes())
}

// vec allocates a vector register of the ISA's width.
func (g *gen) vec() reg.VecVirtual {
	if g.isa.avx512() {
		return g.ZMM()
	}
	return g.YMM()
}

// zero clears v by loading zeros. Not by XOR: avo's liveness analysis
// takes the XOR's read of v as a use, which would keep every accumulator
// of the function live from its start and exhaust the registers.
func (g *gen) zero(v reg.VecVirtual) {
	g.VMOVUPS(g.cst("zero"), v)
}

// zeroFrom clears v by the XOR of zr with itself (zr defined once, by
// zero, before a loop): no load per register cleared, and no read of v.
// The core takes an XOR of a register with itself as a zeroing idiom,
// whatever the destination: v does not wait on zr.
func (g *gen) zeroFrom(zr, v reg.VecVirtual) {
	if g.isa.avx512() {
		g.VPXORD(zr, zr, v)
		return
	}
	g.VPXOR(zr, zr, v)
}

// param loads an argument (a pointer or a count) into a new register.
func (g *gen) param(name string) reg.GPVirtual {
	r := g.GP64()
	g.Load(g.Param(name), r)
	return r
}

// arg returns the stack address of an argument, for instructions that
// take it as a memory operand.
func (g *gen) arg(name string) operand.Mem {
	b, err := g.Param(name).Resolve()
	if err != nil {
		panic(err)
	}
	return b.Addr
}

// stride loads an argument that is a stride in float32 elements, as bytes.
func (g *gen) stride(name string) reg.GPVirtual {
	r := g.param(name)
	g.SHLQ(operand.U8(2), r)
	return r
}

// ret leaves a function, clearing the upper vector state first so later
// SSE code pays no transition penalty.
func (g *gen) ret() {
	g.VZEROUPPER()
	g.RET()
}

// fn starts a function with a noescape stub and its doc comment.
func (g *gen) fn(name, sig string, doc ...string) {
	g.Function(name + g.isa.suffix)
	g.Attributes(attr.NOSPLIT)
	g.Pragma("noescape")
	g.SignatureExpr(sig)
	g.Doc(append([]string{fmt.Sprintf("%s%s is", name, g.isa.suffix)}, doc...)...)
}

// label returns a label name, unique within the current function, that
// says what the code after it does: the words joined by "_", a number
// appended to the word before it (label("rows", 4, "masked") is
// "rows4_masked").
func label(parts ...any) string {
	s := ""
	for _, p := range parts {
		switch p := p.(type) {
		case string:
			if s != "" {
				s += "_"
			}
			s += p
		case int:
			s += fmt.Sprint(p)
		default:
			panic(fmt.Sprintf("label: %v is neither a word nor a number", p))
		}
	}
	return s
}

// maskWord names the variant of a loop whose last vector is masked, or
// is not.
func maskWord(masked bool) string {
	if masked {
		return "masked"
	}
	return "whole"
}
