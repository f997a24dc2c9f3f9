// Widen<F16|BF16>NEON: 16-bit floats to float32, 8 per step (one load,
// the two halves widened by FCVTL/FCVTL2 or SHLL/SHLL2 #16), then a last
// 4. Exact: every float16 and bfloat16 is a float32.

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
		g.Func(name, "(dst *float32, src *uint16, n int)", 24,
			name+" is",
			"",
			"\tfor i := 0; i < n; i++ {",
			fmt.Sprintf("\t\tdst[i] = fallback.%sToF32(src[i])", e.name),
			"",
			"with n a multiple of 4.",
		)
		const dst, src, n, cnt R = 0, 1, 2, 3
		g.loadArgs(arg{"dst", dst}, arg{"src", src}, arg{"n", n})
		g.Inst("LSR $3, %s, %s", n, cnt)
		g.Inst("CBZ %s, last", cnt)
		g.Label("loop")
		g.Inst("VLD1.P 16(%s), [%s]", src, "V0.H8")
		g.Emit(widen(1, 0, false))
		g.Emit(widen(2, 0, true))
		g.Inst("VST1.P %s, 32(%s)", vlist(1, 2), dst)
		g.Inst("SUBS $1, %s, %s", cnt, cnt)
		g.Inst("BNE loop")
		g.Label("last")
		g.Inst("TBZ $2, %s, done", n)
		g.Inst("VLD1 (%s), [%s]", src, "V0.H4")
		g.Emit(widen(1, 0, false))
		g.Inst("VST1 [%s], (%s)", V(1).S4(), dst)
		g.Label("done")
		g.Inst("RET")
	}
}
