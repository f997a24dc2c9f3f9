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
}

// fallbackExp is the scalar exp, for the tails of the vector sets.
var fallbackExp = fallback.Exp32
