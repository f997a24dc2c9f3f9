package fallback

import (
	"encoding/binary"
	"math"
)

// The int8 compute mode's flash blocks on integer dot products: a block of
// int8 K rows and of quantized query rows, both packed (PackKeysQ8,
// PackQueryQ8), give the score tile ScoresQ8 defines. The kernels
// (kernels.Set.ScoresQ8) compute the same bits.

// KeyQ8BlockBytes is one block of a packed key row: Int8Block bytes k+128
// and the block's float32 scale, little-endian.
const KeyQ8BlockBytes = Int8Block + 4

// KeysQ8Stride is the bytes of one packed key row of head dim dk.
func KeysQ8Stride(dk int) int { return Int8Blocks(dk) * KeyQ8BlockBytes }

// PackKeysQ8 writes the nk int8 rows k (head dim dk) into dst, rows ld
// bytes apart (at least KeysQ8Stride(dk)): per block of 32 dims its bytes
// plus 128 (0..255: VPDPBUSD's unsigned operand; dims past dk 128, a
// zero key byte) and its scale.
func PackKeysQ8(dst []byte, ld int, k KVRows, nk, dk int) {
	nb := Int8Blocks(dk)
	const flip = 0x8080808080808080
	for c := range nk {
		src, row := Int4Bytes(k.I8[c*k.Ld:c*k.Ld+dk]), dst[c*ld:c*ld+nb*KeyQ8BlockBytes]
		for b := range nb {
			blk := row[b*KeyQ8BlockBytes : (b+1)*KeyQ8BlockBytes]
			if n := min(Int8Block, dk-b*Int8Block); n == Int8Block {
				for w := 0; w < Int8Block; w += 8 {
					binary.LittleEndian.PutUint64(blk[w:], binary.LittleEndian.Uint64(src[b*Int8Block+w:])^flip)
				}
			} else {
				PackKeyBytesQ8(blk, k.I8[c*k.Ld+b*Int8Block:c*k.Ld+dk])
			}
			binary.LittleEndian.PutUint32(blk[Int8Block:], math.Float32bits(k.S[c*k.LdS+b]))
		}
	}
}

// PackKeyBytesQ8 writes the first Int8Block bytes of a packed block: the
// key bytes src (at most Int8Block) plus 128, then 128 (a zero key byte)
// to the block's end.
func PackKeyBytesQ8(blk []byte, src []int8) {
	for i := range Int8Block {
		blk[i] = 128
		if i < len(src) {
			blk[i] = uint8(src[i]) ^ 0x80
		}
	}
}

// QuadsQ8 are quantized query rows packed for ScoresQ8, Ld rows (a
// multiple of the vector lanes; rows past the item's are zeros):
//
//	Q     dword row t (dims 4t..4t+3) of the rows: row r's 4 bytes at
//	      4·(t·Ld+r), for t < 8·nb (Int8Blocks(dk) blocks, zeros past dk);
//	S, C  per block b the rows' scales and corrections (QueryQ8.S, .Corr)
//	      at b·Ld+r.
type QuadsQ8 struct {
	Q  []int8
	S  []float32
	C  []int32
	Ld int
}

// PackQueryQ8 packs rows rows of q (head dim dk) into dst, whose Ld is at
// least rows and whose slices hold Int8Blocks(dk)·Int8Block·Ld bytes and
// Int8Blocks(dk)·Ld scales and corrections; rows rows..Ld-1 are zeros.
func PackQueryQ8(dst QuadsQ8, q QueryQ8, rows, dk int) {
	nb, ld := Int8Blocks(dk), dst.Ld
	for t := range nb * Int8Block / 4 {
		d := dst.Q[4*t*ld : 4*(t+1)*ld]
		for r := range rows {
			copy(d[4*r:4*r+4], q.Q[r*q.Ld+4*t:])
		}
		clear(d[4*rows:])
	}
	for b := range nb {
		s, c := dst.S[b*ld:(b+1)*ld], dst.C[b*ld:(b+1)*ld]
		for r := range rows {
			s[r], c[r] = q.S[r*nb+b], q.Corr[r*nb+b]
		}
		clear(s[rows:])
		clear(c[rows:])
	}
}

// ScoresQ8 is the score tile of packed K rows k (ldk bytes apart) and
// packed query rows q, keys major:
//
//	s[c*lds+r] = Σ_{b<nb} float32(D(c, r, b)) · (qs(r, b) · ks(c, b))   for c < nk, r < rows
//
// with D the block's exact integer dot product of the key's and the row's
// bytes (from the packed k+128 and the correction: Σ(k+128)·q − 128·Σq),
// the product of the two scales rounded to float32 and each block's term
// added in order by a fused multiply-add, from zero. rows ≤ q.Ld.
func ScoresQ8(s []float32, lds int, k []byte, ldk int, q QuadsQ8, nk, rows, dk int) {
	nb := Int8Blocks(dk)
	for c := range nk {
		row := k[c*ldk:]
		for r := range rows {
			acc := float32(0)
			for b := range nb {
				blk := row[b*KeyQ8BlockBytes:]
				d := q.C[b*q.Ld+r]
				for i := range Int8Block {
					t := b*Int8Block/4 + i/4
					d += int32(blk[i]) * int32(q.Q[4*(t*q.Ld+r)+i%4])
				}
				ks := math.Float32frombits(binary.LittleEndian.Uint32(blk[Int8Block:]))
				acc = fma32(float32(d), q.S[b*q.Ld+r]*ks, acc)
			}
			s[c*lds+r] = acc
		}
	}
}
