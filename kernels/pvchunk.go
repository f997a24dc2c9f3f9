package kernels

// pvChunk is the most keys one PV kernel call takes: the calls for all
// column panels run on one chunk of P and V before the next, so the
// chunk's P rows (all the tile's rows) and each panel's V rows stay in L1
// across the panels and row groups, where a panel over a whole block
// re-read P and V from L2 for every row group. The output tile is stored
// and reloaded between chunks, which keeps the sums' order: the same bits.
// Measured on Zen 3 (32 KiB L1), one thread, AVX2, the kernel alone
// (BenchmarkKernels, two runs): 64 rows × 2048 keys 58–66% → 75–86% of
// the FMA peak (dv 64 and 128), 256 keys dv 64 64–79% → 88–89%, 256 keys
// dv 128 level; chunks of 64 and 96 keys within 1–5% of 48, 128 lower.
// In the flash loop (blocks of at most 256 keys there), four alternated
// bench rounds: 1,8,8,2048,2048,64 BHSD full 73.9–74.7% → 75.6–76.2%,
// causal 70.5–71.4% → 72.0–72.5%; 1,16,16,1024,1024,128 level.
// The avx512 set takes whole blocks: its 32 registers hold a panel of 64
// columns (dv 64 in one panel, 128 in two), and on Zen 4 (32 KiB L1) the
// kernel alone ran 92–97% of the FMA peak in chunks against 95–99%
// without, dv 64 and 128, 256 and 2048 keys (two runs): the chunks' O
// reloads cost more than the P and V rows they keep in L1. AVX2 on the
// same core keeps them (2048 keys 88–92% against 68–82%).
// Defined on every build, though only the assembly sets' pvPanels uses
// it: TestPV meets its multiples on all of them.
const pvChunk = 48
