// Package asm holds fastattn's generated assembly and its Go declarations.
// Nothing in a .s file here is written by hand: the generators in gen/
// write every byte, and `go generate ./...` at the root rebuilds them.
//
// It is empty until the amd64 kernel sets land.
package asm
