package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

var kvTypes = []KVType{fallback.KVFloat32, fallback.KVFloat16, fallback.KVBFloat16, fallback.KVInt8, fallback.KVInt4}

// kvOperand is a guarded K or V operand of nk rows of dim elements at
// stride ld of type t with random values in [-1, 1) (rounded to t;
// int8: quantized per row, with guarded scales at a stride of their own),
// and its float32 values. int4 rows are Int4RowBytes(dim) + ld - dim
// bytes apart; their values stay ld apart.
func kvOperand(t *testing.T, rng *rand.Rand, typ KVType, nk, dim, ld int, atEnd bool) (KVRows, []float32, func()) {
	n := span(nk, dim, ld)
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = 2*rng.Float32() - 1
	}
	if typ.Quantized() {
		nb := fallback.Int8Blocks(dim)
		lds, w := nb+rng.IntN(3), fallback.StoredWidth(typ, dim)
		ldq := w + ld - dim
		s, free := guarded8(t, span(nk, w, ldq), atEnd)
		sc, freeS := guarded(t, span(nk, nb, lds), atEnd)
		for c := range nk {
			row := vals[c*ld : c*ld+dim]
			for i := range row { // a spread of block scales
				row[i] *= float32(1 + (i/fallback.Int8Block+c)%3)
			}
			if typ == fallback.KVInt4 {
				b := fallback.Int4Bytes(s[c*ldq : c*ldq+w])
				fallback.QuantizeInt4KV(b, sc[c*lds:c*lds+nb], row)
				fallback.DequantizeInt4KV(row, b, sc[c*lds:])
				continue
			}
			fallback.QuantizeInt8(s[c*ld:c*ld+dim], sc[c*lds:c*lds+nb], row)
			fallback.DequantizeInt8(row, s[c*ld:c*ld+dim], sc[c*lds:])
		}
		return KVRows{I8: s, S: sc, Type: typ, Ld: ldq, LdS: lds}, vals, func() { free(); freeS() }
	}
	if typ == fallback.KVFloat32 {
		s, free := guarded(t, n, atEnd)
		copy(s, vals)
		return KVRows{F32: s, Type: typ, Ld: ld}, vals, free
	}
	s, free := guarded16(t, n, atEnd)
	fallback.Narrow(s, vals, typ)
	fallback.Widen(vals, s, typ)
	return KVRows{U16: s, Type: typ, Ld: ld}, vals, free
}

// TestDecode checks every set's fused decode kernel against float64 sums,
// for each storage type, 1..16 rows, key counts around the key block
// (partial last blocks), head dims that hit every tail, strides wider
// than the rows, from an empty and from a running state, with every
// operand against a guard page.
func TestDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	dims := []int{1, 2, 3, 8, 14, 16, 18, 31, 32, 64, 66, 128, 160}
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, typ := range kvTypes {
				t.Run(typ.String(), func(t *testing.T) {
					for _, atEnd := range []bool{true, false} {
						for rows := 1; rows <= DecodeRows; rows += 1 + rows/4 {
							T := ks.DecodeKeys()
							nks := []int{T, T + 1, 2*T - 1, 2 * T, 3*T + 5, 70}
							if typ == fallback.KVInt4 { // chunks of int4Chunk, the last longer
								nks = append(nks, 2*int4Chunk, 3*int4Chunk-1, 3*int4Chunk+T+3)
							}
							for _, nk := range nks {
								if nk < T {
									continue
								}
								for di, dk := range dims {
									if !longTests() && (di+rows+nk+boolInt(atEnd))%3 != 0 {
										continue // a third of the cases, each tail still met
									}
									// A random dv the set takes (NEON:
									// multiples of 4 only), if any.
									dv := dims[rng.IntN(len(dims))]
									for try := 0; try < 8 && !ks.HasDecode(typ, dk, dv); try++ {
										dv = dims[rng.IntN(len(dims))]
									}
									if !ks.HasDecode(typ, dk, dv) {
										continue
									}
									decodeCase(t, ks, rng, typ, rows, nk, dk, dv, atEnd)
								}
							}
						}
					}
				})
			}
		})
	}
}

