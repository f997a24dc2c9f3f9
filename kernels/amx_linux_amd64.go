//go:build linux && amd64 && !purego

package kernels

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Linux's request for a dynamically enabled state component (uapi
// asm/prctl.h) and AMX's tile data component (XFEATURE_XTILEDATA).
const (
	archReqXcompPerm  = 0x1023
	xfeatureXtiledata = 18
)

// amxPermit asks Linux for the tile data state, once per process (the
// permission covers every thread, those the Go runtime starts later
// included). Without it the first tile data instruction raises SIGILL
// (LDTILECFG alone succeeds, so it proves nothing).
func amxPermit() error {
	if _, _, errno := unix.Syscall(unix.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXtiledata, 0); errno != 0 {
		return fmt.Errorf("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): %v", errno)
	}
	return nil
}
