//go:build amd64 && !purego

package kernels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/fastattn/fastattn/asm"
	"github.com/fastattn/fastattn/fallback"
	"github.com/klauspost/cpuid/v2"
)

// amxInt8State is nil where the avx512 set runs the int8 mode's flash
// blocks (ScoresQ8) on AMX-INT8 tiles, else the reason it does not
// (AMXInt8Status).
var amxInt8State = errors.New("AMX-INT8 not probed")

// amxInt8Works is nil where this process could run ScoresQ8 on AMX-INT8
// tiles (the CPU, the OS and the self-check allow it), whether or not
// the avx512 set does (AMXInt8).
var amxInt8Works = errors.New("AMX-INT8 not probed")

// AMXInt8On is the value of EnvAMX that also puts the int8 mode's flash
// blocks on AMX-INT8 tiles. They are off by default: on an Intel Xeon
// (family 6 model 207, one thread, BHSD, int8 K/V) the int8 mode ran
// 3.18, 42.4 and 42.2 ms on the tiles against 3.10, 41.1 and 39.3 on
// VPDPBUSD (1,8,8,512,512,64; 1,8,8,2048,2048,64; 1,16,16,1024,1024,128):
// every 32-element block's sums leave the tiles to be scaled, so the
// tiles save less than the stores cost.
const AMXInt8On = "int8"

// AMXInt8Status returns nil when the avx512 set computes ScoresQ8 on the
// CPU's AMX-INT8 tiles (TDPBUSD), else why not: no AMX-TILE, AMX-INT8 and
// AVX512_VNNI in cpuid, an OS that refuses the tile state, a failed
// self-check, or (the default) FASTATTN_AMX not set to AMXInt8On.
func AMXInt8Status() error { return amxInt8State }

// scoresQ8AMXKeys and scoresQ8AMXRows are the keys of one ScoresQ8AMX
// group and the rows of one of its vectors (a tile's 16 rows and 16
// dwords).
const scoresQ8AMXKeys, scoresQ8AMXRows = 16, 16

// scoresQ8AMXFunc is the signature of ScoresQ8AMXAVX512 and its Emu twin.
type scoresQ8AMXFunc func(s *float32, lds int, k *uint8, ldk int, q *int8, qs *float32, qc *int32, ldq, kg, nv, nb int, tiles *uint32)

// x86ScoresQ8AMX runs ScoresQ8 on tiles: the whole groups of 16 keys on
// kernel (with an 8 KiB tiles buffer on the stack: the Emu twin's tile
// file, the native kernel's stored sums), the last nk%16 keys on tail
// (ScoresQ8AVX512), with the same bits.
func x86ScoresQ8AMX(kernel scoresQ8AMXFunc, tail scoresQ8Kernel) scoresQ8Kernel {
	return func(s []float32, lds int, k []byte, ldk int, q QuadsQ8, nk, rows, nb int) {
		kg := nk / scoresQ8AMXKeys
		if kg > 0 {
			var tiles [amxTileFile]uint32
			kernel(&s[0], lds, &k[0], ldk/4, &q.Q[0], &q.S[0], &q.C[0], q.Ld, kg, rows/scoresQ8AMXRows, nb, &tiles[0])
		}
		if done := kg * scoresQ8AMXKeys; done < nk {
			tail(s[done*lds:], lds, k[done*ldk:], ldk, q, nk-done, rows, nb)
		}
	}
}

// amxInt8Usable decides whether this process can run ScoresQ8 on
// AMX-INT8: the CPU has it (and AVX512_VNNI, for the keys past the
// tiles), the environment does not turn AMX off, the OS grants the tile
// data state, and a score tile of small integers on the tiles equals
// fallback.ScoresQ8's.
func amxInt8Usable() error {
	if missing := missingFeatures(cpuid.AMXTILE, cpuid.AMXINT8, cpuid.AVX512VNNI); missing != "" {
		return errors.New("the CPU reports no " + missing)
	}
	if os.Getenv(EnvAMX) == "off" {
		return fmt.Errorf("%s=off", EnvAMX)
	}
	if err := amxPermit(); err != nil {
		return err
	}
	return amxInt8SelfCheck(x86ScoresQ8AMX(asm.ScoresQ8AMXAVX512, nil))
}

