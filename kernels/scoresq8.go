package kernels

import (
	"fmt"

	"github.com/fastattn/fastattn/fallback"
)

// QuadsQ8 are quantized query rows packed for ScoresQ8
// (fallback.PackQueryQ8).
type QuadsQ8 = fallback.QuadsQ8

// quantQ8Func quantizes one query row as QuantizeRowQ8 (x86QuantizeQ8).
type quantQ8Func func(q QueryQ8, src []float32, dk int, values bool) bool

// packKeysQ8Func packs the whole blocks' bytes and every scale of nk int8
// key rows (PackKeysQ8<ISA>).
type packKeysQ8Func func(dst *uint8, ldd int, src *int8, lds int, s *float32, ldss int, nk, nw, nb int)

// scoresQ8Kernel computes ScoresQ8's tile for rows a multiple of Lanes.
type scoresQ8Kernel func(s []float32, lds int, k []byte, ldk int, q QuadsQ8, nk, rows, nb int)

// HasScoresQ8 reports whether the set computes the int8 mode's flash
// blocks on integer dot products (ScoresQ8): AVX-512 with AVX512_VNNI.
// Sets without it multiply the quantized rows' values in float32 (QK on
// a dequantized K block).
func (ks *Set) HasScoresQ8() bool { return ks.scoresQ8 != nil }

// ScoresQ8 computes the score tile of nk packed int8 key rows k
// (fallback.PackKeysQ8, ldk bytes apart: fallback.KeysQ8Stride(dk)) and
// the packed query rows q, keys major, with fallback.ScoresQ8's bits:
//
//	s[c*lds+r] = Σ_b float32(D(c, r, b)) · (qs(r, b) · ks(c, b))   for c < nk, r < rows
//
// D the exact integer dot product of block b. rows is a multiple of
// Lanes, at most q.Ld. A set without it (HasScoresQ8 false) must not be
// asked.
func (ks *Set) ScoresQ8(s []float32, lds int, k []byte, ldk int, q QuadsQ8, nk, rows, dk int) {
	if nk <= 0 || rows <= 0 || dk <= 0 {
		return
	}
	if ks.scoresQ8 == nil {
		panic(fmt.Sprintf("kernels: ScoresQ8: set %s has no kernel", ks.Name))
	}
	ks.checkRows("ScoresQ8", rows)
	nb := fallback.Int8Blocks(dk)
	if ldk < fallback.KeysQ8Stride(dk) || ldk%4 != 0 || rows > q.Ld {
		panic(fmt.Sprintf("kernels: ScoresQ8: key stride %d (at least %d, a multiple of 4), rows %d of %d", ldk, fallback.KeysQ8Stride(dk), rows, q.Ld))
	}
	checkOut("ScoresQ8", "s", s, nk, rows, lds)
	checkIn("ScoresQ8", "k", k, nk, fallback.KeysQ8Stride(dk), ldk)
	checkIn("ScoresQ8", "q", q.Q, 8*nb, 4*rows, 4*q.Ld)
	checkIn("ScoresQ8", "q scales", q.S, nb, rows, q.Ld)
	checkIn("ScoresQ8", "q corrections", q.C, nb, rows, q.Ld)
	ks.scoresQ8(s, lds, k, ldk, q, nk, rows, nb)
}

// PackKeysQ8 writes the nk int8 key rows k (head dim dk) packed for
// ScoresQ8 into dst, rows ld bytes apart (at least
// fallback.KeysQ8Stride(dk)): fallback.PackKeysQ8's bytes, on the set's
// kernel where it has one.
func (ks *Set) PackKeysQ8(dst []byte, ld int, k KVRows, nk, dk int) {
	if nk <= 0 || dk <= 0 {
		return
	}
	nb, w := fallback.Int8Blocks(dk), fallback.KeysQ8Stride(dk)
	if ld < w || k.Type != fallback.KVInt8 {
		panic(fmt.Sprintf("kernels: PackKeysQ8: stride %d (at least %d), K of type %v", ld, w, k.Type))
	}
	checkOut("PackKeysQ8", "dst", dst, nk, w, ld)
	checkIn("PackKeysQ8", "k", k.I8, nk, dk, k.Ld)
	checkIn("PackKeysQ8", "k scales", k.S, nk, nb, k.LdS)
	if ks.packKeysQ8 == nil {
		fallback.PackKeysQ8(dst, ld, k, nk, dk)
		return
	}
	whole := dk / fallback.Int8Block
	ks.packKeysQ8(&dst[0], ld, &k.I8[0], k.Ld, &k.S[0], k.LdS, nk, whole, nb)
	if whole == nb {
		return
	}
	for c := range nk { // the partial last block's bytes
		fallback.PackKeyBytesQ8(dst[c*ld+whole*fallback.KeyQ8BlockBytes:], k.I8[c*k.Ld+whole*fallback.Int8Block:c*k.Ld+dk])
	}
}

// QuantizeRowQ8 quantizes the query row src (dk elements) into row 0 of q
// as fallback.QuantizeQuery does (its bytes, zeros to q.Ld, scales and
// corrections) and, with values, replaces src by the values it then
// stands for (fallback.DequantizeQuery's), on the set's kernel where it
// has one. It reports false, leaving src as it was, where src has a NaN
// or ±Inf (the bytes, scales and corrections are then unspecified).
func (ks *Set) QuantizeRowQ8(q QueryQ8, src []float32, dk int, values bool) bool {
	if dk <= 0 {
		return true
	}
	nb := fallback.Int8Blocks(dk)
	if len(src) < dk || q.Ld < nb*fallback.Int8Block || len(q.Q) < q.Ld || len(q.S) < nb || len(q.Corr) < nb {
		panic(fmt.Sprintf("kernels: QuantizeRowQ8: dk %d: src %d, q %d bytes, %d scales, %d corrections", dk, len(src), len(q.Q), len(q.S), len(q.Corr)))
	}
	if ks.quantQ8 == nil {
		if fallback.NonFinite(src[:dk]) >= 0 {
			return false
		}
		fallback.QuantizeQuery(q, src, 1, dk)
		if values {
			fallback.DequantizeQuery(src, q, 1, dk)
		}
		return true
	}
	if !ks.quantQ8(q, src, dk, values) {
		return false
	}
	clear(q.Q[nb*fallback.Int8Block : q.Ld]) // the kernel writes whole blocks
	return true
}
