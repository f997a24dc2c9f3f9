package main

import (
	"fmt"
	"testing"
)

// BenchmarkReadPattern reads the bytes of the kernels' BenchmarkDecode
// memory cases (go test -bench Decode ./kernels) in plain Go, in the
// orders a decode kernel can request them, so that whoever works on a
// core whose prefetchers forgive a walk still sees what a strict core
// does. 128 MiB: K and V of 2^14 keys × 8 heads of 64 words (a D=128
// float32 row), no software prefetch, only the hardware's:
//
//	contiguous            each tensor in address order (the read probe);
//	bshd,chunk=512        BSHD's walk as tile.Split makes it: per chunk
//	                      of readChunk keys, head after head, each head's
//	                      512-byte rows a page apart;
//	blocks,column-wise    K and V as contiguous rows in blocks of 16 keys,
//	                      K then V, each block read a 64-byte line of each
//	                      row in turn (row 0 line 0, row 1 line 0, …):
//	                      the fused decode kernels' loads until 2026-11,
//	                      16 streams a row apart;
//	blocks,touched        the same, each block's lines first touched in
//	                      address order (one load per line, row after
//	                      row), then read column-wise from L1: the fused
//	                      decode kernels' order now (gen/amd64/decode.go).
//
// On an AMD Zen 4 the column-wise walk reads at a quarter to a third of
// contiguous and the touched walk near contiguous; cores whose
// prefetchers follow many streams show little difference.
func BenchmarkReadPattern(b *testing.B) {
	const heads, words, keys = 8, 64, 1 << 14 // 64 words: a D=128 f32 row
	ld := heads * words
	k, v := make([]uint64, keys*ld), make([]uint64, keys*ld)
	for i := range k {
		k[i], v[i] = uint64(i), uint64(i)
	}
	const block = 16 * words // a block of 16 rows
	walks := []struct {
		name string
		walk func() uint64
	}{
		{"contiguous", func() uint64 { return sum8(k) + sum8(v) }},
		{fmt.Sprintf("bshd,chunk=%d", readChunk), func() uint64 {
			var total uint64
			for c0 := 0; c0 < keys; c0 += readChunk {
				for h := range heads {
					for c := c0; c < c0+readChunk; c++ {
						total += sum8(k[c*ld+h*words:][:words]) + sum8(v[c*ld+h*words:][:words])
					}
				}
			}
			return total
		}},
		{"blocks,column-wise", func() uint64 {
			var total uint64
			for o := 0; o < len(k); o += block {
				total += columnWise(k[o:o+block], words) + columnWise(v[o:o+block], words)
			}
			return total
		}},
		{"blocks,touched", func() uint64 {
			var total uint64
			for o := 0; o < len(k); o += block {
				total += touchLines(k[o:o+block]) + touchLines(v[o:o+block])
				total += columnWise(k[o:o+block], words) + columnWise(v[o:o+block], words)
			}
			return total
		}},
	}
	for _, w := range walks {
		b.Run(w.name, func(b *testing.B) {
			var total uint64
			for i := 0; i < b.N; i++ {
				total += w.walk()
			}
			b.ReportMetric(float64(2*len(k)*8*b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			if total == 1 { // keeps the sums
				b.Log(total)
			}
		})
	}
}

// readChunk is the keys of one chunk of BenchmarkReadPattern's BSHD walk:
// tile.Split's chunk, as in the kernels' BenchmarkDecode.
const readChunk = 512

// columnWise sums rows of rowWords words (x holds whole rows) a 64-byte
// line at a time across the rows: line 0 of every row, then line 1, …
func columnWise(x []uint64, rowWords int) uint64 {
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	for c := 0; c < rowWords; c += 8 {
		for r := c; r < len(x); r += rowWords {
			p := x[r : r+8]
			s0 += p[0]
			s1 += p[1]
			s2 += p[2]
			s3 += p[3]
			s4 += p[4]
			s5 += p[5]
			s6 += p[6]
			s7 += p[7]
		}
	}
	return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}

// touchLines loads the first word of each 64-byte line of x, in address
// order.
func touchLines(x []uint64) uint64 {
	var t uint64
	for o := 0; o < len(x); o += 8 {
		t += x[o]
	}
	return t
}
