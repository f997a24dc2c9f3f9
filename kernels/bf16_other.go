//go:build !amd64 || purego

package kernels

import "errors"

// EmulatedBF16 returns nil: only the avx512 set has bfloat16 kernels to
// emulate (see the amd64 build).
func EmulatedBF16() *Set { return nil }

// EmulatedAMX returns nil: only the avx512 set has AMX kernels to emulate
// (see the amd64 build).
func EmulatedAMX() *Set { return nil }

// GoTiles returns nil: GemmAMX's blocks exist in amd64 builds only.
func GoTiles() *Set { return nil }

// GoPairs returns nil, as GoTiles does.
func GoPairs() *Set { return nil }

// AMXInt8 returns nil: AMX-INT8's kernel exists in amd64 builds only.
func AMXInt8() *Set { return nil }

// AMXStatus says why no set runs AMX tiles in this build.
func AMXStatus() error { return errAMXBuild }

// AMXInt8Status says why no set runs ScoresQ8 on AMX-INT8 tiles in this
// build.
func AMXInt8Status() error { return errAMXBuild }

// errAMXBuild is AMXStatus and AMXInt8Status outside amd64 assembly builds.
var errAMXBuild = errors.New("AMX kernels exist in amd64 builds without the purego tag only")

// WithoutAMX returns ks: this build runs no AMX.
func (ks *Set) WithoutAMX() *Set { return ks }
