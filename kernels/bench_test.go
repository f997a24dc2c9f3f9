package kernels

import (
	"fmt"
	"testing"
	"time"

	"github.com/fastattn/fastattn/fallback"
)

// peakGFLOPS measures ks's register-only FMA rate on one thread.
func peakGFLOPS(ks *Set) float64 {
	const iters = 1 << 22
	best := 0.0
	for run := 0; run < 3; run++ {
		t0 := time.Now()
		ks.FMAPeak(iters)
		best = max(best, float64(iters*ks.PeakFLOPsPerIter())/time.Since(t0).Seconds()/1e9)
	}
	return best
}

// The kernels alone, on data that stays in cache: what the flash loop can
// reach at best. Reported as GFLOP/s and % of the FMA peak of the same run.
func BenchmarkKernels(b *testing.B) {
	for _, ks := range Available() {
		if !ks.HasPeak() {
			continue
		}
		peak := peakGFLOPS(ks)
		report := func(b *testing.B, flops float64) {
			g := flops * float64(b.N) / b.Elapsed().Seconds() / 1e9
			b.ReportMetric(g, "GFLOP/s")
			b.ReportMetric(100*g/peak, "%peak")
		}
		benchQK := func(rows, nk, d int) {
			b.Run(fmt.Sprintf("isa=%s/QK/rows=%d,keys=%d,dk=%d", ks.Name, rows, nk, d), func(b *testing.B) {
				s, k, qt := make([]float32, nk*rows), make([]float32, nk*d), make([]float32, d*rows)
				for i := 0; i < b.N; i++ {
					ks.QK(s, rows, k, d, qt, rows, nk, rows, d)
				}
				report(b, float64(2*rows*nk*d))
			})
		}
		// 256 keys: K or V (64–128 KiB) from L2 at most, Qᵀ and the P
		// rows in L1; 2048 keys: K or V of 0.5–1 MiB, streamed from L2 (or
		// beyond: 1 MiB is a Zen 4 core's whole L2, a Xeon's half).
		for _, c := range []struct{ d, nk int }{{64, 256}, {128, 256}, {64, 2048}, {128, 2048}} {
			rows, nk, d := 64, c.nk, c.d
			benchQK(rows, nk, d)
			b.Run(fmt.Sprintf("isa=%s/PV/rows=%d,keys=%d,dv=%d", ks.Name, rows, nk, d), func(b *testing.B) {
				o, p, v, al := make([]float32, rows*d), make([]float32, nk*rows), make([]float32, nk*d), make([]float32, rows)
				for i := 0; i < b.N; i++ {
					ks.PV(o, d, p, rows, v, d, al, rows, nk, d)
				}
				report(b, float64(2*rows*nk*d))
			})
		}
		// The int8 mode's flash-block scores on integer dot products, beside
		// QK above on the same shapes and MLA's Dk 576: GFLOP/s counts
		// 2·rows·keys·dk as for QK (the products VPDPBUSD does), % of the
		// float32 FMA peak, so above 100 is the integer engine's gain.
		if ks.HasScoresQ8() {
			for _, c := range []struct{ d, nk int }{{128, 256}, {576, 256}} {
				rows, nk, d := 64, c.nk, c.d
				b.Run(fmt.Sprintf("isa=%s/ScoresQ8/rows=%d,keys=%d,dk=%d", ks.Name, rows, nk, d), func(b *testing.B) {
					nb := fallback.Int8Blocks(d)
					ldk := fallback.KeysQ8Stride(d)
					s, k := make([]float32, nk*rows), make([]byte, nk*ldk)
					q := QuadsQ8{Q: make([]int8, nb*fallback.Int8Block*rows), S: make([]float32, nb*rows), C: make([]int32, nb*rows), Ld: rows}
					for i := 0; i < b.N; i++ {
						ks.ScoresQ8(s, rows, k, ldk, q, nk, rows, d)
					}
					report(b, float64(2*rows*nk*d))
				})
				if d != 576 {
					continue
				}
				benchQK(rows, nk, d)
			}
		}
		// The score tile of 64 keys (16 KiB) stays in L1; that of 256 keys
		// (64 KiB, the flash loop's at Dk 64) goes to L2 between the passes.
		for _, nk := range []int{64, 256} {
			b.Run(fmt.Sprintf("isa=%s/Softmax/rows=64,keys=%d", ks.Name, nk), func(b *testing.B) {
				s, m, l, al := make([]float32, nk*64), make([]float32, 64), make([]float32, 64), make([]float32, 64)
				for i := 0; i < b.N; i++ {
					ks.Softmax(s, 64, m, l, al, nk, 64, 0)
				}
				b.ReportMetric(float64(nk*64*b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
			})
		}
	}
}

// The fused decode kernel alone: K and V of 32 keys that stay in L1 and
// of 512 keys in L2 (compute bound: GFLOP/s, 4·rows·d per key, shows how
// far from the FMA peak; at 1 row the L1 case is mostly the call's fixed
// cost), and read from memory: 2^17 contiguous keys (BHSD, 128
// MiB of f32 K+V at D=128), or 2^14 keys of 8 heads interleaved (BSHD,
// the same bytes) walked the way tile.Split walks them — a call per head
// per chunk of benchChunk keys, every head of a chunk before the next
// chunk; mem-chunked reads the contiguous keys in calls of benchChunk
// keys, to tell a call's own cost from the layout's. Reported as GB/s of
// K and V. kv=int8q8 is DecodeQ8 (int8 K on integer dot products; the
// query rows quantized outside the timing, once per call of a step).
func BenchmarkDecode(b *testing.B) {
	const d = 128
	sets := Available()
	if ks := EmulatedVNNI(); ks != nil { // the AVX-VNNI kernel's speed, on its EVEX twin
		sets = append(sets, ks)
	}
	for _, ks := range sets {
		for _, typ := range kvTypes {
		variants:
			for _, q8 := range []bool{false, true} {
				if !ks.HasDecode(typ, d, d) || q8 && (!typ.Quantized() || !ks.HasDecodeQ8(d, d)) || !q8 && ks.Name == "avx2-vnniemu" {
					continue variants
				}
				kvName := typ.String()
				if q8 {
					kvName += "q8"
				}
				for _, rows := range benchDecodeRows {
					for _, c := range []struct {
						name        string
						keys, heads int
						chunk       int
					}{{"L1", 32, 1, 32}, {"L2", 512, 1, 512}, {"mem", 1 << 17, 1, 1 << 17}, {"mem-bshd", 1 << 14, 8, benchChunk}, {"mem-chunked", 1 << 17, 1, benchChunk}} {
						b.Run(fmt.Sprintf("isa=%s/kv=%s/rows=%d/%s", ks.Name, kvName, rows, c.name), func(b *testing.B) {
							w := fallback.StoredWidth(typ, d) // a row's elements, or int4's bytes
							ld := w * c.heads
							n := c.keys * ld
							nb := fallback.Int8Blocks(d)
							k := KVRows{Type: typ, Ld: ld, LdS: nb * c.heads}
							v := k
							// Written, so that memory rows are real pages (a
							// fresh make reads the kernel's one zero page).
							switch typ {
							case fallback.KVFloat32:
								k.F32, v.F32 = make([]float32, n), make([]float32, n)
								for i := range k.F32 {
									k.F32[i], v.F32[i] = float32(i%7)*0.01, float32(i%5)*0.01
								}
							case fallback.KVInt8, fallback.KVInt4:
								k.I8, v.I8 = make([]int8, n), make([]int8, n)
								for i := range k.I8 {
									k.I8[i], v.I8[i] = int8(i%7), int8(i%5)
								}
								k.S, v.S = make([]float32, n/w*nb), make([]float32, n/w*nb)
								for i := range k.S {
									k.S[i], v.S[i] = 0.01, 0.01
								}
							default:
								k.U16, v.U16 = make([]uint16, n), make([]uint16, n)
								for i := range k.U16 {
									k.U16[i], v.U16[i] = uint16(0x3c00+i%7), uint16(0x3c00+i%5)
								}
							}
							q, o := make([]float32, rows*d), make([]float32, rows*d)
							m, l, s := make([]float32, rows), make([]float32, rows), make([]float32, ks.DecodeScratch(d, d))
							qq := QueryQ8{Q: make([]int8, rows*d), S: make([]float32, rows*nb), Corr: make([]int32, rows*nb), Ld: d}
							fallback.QuantizeQuery(qq, q, rows, d)
							b.ResetTimer()
							for i := 0; i < b.N; i++ {
								for c0 := 0; c0 < c.keys; c0 += c.chunk {
									for h := range c.heads {
										if q8 {
											ks.DecodeQ8(qq, rows, d, skipTo(k, c0, h, d), skipTo(v, c0, h, d), c.chunk, d, o, m, l, s, nil)
										} else {
											ks.Decode(q, rows, d, skipTo(k, c0, h, d), skipTo(v, c0, h, d), c.chunk, d, o, m, l, s, nil)
										}
									}
								}
							}
							row := w * max(typ.Bytes(), 1)
							if typ.Quantized() {
								row += 4 * nb // the scales are read too
							}
							bytes := float64(2 * c.keys * c.heads * row)
							b.ReportMetric(bytes*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
							flops := float64(4 * rows * d * c.keys * c.heads)
							b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
						})
					}
				}
			}
		}
	}
}

// benchChunk is the keys of one Decode call in the mem-bshd and
// mem-chunked cases: tile.Split's chunk (splitMaxKeys, which kernels
// cannot import; bench's readChunk is the same number).
const benchChunk = 512

// skipTo returns r from the row of key c of head h (rows of d elements).
func skipTo(r KVRows, c, h, d int) KVRows {
	n := c*r.Ld + h*fallback.StoredWidth(r.Type, d)
	switch r.Type {
	case fallback.KVFloat32:
		r.F32 = r.F32[n:]
	case fallback.KVInt8, fallback.KVInt4:
		r.I8, r.S = r.I8[n:], r.S[c*r.LdS+h*fallback.Int8Blocks(d):]
	default:
		r.U16 = r.U16[n:]
	}
	return r
}

// benchDecodeRows are BenchmarkDecode's row counts: MHA (1), the GQA
// ratios 2–8 (each of the kernel's score groups of 4, 2 and 1 and their
// sums) and the most a call takes.
var benchDecodeRows = []int{1, 2, 3, 4, 5, 6, 7, 8, 16}
