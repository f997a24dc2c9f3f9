package kernels

import (
	"encoding/binary"
	"math"
	"os"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

// vdpbf16psRecord is one recorded VDPBF16PS zmm: the accumulator's 16
// float32 lanes, the two sources' 32 bfloat16 each, and the result, as an
// Intel Xeon (family 6 model 207) returned it.
type vdpbf16psRecord struct {
	acc, out [16]uint32
	a, b     [32]uint16
}

// vdpbf16psRecords reads testdata/vdpbf16ps.bin: 1,200 records (every
// tenth of 12,000), 200 of each class in order — normal values in (−1, 1),
// exponents 2^−60…2^60, denormals (and denormal accumulators), specials
// (NaN, ±Inf, ±0, the largest finite, the smallest normal), cancellation,
// and a mix of all.
func vdpbf16psRecords(t *testing.T) []vdpbf16psRecord {
	t.Helper()
	data, err := os.ReadFile("testdata/vdpbf16ps.bin")
	if err != nil {
		t.Fatal(err)
	}
	const size = 16*4 + 32*2 + 32*2 + 16*4
	if len(data)%size != 0 || len(data) == 0 {
		t.Fatalf("testdata/vdpbf16ps.bin: %d bytes, not records of %d", len(data), size)
	}
	recs := make([]vdpbf16psRecord, len(data)/size)
	for i := range recs {
		d := data[i*size:]
		for j := 0; j < 16; j++ {
			recs[i].acc[j] = binary.LittleEndian.Uint32(d[4*j:])
			recs[i].out[j] = binary.LittleEndian.Uint32(d[192+4*j:])
		}
		for j := 0; j < 32; j++ {
			recs[i].a[j] = binary.LittleEndian.Uint16(d[64+2*j:])
			recs[i].b[j] = binary.LittleEndian.Uint16(d[128+2*j:])
		}
	}
	return recs
}

// TestVDPBF16PSRecords holds fallback.GemmBF16 (the twin), and every set
// that runs the CPU's VDPBF16PS, to the recorded instruction bit for bit
// on every lane of every class, NaN payloads included: lane j is a 1×1×1
// GemmBF16 of the pair (a[2j], a[2j+1]) by (b[2j], b[2j+1]) onto acc[j].
func TestVDPBF16PSRecords(t *testing.T) {
	recs := vdpbf16psRecords(t)
	type gemm func(c []float32, a, b []uint32)
	impls := map[string]gemm{"fallback.GemmBF16": func(c []float32, a, b []uint32) {
		fallback.GemmBF16(c, 1, a, 1, 1, b, 1, 1, 1, 1, true)
	}}
	for _, ks := range Available() {
		if ks.BF16Native() && !ks.BF16RoundsOdd() {
			impls[ks.Name] = func(c []float32, a, b []uint32) { ks.GemmBF16(c, 1, a, 1, 1, b, 1, 1, 1, 1, true) }
		}
	}
	classes := []string{"normal", "exponents", "denormals", "specials", "cancellation", "mix"}
	for name, f := range impls {
		bad := 0
		for i, r := range recs {
			for j := 0; j < 16; j++ {
				c := []float32{math.Float32frombits(r.acc[j])}
				a := []uint32{uint32(r.a[2*j]) | uint32(r.a[2*j+1])<<16}
				b := []uint32{uint32(r.b[2*j]) | uint32(r.b[2*j+1])<<16}
				f(c, a, b)
				if got := math.Float32bits(c[0]); got != r.out[j] {
					if bad++; bad <= 5 {
						t.Errorf("%s, %s record %d lane %d: acc %#08x + (%#04x, %#04x)·(%#04x, %#04x) = %#08x, the CPU %#08x",
							name, classes[i*len(classes)/len(recs)], i, j, r.acc[j], r.a[2*j], r.a[2*j+1], r.b[2*j], r.b[2*j+1], got, r.out[j])
					}
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d lanes differ", name, bad, 16*len(recs))
		}
		t.Logf("%s: %d lanes checked", name, 16*len(recs))
	}
}

// tdpbf16psRecord is one recorded pair of TDPBF16PS on 16×16 tiles, as an
// Intel Xeon (family 6 model 207) returned them: C loaded, then
// TDPBF16PS C, A, B (out[0]) and TDPBF16PS C, A2, B2 on that (out[1]). The
// operands are kept in GemmBF16's pair layout: a[s] [16 rows][16 pairs],
// b[s] [16 pairs][16 columns].
type tdpbf16psRecord struct {
	c   [256]float32
	a   [2][256]uint32
	b   [2][256]uint32
	out [2][256]float32
}

// tdpbf16psRecords reads testdata/tdpbf16ps.bin: 60 records (the first 10
// of each class's 40), in the classes of vdpbf16psRecords.
func tdpbf16psRecords(t *testing.T) []tdpbf16psRecord {
	t.Helper()
	data, err := os.ReadFile("testdata/tdpbf16ps.bin")
	if err != nil {
		t.Fatal(err)
	}
	const size = 256*4 + 4*512*2 + 2*256*4
	if len(data)%size != 0 || len(data) == 0 {
		t.Fatalf("testdata/tdpbf16ps.bin: %d bytes, not records of %d", len(data), size)
	}
	recs := make([]tdpbf16psRecord, len(data)/size)
	for r := range recs {
		d := data[r*size:]
		f32 := func(off, i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(d[off+4*i:])) }
		bf := func(off, i int) uint32 { return uint32(binary.LittleEndian.Uint16(d[off+2*i:])) }
		for i := 0; i < 256; i++ {
			recs[r].c[i] = f32(0, i)
			recs[r].out[0][i], recs[r].out[1][i] = f32(5120, i), f32(6144, i)
		}
		for s, off := range [2][2]int{{1024, 2048}, {3072, 4096}} {
			for i := 0; i < 16; i++ { // A's row i, B's pair row i
				for j := 0; j < 16; j++ {
					recs[r].a[s][i*16+j] = bf(off[0], i*32+2*j) | bf(off[0], i*32+2*j+1)<<16
					recs[r].b[s][i*16+j] = bf(off[1], i*32+2*j) | bf(off[1], i*32+2*j+1)<<16
				}
			}
		}
	}
	return recs
}

// TestTDPBF16PSRecords holds the recorded tile instruction, the twin
// (fallback.GemmBF16) and every AMX set (native or its Emu twin) to the
// bound the native tile tests use (TestGemmAMX): each element within
// dotTol of the float64 sum of its products, denormal operands read as
// zero (an emulated set keeps them, as the emulated VDPBF16PS does); NaN
// where that sum is NaN; and where the products' magnitudes
// could overflow a float32 partial sum, any non-finite result (the order
// of summation decides). The CPU's summation order is undocumented and no
// sequential model gives its bits (the twin matches 54–100% by class), so
// the data checks the bound itself; on a CPU with native tiles the set must
// also give the recorded bits, a 32×32 product of two 16-pair steps
// holding the record in its first tile.
func TestTDPBF16PSRecords(t *testing.T) {
	recs := tdpbf16psRecords(t)
	check := func(who string, r int, s int, c []float32, ldc int, before []float32, flush bool) {
		t.Helper()
		daz := func(x float32) float64 {
			if flush && math.Abs(float64(x)) < 0x1p-126 {
				return 0
			}
			return float64(x)
		}
		rec := &recs[r]
		for i := 0; i < 16; i++ {
			for j := 0; j < 16; j++ {
				exact := daz(before[i*16+j])
				abs := math.Abs(exact)
				for p := 0; p < 16; p++ {
					x, y := rec.a[s][i*16+p], rec.b[s][p*16+j]
					for _, sh := range []uint{0, 16} {
						v := daz(fallback.BF16ToF32(uint16(x>>sh))) * daz(fallback.BF16ToF32(uint16(y>>sh)))
						exact, abs = exact+v, abs+math.Abs(v)
					}
				}
				got := float64(c[i*ldc+j])
				finite := !math.IsNaN(got) && !math.IsInf(got, 0)
				var ok bool
				switch {
				case math.IsNaN(exact):
					ok = math.IsNaN(got)
				case abs > math.MaxFloat32/2: // a partial sum may overflow
					ok = !finite || math.Abs(got-exact) <= dotTol(33, abs)
				default:
					ok = finite && math.Abs(got-exact) <= dotTol(33, abs)+0x1p-126 // FTZ
				}
				if !ok {
					t.Errorf("%s, record %d step %d: c[%d][%d] = %v, exact %v (sum of magnitudes %v)", who, r, s+1, i, j, got, exact, abs)
					return
				}
			}
		}
	}
	amx := bf16SetsWhere((*Set).AMX)
	for r := range recs {
		rec := &recs[r]
		check("the CPU", r, 0, rec.out[0][:], 16, rec.c[:], true)
		check("the CPU", r, 1, rec.out[1][:], 16, rec.out[0][:], true)
		twin := rec.c
		for s := 0; s < 2; s++ {
			before := twin
			fallback.GemmBF16(twin[:], 16, rec.a[s][:], 16, 1, rec.b[s][:], 16, 16, 16, 16, true)
			check("fallback.GemmBF16", r, s, twin[:], 16, before[:], true)
		}
		for _, ks := range amx {
			// The record in the first tile of a 32×32 product: C's first
			// 16×16, A's first 16 rows and B's first 16 columns, the two
			// steps as pairs 0–15 and 16–31; the other tiles are zero.
			for steps := 1; steps <= 2; steps++ {
				c, a, b := make([]float32, 32*32), make([]uint32, 32*32), make([]uint32, 32*32)
				for i := 0; i < 16; i++ {
					copy(c[i*32:i*32+16], rec.c[i*16:])
					for s := 0; s < steps; s++ {
						copy(a[i*32+16*s:i*32+16*s+16], rec.a[s][i*16:])
						copy(b[(16*s+i)*32:(16*s+i)*32+16], rec.b[s][i*16:])
					}
				}
				ks.GemmBF16(c, 32, a, 32, 1, b, 32, 32, 32, 16*steps, true)
				if ks.AMXNative() {
					for i := 0; i < 16; i++ {
						for j := 0; j < 16; j++ {
							if got, want := math.Float32bits(c[i*32+j]), math.Float32bits(rec.out[steps-1][i*16+j]); got != want && !(got&0x7fffffff > 0x7f800000 && want&0x7fffffff > 0x7f800000) {
								t.Fatalf("%s record %d after %d steps: c[%d][%d] = %#08x, the CPU %#08x", ks, r, steps, i, j, got, want)
							}
						}
					}
				} else if steps == 1 {
					check(ks.Name, r, 0, c, 32, rec.c[:], false) // the emulation keeps denormals
				}
			}
		}
	}
	t.Logf("%d records, 2 steps each; AMX sets: %v", len(recs), amx)
}
