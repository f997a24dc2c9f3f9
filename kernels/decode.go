package kernels

import (
	"fmt"
	"math"

	"github.com/fastattn/fastattn/fallback"
)

// KVType is the storage type of K and V (float32, float16, bfloat16).
type KVType = fallback.KVType

// KVRows is a strided run of K or V rows of any storage type.
type KVRows = fallback.KVRows

// DecodeRows is the most query rows one Decode call takes.
const DecodeRows = fallback.DecodeRows

// decodeKernel is the signature of a set's fused decode: Decode's
// arguments, checked.
type decodeKernel func(q []float32, rows, dk int, k, v KVRows, nk, dv int, o, m, l, s, alibi []float32)

// decodeQ8Kernel is the signature of a set's fused decode on int8 dot
// products: DecodeQ8's arguments, checked.
type decodeQ8Kernel func(q QueryQ8, rows, dk int, k, v KVRows, nk, dv int, o, m, l, s, alibi []float32)

// QueryQ8 is query rows quantized for DecodeQ8 (fallback.QueryQ8).
type QueryQ8 = fallback.QueryQ8

// HasDecode reports whether the set has a fused decode kernel for K and V
// stored as t with head dims dk and dv. (AVX2 loads a 16-bit row's last
// vector as dword pairs, so it needs even dims there, and an int8 row's as
// dwords, dims multiples of 4; NEON, without masked loads, needs dims
// that are multiples of its 4 lanes.)
func (ks *Set) HasDecode(t KVType, dk, dv int) bool {
	if ks.decode == nil || ks.decodeWhole && (dk%ks.Lanes != 0 || dv%ks.Lanes != 0) {
		return false
	}
	switch t {
	case fallback.KVFloat32:
		return true
	case fallback.KVInt8, fallback.KVInt4: // int4: widened to int8 (int4kv.go)
		// AVX2 loads an int8 row's last vector as dwords: dims multiples of 4.
		return ks.decodeInt8 && (!ks.decodePairs || (dk%4 == 0 && dv%4 == 0))
	}
	return !ks.decodePairs || (dk%2 == 0 && dv%2 == 0)
}

// DecodeKeys is the fewest keys one Decode call takes: the set's key
// block (its last, partial block is moved back over keys already done).
func (ks *Set) DecodeKeys() int { return ks.decodeKeys }

// DecodeScratch is the length of the scratch s that Decode needs
// (decodeScratchOf).
func (ks *Set) DecodeScratch(dk, dv int) int {
	return int(ks.decodeScratchOf(float64(dk), float64(dv)))
}

// decodeScratchOf is the scratch of Decode and DecodeQ8 in float64:
// the kernel's (kernelScratch), then int4 K/V's widened chunk
// (int4Scratch).
func (ks *Set) decodeScratchOf(dk, dv float64) float64 {
	return ks.kernelScratch(dk, dv) + int4Scratch(dk, dv)
}

// DecodeScratchBound is the most floats DecodeScratch(dk, dv) asks of any
// set this build and CPU run (for memory estimates; a float64, so absurd
// dims cannot overflow).
func DecodeScratchBound(dk, dv int) float64 {
	n := generic.decodeScratchOf(float64(dk), float64(dv))
	for _, ks := range available {
		n = max(n, ks.decodeScratchOf(float64(dk), float64(dv)))
	}
	return n
}

// kernelScratch is the one formula of a decode kernel's scratch, in float64 so
// that DecodeScratchBound may take absurd dims: the generic kernel's
// (fallback.DecodeScratch), or for an assembly set its fixed part, then
// room for a block of keys of int8 K and V, block-major: decodeKeys K
// scales per scale block of dk (on AVX2 each broadcast to a vector),
// decodeKeys V scales per scale block of dv, and per scale block of dv
// the weights of DecodeRows rows times those scales; or (NEON) room for
// a block of keys of K and V dequantized to float32.
func (ks *Set) kernelScratch(dk, dv float64) float64 {
	if ks.decodeScratch == 0 {
		return float64(fallback.DecodeKeys) + dk + dv
	}
	if ks.decodeDequant {
		return float64(ks.decodeScratch) + float64(ks.decodeKeys)*(dk+dv)
	}
	blocks := func(d float64) float64 { return math.Ceil(d / fallback.Int8Block) }
	n := float64(ks.decodeScratch) + float64(ks.decodeKeys)*(float64(max(ks.decodeScales, 1))*blocks(dk)+(1+fallback.DecodeRows)*blocks(dv))
	if ks.decodeQ8 != nil {
		// DecodeQ8's transposed K block: a block's keys of each dword of
		// dk, in whole chunks of 64 bytes.
		n += float64(ks.decodeKeys) * 16 * math.Ceil(dk/64)
	}
	return n
}

