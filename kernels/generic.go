package kernels

import "github.com/fastattn/fastattn/fallback"

// generic is the pure-Go set: it runs everywhere and is the twin of every
// assembly set.
var generic = &Set{
	Name:    "generic",
	Lanes:   1,
	gemm:    fallback.Gemm,
	softmax: fallback.Softmax,
	pv:      fallback.PV,
	exp:     fallback.ExpSlice,
	tr:      fallback.TransposeScale,
	decode: func(q []float32, rows, dk int, k, v KVRows, nk, dv int, o, m, l, s []float32) {
		fallback.Decode(q, rows, dk, k, v, nk, dv, o, m, l, s)
	},
	decodeKeys: 1,
}
