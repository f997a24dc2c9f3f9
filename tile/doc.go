// Package tile turns attention problems and projections into work items
// on a kernels.Set. Every unit of parallel work is a Work (Items, Run):
//
//   - Attention: one problem, planned (plan.go, split.go) as flash items,
//     each a block of query rows of one batch and one KV-head group whose
//     flash loop (flash.go, runs.go, terms.go, poison.go) packs the Q
//     block, walks the KV blocks with the online softmax, skips the blocks
//     every row has masked, masks only the edge blocks and writes the
//     normalized output; or, for a decode step, as chunk items over the
//     keys whose partial results its Merging pass combines;
//   - Gemm: a projection, in blocks of C over weights packed in panels
//     (gemm.go).
//
// Block sizes come from the cache sizes (blocks.go). Plans depend on the
// shape and the machine only, never on the thread count, so results are
// bit for bit the same at any thread count.
//
// This package is fastattn's machinery, not its API: its exported names
// carry no compatibility promise and change whenever the kernels do.
// Programs use package mha, which exposes none of its types.
package tile