func decodeCase(t *testing.T, ks *Set, rng *rand.Rand, typ KVType, rows, nk, dk, dv int, atEnd bool) {
	t.Helper()
	ldk, ldv := dk+rng.IntN(3), dv+rng.IntN(3)
	k, kf, f1 := kvOperand(t, rng, typ, nk, dk, ldk, atEnd)
	v, vf, f2 := kvOperand(t, rng, typ, nk, dv, ldv, atEnd)
	q, f3 := operand(t, rng, rows*dk, atEnd)
	o, f4 := operand(t, rng, rows*dv, atEnd)
	s, f5 := guarded(t, ks.DecodeScratch(dk, dv), atEnd)
	defer func() { f1(); f2(); f3(); f4(); f5() }()
	m, l, running, alibi, f6 := decodeState(t, rng, rows, dv, o, atEnd)
	defer f6()
	o0, m0, l0 := append([]float32(nil), o...), append([]float32(nil), m...), append([]float32(nil), l...)
	ks.Decode(q, rows, dk, k, v, nk, dv, o, m, l, s, alibi)
	if typ == fallback.KVInt8 && ks.decodeDequant {
		// A kernel that dequantizes each block into the scratch gives, bit
		// for bit, its float32 result on the dequantized K and V.
		o32, m32, l32 := append([]float32(nil), o0...), append([]float32(nil), m0...), append([]float32(nil), l0...)
		ks.Decode(q, rows, dk, KVRows{F32: kf, Type: fallback.KVFloat32, Ld: ldk}, KVRows{F32: vf, Type: fallback.KVFloat32, Ld: ldv},
			nk, dv, o32, m32, l32, s, alibi)
		got := append(append(append([]float32(nil), o...), m...), l...)
		for i, x := range append(append(o32, m32...), l32...) {
			if y := got[i]; math.Float32bits(x) != math.Float32bits(y) {
				t.Fatalf("%s int8 rows=%d nk=%d dk=%d dv=%d: state[%d] = %v, float32 on the dequantized K/V %v", ks, rows, nk, dk, dv, i, y, x)
			}
		}
	}
	where := fmt.Sprintf("%s %v rows=%d nk=%d dk=%d dv=%d running=%v alibi=%v", ks, typ, rows, nk, dk, dv, running, alibi != nil)
	checkDecodeState(t, where, q, rows, dk, kf, ldk, vf, ldv, nk, dv, alibi, o0, m0, l0, o, m, l)
}

// decodeState draws a Decode call's state for rows rows of o ([rows][dv]):
// half the time running (m, l at random, o as drawn), else empty (m
// -Inf, l and o zero); and half the time ALiBi's slopes and distances
// (guarded), else nil.
func decodeState(t *testing.T, rng *rand.Rand, rows, dv int, o []float32, atEnd bool) (m, l []float32, running bool, alibi []float32, free func()) {
	m, l = make([]float32, rows), make([]float32, rows)
	running = rng.IntN(2) == 0
	for r := range m {
		if running {
			m[r], l[r] = 2*rng.Float32()-1, 1+rng.Float32()
		} else {
			m[r], l[r] = float32(math.Inf(-1)), 0
			clear(o[r*dv : (r+1)*dv])
		}
	}
	free = func() {}
	if rng.IntN(2) == 0 {
		a, f := guarded(t, 2*rows, atEnd)
		for r := 0; r < rows; r++ {
			a[r], a[rows+r] = rng.Float32()-0.3, float32(rng.IntN(200)-150)
		}
		alibi, free = a, f
	}
	return m, l, running, alibi, free
}

// checkDecodeState checks the state (o, m, l) a Decode call left against
// float64 sums over the float32 values q (rows of dk), kf and vf (nk rows
// at strides ldk, ldv), from the state (o0, m0, l0).
func checkDecodeState(t *testing.T, where string, q []float32, rows, dk int, kf []float32, ldk int, vf []float32, ldv, nk, dv int, alibi, o0, m0, l0, o, m, l []float32) {
	t.Helper()
	checkDecodeStateTol(t, 2e-5, where, q, rows, dk, kf, ldk, vf, ldv, nk, dv, alibi, o0, m0, l0, o, m, l)
}

