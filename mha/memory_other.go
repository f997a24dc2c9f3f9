//go:build !linux

package mha

// systemMemory returns 0: the machine's memory is not known here, so
// only the runtime's own limit (maxAllocBytes) applies.
func systemMemory() uint64 { return 0 }
