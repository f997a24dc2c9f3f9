package fallback

import "math"

// The generic micro-kernels: the portable path, and the twins whose loops
// the doc comments of the assembly declarations repeat. Their contract is
// kernels.Set's; the kernels package checks slice lengths before calling.

// Gemm multiplies row-major matrices, adding to C or overwriting it:
//
//	c[i*ldc+j] = (accumulate ? c[i*ldc+j] : 0) + Σ_{p<k} a[i*lda+p] · b[p*ldb+j]   for i < m, j < n
func Gemm(c []float32, ldc int, a []float32, lda int, b []float32, ldb int, m, n, k int, accumulate bool) {
	for i := 0; i < m; i++ {
		ci := c[i*ldc : i*ldc+n]
		if !accumulate {
			clear(ci)
		}
		for p, av := range a[i*lda : i*lda+k] {
			for j, bv := range b[p*ldb : p*ldb+n] {
				ci[j] += av * bv
			}
		}
	}
}

// Softmax applies one online-softmax step to a transposed tile of nk keys
// by rows, overwriting the scores with the weights P:
//
//	x[c]     = softcap(s[c*lds+r])            (when softcap > 0; -Inf stays)
//	mNew, base = stepMax(m[r], max_c x[c])    (the one NaN and -Inf rule, shared with Decode)
//	s[c*lds+r] = WeightExp32(x[c] - base)     (the weights' exp, see there)
//	alpha[r] = WeightExp32(m[r] - base)       (the rescale of O and l)
//	l[r]     = l[r]·alpha[r] + Σ_c s[c*lds+r];  m[r] = mNew
func Softmax(s []float32, lds int, m, l, alpha []float32, nk, rows int, softcap float32) {
	for r := 0; r < rows; r++ {
		blockMax := float32(math.Inf(-1))
		for c := 0; c < nk; c++ {
			x := s[c*lds+r]
			if softcap > 0 {
				x = Softcap32(x, softcap)
				s[c*lds+r] = x
			}
			blockMax = max32(blockMax, x)
		}
		mNew, base := stepMax(m[r], blockMax)
		sum := float32(0)
		for c := 0; c < nk; c++ {
			p := WeightExp32(s[c*lds+r] - base)
			s[c*lds+r] = p
			sum += p
		}
		a := WeightExp32(m[r] - base)
		alpha[r] = a
		l[r] = l[r]*a + sum
		m[r] = mNew
	}
}

// PV rescales an output tile and adds weights times values:
//
//	o[r*ldo+j] = alpha[r]·o[r*ldo+j] + Σ_{c<nk} p[c*ldp+r] · v[c*ldv+j]   for r < rows, j < dv
//
// A nil alpha means 1 (plain accumulation).
func PV(o []float32, ldo int, p []float32, ldp int, v []float32, ldv int, alpha []float32, rows, nk, dv int) {
	for r := 0; r < rows; r++ {
		or := o[r*ldo : r*ldo+dv]
		if alpha != nil {
			a := alpha[r]
			for j := range or {
				or[j] *= a
			}
		}
		for c := 0; c < nk; c++ {
			pv := p[c*ldp+r]
			vc := v[c*ldv : c*ldv+dv]
			for j, x := range vc {
				or[j] += pv * x
			}
		}
	}
}

// ExpSlice writes Exp32(src[i]) to dst[i] for i < len(dst).
func ExpSlice(dst, src []float32) {
	src = src[:len(dst)]
	for i, x := range src {
		dst[i] = Exp32(x)
	}
}

// TransposeScale writes a scaled transpose:
//
//	dst[c*ldd+r] = scale · src[r*lds+c]   for r < nr, c < nc
func TransposeScale(dst []float32, ldd int, src []float32, lds int, nr, nc int, scale float32) {
	for r := 0; r < nr; r++ {
		for c, x := range src[r*lds : r*lds+nc] {
			dst[c*ldd+r] = scale * x
		}
	}
}

// Transpose32 writes a transpose of 4-byte elements, bit for bit:
//
//	dst[c*ldd+r] = src[r*lds+c]   for r < nr, c < nc
func Transpose32(dst []uint32, ldd int, src []uint32, lds int, nr, nc int) {
	for r := 0; r < nr; r++ {
		for c, x := range src[r*lds : r*lds+nc] {
			dst[c*ldd+r] = x
		}
	}
}

// ScaleColumns scales each column of a row-major matrix by its factor:
//
//	x[i*ldx+r] *= f[r]   for i < n, r < rows
//
// On a transposed output accumulator (Oᵀ: [dv][rows]) it is the flash
// loop's rescale of every row's output by its alpha.
func ScaleColumns(x []float32, ldx int, f []float32, rows, n int) {
	f = f[:rows]
	for i := 0; i < n; i++ {
		xi := x[i*ldx:][:rows]
		for r, a := range f {
			xi[r] *= a
		}
	}
}

// ScoreBias adds ALiBi terms (per row) and a bias (per key) to a
// transposed score tile:
//
//	s[c*lds+r] += slope[r]·(dist[r] + c) + bias[c]   for c < nk, r < rows
//
// dist[r] is the signed distance from row r's query position to the
// tile's first key; slope and dist are both nil (no ALiBi term), bias nil
// (no key term). The product and the bias are added as one fused step
// (fma(slope, dist + c, bias)), then to the score.
func ScoreBias(s []float32, lds int, slope, dist, bias []float32, nk, rows int) {
	for c := 0; c < nk; c++ {
		b := float32(0)
		if bias != nil {
			b = bias[c]
		}
		sc := s[c*lds : c*lds+rows]
		if slope == nil {
			for r := range sc {
				sc[r] += b
			}
			continue
		}
		fc := float32(c)
		for r := range sc {
			sc[r] += float32(math.FMA(float64(slope[r]), float64(dist[r]+fc), float64(b)))
		}
	}
}