// amxInt8Chosen returns nil where the avx512 set runs ScoresQ8 on the
// tiles: works (amxInt8Usable's verdict) is nil and the environment asks
// for them (AMXInt8On).
func amxInt8Chosen(works error, env string) error {
	if works != nil {
		return works
	}
	if env != AMXInt8On {
		return fmt.Errorf("off unless %s=%s: VPDPBUSD ran the int8 mode 1.03-1.07x as fast on a Xeon", EnvAMX, AMXInt8On)
	}
	return nil
}

// amxInt8SelfCheck computes the scores of 32 keys by 32 rows over three
// blocks (a pair and a single: both tile parities) on f and compares
// them with fallback.ScoresQ8's bits.
func amxInt8SelfCheck(f scoresQ8Kernel) error {
	const nk, rows, dk = 32, 32, 96
	nb, ldk := fallback.Int8Blocks(dk), fallback.KeysQ8Stride(dk)
	k := make([]byte, nk*ldk)
	for c := range nk {
		for b := range nb {
			blk := k[c*ldk+b*fallback.KeyQ8BlockBytes:]
			for i := range fallback.Int8Block {
				blk[i] = byte(128 + (c*7+b*5+i*3)%255 - 127)
			}
			binary.LittleEndian.PutUint32(blk[fallback.Int8Block:], math.Float32bits(float32(1+(c+b)%3)))
		}
	}
	q := QuadsQ8{Q: make([]int8, nb*fallback.Int8Block*rows), S: make([]float32, nb*rows), C: make([]int32, nb*rows), Ld: rows}
	for i := range q.Q {
		q.Q[i] = int8(i*11%255 - 127)
	}
	for i := range q.S {
		q.S[i], q.C[i] = 0.25*float32(1+i%4), int32(i%9-4)
	}
	got, want := make([]float32, nk*rows), make([]float32, nk*rows)
	f(got, rows, k, ldk, q, nk, rows, nb)
	fallback.ScoresQ8(want, rows, k, ldk, q, nk, rows, dk)
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return fmt.Errorf("AMX-INT8 self-check: score %d = %v, want %v: the tiles are not used", i, got[i], want[i])
		}
	}
	return nil
}

// withAMXInt8 puts the avx512 set's ScoresQ8 on AMX-INT8 tiles where
// amxInt8Usable allows it and FASTATTN_AMX asks for it (called by the
// set's init, after ScoresQ8AVX512).
func withAMXInt8() {
	avx512.optional = append(avx512.optional, cpuid.AMXINT8)
	amxInt8Works = amxInt8Usable()
	if amxInt8State = amxInt8Chosen(amxInt8Works, os.Getenv(EnvAMX)); amxInt8State == nil {
		avx512.scoresQ8 = scoresQ8OnTiles()
	}
}

// scoresQ8OnTiles is ScoresQ8 on the native AMX-INT8 kernel, its tail
// keys on VPDPBUSD.
func scoresQ8OnTiles() scoresQ8Kernel {
	return x86ScoresQ8AMX(asm.ScoresQ8AMXAVX512, x86ScoresQ8(asm.ScoresQ8AVX512, asm.LanesAVX512))
}

// AMXInt8 returns, for tests and measurements, a copy of the avx512 set
// (named "avx512-amxint8") whose ScoresQ8 runs on the CPU's AMX-INT8
// tiles whether or not FASTATTN_AMX asks for them; nil where they cannot
// run (amxInt8Usable).
func AMXInt8() *Set {
	if amxInt8Works != nil {
		return nil
	}
	ks := *avx512
	ks.Name = "avx512-amxint8"
	ks.scoresQ8 = scoresQ8OnTiles()
	return &ks
}

// withAMXInt8Emu gives ks (EmulatedAMX's set) ScoresQ8 on the Emu twin of
// ScoresQ8AMX where the CPU has AVX512_VNNI (the twin's TDPBUSD and the
// tail keys' kernel).
func withAMXInt8Emu(ks *Set) {
	if cpuid.CPU.Supports(cpuid.AVX512VNNI) {
		ks.scoresQ8 = x86ScoresQ8AMX(asm.ScoresQ8AMXEmuAVX512, x86ScoresQ8(asm.ScoresQ8AVX512, asm.LanesAVX512))
	}
}