// Decode is the fused flash loop of a decode step, fallback.Decode's
// contract: rows (1..DecodeRows) query rows q ([rows][dk], pre-scaled)
// over nk >= DecodeKeys() keys that every row sees, each K and V row read
// once and widened (dequantized) in registers if 16-bit (int8); o ([rows][dv]), m and l are
// the running state of the online softmax. alibi is nil or 2·rows values:
// the rows' ALiBi slopes, then their distances to the first key (key c
// gains slope·(distance + c)). A set without the kernel (HasDecode false)
// must not be asked.
func (ks *Set) Decode(q []float32, rows, dk int, k, v KVRows, nk, dv int, o, m, l, s, alibi []float32) {
	if rows < 1 || rows > DecodeRows || dk < 1 || dv < 1 {
		panic(fmt.Sprintf("kernels: Decode: rows %d (1..%d), dk %d, dv %d", rows, DecodeRows, dk, dv))
	}
	if !ks.HasDecode(k.Type, dk, dv) || v.Type != k.Type {
		panic(fmt.Sprintf("kernels: Decode: set %s has no kernel for K %v, V %v, dk %d, dv %d", ks.Name, k.Type, v.Type, dk, dv))
	}
	checkInN("Decode", "q", q, rows*dk)
	ks.checkDecode("Decode", rows, dk, k, v, nk, dv, o, m, l, s, alibi)
	switch {
	case k.Type == fallback.KVInt4 && rows <= ks.decodeInt4Max:
		ks.decodeInt4Rows(q, rows, dk, k, v, nk, dv, o, m, l, s, alibi)
	case k.Type == fallback.KVInt4:
		ks.decodeInt4Widened(rows, dk, k, v, nk, dv, s, alibi, func(k, v KVRows, n int, alibi []float32) {
			ks.decode(q, rows, dk, k, v, n, dv, o, m, l, s, alibi)
		})
	default:
		ks.decode(q, rows, dk, k, v, nk, dv, o, m, l, s, alibi)
	}
}

// checkDecode checks the operands Decode and DecodeQ8 share: the keys
// (at least a block), K and V (int8: their scales), the state, the
// scratch and ALiBi's terms.
func (ks *Set) checkDecode(kernel string, rows, dk int, k, v KVRows, nk, dv int, o, m, l, s, alibi []float32) {
	if nk < ks.decodeKeys {
		panic(fmt.Sprintf("kernels: %s: %d keys, at least %d", kernel, nk, ks.decodeKeys))
	}
	checkKV(kernel, "k", k, nk, fallback.StoredWidth(k.Type, dk))
	checkKV(kernel, "v", v, nk, fallback.StoredWidth(v.Type, dv))
	if k.Type.Quantized() {
		checkIn(kernel, "k scales", k.S, nk, fallback.Int8Blocks(dk), k.LdS)
		checkIn(kernel, "v scales", v.S, nk, fallback.Int8Blocks(dv), v.LdS)
	}
	checkOutN(kernel, "o", o, rows*dv)
	checkOutN(kernel, "m", m, rows)
	checkOutN(kernel, "l", l, rows)
	checkOutN(kernel, "s", s, ks.DecodeScratch(dk, dv))
	if alibi != nil {
		checkInN(kernel, "alibi", alibi, 2*rows)
	}
}

// HasDecodeQ8 reports whether the set has DecodeQ8 for int8 K/V of head
// dims dk (a multiple of 4) and dv.
func (ks *Set) HasDecodeQ8(dk, dv int) bool {
	return ks.decodeQ8 != nil && dk%4 == 0 && ks.HasDecode(fallback.KVInt8, dk, dv)
}

