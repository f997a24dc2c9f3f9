package kernels

import (
	"math"
	"unsafe"

	"github.com/fastattn/fastattn/fallback"
)

// Int4 K/V (fallback.KVInt4 rows: ggml's q4_0 blocks) in Decode runs on
// the set's int4 kernel where it has one (decodeInt4Rows below), and in
// DecodeQ8 on the set's DecodeQ8I4 where it has one for the call's rows
// (decodeQ8I4Rows), both reading the nibbles as they are. Otherwise it
// runs on the int8 decode kernels: Decode and DecodeQ8 widen int4Chunk keys at a time to
// int8 rows in their scratch (a nibble u becomes u-8, under the same
// scales, so every row stands for the same values) and run the set's int8
// kernel over the chunk, the softmax state carried from chunk to chunk.
// The widened chunk, 2·int4Chunk·32 bytes a block of d at most, stays in
// L1 (16 KiB at d 128) while the kernel reads it; memory sees the int4
// bytes only. A chunk is a multiple of every set's key block, so the
// kernel's blocks fall where one call's would: the result is the int8
// kernel's on the widened rows, bit for bit.

// int4Chunk is the keys widened at a time.
const int4Chunk = 64

// int4Scratch is the floats of the scratch int4 K/V adds to Decode's:
// room for a chunk of up to 2·int4Chunk keys (the last chunk takes what
// is left, so none is shorter than a key block) of K and V widened, and
// the ALiBi terms of a chunk (2·DecodeRows).
func int4Scratch(dk, dv float64) float64 {
	blocks := math.Ceil(dk/fallback.Int8Block) + math.Ceil(dv/fallback.Int8Block)
	return 2*int4Chunk*fallback.Int8Block*blocks/4 + 2*fallback.DecodeRows
}

// decodeInt4Widened runs kernel (a set's decode, or DecodeQ8's on q8) over int4
// K and V (checked): chunk by chunk, K and V widened to int8 into s past
// the kernel's own scratch, alibi's distances advanced to each chunk's
// first key. V inside K (the same rows) is widened once.
func (ks *Set) decodeInt4Widened(rows, dk int, k, v KVRows, nk, dv int, s, alibi []float32,
	kernel func(k, v KVRows, n int, alibi []float32)) {
	base := int(ks.kernelScratch(float64(dk), float64(dv)))
	nbk, nbv := fallback.Int8Blocks(dk), fallback.Int8Blocks(dv)
	ldk, ldv := nbk*fallback.Int8Block, nbv*fallback.Int8Block
	room := s[base:]
	terms := room[:2*fallback.DecodeRows]
	bytes := unsafe.Slice((*int8)(unsafe.Pointer(&room[2*fallback.DecodeRows])), 4*(len(room)-2*fallback.DecodeRows))
	kb, vb := bytes[:2*int4Chunk*ldk], bytes[2*int4Chunk*ldk:][:2*int4Chunk*ldv]
	// V inside K (or K passed as V): the same rows and scales.
	shared := &v.I8[0] == &k.I8[0] && v.Ld == k.Ld && &v.S[0] == &k.S[0] && v.LdS == k.LdS
	for c0 := 0; c0 < nk; {
		n := nk - c0
		if n >= 2*int4Chunk {
			n = int4Chunk
		}
		// The next chunk, if any, holds at least n rows (only the last
		// is longer than int4Chunk): prefetched as this one is widened.
		next := 0
		if c0+n < nk {
			next = n
		}
		kc := KVRows{Type: fallback.KVInt8, I8: kb, Ld: ldk, S: k.S[c0*k.LdS:], LdS: k.LdS}
		ks.widenInt4Rows(kb, ldk, k.From(c0), n, nbk, next)
		vc := kc
		if !shared {
			vc = KVRows{Type: fallback.KVInt8, I8: vb, Ld: ldv, S: v.S[c0*v.LdS:], LdS: v.LdS}
			ks.widenInt4Rows(vb, ldv, v.From(c0), n, nbv, next)
		}
		a := alibi
		if alibi != nil {
			a = terms[:2*rows]
			copy(a, alibi[:rows])
			for r := range rows {
				a[rows+r] = alibi[rows+r] + float32(c0)
			}
		}
		kernel(kc, vc, n, a)
		c0 += n
	}
}

