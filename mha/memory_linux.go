package mha

import "syscall"

// systemMemory returns the machine's RAM plus swap in bytes, or 0.
func systemMemory() uint64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	unit := uint64(si.Unit)
	if unit == 0 {
		unit = 1
	}
	return (uint64(si.Totalram) + uint64(si.Totalswap)) * unit
}
