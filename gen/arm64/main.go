// Command arm64 generates fastattn's NEON kernel set with the emitter of
// gen/neon: asm/neon_arm64.s, its Go declarations asm/neon_arm64.go and
// the parameters it was built with, asm/params_neon_arm64.go.
//
//	go run ./arm64 -out ../asm     (from gen/; asm/gen.go has the go:generate line)
//
// Registers are assigned by hand (NEON has 32 vector registers and the
// kernels are small); each kernel's comment gives the plan.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/fastattn/fastattn/gen/expconst"
	. "github.com/fastattn/fastattn/gen/neon"
	"github.com/fastattn/fastattn/gen/params"
)

func main() {
	fs := flag.NewFlagSet("arm64", flag.ExitOnError)
	out := fs.String("out", "../asm", "directory to write the .s and .go files to")
	fs.Parse(os.Args[1:])
	e := New("go run ./arm64", "arm64 && !purego", "asm")
	g := &gen{Emitter: e}
	g.constants()
	g.gemm()
	g.pv()
	g.softmax()
	g.scoreBias()
	g.expKernel()
	g.peak()
	stubs, err := e.Stubs()
	if err != nil {
		log.Fatal(err)
	}
	for name, b := range map[string][]byte{"neon_arm64.s": e.Asm(), "neon_arm64.go": stubs} {
		if err := os.WriteFile(filepath.Join(*out, name), b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	err = params.Write(*out, "neon", "arm64", "NEON", "go run ./arm64", "arm64 && !purego", []params.Param{
		{Name: "Lanes", Value: 4, Doc: "the float32 lanes of a vector."},
		{Name: "PanelVecs", Value: maxNV, Doc: "the most vectors of a Gemm or PV panel: the register tile's width."},
		{Name: "SoftmaxVecs", Value: maxNV, Doc: "the most vectors of rows of a Softmax or ScoreBias call."},
		{Name: "PeakChains", Value: peakChains, Doc: "the independent vector FMAs of an FMAPeak iteration."},
	})
	if err != nil {
		log.Fatal(err)
	}
}

type gen struct{ *Emitter }

// The tile of GEMM and PV: mk rows × nv vectors of 4 lanes, 24
// accumulators V0..V23 (row i, vector j in V(4i+j)), the B or V row in
// V24..V27, broadcasts in V28/V29. Per step 4 vector loads and 6 broadcast
// loads (GEMM) or 2 loads of 4+2 P values used by lane (PV) feed 24 FMAs.
const (
	mk    = 6
	maxNV = 4
)

func acc(i, j int) V { return V(4*i + j) }

// The constant table: each constant one 32-bit word, loaded with VLD1R:
// exp's (gen/expconst) and the exponent bias.
var constants = append(append([]expconst.Const(nil), expconst.Table...),
	expconst.Const{Name: "bias", Bits: 127 << 23}, // the bits of 1.0: 2^n is (n << 23) + bias
)

func (g *gen) constants() {
	words := make([]uint32, len(constants))
	for i, c := range constants {
		words[i] = c.Bits
	}
	g.Data("constsNEON", words)
}

// loadConst replicates a constant into v, using R27-free scratch R24 for
// the table address.
func (g *gen) loadConst(name string, v V) {
	g.constAddr(name, 24)
	g.Inst("VLD1R (R24), [%s]", v.S4())
}

// constAddr puts the address of a constant in the table into r.
func (g *gen) constAddr(name string, r R) {
	for i, c := range constants {
		if c.Name == name {
			g.Inst("MOVD $constsNEON<>+%d(SB), %s", 4*i, r)
			return
		}
	}
	panic("no constant " + name)
}

// vlist is a Go-assembler register list of n consecutive registers from v.
func vlist(v V, n int) string {
	s := "["
	for i := 0; i < n; i++ {
		if i > 0 {
			s += ", "
		}
		s += V(int(v) + i).S4()
	}
	return s + "]"
}

// zero clears v.
func (g *gen) zero(v V) { g.Inst("VEOR V%d.B16, V%d.B16, V%d.B16", v, v, v) }

// move copies n to d.
func (g *gen) move(d, n V) { g.Emit(EncORR(d, n, n)) }

// loadArgs loads 8-byte arguments, in order of the frame, into R0, R1, ...;
// the one named nv goes to R8, where panels reads it.
func (g *gen) loadArgs(names ...string) {
	for i, a := range names {
		reg := i
		if a == "nv" {
			reg = 8
		}
		g.Inst("MOVD %s+%d(FP), R%d", a, 8*i, reg)
	}
}

// panels emits a jump on the argument nv in R8 (1..maxNV; any other value
// returns) to one copy of panel per value, labelled prefix+nv.
func (g *gen) panels(prefix string, panel func(nv int)) {
	for v := maxNV; v >= 1; v-- {
		g.Inst("CMP $%d, R8", v)
		g.Inst("BEQ %s%d", prefix, v)
	}
	g.Inst("RET")
	for nv := maxNV; nv >= 1; nv-- {
		g.Label(fmt.Sprintf("%s%d", prefix, nv))
		panel(nv)
	}
}

// rowGroups emits the loop over the rows in R6: groups of mk rows, then
// the last rows%mk in blocks of 4, 2 and 1 (at most one of each).
func (g *gen) rowGroups(l string, block func(mr int, lbl string)) {
	g.Label(l + "groups")
	g.Inst("CMP $%d, R6", mk)
	g.Inst("BLT %stail4", l)
	block(mk, l+"full")
	g.Inst("SUB $%d, R6, R6", mk)
	g.Inst("B %sgroups", l)
	for _, mr := range []int{4, 2, 1} {
		g.Label(l + "tail" + itoa(mr))
		next := l + "tail" + itoa(mr/2)
		if mr == 1 {
			next = l + "done"
		}
		g.Inst("TBZ $%d, R6, %s", map[int]int{4: 2, 2: 1, 1: 0}[mr], next)
		block(mr, l+"rows"+itoa(mr))
	}
	g.Label(l + "done")
	g.Inst("RET")
}

func itoa(i int) string { return string(rune('0' + i)) }
