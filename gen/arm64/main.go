// Command arm64 generates fastattn's NEON kernel set with the emitter of
// gen/neon: asm/neon_arm64.s, its Go declarations asm/neon_arm64.go and
// the parameters it was built with, asm/params_neon_arm64.go.
//
//	go run ./arm64 -out ../asm     (from gen/; asm/gen.go has the go:generate line)
//
// Registers are assigned by hand (NEON has 32 vector registers and the
// kernels are small); each kernel's file gives the plan, as named R and V
// constants.
package main

import (
	"flag"
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
	g.prefetchLines()
	for _, el := range append(neonElems, neonInt8) {
		g.decode(el, false)
	}
	g.decode(neonInt8, true) // DecodeQ8NEON: int8 K on SDOT
	g.convert()
	g.narrow()
	g.widenI4KV()
	g.dequant()
	g.weights()
	g.gemmBF16()
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
		{Name: "DecodeKeys", Value: 4, Doc: "the key block of Decode: the fewest keys of a call."},
	})
	if err != nil {
		log.Fatal(err)
	}
}

type gen struct{ *Emitter }

// The general registers every kernel shares: panels dispatches on the nv
// argument in rNV, rowGroups counts the rows left down in rRows, and the
// constant table's address goes through rConst.
const (
	rRows  R = 6
	rNV    R = 8
	rConst R = 24
)

// The constant table: each constant one 32-bit word, loaded with VLD1R:
// exp's (gen/expconst), the exponent bias and the integers of bfloat16
// rounding; then the vector 0, 1, 2, 3 (Decode's key numbers in a block),
// loaded whole with VLD1.
var constants = append(append([]expconst.Const(nil), expconst.Table...),
	expconst.Const{Name: "bias", Bits: 127 << 23}, // the bits of 1.0: 2^n is (n << 23) + bias
	expconst.Const{Name: "intOne", Bits: 1},       // bfloat16 rounding: the kept bit, 0x7fff, a NaN's quiet bit
	expconst.Const{Name: "bf16Half", Bits: 0x7fff},
	expconst.Const{Name: "bf16Quiet", Bits: 0x400000},
	expconst.Const{Name: "iota0", Bits: 0},
	expconst.Const{Name: "iota1", Bits: 0x3f800000},
	expconst.Const{Name: "iota2", Bits: 0x40000000},
	expconst.Const{Name: "iota3", Bits: 0x40400000},
)

func (g *gen) constants() {
	words := make([]uint32, len(constants))
	for i, c := range constants {
		words[i] = c.Bits
	}
	g.Data("constsNEON", words)
}

// loadConst replicates a constant into v.
func (g *gen) loadConst(name string, v V) {
	g.constAddr(name, rConst)
	g.Inst("VLD1R (%s), [%s]", rConst, v.S4())
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

// arg names an argument of the current function and the register it is
// loaded into.
type arg struct {
	name string
	r    R
}

// loadArgs loads 8-byte arguments into their registers, in order.
func (g *gen) loadArgs(args ...arg) {
	for _, a := range args {
		g.Inst("MOVD %s, %s", g.Arg(a.name), a.r)
	}
}

// toBytes scales strides in float32 elements to bytes, in place.
func (g *gen) toBytes(strides ...R) {
	for _, r := range strides {
		g.Inst("LSL $2, %s, %s", r, r)
	}
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
func (g *gen) zero(v V) { g.VEOR(v, v, v) }
