package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/fastattn/fastattn/fallback"
)

// q8Sets are the sets this CPU runs DecodeQ8 on, and the avx2 set on
// the Emu twin of its AVX-VNNI kernel where the CPU has AVX512_VNNI.
func q8Sets() []*Set {
	var out []*Set
	for _, ks := range Available() {
		if ks.decodeQ8 != nil {
			out = append(out, ks)
		}
	}
	if ks := EmulatedVNNI(); ks != nil {
		out = append(out, ks)
	}
	return out
}

// TestDecodeQ8 checks DecodeQ8 against float64 sums over the values its
// operands stand for (the dequantized query rows, K and V), as TestDecode
// checks Decode: 1..16 rows, key counts around the block, head dims that
// hit every tail of a chunk of 64 bytes and of a scale block, a query
// block of zeros, strides wider than the rows, running states, ALiBi,
// every operand against a guard page.
func TestDecodeQ8(t *testing.T) {
	sets := q8Sets()
	if len(sets) == 0 {
		t.Skip("no set of this CPU has DecodeQ8")
	}
	rng := rand.New(rand.NewPCG(8, 8))
	dims := []int{4, 8, 28, 32, 36, 60, 64, 68, 100, 128, 132, 192, 576}
	dvs := []int{1, 16, 31, 64, 128, 160, 512}
	for _, ks := range sets {
		t.Run(ks.Name, func(t *testing.T) {
			T := ks.DecodeKeys()
			for _, atEnd := range []bool{true, false} {
				for rows := 1; rows <= DecodeRows; rows += 1 + rows/4 {
					for _, nk := range []int{T, T + 1, 2*T - 1, 3*T + 5, 70, 3*int4Chunk + 5} {
						for di, dk := range dims {
							if !longTests() && (di+rows+nk+boolInt(atEnd))%3 != 0 {
								continue
							}
							dv := dvs[rng.IntN(len(dvs))]
							if ks.decodePairs || ks.decodeWhole { // AVX2's int8 rows, NEON: dims multiples of 4
								dv = (dv + 3) &^ 3
							}
							if !ks.HasDecodeQ8(dk, dv) {
								t.Fatalf("%s: no DecodeQ8 for dk %d dv %d", ks, dk, dv)
							}
							typ := fallback.KVInt8
							if rng.IntN(3) == 0 { // int4 rows, widened a chunk at a time
								typ = fallback.KVInt4
							}
							decodeQ8Case(t, ks, rng, typ, rows, nk, dk, dv, atEnd)
						}
					}
				}
			}
		})
	}
}

func decodeQ8Case(t *testing.T, ks *Set, rng *rand.Rand, typ KVType, rows, nk, dk, dv int, atEnd bool) {
	t.Helper()
	ldk, ldv := dk+rng.IntN(3), dv+rng.IntN(3)
	k, kf, f1 := kvOperand(t, rng, typ, nk, dk, ldk, atEnd)
	v, vf, f2 := kvOperand(t, rng, typ, nk, dv, ldv, atEnd)
	nb, ld := fallback.Int8Blocks(dk), fallback.QueryQ8Ld(dk)
	qb, f3 := guarded8(t, rows*ld, atEnd)
	qs, f4 := guarded(t, rows*nb, atEnd)
	qc32, f5 := guarded32(t, rows*nb, atEnd)
	o, f6 := operand(t, rng, rows*dv, atEnd)
	s, f7 := guarded(t, ks.DecodeScratch(dk, dv), atEnd)
	defer func() {
		f1()
		f2()
		f3()
		f4()
		f5()
		f6()
		f7()
	}()
	q := QueryQ8{Q: qb, S: qs, Corr: unsafe.Slice((*int32)(unsafe.Pointer(&qc32[0])), len(qc32)), Ld: ld}
	src := make([]float32, rows*dk)
	for i := range src {
		src[i] = (2*rng.Float32() - 1) * float32(1+(i%dk)/32%3) // a spread of block scales
	}
	if rows > 1 && dk > 32 {
		clear(src[dk : dk+32]) // row 1's first block: all zeros, scale 0
	}
	fallback.QuantizeQuery(q, src, rows, dk)
	qf := make([]float32, rows*dk)
	fallback.DequantizeQuery(qf, q, rows, dk)
	m, l, running, alibi, f8 := decodeState(t, rng, rows, dv, o, atEnd)
	defer f8()
	o0, m0, l0 := append([]float32(nil), o...), append([]float32(nil), m...), append([]float32(nil), l...)
	ks.DecodeQ8(q, rows, dk, k, v, nk, dv, o, m, l, s, alibi)
	where := fmt.Sprintf("%s DecodeQ8 %v rows=%d nk=%d dk=%d dv=%d running=%v alibi=%v", ks, typ, rows, nk, dk, dv, running, alibi != nil)
	// The scores are rounded once per scale block (fma of the block's
	// scaled sum), ⌈dk/32⌉ roundings where the float32 kernels round in
	// their lanes' sums: a random walk, so the bound grows as √dk past
	// the float32 kernels' 2e-5 at dk = 128 (NEON at dk 576 measured
	// 2.3e-5; DecodeQ8 and Decode on the same quantized rows differ by
	// at most 1.1e-5 over 300 random cases on every set).
	tol := 2e-5 * max(1, math.Sqrt(float64(dk)/128))
	checkDecodeStateTol(t, tol, where, qf, rows, dk, kf, ldk, vf, ldv, nk, dv, alibi, o0, m0, l0, o, m, l)
}

