package kernels

import "github.com/fastattn/fastattn/fallback"

// generic is the pure-Go set: it runs everywhere and is the twin of every
// assembly set.
var generic = &Set{
	Name:       "generic",
	Lanes:      1,
	gemm:       fallback.Gemm,
	softmax:    fallback.Softmax,
	pv:         fallback.PV,
	exp:        fallback.ExpSlice,
	tr:         fallback.TransposeScale,
	decode:     fallback.Decode,
	decodeKeys: 1,
	decodeInt8: true,
}
