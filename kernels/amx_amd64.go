//go:build amd64 && !purego

package kernels

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/fastattn/fastattn/asm"
	"github.com/fastattn/fastattn/fallback"
	"github.com/klauspost/cpuid/v2"
)

// EnvAMX is the environment variable that chooses the AMX kernels:
// FASTATTN_AMX=off keeps the avx512 set on VDPBF16PS (the bfloat16 mode
// then follows BF16Preferred's rule for a CPU without AMX);
// FASTATTN_AMX=int8 (AMXInt8On) also runs the int8 mode's ScoresQ8 on
// AMX-INT8 tiles, which by default stays on VPDPBUSD (AMXInt8Status).
const EnvAMX = "FASTATTN_AMX"

// amxState is nil where the avx512 set runs its bfloat16 products on AMX
// tiles, else the reason it does not (AMXStatus).
var amxState = errors.New("AMX not probed")

// AMXStatus returns nil when the avx512 set runs the CPU's AMX tiles, else
// why not: no AMX-TILE and AMX-BF16 in cpuid, FASTATTN_AMX=off, an OS
// that refuses (or, outside Linux, cannot be asked for) the tile state,
// or a failed self-check.
func AMXStatus() error { return amxState }

// amxUsable decides whether this process runs AMX: the CPU has it, the
// environment allows it, the OS grants the tile data state (amxPermit,
// once per process: Linux's arch_prctl), and a small product on the tiles
// gives the exact result (a guard against an encoding no test here could
// run natively).
func amxUsable() error {
	if missing := missingFeatures(cpuid.AMXTILE, cpuid.AMXBF16); missing != "" {
		return errors.New("the CPU reports no " + missing)
	}
	if os.Getenv(EnvAMX) == "off" {
		return fmt.Errorf("%s=off", EnvAMX)
	}
	if err := amxPermit(); err != nil {
		return err
	}
	return amxSelfCheck()
}

// amxSelfCheck multiplies a 32×32 block over 32 pairs (64 terms) of small
// integers on the tiles, accumulating onto C, and compares it with the
// exact result: every product and partial sum is an integer below 2^24,
// so any order of summation gives it exactly.
func amxSelfCheck() error {
	const n, k = 32, 32 // rows and columns of C; pairs of k
	var a, b [n * k]uint32
	var c, want [n * n]float32
	bf := func(v int) uint32 { return uint32(fallback.F32ToBF16(float32(v))) }
	for i := range a {
		lo, hi := i%5-2, i%7-3
		a[i] = bf(lo) | bf(hi)<<16
		lo, hi = (i/3)%5-2, (i/5)%3-1
		b[i] = bf(lo) | bf(hi)<<16
	}
	for i := range c {
		c[i] = float32(i % 11)
	}
	want = c // exact in any order, so the twin's order gives it too
	fallback.GemmBF16(want[:], n, a[:], k, 1, b[:], n, n, n, k, true)
	asm.GemmAMXAVX512(&c[0], n, &a[0], k, &b[0], n, n/amxBlock, n/amxBlock, k/amxPairs, 1, nil)
	for i := range c {
		if c[i] != want[i] {
			return fmt.Errorf("AMX self-check: element %d = %v, want %v: the tiles are not used", i, c[i], want[i])
		}
	}
	return nil
}

// WithoutAMX returns ks without AMX tiles (Config.NoAMX): for the avx512
// set where this process runs AMX, a copy whose bfloat16 products run on
// VDPBF16PS (the float32 kernels with the mode's roundings on Intel, as
// FASTATTN_AMX=off gives) and whose ScoresQ8 runs on VPDPBUSD; ks itself
// otherwise.
func (ks *Set) WithoutAMX() *Set {
	if ks != avx512 || (amxState != nil && amxInt8State != nil) {
		return ks
	}
	c := *ks
	if c.bf16 != nil && c.bf16.amx != nil {
		b := *c.bf16
		b.amx, b.amxPeak = nil, nil
		b.slow = cpuid.CPU.VendorID == cpuid.Intel
		c.bf16 = &b
	}
	if amxInt8State == nil {
		c.scoresQ8 = x86ScoresQ8(asm.ScoresQ8AVX512, asm.LanesAVX512)
	}
	return &c
}

// featureNames are Intel's names of the features cpuid spells otherwise.
var featureNames = map[cpuid.FeatureID]string{
	cpuid.AMXTILE: "AMX-TILE", cpuid.AMXBF16: "AMX-BF16", cpuid.AMXINT8: "AMX-INT8", cpuid.AVX512VNNI: "AVX512_VNNI",
}

// missingFeatures names the features of fs the CPU does not report, as
// "A", "A and B" or "A, B and C"; "" when it reports them all.
func missingFeatures(fs ...cpuid.FeatureID) string {
	var names []string
	for _, f := range fs {
		if cpuid.CPU.Supports(f) {
			continue
		}
		if name, ok := featureNames[f]; ok {
			names = append(names, name)
		} else {
			names = append(names, f.String())
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