// DecodeQ8 is Decode over int8 K and V whose scores are integer dot
// products: the query rows come quantized (q: rows of QueryQ8Ld(dk)
// bytes, fallback.QuantizeQuery), each K block's int32 sums scaled by
// both scales, summed in float32; the rest is Decode's. Its results are
// Decode's on the rows fallback.DequantizeQuery gives (up to the order
// and rounding of the float32 sums). A set without it (HasDecodeQ8
// false) must not be asked.
func (ks *Set) DecodeQ8(q QueryQ8, rows, dk int, k, v KVRows, nk, dv int, o, m, l, s, alibi []float32) {
	if rows < 1 || rows > DecodeRows || dk < 1 || dv < 1 {
		panic(fmt.Sprintf("kernels: DecodeQ8: rows %d (1..%d), dk %d, dv %d", rows, DecodeRows, dk, dv))
	}
	if !ks.HasDecodeQ8(dk, dv) || !k.Type.Quantized() || v.Type != k.Type {
		panic(fmt.Sprintf("kernels: DecodeQ8: set %s has no kernel for K %v, V %v, dk %d, dv %d", ks.Name, k.Type, v.Type, dk, dv))
	}
	if q.Ld != fallback.QueryQ8Ld(dk) {
		panic(fmt.Sprintf("kernels: DecodeQ8: query stride %d, want %d", q.Ld, fallback.QueryQ8Ld(dk)))
	}
	nb := fallback.Int8Blocks(dk)
	checkInN("DecodeQ8", "q", q.Q, rows*q.Ld)
	checkInN("DecodeQ8", "q scales", q.S, rows*nb)
	checkInN("DecodeQ8", "q corrections", q.Corr, rows*nb)
	ks.checkDecode("DecodeQ8", rows, dk, k, v, nk, dv, o, m, l, s, alibi)
	switch {
	case k.Type == fallback.KVInt4 && ks.decodeQ8I4 != nil && rows <= ks.decodeQ8I4Max:
		ks.decodeQ8I4Rows(q, rows, dk, k, v, nk, dv, o, m, l, s, alibi)
	case k.Type == fallback.KVInt4:
		ks.decodeInt4Widened(rows, dk, k, v, nk, dv, s, alibi, func(k, v KVRows, n int, alibi []float32) {
			ks.decodeQ8(q, rows, dk, k, v, n, dv, o, m, l, s, alibi)
		})
	default:
		ks.decodeQ8(q, rows, dk, k, v, nk, dv, o, m, l, s, alibi)
	}
}

// Widen writes src, elements of type t (float16 or bfloat16), as float32
// to dst[:len(src)], exactly (fallback.Widen).
func (ks *Set) Widen(dst []float32, src []uint16, t KVType) {
	n := ks.convertable("Widen", len(dst), len(src), t, ks.widen != nil)
	raceWrite(dst, len(src))
	raceRead(src, len(src))
	if n > 0 {
		ks.widen(dst[:n], n, src[:n], n, 1, n, t)
	}
	fallback.Widen(dst[n:], src[n:], t)
}

// Narrow rounds src to elements of type t (float16 or bfloat16) in
// dst[:len(src)], to nearest, ties to even (fallback.Narrow).
func (ks *Set) Narrow(dst []uint16, src []float32, t KVType) {
	n := ks.convertable("Narrow", len(dst), len(src), t, ks.narrow != nil)
	raceWrite(dst, len(src))
	raceRead(src, len(src))
	if n > 0 {
		ks.narrow(dst[:n], src[:n], t)
	}
	fallback.Narrow(dst[n:], src[n:], t)
}

// HasRoundBF16 reports whether the set rounds to bfloat16 in place on a
// kernel of its own (RoundBF16<ISA>: the amd64 sets); elsewhere Narrow
// then Widen through a scratch is faster than RoundBF16's Go loop.
func (ks *Set) HasRoundBF16() bool { return ks.roundBF16 != nil }

// RoundBF16 writes src rounded to bfloat16 to dst[:len(src)]: each
// element fallback.BF16ToF32(fallback.F32ToBF16(x)), what Narrow then
// Widen give (to nearest even, a NaN kept NaN with its quiet bit set), in
// one pass: whole vectors on the set's kernel, the rest in Go. dst may be
// src (in place); otherwise they must not overlap.
func (ks *Set) RoundBF16(dst, src []float32) {
	check("RoundBF16", "dst", len(dst), len(src))
	raceWrite(dst, len(src))
	raceRead(src, len(src))
	n := 0
	if ks.roundBF16 != nil {
		n = len(src) / ks.Lanes * ks.Lanes
		if n > 0 {
			ks.roundBF16(&dst[0], &src[0], n)
		}
	}
	fallback.RoundBF16(dst[n:len(src)], src[n:])
}

