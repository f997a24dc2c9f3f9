//go:build !race

package kernels

import "github.com/fastattn/fastattn/fallback"

// Without -race the annotations of race.go compile to nothing.

const raceEnabled = false

func raceRead[T any](x []T, n int)                   {}
func raceWrite[T any](x []T, n int)                  {}
func raceReadRows[T any](x []T, rows, cols, ld int)  {}
func raceWriteRows[T any](x []T, rows, cols, ld int) {}
func raceKV(kv fallback.KVRows, rows, cols int)      {}
func raceWeights(w WeightRows, rows, cols int)       {}
