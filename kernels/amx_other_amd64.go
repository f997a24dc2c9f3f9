//go:build !linux && amd64 && !purego

package kernels

import "errors"

// amxPermit: outside Linux the OS cannot be asked for the tile data state
// here, so AMX stays off.
func amxPermit() error {
	return errors.New("AMX's tile state is requested through Linux's arch_prctl only")
}