// widenInt4Rows writes nr int4 K/V rows of src, blocks blocks each, as
// int8 rows (Int8Block elements a block) at stride ldd in dst: the set's
// kernel, else fallback.WidenInt4KV row by row. With next > 0 the set's
// kernel prefetches the rows next rows on (src holds them).
func (ks *Set) widenInt4Rows(dst []int8, ldd int, src KVRows, nr, blocks, next int) {
	if ks.widenI4KV != nil {
		ks.widenI4KV(dst, ldd, src.I8, src.Ld, nr, blocks, next*src.Ld)
		return
	}
	for r := range nr {
		fallback.WidenInt4KV(dst[r*ldd:], fallback.Int4Bytes(src.I8[r*src.Ld:r*src.Ld+blocks*fallback.Int4Block]), blocks)
	}
}

// WidenInt4Rows writes nr int4 K/V rows of src (Type KVInt4), blocks
// blocks each, as int8 rows at stride ldd in dst: element i of a row
// becomes u-8, so that under the same scales it stands for the same
// value (fallback.WidenInt4KV).
func (ks *Set) WidenInt4Rows(dst []int8, ldd int, src KVRows, nr, blocks int) {
	if nr <= 0 || blocks <= 0 {
		return
	}
	if src.Type != fallback.KVInt4 {
		panic("kernels: WidenInt4Rows: " + src.Type.String() + " rows")
	}
	checkOut("WidenInt4Rows", "dst", dst, nr, blocks*fallback.Int8Block, ldd)
	checkIn("WidenInt4Rows", "src", src.I8, nr, blocks*fallback.Int4Block, src.Ld)
	ks.widenInt4Rows(dst, ldd, src, nr, blocks, 0)
}

// decodeQ8I4Rows runs the set's DecodeQ8I4 (int4 K and V read as they
// are, checked) on q's rows rearranged in s past the kernel's scratch:
// each block's 32 bytes in the order the kernel unpacks a block's nibbles
// (element j, then j+16, for j = 0..15), zeros to a multiple of 64 bytes,
// and each block's correction -8·Σ q8 (q.Corr holds -128·Σ q8: a
// sixteenth of it, exactly). The result is the int8 kernel's on the rows
// WidenInt4Rows gives, bit for bit: the same int32 sums, scaled alike.
func (ks *Set) decodeQ8I4Rows(q QueryQ8, rows, dk int, k, v KVRows, nk, dv int, o, m, l, s, alibi []float32) {
	nb := fallback.Int8Blocks(dk)
	ld := (nb + 1) / 2 * 64
	room := s[int(ks.kernelScratch(float64(dk), float64(dv))):]
	corr := unsafe.Slice((*int32)(unsafe.Pointer(&room[0])), rows*nb)
	q8 := unsafe.Slice((*int8)(unsafe.Pointer(&room[rows*nb])), rows*ld)
	for r := range rows {
		row, out := q.Q[r*q.Ld:], q8[r*ld:(r+1)*ld]
		for b := range nb {
			blk, dst := row[b*fallback.Int8Block:][:fallback.Int8Block], out[b*fallback.Int8Block:][:fallback.Int8Block]
			for j := range fallback.Int4Block {
				dst[2*j], dst[2*j+1] = blk[j], blk[j+fallback.Int4Block]
			}
			corr[r*nb+b] = q.Corr[r*nb+b] / 16
		}
		clear(out[nb*fallback.Int8Block:])
	}
	ks.decodeQ8I4(QueryQ8{Q: q8, S: q.S, Corr: corr, Ld: ld}, rows, dk, k, v, nk, dv, o, m, l, s, alibi)
}

// decodeInt4Rows runs the set's int4 Decode kernel (int4 K and V read as
// they are, checked), which takes whole blocks of dk: q's rows, if dk is
// not, copied into s past the kernel's scratch with zeros to whole
// blocks (a zero query element meets a finite K value). The result is
// the int8 kernel's on the rows WidenInt4Rows gives and q so padded, bit
// for bit: the same products, summed alike.
func (ks *Set) decodeInt4Rows(q []float32, rows, dk int, k, v KVRows, nk, dv int, o, m, l, s, alibi []float32) {
	whole := fallback.Int8Blocks(dk) * fallback.Int8Block
	if whole != dk {
		qp := s[int(ks.kernelScratch(float64(dk), float64(dv))):][:rows*whole]
		for r := range rows {
			row := qp[r*whole : (r+1)*whole]
			copy(row, q[r*dk:(r+1)*dk])
			clear(row[dk:])
		}
		q = qp
	}
	ks.decode(q, rows, whole, k, v, nk, dv, o, m, l, s, alibi)
}