// checkDecodeStateTol is checkDecodeState with tol, the outputs' bound
// (the LSE's is relative, 2e-5).
func checkDecodeStateTol(t *testing.T, tol float64, where string, q []float32, rows, dk int, kf []float32, ldk int, vf []float32, ldv, nk, dv int, alibi, o0, m0, l0, o, m, l []float32) {
	t.Helper()
	for r := 0; r < rows; r++ {
		// float64: the state after all keys, normalized.
		sc := make([]float64, nk)
		mx := float64(m0[r])
		for c := range sc {
			for d := 0; d < dk; d++ {
				sc[c] += float64(q[r*dk+d]) * float64(kf[c*ldk+d])
			}
			if alibi != nil {
				sc[c] += float64(alibi[r]) * (float64(alibi[rows+r]) + float64(c))
			}
			mx = math.Max(mx, sc[c])
		}
		w0 := 0.0
		if l0[r] > 0 {
			w0 = math.Exp(float64(m0[r]) - mx)
		}
		sum := float64(l0[r]) * w0
		want := make([]float64, dv)
		for j := range want {
			want[j] = float64(o0[r*dv+j]) * w0
		}
		for c, x := range sc {
			w := math.Exp(x - mx)
			sum += w
			for j := range want {
				want[j] += w * float64(vf[c*ldv+j])
			}
		}
		where := fmt.Sprintf("%s row %d", where, r)
		lse := float64(m[r]) + math.Log(float64(l[r]))
		// !(err <= tol): a NaN fails too.
		if !(math.Abs(lse-(mx+math.Log(sum))) <= 2e-5*(1+math.Abs(lse))) {
			t.Fatalf("%s: LSE %v, want %v (m %v, l %v)", where, lse, mx+math.Log(sum), m[r], l[r])
		}
		for j := range want {
			got, w := float64(o[r*dv+j])/float64(l[r]), want[j]/sum
			if !(math.Abs(got-w) <= tol) {
				t.Fatalf("%s: out[%d] = %v, want %v", where, j, got, w)
			}
		}
	}
}

// TestDecodeNaN: a NaN in a key makes the row's sum NaN (so the row
// becomes NaN); a NaN in a value reaches only its column (int8, int4: a
// NaN scale, its block's columns).
func TestDecodeNaN(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 14))
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, typ := range kvTypes {
				T, dk := ks.DecodeKeys(), 32
				if !ks.HasDecode(typ, dk, dk) {
					continue
				}
				for _, poisonK := range []bool{true, false} {
					nk := 2*T + 3
					k, _, f1 := kvOperand(t, rng, typ, nk, dk, dk, true)
					v, _, f2 := kvOperand(t, rng, typ, nk, dk, dk, true)
					row := rng.IntN(nk)
					at := row*dk + 5
					nan := float32(math.NaN())
					switch target := map[bool]KVRows{true: k, false: v}[poisonK]; typ {
					case fallback.KVFloat32:
						target.F32[at] = nan
					case fallback.KVInt8, fallback.KVInt4:
						target.S[row*target.LdS] = nan // columns 0..31
					default:
						fallback.Narrow(target.U16[at:at+1], []float32{nan}, typ)
					}
					q := make([]float32, dk)
					for i := range q {
						q[i] = rng.Float32()
					}
					o, m, l := make([]float32, dk), []float32{float32(math.Inf(-1))}, []float32{0}
					ks.Decode(q, 1, dk, k, v, nk, dk, o, m, l, make([]float32, ks.DecodeScratch(dk, dk)), nil)
					if poisonK && !math.IsNaN(float64(l[0])) {
						t.Errorf("%s %v: NaN key: l = %v, want NaN", ks, typ, l[0])
					}
					if !poisonK {
						for j, x := range o {
							if isNaN := math.IsNaN(float64(x)); isNaN != (j == 5 || typ.Quantized()) {
								t.Errorf("%s %v: NaN value in column 5: o[%d] = %v", ks, typ, j, x)
							}
						}
					}
					f1()
					f2()
				}
			}
		})
	}
}

