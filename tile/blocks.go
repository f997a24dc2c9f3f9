package tile

import (
	"github.com/fastattn/fastattn/fallback"
	"github.com/fastattn/fastattn/kernels"
	"github.com/klauspost/cpuid/v2"
)

// Blocks are the block sizes of the flash loop.
type Blocks struct {
	// Rows is the target number of query rows of one work item (the rows of
	// all query heads of a KV group at a run of positions).
	Rows int
	// Keys is the number of keys of one KV block.
	Keys int
}

// The largest block sizes BlocksFor returns.
const (
	maxRows = 64
	maxKeys = 512
)

// WorkspaceBytes bounds the bytes one worker's Workspace grows to for head
// dims dk and dv, whatever the plan and the kernel set: the Qᵀ block, the
// score tile, the output block, the row state, the query rows of Dot and
// the fused decode, 16-bit K and V blocks widened, the fused decode's
// scratch and the ALiBi rows, at the largest block sizes, a merged row
// in float64, the bfloat16 mode's rounding chunk and the bfloat16
// kernels' pairs (Qᵀ, the weights, V and K), ScoresQ8's packed rows and K
// block (and int4 K widened for it), and the Workspaces of an interleaved split item's heads
// (groupWorkspaceBytes). It is a float64 so that absurd dims cannot
// overflow.
func WorkspaceBytes(dk, dv int) float64 {
	return 4*(float64(maxRows)*float64(dk+dv+maxKeys+9)+16*float64(dk)+maxKeys+
		float64(maxKeys)*float64(dk+dv)+kernels.DecodeScratchBound(dk, dv)) + 8*float64(dv) + 2*roundChunk +
		4*(float64(maxRows)*(float64(dk)/2+maxKeys/2+1)+(maxKeys/2+1)*float64(dv)+maxKeys*float64(dk)/2) +
		2*float64(maxRows)*(float64(dk)+fallback.Int8Block+8*(float64(dk)/fallback.Int8Block+1)) + // the int8 mode's rows, and ScoresQ8's packed copy
		maxKeys*(fallback.KeyQ8BlockBytes+fallback.Int8Block)*(float64(dk)/fallback.Int8Block+1) + // ScoresQ8's packed K block, int4 K widened
		groupWorkspaceBytes(dk, dv)
}

// smallHeadKeys caps the KV block of heads of dims up to 64: there the L2
// budget alone allows 512 keys, and halving that block ran faster.
// Measured 2026-11-24, Zen 5, one thread, three alternating bench runs:
// 1,8,8,2048,2048,64 full on AVX2 81.1–83.0 GFLOP/s against 75.7–81.7
// (BSHD) and 82.8–84.3 against 80.0–84.0 (BHSD), causal 74.3–79.2 against
// 67.5–77.4; AVX-512 within the noise (full 160–167 against 164–166,
// causal 154–162 against 151–157). At dims 128 the budget gives 352 keys,
// and 256 measured no faster (AVX2 1,16,16,1024,1024,128 full 77.2–77.4
// against 73.0–82.8), so the cap leaves them. The likely cause (not
// measured: no counters) is the AVX2 PV sweep of one 16-column panel, a
// line of V and one of P per key: 32 KiB at 256 keys stays in a 48 KiB
// L1 across the row groups, 64 KiB at 512 does not; the PV kernel alone
// at BSHD's 2 KiB stride ran at 92% of the ymm peak over 256 keys and 83%
// over 512.
const smallHeadKeys = 256

// Cache sizes used when cpuid reports none.
const (
	defaultL1 = 32 << 10
	defaultL2 = 1 << 20
)

// cacheSizes returns the per-core L1 data and L2 sizes, with sane defaults.
func cacheSizes() (l1, l2 int) {
	l1, l2 = cpuid.CPU.Cache.L1D, cpuid.CPU.Cache.L2
	if l1 <= 0 {
		l1 = defaultL1
	}
	if l2 <= 0 {
		l2 = defaultL2
	}
	return l1, l2
}

// BlocksFor returns the block sizes for head dims dk, dv on this machine.
//
// Rows: 64 query rows (a multiple of every vector width), shrunk when the
// packed Qᵀ block (dk·Rows floats) would fill more than a quarter of L2,
// but never below 16. QK streams Qᵀ once per register block of keys, from
// L2 if need be: with 64 rows (four zmm) its micro-kernel's tile is
// compute-bound, with 16 (one zmm) it is bound by the keys' broadcast
// loads. Measured 2026-11-26 on Zen 4 (32 KiB L1, 1 MiB L2), one thread,
// 9–40 calls alternated in one process: MLA's absorbed decode (128 heads
// over one latent head, Dk 576, Dv 512, 4,096 keys) ran 1.34–1.37× as fast
// on AVX-512 (15.7–16.1 ms → 11.7 ms) and 1.06–1.10× on AVX2 with 64 rows
// than with the 16 an L1 rule gave; prefill at Dk 256 and 192/128 and a
// GQA decode of 16 rows at Dk 256 0.996–1.15× (most 1.02–1.07×). Keys: the S tile (Keys·Rows), the K and V blocks (Keys·(dk+dv))
// and the Qᵀ and O blocks (Rows·(dk+dv)) together fill at most half of L2,
// so a KV block stays in L2 while every row of the item uses it. Keys is a
// multiple of 16 in [16, 512], at most smallHeadKeys for head dims up to
// 64. The sizes depend on the shape and the machine only, never on the
// thread count, so results do not either.
func BlocksFor(dk, dv int) Blocks {
	_, l2 := cacheSizes()
	rows := maxRows
	for rows > 16 && dk*rows*4 > l2/4 {
		rows /= 2
	}
	budget := l2/2/4 - rows*(dk+dv)
	keys := budget / (rows + dk + dv)
	if max(dk, dv) <= 64 {
		keys = min(keys, smallHeadKeys)
	}
	keys = keys / 16 * 16
	keys = min(max(keys, 16), maxKeys)
	return Blocks{Rows: rows, Keys: keys}
}
