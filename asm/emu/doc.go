// Package emu runs functions of the generated amd64 assembly (asm's .s
// files, in Go's assembler syntax) in an interpreter, so that the avx512
// set's kernels can be checked on cores without AVX-512: qemu has none,
// and a CI machine or a developer's core may lack it. It knows the
// instructions of the kernels its tests run (the GEMMs and GEMVs, PV,
// the softmaxes, the transposes, Dot, the fused decode kernels, the
// conversions), with Intel's semantics for each and a float32 FMA rounded
// once; a raw-bytes instruction (VDPBF16PS, the tile instructions) or any
// other is an error when reached. Every memory access goes through the
// regions the caller mapped: a byte outside them, a mask's suppressed
// lanes aside, is an error, as a guard page would be a fault.
//
// It is a test tool, never used by the library: slow (0.6 µs an
// instruction on a Zen 3 core), and like asm, machinery whose exported
// names carry no compatibility promise.
package emu