// TestConvert checks Widen on every 16-bit pattern and Narrow on special
// values and random float32 patterns, bit for bit against the scalar
// conversions (which TestScalarConversions checks against math), every
// length's tail against guard pages.
func TestConvert(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 15))
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	f := make([]float32, 1<<16+100)
	specials := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65519.99, 65520, -65520, 1e-8, 2.9e-8, 3e-8,
		6.1e-5, 5.96e-8, 1e38, 3.4e38, -3.4e38, float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7fc00000), math.Float32frombits(0xff800001), math.Float32frombits(0x7f800001),
		math.Float32frombits(0x7fbfffff), math.Float32frombits(0x00000001), math.Float32frombits(0x807fffff),
		math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), math.Float32frombits(0x7f7fffff)}
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			for _, typ := range kvTypes[1:3] {
				ks.Widen(f[:len(all)], all, typ)
				for i, h := range all {
					want := fallback.F16ToF32(h)
					if typ == fallback.KVBFloat16 {
						want = fallback.BF16ToF32(h)
					}
					if math.Float32bits(f[i]) != math.Float32bits(want) {
						t.Fatalf("%s Widen %v(%#04x) = %#08x, want %#08x", ks, typ, h, math.Float32bits(f[i]), math.Float32bits(want))
					}
				}
				src := append([]float32(nil), specials...)
				for len(src) < 1<<16 {
					src = append(src, math.Float32frombits(rng.Uint32()), float32(rng.NormFloat64()*1000))
				}
				dst := make([]uint16, len(src))
				ks.Narrow(dst, src, typ)
				for i, x := range src {
					want := fallback.F32ToF16(x)
					if typ == fallback.KVBFloat16 {
						want = fallback.F32ToBF16(x)
					}
					if dst[i] != want {
						t.Fatalf("%s Narrow %v(%v = %#08x) = %#04x, want %#04x", ks, typ, x, math.Float32bits(x), dst[i], want)
					}
				}
				for n := 0; n <= 40; n++ {
					for _, atEnd := range []bool{true, false} {
						h, f1 := guarded16(t, n, atEnd)
						w, f2 := guarded(t, n, atEnd)
						copy(w, src)
						ks.Narrow(h, w, typ)
						ks.Widen(w, h, typ)
						f1()
						f2()
					}
					// WidenRows: 3 rows of n, contiguous or at strides
					// n+5 (src) and n+3 (dst), against Widen, both
					// operands against a guard page.
					for _, ld := range [][2]int{{n, n}, {n + 5, n + 3}} {
						if n == 0 {
							continue
						}
						lds, ldd := ld[0], ld[1]
						h, f1 := guarded16(t, span(3, n, lds), true)
						w, f2 := guarded(t, span(3, n, ldd), true)
						for i := range h {
							h[i] = uint16(rng.Uint32())
						}
						ks.WidenRows(w, ldd, h, lds, 3, n, typ)
						row := make([]float32, n)
						for r := 0; r < 3; r++ {
							fallback.Widen(row, h[r*lds:r*lds+n], typ)
							for j, x := range row {
								if math.Float32bits(x) != math.Float32bits(w[r*ldd+j]) {
									t.Fatalf("%s WidenRows %v n=%d lds=%d ldd=%d: [%d][%d] = %v, want %v", ks, typ, n, lds, ldd, r, j, w[r*ldd+j], x)
								}
							}
						}
						f1()
						f2()
						// NarrowRows back, at the strides swapped, against
						// Narrow per row, the padding between rows untouched.
						x, f3 := guarded(t, span(3, n, ldd), false)
						for i := range x {
							x[i] = math.Float32frombits(rng.Uint32()) // every pattern: NaN, Inf, ties, denormals
						}
						h2, f4 := guarded16(t, span(3, n, lds), false)
						for i := range h2 {
							h2[i] = 0xabcd
						}
						ks.NarrowRows(h2, lds, x, ldd, 3, n, typ)
						want := make([]uint16, n)
						for r := 0; r < 3; r++ {
							fallback.Narrow(want, x[r*ldd:r*ldd+n], typ)
							for j := 0; j < lds && r*lds+j < len(h2); j++ {
								if w := uint16(0xabcd); j < n {
									w = want[j]
									if h2[r*lds+j] != w {
										t.Fatalf("%s NarrowRows %v n=%d: [%d][%d] = %#04x, want %#04x", ks, typ, n, r, j, h2[r*lds+j], w)
									}
								} else if h2[r*lds+j] != w {
									t.Fatalf("%s NarrowRows %v n=%d: wrote the padding [%d][%d]", ks, typ, n, r, j)
								}
							}
						}
						f3()
						f4()
					}
				}
			}
		})
	}
}

