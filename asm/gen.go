package asm

// The generators live in their own module (gen/), so users of fastattn
// never download avo. `go generate ./...` at the root runs these.

//go:generate go -C ../gen run ./amd64 -out ../asm
//go:generate go -C ../gen run ./arm64 -out ../asm