// convertable checks a conversion's contract and returns how many leading
// elements the set's kernel converts (whole vectors, if it has one; the
// Go code does the rest).
func (ks *Set) convertable(kernel string, dst, src int, t KVType, vectorized bool) int {
	check(kernel, "dst", dst, src)
	if t != fallback.KVFloat16 && t != fallback.KVBFloat16 {
		panic(fmt.Sprintf("kernels: %s: %v is not a 16-bit type", kernel, t))
	}
	if !vectorized {
		return 0
	}
	return src / ks.Lanes * ks.Lanes
}

// WidenRows widens rows rows of n 16-bit elements of type t, at stride lds
// in src, to float32 at stride ldd in dst: Widen per row, checked once,
// the rows' whole vectors in one kernel call.
func (ks *Set) WidenRows(dst []float32, ldd int, src []uint16, lds int, rows, n int, t KVType) {
	if rows <= 0 || n <= 0 {
		return
	}
	checkOut("WidenRows", "dst", dst, rows, n, ldd)
	checkIn("WidenRows", "src", src, rows, n, lds)
	if ldd == n && lds == n {
		n, rows = rows*n, 1
	}
	nv := ks.convertable("WidenRows", n, n, t, ks.widen != nil)
	if nv > 0 { // one kernel call for every row's whole vectors
		ks.widen(dst, ldd, src, lds, rows, nv, t)
	}
	if nv < n {
		for r := 0; r < rows; r++ {
			fallback.Widen(dst[r*ldd+nv:r*ldd+n], src[r*lds+nv:r*lds+n], t)
		}
	}
}

// NarrowRows rounds rows rows of n float32 elements, at stride lds in
// src, to 16-bit floats of type t at stride ldd in dst: Narrow per row,
// checked once.
func (ks *Set) NarrowRows(dst []uint16, ldd int, src []float32, lds int, rows, n int, t KVType) {
	if rows <= 0 || n <= 0 {
		return
	}
	checkOut("NarrowRows", "dst", dst, rows, n, ldd)
	checkIn("NarrowRows", "src", src, rows, n, lds)
	if ldd == n && lds == n {
		n, rows = rows*n, 1
	}
	nv := ks.convertable("NarrowRows", n, n, t, ks.narrow != nil)
	for r := 0; r < rows; r++ {
		if nv > 0 {
			ks.narrow(dst[r*ldd:r*ldd+nv], src[r*lds:r*lds+nv], t)
		}
		if nv < n {
			fallback.Narrow(dst[r*ldd+nv:r*ldd+n], src[r*lds+nv:r*lds+n], t)
		}
	}
}

// DequantRows writes nr rows of n elements of the int8 or int4 rows src
// (with their scales) as float32 at stride ldd in dst: row r element i is
// float32(q)·scale, as fallback.DequantizeInt8 (int4: float32(u-8)·scale,
// fallback.DequantizeInt4KV). The whole blocks of 32 run on the set's
// DequantI8/DequantI4 kernel where it has one, a row's tail in Go.
func (ks *Set) DequantRows(dst []float32, ldd int, src KVRows, nr, n int) {
	if nr <= 0 || n <= 0 {
		return
	}
	if !src.Type.Quantized() {
		panic(fmt.Sprintf("kernels: DequantRows: %v rows", src.Type))
	}
	checkOut("DequantRows", "dst", dst, nr, n, ldd)
	checkIn("DequantRows", "src", src.I8, nr, fallback.StoredWidth(src.Type, n), src.Ld)
	checkIn("DequantRows", "scales", src.S, nr, fallback.Int8Blocks(n), src.LdS)
	whole := 0 // elements the set's kernel writes: whole blocks of 32
	if ks.dequant != nil && n >= fallback.Int8Block {
		whole = n / fallback.Int8Block * fallback.Int8Block
		ks.dequant(dst, ldd, src, nr, whole/fallback.Int8Block)
		if whole == n {
			return
		}
	}
	b0 := whole / fallback.Int8Block // the first block left to Go
	for r := range nr {
		out, sc := dst[r*ldd+whole:r*ldd+n], src.S[r*src.LdS+b0:]
		if src.Type == fallback.KVInt4 {
			row := src.I8[r*src.Ld : r*src.Ld+fallback.Int4RowBytes(n)]
			fallback.DequantizeInt4KV(out, fallback.Int4Bytes(row[b0*fallback.Int4Block:]), sc)
			continue
		}
		fallback.DequantizeInt8(out, src.I8[r*src.Ld+whole:r*src.Ld+n], sc)
	}
}
