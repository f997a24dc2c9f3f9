// Package asm holds fastattn's generated assembly and its Go declarations.
// Nothing in a .s file here is written by hand: the generators in gen/
// write every byte, and `go generate ./...` at the root rebuilds them.
//
// Per kernel set, three generated files: <set>_<arch>.s (the kernels),
// <set>_<arch>.go (their declarations, each doc comment the kernel's
// reference loop) and params_<set>_<arch>.go (the constants the kernels
// were generated with, which the kernels package reads). The kernels
// package wraps them behind one contract and picks a set at run time; the
// purego build tag leaves this package empty.
//
// This package is fastattn's machinery, not its API: its exported names
// carry no compatibility promise and change whenever the kernels do.
// Programs use package mha, which exposes none of its types.
package asm
