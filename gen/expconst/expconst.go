// Package expconst lists the constants of fastattn's exp and tanh, as float32 bit
// patterns, for the generators of every instruction set. The values are
// those of fallback/exp.go, the scalar twin, so all sets compute the same
// function.
package expconst

import (
	"math"

	"github.com/fastattn/fastattn/fallback"
)

// Const is one named constant.
type Const struct {
	Name string
	Bits uint32
}

// Table is exp's constants (the clamps, the range reduction and the
// polynomial p0..p5), the softmax weights' exp's and those of softcap's tanh.
var Table = []Const{
	{"expMin", math.Float32bits(fallback.ExpMin)},
	{"expMax", math.Float32bits(fallback.ExpMax)},
	{"log2e", math.Float32bits(fallback.Log2e)},
	{"ln2hi", math.Float32bits(fallback.Ln2Hi)},
	{"ln2lo", math.Float32bits(fallback.Ln2Lo)},
	{"p0", math.Float32bits(fallback.ExpPoly[0])},
	{"p1", math.Float32bits(fallback.ExpPoly[1])},
	{"p2", math.Float32bits(fallback.ExpPoly[2])},
	{"p3", math.Float32bits(fallback.ExpPoly[3])},
	{"p4", math.Float32bits(fallback.ExpPoly[4])},
	{"p5", math.Float32bits(fallback.ExpPoly[5])},
	{"one", math.Float32bits(1)},
	// The softmax weights' exp (fallback.WeightExp32): its low clamp, the
	// rounding constant 1.5·2^23 and Q's coefficients w0..w5, highest degree
	// first and consecutive (NEON walks them).
	{"wexpMin", math.Float32bits(fallback.WeightExpMin)},
	{"weightRound", math.Float32bits(fallback.WeightRound)},
	{"w0", math.Float32bits(fallback.Exp2Poly[0])},
	{"w1", math.Float32bits(fallback.Exp2Poly[1])},
	{"w2", math.Float32bits(fallback.Exp2Poly[2])},
	{"w3", math.Float32bits(fallback.Exp2Poly[3])},
	{"w4", math.Float32bits(fallback.Exp2Poly[4])},
	{"w5", math.Float32bits(fallback.Exp2Poly[5])},
	{"negMax", math.Float32bits(-math.MaxFloat32)},
	{"negInf", math.Float32bits(float32(math.Inf(-1)))},
	// softcap's tanh (fallback.Tanh32): the threshold of the polynomial
	// form and its coefficients t0..t4, consecutive (NEON walks them).
	{"tanhSmall", math.Float32bits(fallback.TanhSmall)},
	{"t0", math.Float32bits(fallback.TanhPoly[0])},
	{"t1", math.Float32bits(fallback.TanhPoly[1])},
	{"t2", math.Float32bits(fallback.TanhPoly[2])},
	{"t3", math.Float32bits(fallback.TanhPoly[3])},
	{"t4", math.Float32bits(fallback.TanhPoly[4])},
}

// WeightExpNames are the constants of the softmax weights' exp
// (fallback.WeightExp32) in the order the generators hold them in
// registers: amd64's Softmax holds them all, NEON loads them into
// consecutive registers (V16..V25) and names them by position.
var WeightExpNames = []string{"wexpMin", "log2e", "weightRound", "w0", "w1", "w2", "w3", "w4", "w5", "one"}
