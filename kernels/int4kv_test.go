package kernels

import (
	"fmt"
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

// TestDecodeQ8Int4AsInt8: DecodeQ8 over int4 K/V (DecodeQ8I4 reads them
// as they are where the set has it for the rows: AVX-512 1..16, AVX2
// one; otherwise they are widened a chunk at a time) gives, bit for bit,
// DecodeQ8's result over the int8 rows WidenInt4Rows makes of them in
// one call: the same int32 sums, scaled and summed alike.
func TestDecodeQ8Int4AsInt8(t *testing.T) {
	rng := rand.New(rand.NewPCG(49, 49))
	for _, ks := range q8Sets() {
		int4AsInt8(t, rng, ks, true)
	}
}

// TestDecodeInt4AsInt8: Decode over int4 K/V (the set's int4 kernel where
// it takes the rows, else widened a chunk at a time) gives, bit for bit,
// Decode's result over the int8 rows WidenInt4Rows makes of them, with
// the query rows padded with zeros to whole blocks where the int4 kernel
// runs (it takes whole blocks of dk): the same products, summed alike.
func TestDecodeInt4AsInt8(t *testing.T) {
	rng := rand.New(rand.NewPCG(50, 50))
	for _, ks := range Available() {
		int4AsInt8(t, rng, ks, false)
	}
}

// int4AsInt8 runs the cases of the two tests above on one set, in the
// int8 mode (q8: DecodeQ8) or the float32 one (Decode): 1..16 rows (one:
// the paths without the transpose, and the row walk), head dims of one
// to 18 blocks (odd counts end on a half chunk), partial last vectors,
// strided and adjacent rows, V inside K, ALiBi and a running state, key
// counts around the block.
func int4AsInt8(t *testing.T, rng *rand.Rand, ks *Set, q8 bool) {
	t.Helper()
	T := ks.DecodeKeys()
	for _, dk := range []int{4, 18, 32, 40, 64, 96, 128, 160, 576} {
		for _, nk := range []int{T, T + 3, 5*T - 1, 3*int4Chunk + 7} {
			rows := []int{1, 1, 2, 3, 4, 5, 8, 16}[rng.IntN(8)]
			dv := []int{dk, 16, 48, 128, 512}[rng.IntN(5)]
			if ks.decodePairs {
				dv = (dv + 3) &^ 3
			}
			if !ks.HasDecode(fallback.KVInt4, dk, dv) || q8 && !ks.HasDecodeQ8(dk, dv) {
				continue
			}
			vink := dv <= dk && rng.IntN(3) == 0
			ld := dk + 32*rng.IntN(2)
			k, _, free := kvOperand(t, rng, fallback.KVInt4, nk, dk, ld, rng.IntN(2) == 0)
			v := k
			if !vink {
				var freeV func()
				v, _, freeV = kvOperand(t, rng, fallback.KVInt4, nk, dv, dv+32*rng.IntN(2), true)
				defer freeV()
			}
			defer free()
			// The int8 twins: the same scales, each row widened, adjacent
			// where the int4 rows are (the float32 kernels walk adjacent
			// and strided rows in different orders).
			wide := func(r KVRows, dim int) KVRows {
				nb := fallback.Int8Blocks(dim)
				ld := nb * fallback.Int8Block
				if r.Ld != nb*fallback.Int4Block {
					ld += fallback.Int8Block
				}
				w := KVRows{Type: fallback.KVInt8, I8: make([]int8, nk*ld), Ld: ld, S: r.S, LdS: r.LdS}
				ks.WidenInt4Rows(w.I8, w.Ld, r, nk, nb)
				return w
			}
			k8, v8 := wide(k, dk), wide(v, dv)
			src := make([]float32, rows*dk)
			for i := range src {
				src[i] = float32(rng.NormFloat64()) / 4
			}
			nb, ldq := fallback.Int8Blocks(dk), fallback.QueryQ8Ld(dk)
			q := QueryQ8{Q: make([]int8, rows*ldq), S: make([]float32, rows*nb), Corr: make([]int32, rows*nb), Ld: ldq}
			fallback.QuantizeQuery(q, src, rows, dk)
			// The float32 twin's query: src's rows padded to whole blocks.
			whole := nb * fallback.Int8Block
			padded := make([]float32, rows*whole)
			for r := range rows {
				copy(padded[r*whole:], src[r*dk:(r+1)*dk])
			}
			var alibi []float32
			if rng.IntN(2) == 0 {
				for r := range rows {
					alibi = append(alibi, -0.0625/float32(r+1))
				}
				for range rows {
					alibi = append(alibi, float32(rng.IntN(50)))
				}
			}
			type state struct{ o, m, l []float32 }
			start := state{make([]float32, rows*dv), make([]float32, rows), make([]float32, rows)}
			for r := range rows {
				start.m[r] = float32(math.Inf(-1))
				if rng.IntN(2) == 0 { // a running state
					for i := range dv {
						start.o[r*dv+i] = float32(rng.NormFloat64())
					}
					start.m[r], start.l[r] = 0.5, 3
				}
			}
			run := func(k, v KVRows) state {
				st := state{append([]float32(nil), start.o...), append([]float32(nil), start.m...), append([]float32(nil), start.l...)}
				switch {
				case q8:
					ks.DecodeQ8(q, rows, dk, k, v, nk, dv, st.o, st.m, st.l, make([]float32, ks.DecodeScratch(dk, dv)), alibi)
				case k.Type == fallback.KVInt4 || rows > ks.decodeInt4Max:
					// (More rows than the int4 kernel takes: int4 is widened
					// and the int8 kernel runs on dk itself.)
					ks.Decode(src, rows, dk, k, v, nk, dv, st.o, st.m, st.l, make([]float32, ks.DecodeScratch(dk, dv)), alibi)
				default:
					ks.Decode(padded, rows, whole, k, v, nk, dv, st.o, st.m, st.l, make([]float32, ks.DecodeScratch(whole, dv)), alibi)
				}
				return st
			}
			got, want := run(k, v), run(k8, v8)
			where := fmt.Sprintf("%s q8=%v rows=%d dk=%d dv=%d nk=%d vink=%v alibi=%v", ks, q8, rows, dk, dv, nk, vink, alibi != nil)
			for r := range rows {
				if math.Float32bits(got.m[r]) != math.Float32bits(want.m[r]) || math.Float32bits(got.l[r]) != math.Float32bits(want.l[r]) {
					t.Fatalf("%s: row %d: m, l = %v, %v; the widened rows give %v, %v", where, r, got.m[r], got.l[r], want.m[r], want.l[r])
				}
			}
			for i := range got.o {
				if math.Float32bits(got.o[i]) != math.Float32bits(want.o[i]) {
					t.Fatalf("%s: o[%d] = %v; the widened rows give %v", where, i, got.o[i], want.o[i])
				}
			}
		}
	}
}
