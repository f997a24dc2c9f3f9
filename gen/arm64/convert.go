// Widen<F16|BF16>NEON: 16-bit floats to float32, 8 per step (one load,
// the two halves widened by FCVTL/FCVTL2 or SHLL/SHLL2 #16), then a last
// 4. Exact: every float16 and bfloat16 is a float32. Narrow<F16|BF16>NEON
// the other way, rounded to nearest even: FCVTN/FCVTN2, or for bfloat16
// the integer rounding of fallback.F32ToBF16 and UZP2 of the high halves.

package main

import (
	"fmt"

	. "github.com/fastattn/fastattn/gen/neon"
)

// convert emits the widening kernels.
func (g *gen) convert() {
	for _, e := range neonElems[1:] {
		widen := func(d, n V, upper bool) Encoding {
			if e.name == "F16" {
				return EncFCVTL(d, n, upper)
			}
			return EncSHLL(d, n, upper)
		}
		name := "Widen" + e.name + "NEON"
		g.Func(name, "(dst *float32, ldd int, src *uint16, lds int, rows, n int)", 48,
			name+" is",
			"",
			"\tfor r := 0; r < rows; r++ {",
			"\t\tfor i := 0; i < n; i++ {",
			fmt.Sprintf("\t\t\tdst[r*ldd+i] = fallback.%sToF32(src[r*lds+i])", e.name),
			"",
			"with n a multiple of 4, strides in elements: strided rows in one call",
			"(a K or V block of the flash path).",
		)
		const dst, ldd, src, lds, rows, n, cnt, d, s R = 0, 1, 2, 3, 4, 5, 6, 7, 9
		g.loadArgs(arg{"dst", dst}, arg{"ldd", ldd}, arg{"src", src}, arg{"lds", lds}, arg{"rows", rows}, arg{"n", n})
		g.toBytes(ldd)
		g.Inst("LSL $1, %s, %s", lds, lds)
		g.Inst("CBZ %s, done", rows)
		g.Inst("CBZ %s, done", n)
		g.Label("row")
		g.Inst("MOVD %s, %s", dst, d)
		g.Inst("MOVD %s, %s", src, s)
		g.Inst("LSR $3, %s, %s", n, cnt)
		g.Inst("CBZ %s, last", cnt)
		g.Label("loop")
		g.Inst("VLD1.P 16(%s), [%s]", s, "V0.H8")
		g.Emit(widen(1, 0, false))
		g.Emit(widen(2, 0, true))
		g.Inst("VST1.P %s, 32(%s)", vlist(1, 2), d)
		g.Inst("SUBS $1, %s, %s", cnt, cnt)
		g.Inst("BNE loop")
		g.Label("last")
		g.Inst("TBZ $2, %s, next", n)
		g.Inst("VLD1 (%s), [%s]", s, "V0.H4")
		g.Emit(widen(1, 0, false))
		g.Inst("VST1 [%s], (%s)", V(1).S4(), d)
		g.Label("next")
		g.Inst("ADD %s, %s, %s", ldd, dst, dst)
		g.Inst("ADD %s, %s, %s", lds, src, src)
		g.Inst("SUBS $1, %s, %s", rows, rows)
		g.Inst("BNE row")
		g.Label("done")
		g.Inst("RET")
	}
}

// narrow emits the narrowing kernels: 8 float32 per step (two vectors
// into one of 8 halves), then a last 4 (the lower 4 halves stored).
// bfloat16, per word b: NaN ? b | 0x400000 (quiet) : b + 0x7fff + (b>>16
// & 1), then its high half; V16..V18 hold 1, 0x7fff and 0x400000.
func (g *gen) narrow() {
	const dst, src, n, cnt R = 0, 1, 2, 3
	for _, e := range neonElems[1:] {
		name := "Narrow" + e.name + "NEON"
		g.Func(name, "(dst *uint16, src *float32, n int)", 24,
			name+" is",
			"",
			"\tfor i := 0; i < n; i++ {",
			fmt.Sprintf("\t\tdst[i] = fallback.F32To%s(src[i])", e.name),
			"",
			"with n a multiple of 4.",
		)
		g.loadArgs(arg{"dst", dst}, arg{"src", src}, arg{"n", n})
		bf := e.name == "BF16"
		if bf {
			g.loadConst("intOne", 16)
			g.loadConst("bf16Half", 17)
			g.loadConst("bf16Quiet", 18)
		}
		// round rounds the 4 words of v to bfloat16 in their high halves,
		// with t and u temporaries.
		round := func(v, t, u V) {
			g.Inst("VUSHR $16, %s, %s", v.S4(), t.S4())
			g.Inst("VAND %s, %s, %s", V(16).B16(), t.B16(), t.B16())
			g.VADD(t, t, 17)
			g.VADD(t, t, v) // b + 0x7fff + (b>>16 & 1)
			g.Inst("VORR %s, %s, %s", V(18).B16(), v.B16(), u.B16())
			g.Emit(EncFCMEQ(v, v, v)) // not NaN
			g.VBSL(v, t, u)
		}
		g.Inst("LSR $3, %s, %s", n, cnt)
		g.Inst("CBZ %s, last", cnt)
		g.Label("loop")
		g.Inst("VLD1.P 32(%s), %s", src, vlist(0, 2))
		if bf {
			round(0, 2, 3)
			round(1, 2, 3)
			g.Inst("VUZP2 %s, %s, %s", "V1.H8", "V0.H8", "V2.H8")
		} else {
			g.Emit(EncFCVTN(2, 0, false))
			g.Emit(EncFCVTN(2, 1, true))
		}
		g.Inst("VST1.P [%s], 16(%s)", "V2.H8", dst)
		g.Inst("SUBS $1, %s, %s", cnt, cnt)
		g.Inst("BNE loop")
		g.Label("last")
		g.Inst("TBZ $2, %s, done", n)
		g.Inst("VLD1 (%s), [%s]", src, V(0).S4())
		if bf {
			round(0, 2, 3)
			g.Inst("VUZP2 %s, %s, %s", "V0.H8", "V0.H8", "V2.H8")
		} else {
			g.Emit(EncFCVTN(2, 0, false))
		}
		g.Inst("FMOVD %s, (%s)", V(2).F(), dst)
		g.Label("done")
		g.Inst("RET")
	}
}
