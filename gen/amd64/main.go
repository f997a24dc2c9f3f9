// Command amd64 generates fastattn's AVX2+FMA and AVX-512 kernel sets with
// avo: for each instruction set, asm/<isa>_amd64.s and its Go declarations
// asm/<isa>_amd64.go.
//
//	go run ./amd64 -out ../asm     (from gen/; asm/gen.go has the go:generate line)
//
// The output depends only on this program, never on where it is written,
// so a regeneration into any directory must reproduce the committed files
// byte for byte.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"regexp"

	"github.com/fastattn/fastattn/gen/params"
	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/pass"
	"github.com/mmcloughlin/avo/printer"
)

func main() {
	// avo's build package owns flag.CommandLine (-out among its flags).
	fs := flag.NewFlagSet("amd64", flag.ExitOnError)
	out := fs.String("out", "../asm", "directory to write the .s and .go files to")
	fs.Parse(os.Args[1:])
	for _, x := range isas {
		if err := generate(x, *out); err != nil {
			log.Fatalf("%s: %v", x.name, err)
		}
	}
}

// evexOnly matches the registers only EVEX (AVX-512) instructions encode:
// vector registers 16..31, zmm, opmasks.
var evexOnly = regexp.MustCompile(`\b([XY](1[6-9]|2[0-9]|3[01])|Z[0-9]+|K[1-7])\b`)

// generate builds every kernel of x and writes its three files into dir:
// the assembly, its Go declarations and its parameters.
func generate(x isa, dir string) error {
	c := build.NewContext()
	c.ConstraintExpr("amd64,!purego")
	g := newGen(c, x)
	g.gemm()
	g.gemmPacked()
	for _, packed := range []bool{false, true} {
		for _, e := range []elem{f16, bf16} {
			g.gemmW(e, packed)
		}
		g.gemmWPairs(packed)
	}
	g.gemvI8()
	g.gemvI4()
	g.widenW(false)
	g.widenW(true)
	g.transpose(true)
	g.transpose(false)
	g.dot()
	if !g.isa.avx512() { // the AVX-512 set runs the AVX2 ones but float32's (heads.go)
		for _, e := range []elem{f32, f16, bf16} {
			g.headScores(e)
			g.headPV(e)
		}
		g.headScoresI8()
		g.headPVI8()
	} else { // HeadScoresF32AVX512, HeadPVF32AVX512: zmm vectors
		g.headScores(f32)
		g.headPV(f32)
	}
	for _, e := range []elem{f32, f16, bf16, i8, i4} {
		g.decode(e, q8None)
	}
	if x.avx512() {
		g.decode(i8, q8Dot) // DecodeQ8: int8 K on VPDPBUSD
		g.decode(i4, q8Dot) // DecodeQ8I4: int4 K/V as they are, 1..16 rows
		g.scoresQ8()        // ScoresQ8: a flash block's int8 scores on VPDPBUSD
		g.packKeysQ8()      // PackKeysQ8: its K blocks
	} else {
		for _, e := range []elem{i8, i4} { // DecodeQ8…, DecodeQ8…I4
			g.decode(e, q8Sign)   // DecodeQ8: on VPMADDUBSW
			g.decode(e, q8Dot)    // DecodeQ8VNNI: on AVX-VNNI's VPDPBUSD
			g.decode(e, q8DotEmu) // DecodeQ8VNNIEmu: the same on its EVEX form
		}
	}
	g.quantizeQ8() // QuantizeQ8: the int8 mode's query rows
	g.convert()
	g.widenI4KV()
	g.dequant()
	g.pv()
	g.softmax()
	g.softmaxPairs(false)
	g.softmaxRound()
	g.scaleColumns()
	g.scoreBias()
	g.expKernel()
	g.peak()
	g.prefetchLines()
	if x.avx512() {
		g.gemmBF16(false)
		g.gemmBF16(true)
		g.pairBF16()
		g.softmaxPairs(true) // SoftmaxPairsBF16: on VCVTNE2PS2BF16
		g.bf16Peak()
		cfg := g.tileConfig()
		g.gemmAMX(cfg, false)
		g.gemmAMX(cfg, true)
		g.amxPeak(cfg)
		cfgQ8 := g.tileConfigQ8()
		g.scoresQ8AMX(cfgQ8, false) // ScoresQ8AMX: ScoresQ8 on AMX-INT8 tiles
		g.scoresQ8AMX(cfgQ8, true)
	}
	f, err := c.Result()
	if err != nil {
		return err
	}
	if err := pass.Compile.Execute(f); err != nil {
		return err
	}
	if err := rawPass(f); err != nil { // VDPBF16PS's bytes, once registers are allocated
		return err
	}
	if err := amxPass(f); err != nil { // the tile instructions' bytes
		return err
	}
	// A fixed command line in the header: the files do not depend on -out.
	cfg := printer.Config{Argv: []string{"go", "run", "./amd64"}, Pkg: "asm"}
	for _, o := range []struct {
		name string
		p    printer.Printer
	}{
		{x.name + "_amd64.s", printer.NewGoAsm(cfg)},
		{x.name + "_amd64.go", printer.NewStubs(cfg)},
	} {
		b, err := o.p.Print(f)
		if err != nil {
			return err
		}
		if r := evexOnly.Find(b); !x.avx512() && r != nil {
			// avo allocates past the 16 VEX registers when a kernel needs
			// more, with no error and no AVX-512 in its Requires line.
			return fmt.Errorf("%s: the %s code uses %s, an AVX-512 register", o.name, x.name, r)
		}
		if err := os.WriteFile(filepath.Join(dir, o.name), b, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", o.name, err)
		}
	}
	return params.Write(dir, x.name, "amd64", x.suffix, "go run ./amd64", "amd64 && !purego", []params.Param{
		{Name: "Lanes", Value: x.lanes, Doc: "the float32 lanes of a vector."},
		{Name: "PanelVecs", Value: x.nv, Doc: "the most vectors of a Gemm or PV panel: the register tile's width."},
		{Name: "SoftmaxVecs", Value: x.softNV, Doc: "the most vectors of rows of a Softmax or ScoreBias call."},
		{Name: "DotRows", Value: dotRows, Doc: "the most query rows of a Dot call."},
		{Name: "PeakChains", Value: peakChains, Doc: "the independent vector FMAs of an FMAPeak iteration."},
		{Name: "BF16PeakChains", Value: bf16Chains(x), Doc: "the independent VDPBF16PS of a BF16Peak iteration (0: no bfloat16 kernels)."},
		{Name: "AMXBlock", Value: amxBlockOf(x), Doc: "the rows and columns of C one GemmAMX step covers (0: no AMX kernels)."},
		{Name: "AMXPairs", Value: amxPairsOf(x), Doc: "the pairs of k one GemmAMX step takes."},
		{Name: "DecodeKeys", Value: x.lanes, Doc: "the fewest keys of a Decode call (one block)."},
		{Name: "DecodeScratch", Value: g.decodeScratch(), Doc: "the floats of Decode's scratch: weights, alphas, masks."},
		{Name: "DecodeScaleWidth", Value: g.scaleEntryBytes() / 4, Doc: "the floats of one int8 K scale in Decode's scale scratch (AVX2: broadcast\n// to a vector by the fill, so that the kernel multiplies by a memory operand)."},
		{Name: "DecodePairs", Value: !x.avx512(), Doc: "whether Decode loads a 16-bit row's last vector as dword pairs\n// (VMASKMOVPS has no 16-bit form), so it takes even dims only."},
	})
}
