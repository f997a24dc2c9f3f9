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
