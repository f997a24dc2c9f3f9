package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fastattn/fastattn/fallback"
)

// TestWidenInt4Rows checks every set's int4 → int8 widening against
// fallback.WidenInt4KV byte for byte: 1..9 blocks (pairs and an odd
// block), strides wider than the rows, every byte value, source and
// destination against guard pages on either side, and the destination's
// bytes past each row's blocks untouched.
func TestWidenInt4Rows(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 45))
	for _, ks := range Available() {
		for blocks := 1; blocks <= 9; blocks++ {
			for _, atEnd := range []bool{true, false} {
				rows := 1 + rng.IntN(4)
				lds, ldd := blocks*fallback.Int4Block+rng.IntN(3), blocks*fallback.Int8Block+rng.IntN(3)
				src, f1 := guarded8(t, span(rows, blocks*fallback.Int4Block, lds), atEnd)
				dst, f2 := guarded8(t, span(rows, blocks*fallback.Int8Block, ldd), atEnd)
				for i := range src {
					src[i] = int8(rng.Uint32())
				}
				for i := range dst {
					dst[i] = 99
				}
				ks.WidenInt4Rows(dst, ldd, KVRows{Type: fallback.KVInt4, I8: src, Ld: lds}, rows, blocks)
				want := make([]int8, blocks*fallback.Int8Block)
				for r := range rows {
					fallback.WidenInt4KV(want, fallback.Int4Bytes(src[r*lds:]), blocks)
					for i, w := range want {
						if got := dst[r*ldd+i]; got != w {
							t.Fatalf("%s blocks=%d row %d: dst[%d] = %d, want %d", ks, blocks, r, i, got, w)
						}
					}
					for i := r*ldd + len(want); i < min(len(dst), (r+1)*ldd); i++ {
						if dst[i] != 99 {
							t.Fatalf("%s blocks=%d row %d: byte %d past the row written", ks, blocks, r, i)
						}
					}
				}
				f1()
				f2()
			}
		}
		// Every byte value: 16 rows of one block, byte j of row r = 16r+j.
		src, dst := make([]int8, 256), make([]int8, 512)
		for i := range src {
			src[i] = int8(i)
		}
		ks.WidenInt4Rows(dst, 32, KVRows{Type: fallback.KVInt4, I8: src, Ld: 16}, 16, 1)
		for i := range 256 {
			r, j := i/16, i%16
			if lo, hi := dst[r*32+j], dst[r*32+16+j]; lo != int8(i&15)-8 || hi != int8(i>>4)-8 {
				t.Fatalf("%s: byte %#x widens to %d, %d; want %d, %d", ks, i, lo, hi, int8(i&15)-8, int8(i>>4)-8)
			}
		}
	}
}

// TestDequantRows checks every set's DequantRows on int8 and int4 rows
// bit for bit against the Go twins (fallback.DequantizeInt8,
// DequantizeInt4KV): row widths at every tail of a block of 32 (the
// kernel's whole blocks, then Go), strides wider than the rows, every
// operand against a guard page, and dst's bytes past each row untouched.
func TestDequantRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 47))
	for _, ks := range Available() {
		for _, typ := range []KVType{fallback.KVInt8, fallback.KVInt4} {
			for _, n := range []int{1, 5, 16, 31, 32, 33, 64, 80, 96, 127, 128, 160} {
				for _, atEnd := range []bool{true, false} {
					rows := 1 + rng.IntN(4)
					ld := n + rng.IntN(3)
					src, vals, free := kvOperand(t, rng, typ, rows, n, ld, atEnd)
					ldd := n + rng.IntN(3)
					dst, f2 := guarded(t, span(rows, n, ldd), atEnd)
					for i := range dst {
						dst[i] = 12345
					}
					ks.DequantRows(dst, ldd, src, rows, n)
					for r := range rows {
						for i := range n {
							if got, want := dst[r*ldd+i], vals[r*ld+i]; got != want {
								t.Fatalf("%s %v n=%d row %d: dst[%d] = %v, the Go twin %v", ks, typ, n, r, i, got, want)
							}
						}
						for i := r*ldd + n; i < min(len(dst), (r+1)*ldd); i++ {
							if dst[i] != 12345 {
								t.Fatalf("%s %v n=%d: dst[%d] past row %d written", ks, typ, n, i, r)
							}
						}
					}
					free()
					f2()
				}
			}
		}
	}
}

// TestDecodeInt4SharedBytes: V given as K's bytes under scales of its own
// is not taken for V inside K: its own scales apply.
func TestDecodeInt4SharedBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 48))
	const rows, nk, d = 2, 150, 64
	for _, ks := range Available() {
		if !ks.HasDecode(fallback.KVInt4, d, d) {
			continue
		}
		k, kf, f1 := kvOperand(t, rng, fallback.KVInt4, nk, d, d, true)
		v := k
		v.S = make([]float32, len(k.S))
		vf := append([]float32(nil), kf...)
		for c := range nk { // V's scales twice K's: its values twice K's
			for b := range fallback.Int8Blocks(d) {
				v.S[c*v.LdS+b] = 2 * k.S[c*k.LdS+b]
			}
			for i := range d {
				vf[c*d+i] = 2 * kf[c*d+i]
			}
		}
		q, o := make([]float32, rows*d), make([]float32, rows*d)
		for i := range q {
			q[i] = float32(rng.NormFloat64()) / 8
		}
		m, l := []float32{float32(math.Inf(-1)), float32(math.Inf(-1))}, make([]float32, rows)
		o0, m0, l0 := append([]float32(nil), o...), append([]float32(nil), m...), append([]float32(nil), l...)
		ks.Decode(q, rows, d, k, v, nk, d, o, m, l, make([]float32, ks.DecodeScratch(d, d)), nil)
		checkDecodeState(t, ks.Name+" int4 V = K's bytes, own scales", q, rows, d, kf, d, vf, d, nk, d, nil, o0, m0, l0, o, m, l)
		f1()
	}
}
