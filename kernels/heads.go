package kernels

import (
	"fmt"

	"github.com/fastattn/fastattn/fallback"
)

// headKernels are a set's kernels of a decode step read key by key across
// the heads (HeadScores, HeadPV), one pair per K/V type, taking the head
// dim (HeadDims holds).
type headKernels struct {
	scores func(s []float32, lds int, q []float32, k KVRows, nk, heads, dk int)
	pv     func(o []float32, ldo int, p []float32, ldp int, v KVRows, alpha []float32, nk, heads, dv int)
}

// headVector is the float32 vector the head kernels are generated for
// (AVX2's, which the AVX-512 set runs too).
const headVector = 8

// HeadDims reports whether head dims dk and dv of K/V type t suit the
// head kernels, on any set that has them: float32, float16 or bfloat16
// rows of whole vectors of 8 floats, or int8 rows of whole blocks of 32
// (int4: none). It depends on the shape alone, for plans made before a
// set is chosen.
func HeadDims(t KVType, dk, dv int) bool {
	w := headVector
	if t == fallback.KVInt8 {
		w = fallback.Int8Block
	}
	return t != fallback.KVInt4 && dk > 0 && dv > 0 && dk%w == 0 && dv%w == 0
}

// HasHeads reports whether the set has HeadScores and HeadPV for K/V of
// type t and head dims dk and dv (HeadDims).
func (ks *Set) HasHeads(t KVType, dk, dv int) bool {
	return ks.heads != nil && HeadDims(t, dk, dv)
}

// HeadScores is fallback.HeadScores: the scores of a decode step of one
// query row per head (q: [heads][dk], pre-scaled) against nk keys whose
// rows hold the heads side by side (BSHD K: head h of key j at
// k.Ld·j + h·dk), written key-major (s[j*lds+h], Softmax's tile), K read
// in address order. A set without it (HasHeads false) must not be asked.
func (ks *Set) HeadScores(s []float32, lds int, q []float32, k KVRows, nk, heads, dk int) {
	if nk < 1 || heads < 1 || !ks.HasHeads(k.Type, dk, dk) {
		panic(fmt.Sprintf("kernels: HeadScores: set %s, K %v, %d keys, %d heads, dk %d", ks.Name, k.Type, nk, heads, dk))
	}
	checkOut("HeadScores", "s", s, nk, heads, lds)
	checkInN("HeadScores", "q", q, heads*dk)
	checkKV("HeadScores", "k", k, nk, heads*dk)
	if k.Type == fallback.KVInt8 {
		checkIn("HeadScores", "k scales", k.S, nk, heads*fallback.Int8Blocks(dk), k.LdS)
	}
	ks.heads.scores(s, lds, q, k, nk, heads, dk)
}

// HeadPV is fallback.HeadPV: the rescale of the heads' output rows (o:
// [heads] rows ldo apart) by alpha, then the sum over nk keys of the
// weights (p[j*ldp+h], as Softmax leaves them) times V rows that hold
// the heads side by side (head h of key j at v.Ld·j + h·dv), V read in
// address order. A set without it (HasHeads false) must not be asked.
func (ks *Set) HeadPV(o []float32, ldo int, p []float32, ldp int, v KVRows, alpha []float32, nk, heads, dv int) {
	if nk < 1 || heads < 1 || !ks.HasHeads(v.Type, dv, dv) {
		panic(fmt.Sprintf("kernels: HeadPV: set %s, V %v, %d keys, %d heads, dv %d", ks.Name, v.Type, nk, heads, dv))
	}
	checkOut("HeadPV", "o", o, heads, dv, ldo)
	checkIn("HeadPV", "p", p, nk, heads, ldp)
	checkKV("HeadPV", "v", v, nk, heads*dv)
	if v.Type == fallback.KVInt8 {
		checkIn("HeadPV", "v scales", v.S, nk, heads*fallback.Int8Blocks(dv), v.LdS)
	}
	checkInN("HeadPV", "alpha", alpha, heads)
	ks.heads.pv(o, ldo, p, ldp, v, alpha, nk, heads, dv)
}

// headAheadBytes is how far ahead of the rows they read the head kernels
// prefetch (gen/amd64/heads.go): whole rows at least this many bytes on
// (32 KiB: 4 keys of 32 heads of 128 float16 dims), and at least
// headPassKeys rows. On Zen 4, one thread, the MHA step
// 1,32,32,1,4096,128 BSHD float16 ran 3.10 ms at 8 KiB, 2.94 at 32 and
// 2.96 at 64, against 3.91 without; at 64 KiB bfloat16 and int8 were
// level or slower than at 32 (alternated rounds in one process, medians).
const headAheadBytes = 32 << 10

// headPassKeys is the most keys one pass of a head kernel loads at once
// (HeadPV's blocks, HeadScores' fours on AVX-512): a prefetch nearer than
// that names rows the same pass is loading. Float32 rows of 32 heads of
// 128 dims are 16 KiB, so 32 KiB was two keys: taking four (64 KiB), the
// step on the key-major path ran 6.31 → 6.15 ms on the avx2 kernels and
// 5.97 → 5.59 on the avx512 ones (Zen 4, one thread, in-process rounds).
const headPassKeys = 4

// headAhead returns the head kernels' prefetch arguments for nk rows of
// w elements ld apart, in a slice of n elements of size bytes: ahead, the
// bytes from a row to the one prefetched (the fewest whole rows covering
// headAheadBytes, and at least headPassKeys), and pfn, how many of the nk
// rows have that row inside the slice (rows j < pfn prefetch, the others
// do not), so that every address a prefetch names lies within the slice.
func headAhead(n, ld, w, size, nk int) (ahead, pfn int) {
	row := max(ld*size, 1)
	keys := max((headAheadBytes+row-1)/row, headPassKeys)
	avail := 0 // rows whose w elements lie inside the slice
	if n >= w {
		avail = (n-w)/max(ld, 1) + 1
	}
	return keys * ld * size, min(nk, max(avail-keys, 0))
}
