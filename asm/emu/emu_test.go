//go:build amd64 && !purego

package emu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"unsafe"

	"github.com/fastattn/fastattn/asm"
	"github.com/fastattn/fastattn/fallback"
	"github.com/klauspost/cpuid/v2"
)

// The AVX-512 kernels of the float32 family run here in the interpreter,
// each beside its AVX2 twin run natively on the same operands: the same
// sums in the same order, so the same bits. The interpreter is checked
// first on the AVX2 text itself, against the same native runs.

// load parses a generated .s file of package asm. With a kernel set
// forced (FASTATTN_ISA) the test is skipped: these tests run the text,
// whatever set the library would select, so the unforced pass (CI runs
// the suite once per forced set too) covers them.
func load(t *testing.T, name string) *Program {
	t.Helper()
	if os.Getenv("FASTATTN_ISA") != "" {
		t.Skip("a kernel set is forced: the interpreter's tests run in the unforced pass")
	}
	src, err := os.ReadFile("../" + name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// needAVX2 skips a test the native AVX2 kernels cannot run on.
func needAVX2(t *testing.T) {
	if !cpuid.CPU.Supports(cpuid.AVX2, cpuid.FMA3) {
		t.Skip("no AVX2 and FMA: the native reference cannot run")
	}
}

// isa is one kernel set's text as the interpreter runs it.
type isa struct {
	prog   *Program
	suffix string
	lanes  int
	maxNV  int
}

func sets(t *testing.T) []isa {
	return []isa{
		{load(t, "avx2_amd64.s"), "AVX2", 8, asm.PanelVecsAVX2},
		{load(t, "avx512_amd64.s"), "AVX512", 16, asm.PanelVecsAVX512},
	}
}

// panels calls f for each column panel of n columns: j0, nv, tail.
func panels(n, lanes, maxNV int, f func(j0, nv, tail int)) {
	for j0 := 0; j0 < n; {
		w := min(n-j0, lanes*maxNV)
		nv := (w + lanes - 1) / lanes
		f(j0, nv, w-(nv-1)*lanes)
		j0 += w
	}
}

func randF32(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d = %v (%#x), want %v (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

func ptr[T any](s []T) unsafe.Pointer { return unsafe.Pointer(&s[0]) }

// gemmKind is a GEMM kernel family: B's element and whether A is packed.
type gemmKind struct {
	name   string // the kernel's name without its set's suffix
	bBytes int    // bytes per B element: 4 float32 or pairs, 2 float16/bfloat16
	pairs  bool   // B holds pairs of bfloat16 over k (k counts pairs)
	packed bool   // A packed in row tiles of 6, 4, 2, 1
}

var gemmKinds = []gemmKind{
	{"Gemm", 4, false, false},
	{"GemmPacked", 4, false, true},
	{"GemmWF16", 2, false, false},
	{"GemmWBF16", 2, false, false},
	{"GemmWPairs", 4, true, false},
	{"GemmWPackedF16", 2, false, true},
	{"GemmWPackedBF16", 2, false, true},
	{"GemmWPairsPacked", 4, true, true},
}

// native runs the AVX2 kernel of kind g natively.
func native(g gemmKind, c *float32, ldc int, a *float32, lda int, b unsafe.Pointer, ldb, m, k, nv, tail, acc int) {
	switch g.name {
	case "Gemm":
		asm.GemmAVX2(c, ldc, a, lda, (*float32)(b), ldb, m, k, nv, tail, acc)
	case "GemmPacked":
		asm.GemmPackedAVX2(c, ldc, a, lda, (*float32)(b), ldb, m, k, nv, tail, acc)
	case "GemmWF16":
		asm.GemmWF16AVX2(c, ldc, a, lda, (*uint16)(b), ldb, m, k, nv, tail, acc)
	case "GemmWBF16":
		asm.GemmWBF16AVX2(c, ldc, a, lda, (*uint16)(b), ldb, m, k, nv, tail, acc)
	case "GemmWPairs":
		asm.GemmWPairsAVX2(c, ldc, a, lda, (*uint32)(b), ldb, m, k, nv, tail, acc)
	case "GemmWPackedF16":
		asm.GemmWPackedF16AVX2(c, ldc, a, lda, (*uint16)(b), ldb, m, k, nv, tail, acc)
	case "GemmWPackedBF16":
		asm.GemmWPackedBF16AVX2(c, ldc, a, lda, (*uint16)(b), ldb, m, k, nv, tail, acc)
	case "GemmWPairsPacked":
		asm.GemmWPairsPackedAVX2(c, ldc, a, lda, (*uint32)(b), ldb, m, k, nv, tail, acc)
	default:
		panic(g.name)
	}
}

// packA lays out m rows of depth k (a row every lda) as the packed kernels
// read them: tiles of 6 rows, then 4, 2, 1, each tile's columns
// contiguous (element (i, p) of a tile of mr rows from r0 at r0·k + p·mr
// + i - r0).
func packA(a []float32, lda, m, k int) []float32 {
	out := make([]float32, m*k)
	for r0 := 0; r0 < m; {
		mr := 1
		switch rem := m - r0; {
		case rem >= 6:
			mr = 6
		case rem >= 4:
			mr = 4
		case rem >= 2:
			mr = 2
		}
		for p := 0; p < k; p++ {
			for i := 0; i < mr; i++ {
				out[r0*k+p*mr+i] = a[(r0+i)*lda+p]
			}
		}
		r0 += mr
	}
	return out
}

// TestGemms runs every GEMM kernel of the AVX-512 set (and, as the
// interpreter's own check, of the AVX2 set) in the interpreter beside the
// AVX2 kernel run natively: every row tail (the tiles of 6, 4, 2, 1),
// column tails on both sets' widths, steps of k around the unrolling by 4,
// accumulating or not. Each operand is mapped to its last byte, so a read
// or write past it fails the run.
func TestGemms(t *testing.T) {
	needAVX2(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range sets(t) {
		for _, g := range gemmKinds {
			t.Run(g.name+s.suffix, func(t *testing.T) {
				for _, m := range []int{1, 2, 3, 5, 6, 7, 11, 13} {
					for _, k := range []int{1, 2, 3, 4, 5, 8, 9} {
						for _, cols := range []int{1, 7, 8, 17, 33, 63, 64, 70} {
							gemmCase(t, s, g, rng, m, k, cols, (m+k+cols)%2)
						}
					}
				}
			})
		}
	}
}

func gemmCase(t *testing.T, s isa, g gemmKind, rng *rand.Rand, m, k, n, acc int) {
	depth := k // A's columns
	if g.pairs {
		depth = 2 * k
	}
	lda := depth + rng.IntN(3)
	a := randF32(rng, (m-1)*lda+depth)
	ldb := (n+63)&^63 + 64*rng.IntN(2) // whole vectors of either set readable
	words := ldb * k                   // 16-bit and paired B are read in whole vectors
	var b []uint32
	var b16 []uint16
	var bp unsafe.Pointer
	switch {
	case g.bBytes == 4 && !g.pairs:
		f := randF32(rng, (k-1)*ldb+n)
		bp = ptr(f)
		b = unsafe.Slice((*uint32)(bp), len(f))
	case g.pairs:
		b = make([]uint32, words)
		for i := range b {
			b[i] = uint32(bf16(rng)) | uint32(bf16(rng))<<16
		}
		bp = ptr(b)
	default:
		b16 = make([]uint16, words)
		for i := range b16 {
			if g.name == "GemmWF16" || g.name == "GemmWPackedF16" {
				b16[i] = f16(rng)
			} else {
				b16[i] = bf16(rng)
			}
		}
		bp = ptr(b16)
	}
	ap, aLd := a, lda
	if g.packed {
		ap, aLd = packA(a, lda, m, depth), depth
	}
	ldc := n + rng.IntN(3)
	c0 := randF32(rng, (m-1)*ldc+n)
	want := append([]float32(nil), c0...)
	got := append([]float32(nil), c0...)
	panels(n, 8, asm.PanelVecsAVX2, func(j0, nv, tail int) {
		native(g, &want[j0], ldc, &ap[0], aLd, unsafe.Add(bp, j0*g.bBytes), ldb, m, k, nv, tail, acc)
	})
	mc := NewMachine(s.prog)
	MapSlice(mc, ap)
	MapSlice(mc, got)
	if b16 != nil {
		MapSlice(mc, b16)
	} else {
		MapSlice(mc, b)
	}
	panels(n, s.lanes, s.maxNV, func(j0, nv, tail int) {
		err := mc.Call(g.name+s.suffix, Ptr(ptr(got[j0:])), Int(ldc), Ptr(ptr(ap)), Int(aLd),
			Ptr(unsafe.Add(bp, j0*g.bBytes)), Int(ldb), Int(m), Int(k), Int(nv), Int(tail), Int(acc))
		if err != nil {
			t.Fatalf("m=%d k=%d n=%d j0=%d: %v", m, k, n, j0, err)
		}
	})
	sameBits(t, g.name+s.suffix, got, want)
}

// bf16 is a random bfloat16's bits; f16 a random float16's.
func bf16(rng *rand.Rand) uint16 {
	return uint16(math.Float32bits(float32(rng.NormFloat64())) >> 16)
}

func f16(rng *rand.Rand) uint16 {
	sign := uint16(rng.IntN(2)) << 15
	return sign | uint16(13+rng.IntN(4))<<10 | uint16(rng.IntN(1024))
}

// TestPV runs PV of both sets in the interpreter beside AVX2's natively:
// row tails, column tails, keys around the unrolling by 4, with and
// without alpha, and the scaling-only call (no keys).
func TestPV(t *testing.T) {
	needAVX2(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, s := range sets(t) {
		t.Run("PV"+s.suffix, func(t *testing.T) {
			for _, rows := range []int{1, 2, 5, 6, 7, 13} {
				for _, nk := range []int{0, 1, 3, 4, 5, 9} {
					for _, dv := range []int{1, 8, 15, 16, 33, 63, 64, 70, 128} {
						pvCase(t, s, rng, rows, nk, dv, (rows+nk+dv)%2 == 0)
					}
				}
			}
		})
	}
}

func pvCase(t *testing.T, s isa, rng *rand.Rand, rows, nk, dv int, scaled bool) {
	ldo, ldp, ldv := dv+rng.IntN(3), rows+rng.IntN(3), dv+rng.IntN(3)
	o0 := randF32(rng, (rows-1)*ldo+dv)
	p := randF32(rng, max(nk*ldp, 1))
	v := randF32(rng, max((nk-1)*ldv+dv, 1))
	alpha := randF32(rng, rows)
	var ap *float32
	if scaled {
		ap = &alpha[0]
	}
	pp := Int(0) // no keys: no P or V, as kernels.pvPanels passes them
	if nk > 0 {
		pp = Ptr(ptr(p))
	}
	want := append([]float32(nil), o0...)
	got := append([]float32(nil), o0...)
	panels(dv, 8, asm.PanelVecsAVX2, func(j0, nv, tail int) {
		var p0, v0 *float32
		if nk > 0 {
			p0, v0 = &p[0], &v[j0]
		}
		asm.PVAVX2(&want[j0], ldo, p0, ldp, v0, ldv, ap, rows, nk, nv, tail)
	})
	mc := NewMachine(s.prog)
	for _, x := range [][]float32{got, p, v, alpha} {
		MapSlice(mc, x)
	}
	panels(dv, s.lanes, s.maxNV, func(j0, nv, tail int) {
		var aArg Arg = Int(0)
		if scaled {
			aArg = Ptr(ptr(alpha))
		}
		vp := Int(0)
		if nk > 0 {
			vp = Ptr(ptr(v[j0:]))
		}
		err := mc.Call("PV"+s.suffix, Ptr(ptr(got[j0:])), Int(ldo), pp, Int(ldp), vp, Int(ldv), aArg,
			Int(rows), Int(nk), Int(nv), Int(tail))
		if err != nil {
			t.Fatalf("rows=%d nk=%d dv=%d: %v", rows, nk, dv, err)
		}
	})
	sameBits(t, "PV"+s.suffix, got, want)
}

// TestSoftmax runs Softmax, SoftmaxRound (the weights rounded to
// bfloat16) and SoftmaxPairs (and paired over keys) of both sets in the interpreter beside AVX2's
// natively: 16 to 64 rows, rows with no key yet (m = -Inf), masked
// scores (-Inf), with and without a softcap.
func TestSoftmax(t *testing.T) {
	needAVX2(t)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, s := range sets(t) {
		for _, name := range []string{"Softmax", "SoftmaxRound", "SoftmaxPairs"} {
			t.Run(name+s.suffix, func(t *testing.T) {
				for _, rows := range []int{16, 32, 48, 64} {
					for _, nk := range []int{1, 2, 5, 17} {
						for _, softcap := range []float32{0, 30} {
							softmaxCase(t, s, name, rng, rows, nk, softcap)
						}
					}
				}
			})
		}
	}
}

func softmaxCase(t *testing.T, s isa, name string, rng *rand.Rand, rows, nk int, softcap float32) {
	lds := rows + 8*rng.IntN(2)
	sc := randF32(rng, (nk-1)*lds+rows)
	for i := range sc {
		sc[i] *= 8
		if rng.IntN(9) == 0 {
			sc[i] = float32(math.Inf(-1))
		}
	}
	m0, l0 := randF32(rng, rows), randF32(rng, rows)
	for i := range m0 {
		l0[i] = float32(math.Abs(float64(l0[i])))
		if i%5 == 0 {
			m0[i], l0[i] = float32(math.Inf(-1)), 0
		}
	}
	type state struct{ s, m, l, al []float32 }
	mk := func() state {
		return state{append([]float32(nil), sc...), append([]float32(nil), m0...), append([]float32(nil), l0...), make([]float32, rows)}
	}
	want, got := mk(), mk()
	ldp := lds + 8
	wantP, gotP := make([]uint32, (nk+1)/2*ldp), make([]uint32, (nk+1)/2*ldp)
	for r0 := 0; r0 < rows; r0 += 16 {
		switch name {
		case "Softmax":
			asm.SoftmaxAVX2(&want.s[r0], lds, &want.m[r0], &want.l[r0], &want.al[r0], nk, 2, softcap)
		case "SoftmaxRound":
			asm.SoftmaxRoundAVX2(&want.s[r0], lds, &want.m[r0], &want.l[r0], &want.al[r0], nk, 2, softcap)
		default:
			asm.SoftmaxPairsAVX2(&want.s[r0], lds, &want.m[r0], &want.l[r0], &want.al[r0], nk, 2, softcap, &wantP[r0], ldp)
		}
	}
	mc := NewMachine(s.prog)
	for _, x := range [][]float32{got.s, got.m, got.l, got.al} {
		MapSlice(mc, x)
	}
	MapSlice(mc, gotP)
	step := s.lanes * 4
	if s.suffix == "AVX2" {
		step = 16
	}
	for r0 := 0; r0 < rows; r0 += step {
		nv := min(step, rows-r0) / s.lanes
		args := []Arg{Ptr(ptr(got.s[r0:])), Int(lds), Ptr(ptr(got.m[r0:])), Ptr(ptr(got.l[r0:])),
			Ptr(ptr(got.al[r0:])), Int(nk), Int(nv), F32(softcap)}
		if name == "SoftmaxPairs" {
			args = append(args, Ptr(ptr(gotP[r0:])), Int(ldp))
		}
		err := mc.Call(name+s.suffix, args...)
		if err != nil {
			t.Fatalf("rows=%d nk=%d: %v", rows, nk, err)
		}
	}
	sameBits(t, "Softmax weights", got.s, want.s)
	sameBits(t, "Softmax m", got.m, want.m)
	sameBits(t, "Softmax l", got.l, want.l)
	sameBits(t, "Softmax alpha", got.al, want.al)
	for i := range wantP {
		if gotP[i] != wantP[i] {
			t.Fatalf("SoftmaxPairs%s rows=%d nk=%d: pair %d = %#x, want %#x", s.suffix, rows, nk, i, gotP[i], wantP[i])
		}
	}
}

// TestAccess checks that the interpreter reports a read past a mapped
// operand: Gemm reading one row of A more than was mapped.
func TestAccess(t *testing.T) {
	p := load(t, "avx512_amd64.s")
	a, b, c := make([]float32, 4), make([]float32, 64), make([]float32, 16)
	mc := NewMachine(p)
	MapSlice(mc, a[:3]) // k = 4 reads a[3]
	MapSlice(mc, b)
	MapSlice(mc, c)
	err := mc.Call("GemmAVX512", Ptr(ptr(c)), Int(16), Ptr(ptr(a)), Int(4), Ptr(ptr(b)), Int(16), Int(1), Int(4), Int(1), Int(16), Int(0))
	if err == nil {
		t.Fatal("a read past the mapped A ran without an error")
	}
}

// TestTransposeScale runs TransposeScale and Transpose32 of both sets in the interpreter
// beside AVX2's natively (one rounding per element: the same bits).
func TestTransposeScale(t *testing.T) {
	needAVX2(t)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, s := range sets(t) {
		t.Run("TransposeScale"+s.suffix, func(t *testing.T) {
			for _, nr := range []int{8, 16, 24} {
				for _, nc := range []int{8, 16, 40} {
					lds, ldd := nc+rng.IntN(3), nr+rng.IntN(3)
					src := randF32(rng, (nr-1)*lds+nc)
					want, got := make([]float32, (nc-1)*ldd+nr), make([]float32, (nc-1)*ldd+nr)
					asm.TransposeScaleAVX2(&want[0], ldd, &src[0], lds, nr, nc, 0.125)
					mc := NewMachine(s.prog)
					MapSlice(mc, src)
					MapSlice(mc, got)
					if err := mc.Call("TransposeScale"+s.suffix, Ptr(ptr(got)), Int(ldd), Ptr(ptr(src)), Int(lds), Int(nr), Int(nc), F32(0.125)); err != nil {
						t.Fatalf("nr=%d nc=%d: %v", nr, nc, err)
					}
					sameBits(t, "TransposeScale", got, want)
					// Transpose32: the same shuffles on bits, no multiply.
					src32 := bitsOf(src)
					want32, got32 := make([]uint32, len(want)), make([]uint32, len(got))
					asm.Transpose32AVX2(&want32[0], ldd, &src32[0], lds, nr, nc)
					call(t, s, "Transpose32", [][]byte{bytesOf(src32), bytesOf(got32)}, Ptr(ptr(got32)), Int(ldd), Ptr(ptr(src32)), Int(lds), Int(nr), Int(nc))
					for i := range want32 {
						if got32[i] != want32[i] {
							t.Fatalf("Transpose32 nr=%d nc=%d: element %d = %#x, want %#x", nr, nc, i, got32[i], want32[i])
						}
					}
				}
			}
		})
	}
}

// bitsOf returns x's bit patterns.
func bitsOf(x []float32) []uint32 {
	u := make([]uint32, len(x))
	for i, v := range x {
		u[i] = math.Float32bits(v)
	}
	return u
}

// near fails unless got is within tol of want (relative to scale).
func near(t *testing.T, what string, got, want, scale float64) {
	t.Helper()
	if !(math.Abs(got-want) <= 2e-5*scale+1e-30) {
		t.Fatalf("%s = %v, want %v (scale %v)", what, got, want, scale)
	}
}

// TestDot runs Dot of both sets in the interpreter against float64 dot
// products (the sets reduce lanes in different orders): 1 to 4 rows, key
// counts around the groups of 4, every tail of the head dim.
func TestDot(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, s := range sets(t) {
		t.Run("Dot"+s.suffix, func(t *testing.T) {
			for rows := 1; rows <= 4; rows++ {
				for _, nk := range []int{1, 3, 4, 5, 9, 17} {
					for _, dk := range []int{1, 7, 16, 17, 64, 70} {
						ldk, ldq, lds := dk+rng.IntN(3), dk+rng.IntN(3), rows+rng.IntN(3)
						k, q := randF32(rng, (nk-1)*ldk+dk), randF32(rng, (rows-1)*ldq+dk)
						out := make([]float32, (nk-1)*lds+rows)
						mc := NewMachine(s.prog)
						for _, x := range [][]float32{k, q, out} {
							MapSlice(mc, x)
						}
						nvec := (dk + s.lanes - 1) / s.lanes
						err := mc.Call("Dot"+s.suffix, Ptr(ptr(out)), Int(lds), Ptr(ptr(k)), Int(ldk), Ptr(ptr(q)), Int(ldq),
							Int(rows), Int(nk), Int(nvec), Int(dk-(nvec-1)*s.lanes))
						if err != nil {
							t.Fatalf("rows=%d nk=%d dk=%d: %v", rows, nk, dk, err)
						}
						for c := 0; c < nk; c++ {
							for r := 0; r < rows; r++ {
								want, abs := 0.0, 0.0
								for d := 0; d < dk; d++ {
									x := float64(k[c*ldk+d]) * float64(q[r*ldq+d])
									want, abs = want+x, abs+math.Abs(x)
								}
								near(t, "Dot", float64(out[c*lds+r]), want, abs)
							}
						}
					}
				}
			}
		})
	}
}

// TestDecode runs the fused decode kernels of both sets (float32,
// float16 and bfloat16 K/V) in the interpreter against fallback.Decode:
// rows 1 to 16, key counts from one block on, head dims with tails, a
// running state or an empty one, with ALiBi or not. Blocks of a set's
// lanes keys against fallback's 16 round differently, so the results
// are held within bounds: the outputs divided by their sums, the sums
// relative to each other, the maxima.
func TestDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, s := range sets(t) {
		for _, typ := range []fallback.KVType{fallback.KVFloat32, fallback.KVFloat16, fallback.KVBFloat16, fallback.KVInt8, fallback.KVInt4} {
			name := map[fallback.KVType]string{fallback.KVFloat32: "DecodeF32", fallback.KVFloat16: "DecodeF16", fallback.KVBFloat16: "DecodeBF16",
				fallback.KVInt8: "DecodeI8", fallback.KVInt4: "DecodeI4"}[typ]
			t.Run(name+s.suffix, func(t *testing.T) {
				dims := []int{8, 17, 64, 128}
				switch {
				case typ == fallback.KVInt4:
					dims = []int{32, 64, 128} // whole q4_0 blocks
				case s.suffix == "AVX2" && typ == fallback.KVInt8:
					dims = []int{8, 20, 64, 128} // AVX2 reads an int8 row's last vector as dwords (kernels.HasDecode)
				case s.suffix == "AVX2" && typ != fallback.KVFloat32:
					dims = []int{8, 18, 64, 128} // AVX2 reads 16-bit rows as dword pairs: even dims (kernels.HasDecode)
				}
				for _, rows := range []int{1, 2, 5, 16} {
					for _, nk := range []int{16, 17, 33, 40} {
						for _, dk := range dims {
							decodeCase(t, s, name, typ, rng, rows, nk, dk, dims[rng.IntN(len(dims))], (rows+nk)%2 == 0)
						}
					}
				}
			})
		}
	}
}

func decodeCase(t *testing.T, s isa, name string, typ fallback.KVType, rng *rand.Rand, rows, nk, dk, dv int, running bool) {
	ldk, ldv := dk+rng.IntN(3), dv+rng.IntN(3)
	kf, vf := randF32(rng, (nk-1)*ldk+dk), randF32(rng, (nk-1)*ldv+dv)
	var scales [2][]float32 // int8 and int4: K's and V's scales, a row every ldS
	rowsOf := func(f []float32, ld, dim, which int) (fallback.KVRows, unsafe.Pointer, int) {
		switch typ {
		case fallback.KVFloat32:
			return fallback.KVRows{F32: f, Type: typ, Ld: ld}, ptr(f), 4 * len(f)
		case fallback.KVInt8, fallback.KVInt4:
			ldS := fallback.Int8Blocks(dim) + 1
			sc := make([]float32, nk*ldS)
			for i := range sc {
				sc[i] = 0.01 + 0.05*rng.Float32()
			}
			scales[which] = sc
			ldq := ld
			if typ == fallback.KVInt4 {
				ldq = fallback.Int4RowBytes(dim) + 3
			}
			q := make([]int8, (nk-1)*ldq+fallback.StoredWidth(typ, dim))
			for i := range q {
				q[i] = int8(rng.Uint32())
			}
			return fallback.KVRows{I8: q, S: sc, Type: typ, Ld: ldq, LdS: ldS}, ptr(q), len(q)
		}
		u := make([]uint16, len(f))
		fallback.Narrow(u, f, typ)
		return fallback.KVRows{U16: u, Type: typ, Ld: ld}, ptr(u), 2 * len(u)
	}
	kr, kp, kn := rowsOf(kf, ldk, dk, 0)
	vr, vp, vn := rowsOf(vf, ldv, dv, 1)
	q := randF32(rng, rows*dk)
	for i := range q {
		q[i] *= 0.3
	}
	o0, m0, l0 := make([]float32, rows*dv), make([]float32, rows), make([]float32, rows)
	for r := range m0 {
		m0[r] = float32(math.Inf(-1))
		if running {
			m0[r], l0[r] = float32(rng.NormFloat64()), 1+rng.Float32()
			for j := 0; j < dv; j++ {
				o0[r*dv+j] = float32(rng.NormFloat64())
			}
		}
	}
	var alibi []float32
	if rng.IntN(2) == 0 {
		alibi = randF32(rng, 2*rows)
		for i := range alibi {
			alibi[i] = float32(math.Abs(float64(alibi[i]))) * 0.01
		}
	}
	wo, wm, wl := append([]float32(nil), o0...), append([]float32(nil), m0...), append([]float32(nil), l0...)
	fallback.Decode(q, rows, dk, kr, vr, nk, dv, wo, wm, wl, make([]float32, fallback.DecodeKeys+dk+dv), alibi)
	o, m, l := append([]float32(nil), o0...), append([]float32(nil), m0...), append([]float32(nil), l0...)
	scratch := make([]float32, asm.DecodeScratchAVX512+16*(2+fallback.DecodeRows)*(fallback.Int8Blocks(dk)+fallback.Int8Blocks(dv)))
	mc := NewMachine(s.prog)
	for _, x := range [][]float32{q, o, m, l, scratch} {
		MapSlice(mc, x)
	}
	mc.Map(kp, kn)
	mc.Map(vp, vn)
	al := Int(0)
	if alibi != nil {
		MapSlice(mc, alibi)
		al = Ptr(ptr(alibi))
	}
	kvec, vvec := (dk+s.lanes-1)/s.lanes, (dv+s.lanes-1)/s.lanes
	args := []Arg{Ptr(ptr(q)), Int(rows), Int(kvec), Int(dk - (kvec-1)*s.lanes), Ptr(kp), Int(kr.Ld), Ptr(vp), Int(vr.Ld),
		Int(nk), Int(vvec), Int(dv - (vvec-1)*s.lanes), Ptr(ptr(o)), Ptr(ptr(m)), Ptr(ptr(l)), Ptr(ptr(scratch)), al}
	if typ.Quantized() {
		MapSlice(mc, scales[0])
		MapSlice(mc, scales[1])
		args = append(args, Ptr(ptr(scales[0])), Int(kr.LdS), Ptr(ptr(scales[1])), Int(vr.LdS))
	}
	err := mc.Call(name+s.suffix, args...)
	if err != nil {
		t.Fatalf("rows=%d nk=%d dk=%d dv=%d: %v", rows, nk, dk, dv, err)
	}
	vmax := 1.0 // the largest |v|, which o's rounding scales with
	buf := make([]float32, dv)
	for c := 0; c < nk; c++ {
		for _, x := range vr.Row(c, dv, buf) {
			vmax = max(vmax, math.Abs(float64(x)))
		}
	}
	where := func(what string, r int) string {
		return fmt.Sprintf("%s rows=%d nk=%d dk=%d dv=%d running=%v alibi=%v: %s[%d]", name+s.suffix, rows, nk, dk, dv, running, alibi != nil, what, r)
	}
	for r := 0; r < rows; r++ {
		near(t, where("m", r), float64(m[r]), float64(wm[r]), 1+math.Abs(float64(wm[r])))
		// Sums and outputs scale with e^-m: compare them at the reference's max.
		f := math.Exp(float64(m[r]) - float64(wm[r]))
		near(t, where("l", r), float64(l[r])*f, float64(wl[r]), float64(wl[r]))
		for j := 0; j < dv; j++ {
			near(t, where("o", r), float64(o[r*dv+j])*f, float64(wo[r*dv+j]), float64(wl[r])*vmax)
		}
	}
}

// call runs name in a new machine over the mapped slices, failing the
// test on an error.
func call(t *testing.T, s isa, name string, mapped [][]byte, args ...Arg) {
	t.Helper()
	mc := NewMachine(s.prog)
	for _, b := range mapped {
		MapSlice(mc, b)
	}
	if err := mc.Call(name+s.suffix, args...); err != nil {
		t.Fatalf("%s%s: %v", name, s.suffix, err)
	}
}

// bytesOf views a slice's elements as bytes, for mapping.
func bytesOf[T any](x []T) []byte {
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*int(unsafe.Sizeof(z)))
}

// TestConversions runs the element-wise kernels of both sets in the
// interpreter against their Go twins in fallback, bit for bit: Widen of
// float16 (every pattern) and bfloat16, RoundBF16, the int8 and int4
// dequantizers, ScaleColumns and ScoreBias.
func TestConversions(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, s := range sets(t) {
		t.Run(s.suffix, func(t *testing.T) {
			// Widen: every float16 pattern, random bfloat16s; rows of n
			// at a stride.
			for _, typ := range []fallback.KVType{fallback.KVFloat16, fallback.KVBFloat16} {
				const rows, n, ld = 4096 / 64, 64, 70
				src := make([]uint16, (rows-1)*ld+n)
				for r := 0; r < rows; r++ {
					for i := 0; i < n; i++ {
						src[r*ld+i] = uint16(r*n + i)
						if typ == fallback.KVBFloat16 {
							src[r*ld+i] = uint16(rng.Uint32())
						}
					}
				}
				got := make([]float32, (rows-1)*ld+n)
				name := map[fallback.KVType]string{fallback.KVFloat16: "WidenF16", fallback.KVBFloat16: "WidenBF16"}[typ]
				call(t, s, name, [][]byte{bytesOf(src), bytesOf(got)}, Ptr(ptr(got)), Int(ld), Ptr(ptr(src)), Int(ld), Int(rows), Int(n))
				for r := 0; r < rows; r++ {
					want := make([]float32, n)
					fallback.Widen(want, src[r*ld:r*ld+n], typ)
					sameBits(t, name, got[r*ld:r*ld+n], want)
				}
			}
			// RoundBF16 on random patterns, ties and specials among them.
			x := make([]float32, 256)
			for i := range x {
				x[i] = math.Float32frombits(rng.Uint32())
				if i%4 == 0 {
					x[i] = math.Float32frombits(rng.Uint32()&^0xffff | 0x8000)
				}
			}
			got := make([]float32, len(x))
			call(t, s, "RoundBF16", [][]byte{bytesOf(x), bytesOf(got)}, Ptr(ptr(got)), Ptr(ptr(x)), Int(len(x)))
			want := make([]float32, len(x))
			fallback.RoundBF16(want, x)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
					t.Fatalf("RoundBF16(%#x) = %#x, want %#x", math.Float32bits(x[i]), math.Float32bits(got[i]), math.Float32bits(want[i]))
				}
			}
			// The dequantizers: 3 rows of 2 blocks at strides.
			const rows, blocks = 3, 2
			scales := randF32(rng, rows*(blocks+1))
			q8 := make([]int8, rows*70)
			for i := range q8 {
				q8[i] = int8(rng.Uint32())
			}
			out := make([]float32, (rows-1)*80+32*blocks)
			call(t, s, "DequantI8", [][]byte{bytesOf(q8), bytesOf(scales), bytesOf(out)},
				Ptr(ptr(out)), Int(80), Ptr(ptr(q8)), Int(70), Ptr(ptr(scales)), Int(blocks+1), Int(rows), Int(blocks))
			for r := 0; r < rows; r++ {
				want := make([]float32, 32*blocks)
				fallback.DequantizeInt8(want, q8[r*70:r*70+32*blocks], scales[r*(blocks+1):])
				sameBits(t, "DequantI8", out[r*80:r*80+32*blocks], want)
			}
			q4 := make([]int8, rows*40)
			for i := range q4 {
				q4[i] = int8(rng.Uint32())
			}
			call(t, s, "DequantI4", [][]byte{bytesOf(q4), bytesOf(scales), bytesOf(out)},
				Ptr(ptr(out)), Int(80), Ptr(ptr(q4)), Int(40), Ptr(ptr(scales)), Int(blocks+1), Int(rows), Int(blocks))
			for r := 0; r < rows; r++ {
				want := make([]float32, 32*blocks)
				fallback.DequantizeInt4KV(want, bytesOf(q4[r*40:r*40+16*blocks]), scales[r*(blocks+1):])
				sameBits(t, "DequantI4", out[r*80:r*80+32*blocks], want)
			}
			// ScaleColumns and ScoreBias over each count of row vectors a
			// call takes; ALiBi's distances are whole numbers (the kernels
			// step them by one a key, exact there).
			maxVecs := asm.SoftmaxVecsAVX2
			if s.suffix == "AVX512" {
				maxVecs = asm.SoftmaxVecsAVX512
			}
			for nv := 1; nv <= maxVecs; nv++ {
				rowsN, nk, ld := nv*s.lanes, 5, nv*s.lanes+3
				xs, f := randF32(rng, (nk-1)*ld+rowsN), randF32(rng, rowsN)
				wantX := append([]float32(nil), xs...)
				fallback.ScaleColumns(wantX, ld, f, rowsN, nk)
				call(t, s, "ScaleColumns", [][]byte{bytesOf(xs), bytesOf(f)}, Ptr(ptr(xs)), Int(ld), Ptr(ptr(f)), Int(nk), Int(nv))
				sameBits(t, "ScaleColumns", xs, wantX)
				sc, slope, dist, bias := randF32(rng, (nk-1)*ld+rowsN), randF32(rng, rowsN), randF32(rng, rowsN), randF32(rng, nk)
				for r := range dist {
					dist[r] = float32(rng.IntN(4096) - 2048)
				}
				wantS := append([]float32(nil), sc...)
				fallback.ScoreBias(wantS, ld, slope, dist, bias, nk, rowsN)
				call(t, s, "ScoreBias", [][]byte{bytesOf(sc), bytesOf(slope), bytesOf(dist), bytesOf(bias)},
					Ptr(ptr(sc)), Int(ld), Ptr(ptr(slope)), Ptr(ptr(dist)), Ptr(ptr(bias)), Int(nk), Int(nv))
				sameBits(t, "ScoreBias", sc, wantS)
			}
		})
	}
}

// TestInt8Weights runs GemvWI8 and WidenWI8 of both sets in the
// interpreter beside AVX2's run natively (the same block sums in the same
// order, the same products): row tails of the 3-row tile, column tails,
// depths around the 32-row blocks.
func TestInt8Weights(t *testing.T) {
	needAVX2(t)
	rng := rand.New(rand.NewPCG(15, 16))
	for _, s := range sets(t) {
		t.Run(s.suffix, func(t *testing.T) {
			for _, m := range []int{1, 2, 3, 4, 7} {
				for _, k := range []int{1, 31, 32, 33, 70} {
					for _, n := range []int{1, 9, 16, 40, 64, 70} {
						ldb := (n+63)&^63 + 64 // whole vectors of either set
						b := make([]int8, k*ldb)
						for i := range b {
							b[i] = int8(rng.Uint32())
						}
						sc := randF32(rng, ((k+31)/32)*ldb)
						lda, ldc := k+rng.IntN(3), n+rng.IntN(3)
						a := randF32(rng, (m-1)*lda+k)
						c0 := randF32(rng, (m-1)*ldc+n)
						acc := (m + k + n) % 2
						want, got := append([]float32(nil), c0...), append([]float32(nil), c0...)
						panels(n, 8, asm.PanelVecsAVX2, func(j0, nv, tail int) {
							asm.GemvWI8AVX2(&want[j0], ldc, &a[0], lda, &b[j0], ldb, m, k, nv, tail, acc, &sc[j0])
						})
						mc := NewMachine(s.prog)
						for _, x := range [][]byte{bytesOf(b), bytesOf(sc), bytesOf(a), bytesOf(got)} {
							MapSlice(mc, x)
						}
						panels(n, s.lanes, s.maxNV, func(j0, nv, tail int) {
							err := mc.Call("GemvWI8"+s.suffix, Ptr(ptr(got[j0:])), Int(ldc), Ptr(ptr(a)), Int(lda), Ptr(ptr(b[j0:])), Int(ldb),
								Int(m), Int(k), Int(nv), Int(tail), Int(acc), Ptr(ptr(sc[j0:])))
							if err != nil {
								t.Fatalf("m=%d k=%d n=%d: %v", m, k, n, err)
							}
						})
						sameBits(t, "GemvWI8"+s.suffix, got, want)
					}
				}
			}
			// WidenWI8: whole vectors, k rows.
			for _, k := range []int{1, 32, 33} {
				ldb, ldd := 128, 130
				b := make([]int8, k*ldb)
				for i := range b {
					b[i] = int8(rng.Uint32())
				}
				sc := randF32(rng, ((k+31)/32)*ldb)
				want, got := make([]float32, k*ldd), make([]float32, k*ldd)
				for j0 := 0; j0 < 128; j0 += 16 {
					asm.WidenWI8AVX2(&want[j0], ldd, &b[j0], ldb, k, 2, &sc[j0])
				}
				for j0 := 0; j0 < 128; j0 += s.lanes * s.maxNV {
					call(t, s, "WidenWI8", [][]byte{bytesOf(b), bytesOf(sc), bytesOf(got)},
						Ptr(ptr(got[j0:])), Int(ldd), Ptr(ptr(b[j0:])), Int(ldb), Int(k), Int(s.maxNV), Ptr(ptr(sc[j0:])))
				}
				sameBits(t, "WidenWI8"+s.suffix, got, want)
			}
		})
	}
}

// TestInt4Weights runs GemvWI4 and WidenWI4 of both sets in the
// interpreter against their documented sums in Go (each set packs the
// nibbles in groups of its own vector width, fallback.Int4Byte), which
// AVX2's kernels run natively match too: a zero point and a scale a
// block, the sums in order of p.
func TestInt4Weights(t *testing.T) {
	needAVX2(t)
	rng := rand.New(rand.NewPCG(17, 18))
	for _, s := range sets(t) {
		t.Run(s.suffix, func(t *testing.T) {
			u := func(b []byte, ldb, p, j int) float32 {
				return float32(fallback.Int4At(b[p*ldb/2:], j, s.lanes))
			}
			for _, m := range []int{1, 2, 3, 5} {
				for _, k := range []int{1, 31, 32, 33, 70} {
					for _, n := range []int{1, 9, 16, 40, 64, 70} {
						ldb := (n+63)&^63 + 64
						b := make([]byte, k*ldb/2)
						for i := range b {
							b[i] = byte(rng.Uint32())
						}
						nb := (k + 31) / 32
						sc := randF32(rng, nb*ldb)
						z := make([]uint8, nb*ldb)
						for i := range z {
							z[i] = uint8(rng.IntN(16))
						}
						lda, ldc := k+rng.IntN(3), n+rng.IntN(3)
						a := randF32(rng, (m-1)*lda+k)
						c0 := randF32(rng, (m-1)*ldc+n)
						acc := (m + k + n) % 2
						want, got := append([]float32(nil), c0...), append([]float32(nil), c0...)
						for i := 0; i < m; i++ {
							for j := 0; j < n; j++ {
								c := float32(0)
								if acc != 0 {
									c = c0[i*ldc+j]
								}
								for q0 := 0; q0 < k; q0 += 32 {
									ar := a[i*lda:]
									sum, asum := ar[q0]*u(b, ldb, q0, j), ar[q0]
									for p := q0 + 1; p < min(k, q0+32); p++ {
										sum, asum = fma32(ar[p], u(b, ldb, p, j), sum), asum+ar[p]
									}
									sum = fma32(-float32(z[(q0/32)*ldb+j]), asum, sum)
									c = fma32(sum, sc[(q0/32)*ldb+j], c)
								}
								want[i*ldc+j] = c
							}
						}
						if s.suffix == "AVX2" { // the Go sums against the kernel run natively
							nat := append([]float32(nil), c0...)
							panels(n, 8, asm.PanelVecsAVX2, func(j0, nv, tail int) {
								asm.GemvWI4AVX2(&nat[j0], ldc, &a[0], lda, &b[j0/2], ldb, m, k, nv, tail, acc, &sc[j0], &z[j0])
							})
							sameBits(t, "GemvWI4AVX2 natively", nat, want)
						}
						mc := NewMachine(s.prog)
						for _, x := range [][]byte{b, bytesOf(sc), z, bytesOf(a), bytesOf(got)} {
							MapSlice(mc, x)
						}
						panels(n, s.lanes, s.maxNV, func(j0, nv, tail int) {
							err := mc.Call("GemvWI4"+s.suffix, Ptr(ptr(got[j0:])), Int(ldc), Ptr(ptr(a)), Int(lda), Ptr(ptr(b[j0/2:])), Int(ldb),
								Int(m), Int(k), Int(nv), Int(tail), Int(acc), Ptr(ptr(sc[j0:])), Ptr(ptr(z[j0:])))
							if err != nil {
								t.Fatalf("m=%d k=%d n=%d: %v", m, k, n, err)
							}
						})
						sameBits(t, "GemvWI4"+s.suffix, got, want)
					}
				}
			}
			for _, k := range []int{1, 32, 33} {
				ldb, ldd := 128, 130
				b := make([]byte, k*ldb/2)
				for i := range b {
					b[i] = byte(rng.Uint32())
				}
				nb := (k + 31) / 32
				sc, z := randF32(rng, nb*ldb), make([]uint8, nb*ldb)
				for i := range z {
					z[i] = uint8(rng.IntN(16))
				}
				want, got := make([]float32, k*ldd), make([]float32, k*ldd)
				for p := 0; p < k; p++ {
					for j := 0; j < ldb; j++ {
						want[p*ldd+j] = (u(b, ldb, p, j) - float32(z[(p/32)*ldb+j])) * sc[(p/32)*ldb+j]
					}
				}
				for j0 := 0; j0 < 128; j0 += s.lanes * s.maxNV {
					call(t, s, "WidenWI4", [][]byte{b, bytesOf(sc), z, bytesOf(got)},
						Ptr(ptr(got[j0:])), Int(ldd), Ptr(ptr(b[j0/2:])), Int(ldb), Int(k), Int(s.maxNV), Ptr(ptr(sc[j0:])), Ptr(ptr(z[j0:])))
				}
				sameBits(t, "WidenWI4"+s.suffix, got, want)
			}
		})
	}
}

// TestNarrow runs NarrowF16 and NarrowBF16 of both sets against
// fallback's F32ToF16 and F32ToBF16, bit for bit: random patterns,
// rounding ties, overflow, binary16's subnormals, NaN and infinities.
func TestNarrow(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	src := make([]float32, 4096)
	for i := range src {
		switch i % 4 {
		case 0:
			src[i] = math.Float32frombits(rng.Uint32())
		case 1: // binary16's range, ties included
			src[i] = math.Float32frombits(uint32(rng.IntN(2))<<31 | uint32(100+rng.IntN(50))<<23 | uint32(rng.IntN(1<<10))<<13 | 1<<12)
		case 2:
			src[i] = float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(40)-25)))
		default:
			src[i] = []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 65520, 65519, 6e-8, 3e-8, 0}[rng.IntN(8)]
		}
	}
	for _, s := range sets(t) {
		for _, name := range []string{"NarrowF16", "NarrowBF16"} {
			got := make([]uint16, len(src))
			call(t, s, name, [][]byte{bytesOf(src), bytesOf(got)}, Ptr(ptr(got)), Ptr(ptr(src)), Int(len(src)))
			for i, x := range src {
				want := fallback.F32ToF16(x)
				if name == "NarrowBF16" {
					want = fallback.F32ToBF16(x)
				}
				if got[i] != want {
					t.Fatalf("%s%s(%#x) = %#04x, want %#04x", name, s.suffix, math.Float32bits(x), got[i], want)
				}
			}
		}
	}
}