// TestDecodeQ8Extremes: query bytes of ±127 and key bytes of ±127 or
// -128 (no quantizer of ours makes -128, but int8 K given as it is may
// hold it) in every lane give the dequantized values' result: the
// largest int32 block sums, AVX-512's +128 of the unsigned operand at
// its extremes, and AVX2's 16-bit pairs at their largest, 2·128·127.
func TestDecodeQ8Extremes(t *testing.T) {
	sets := q8Sets()
	if len(sets) == 0 {
		t.Skip("no set of this CPU has DecodeQ8")
	}
	for _, ks := range sets {
		for _, tc := range []struct {
			sign    float32
			minByte bool
		}{{1, false}, {-1, false}, {1, true}, {-1, true}} {
			sign := tc.sign
			rows, nk, dk, dv := 3, 2*ks.DecodeKeys()+3, 128, 32
			kf, vf := make([]float32, nk*dk), make([]float32, nk*dv)
			for i := range kf {
				kf[i] = float32(1 - 2*(i/dk%2)) // ±1 by key: bytes ±127
			}
			for i := range vf {
				vf[i] = float32(i%7) - 3
			}
			kq, vq := make([]int8, len(kf)), make([]int8, len(vf))
			ksc, vsc := make([]float32, nk*4), make([]float32, nk)
			for c := range nk {
				fallback.QuantizeInt8(kq[c*dk:(c+1)*dk], ksc[c*4:], kf[c*dk:(c+1)*dk])
				fallback.QuantizeInt8(vq[c*dv:(c+1)*dv], vsc[c:], vf[c*dv:(c+1)*dv])
				fallback.DequantizeInt8(kf[c*dk:(c+1)*dk], kq[c*dk:(c+1)*dk], ksc[c*4:])
				fallback.DequantizeInt8(vf[c*dv:(c+1)*dv], vq[c*dv:(c+1)*dv], vsc[c:])
			}
			if tc.minByte {
				for i := range kq {
					if kq[i] == -127 {
						kq[i], kf[i] = -128, -128*ksc[i/dk*4+i%dk/32]
					}
				}
			}
			src := make([]float32, rows*dk)
			for i := range src {
				src[i] = sign * 0.01
			}
			q := QueryQ8{Q: make([]int8, rows*128), S: make([]float32, rows*4), Corr: make([]int32, rows*4), Ld: 128}
			fallback.QuantizeQuery(q, src, rows, dk)
			if q.Q[0] != int8(127*sign) {
				t.Fatalf("query byte %d, want ±127", q.Q[0])
			}
			qf := make([]float32, len(src))
			fallback.DequantizeQuery(qf, q, rows, dk)
			o, m, l := make([]float32, rows*dv), make([]float32, rows), make([]float32, rows)
			for r := range m {
				m[r] = float32(math.Inf(-1))
			}
			o0, m0, l0 := append([]float32(nil), o...), append([]float32(nil), m...), append([]float32(nil), l...)
			s := make([]float32, ks.DecodeScratch(dk, dv))
			ks.DecodeQ8(q, rows, dk, KVRows{I8: kq, S: ksc, Type: fallback.KVInt8, Ld: dk, LdS: 4},
				KVRows{I8: vq, S: vsc, Type: fallback.KVInt8, Ld: dv, LdS: 1}, nk, dv, o, m, l, s, nil)
			checkDecodeState(t, fmt.Sprintf("%s extremes sign %v, key bytes -128 %v", ks, sign, tc.minByte), qf, rows, dk, kf, dk, vf, dv, nk, dv, nil, o0, m0, l0, o, m, l)
		}
	}
}
