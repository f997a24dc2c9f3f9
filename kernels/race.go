//go:build race

package kernels

import (
	"runtime"
	"unsafe"

	"github.com/fastattn/fastattn/fallback"
)

// The race detector does not see what assembly reads and writes, so each
// Set method tells it, at the kernel-call boundary, which elements of each
// operand the call reads (raceRead) and writes (raceWrite): two goroutines
// writing one output through a kernel are then reported like Go code
// would be. Built only with -race; race_off.go makes these no-ops.

// raceEnabled reports a -race build.
const raceEnabled = true

// raceRead marks the first n elements of x as read.
func raceRead[T any](x []T, n int) {
	if n > 0 {
		runtime.RaceReadRange(unsafe.Pointer(unsafe.SliceData(x)), n*int(unsafe.Sizeof(*new(T))))
	}
}

// raceWrite marks the first n elements of x as written.
func raceWrite[T any](x []T, n int) {
	if n > 0 {
		runtime.RaceWriteRange(unsafe.Pointer(unsafe.SliceData(x)), n*int(unsafe.Sizeof(*new(T))))
	}
}

// raceReadRows marks rows rows of cols elements, ld apart, as read (only
// the rows: what lies between them may be another call's).
func raceReadRows[T any](x []T, rows, cols, ld int) {
	for r := 0; r < rows; r++ {
		raceRead(x[r*ld:], cols)
	}
}

// raceWriteRows marks rows rows of cols elements, ld apart, as written.
func raceWriteRows[T any](x []T, rows, cols, ld int) {
	for r := 0; r < rows; r++ {
		raceWrite(x[r*ld:], cols)
	}
}

// raceKV marks rows K or V rows of cols elements, of any storage type, as
// read.
func raceKV(kv fallback.KVRows, rows, cols int) {
	switch kv.Type {
	case fallback.KVFloat32:
		raceReadRows(kv.F32, rows, cols, kv.Ld)
	case fallback.KVInt8, fallback.KVInt4: // int4: cols in bytes
		raceReadRows(kv.I8, rows, cols, kv.Ld)
	default:
		raceReadRows(kv.U16, rows, cols, kv.Ld)
	}
}

// raceWeights marks rows rows of cols elements of a weight block as read
// (int4: nibbles, two to a byte, rows starting on whole bytes).
func raceWeights(w WeightRows, rows, cols int) {
	switch w.Type {
	case fallback.KVFloat32:
		raceReadRows(w.F32, rows, cols, w.Ld)
	case fallback.KVInt8:
		raceReadRows(w.I8, rows, cols, w.Ld)
	case fallback.KVInt4:
		raceReadRows(w.I4, rows, (cols+1)/2, w.Ld/2)
	case fallback.KVBFloat16:
		if w.P != nil {
			raceReadRows(w.P, (rows+1)/2, cols, w.Ld)
			break
		}
		raceReadRows(w.U16, rows, cols, w.Ld)
	default:
		raceReadRows(w.U16, rows, cols, w.Ld)
	}
}