// TestDecodeInt4ValueInKey: int4 V inside K (the same rows, MLA's
// absorbed form) is widened once per chunk and read at K's stride: the
// float64 sums over K's values for both, on every set, with and without
// the int8 mode's kernel.
func TestDecodeInt4ValueInKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(44, 44))
	for _, ks := range Available() {
		for _, c := range []struct{ rows, nk, dk, dv int }{{1, 200, 64, 32}, {4, 129, 96, 64}, {16, 300, 576, 512}} {
			if !ks.HasDecode(fallback.KVInt4, c.dk, c.dv) {
				continue
			}
			ld := c.dk + 1
			k, kf, f1 := kvOperand(t, rng, fallback.KVInt4, c.nk, c.dk, ld, true)
			q, f2 := operand(t, rng, c.rows*c.dk, true)
			for i := range q { // scaled as attention's (1/√dk): scores of a few units, in float32's reach of the float64 sums
				q[i] /= float32(math.Sqrt(float64(c.dk)))
			}
			o, f3 := operand(t, rng, c.rows*c.dv, true)
			s, f4 := guarded(t, ks.DecodeScratch(c.dk, c.dv), true)
			m, l, _, alibi, f5 := decodeState(t, rng, c.rows, c.dv, o, true)
			o0, m0, l0 := append([]float32(nil), o...), append([]float32(nil), m...), append([]float32(nil), l...)
			ks.Decode(q, c.rows, c.dk, k, k, c.nk, c.dv, o, m, l, s, alibi)
			where := fmt.Sprintf("%s int4 V in K rows=%d nk=%d dk=%d dv=%d", ks, c.rows, c.nk, c.dk, c.dv)
			checkDecodeState(t, where, q, c.rows, c.dk, kf, ld, kf, ld, c.nk, c.dv, alibi, o0, m0, l0, o, m, l)
			f1()
			f2()
			f3()
			f4()
			f5()
		}
	}
}

// TestRoundBF16 checks RoundBF16, in place and into another slice, bit for bit against Narrow then Widen's
// scalar twins: special values (NaNs signalling and quiet, ties, the
// largest finite, subnormals), every upper half with low halves at and
// around the tie, random patterns; every length's tail against guard
// pages, nothing past it written.
func TestRoundBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 16))
	src := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 3.4e38, -3.4e38, float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7fc00000), math.Float32frombits(0xff800001), math.Float32frombits(0x7f800001),
		math.Float32frombits(0x7fbfffff), math.Float32frombits(0x7fffffff), math.Float32frombits(0x00000001),
		math.Float32frombits(0x807fffff), math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000),
		math.Float32frombits(0x7f7fffff), math.Float32frombits(0x7f7f8000), math.Float32frombits(0x7f7f7fff)}
	for hi := uint32(0); hi < 1<<16; hi++ {
		for _, lo := range []uint32{0, 0x7fff, 0x8000, 0x8001, 0xffff} {
			src = append(src, math.Float32frombits(hi<<16|lo))
		}
	}
	for range 1 << 16 {
		src = append(src, math.Float32frombits(rng.Uint32()))
	}
	want := make([]float32, len(src))
	for i, x := range src {
		want[i] = fallback.BF16ToF32(fallback.F32ToBF16(x))
	}
	for _, ks := range Available() {
		t.Run(ks.Name, func(t *testing.T) {
			x := append([]float32(nil), src...)
			ks.RoundBF16(x, x) // in place
			y := make([]float32, len(src))
			ks.RoundBF16(y, src)
			for i := range x {
				if math.Float32bits(y[i]) != math.Float32bits(x[i]) {
					t.Fatalf("%s RoundBF16 into another slice: element %d = %#08x, in place %#08x", ks, i, math.Float32bits(y[i]), math.Float32bits(x[i]))
				}
				if math.Float32bits(x[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s RoundBF16(%#08x) = %#08x, want %#08x", ks, math.Float32bits(src[i]), math.Float32bits(x[i]), math.Float32bits(want[i]))
				}
			}
			for n := 0; n <= 40; n++ {
				for _, atEnd := range []bool{true, false} {
					w, free := guarded(t, n+1, atEnd)
					copy(w, src[len(src)-n-1:])
					sentinel := w[n]
					ks.RoundBF16(w[:n], w[:n])
					for i := range n {
						if math.Float32bits(w[i]) != math.Float32bits(want[len(src)-n-1+i]) {
							t.Fatalf("%s RoundBF16 n=%d: element %d = %#08x", ks, n, i, math.Float32bits(w[i]))
						}
					}
					if math.Float32bits(w[n]) != math.Float32bits(sentinel) {
						t.Fatalf("%s RoundBF16 n=%d wrote past the slice", ks, n)
					}
					free()
					e, freeE := guarded(t, n, atEnd) // both end at a guard page
					s, freeS := guarded(t, n, atEnd)
					copy(s, src)
					ks.RoundBF16(e, s)
					for i := range n {
						if math.Float32bits(e[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s RoundBF16 n=%d into another slice: element %d = %#08x", ks, n, i, math.Float32bits(e[i]))
						}
					}
					freeE()
					freeS()
				}
			}
		})
	}
}
