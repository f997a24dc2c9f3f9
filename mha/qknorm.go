package mha

import (
	"fmt"
	"math"
)

// qkNorm is a resolved RMSNorm of q or k (QK-norm): y = x / sqrt(mean(x²)
// + eps) · w, over each head's HeadDim values (w of HeadDim: Qwen3,
// Gemma 3) or over all heads of a token at once (w of heads·HeadDim: OLMo
// 2). A nil w is no norm.
type qkNorm struct {
	w       []float32
	eps     float32
	perHead bool
}

// newQKNorm checks the weights w of a norm over heads heads of dim.
func newQKNorm(name string, w []float32, heads, dim int, eps float32) (qkNorm, error) {
	switch len(w) {
	case 0:
		return qkNorm{}, nil
	case dim:
		return qkNorm{w: clone(w, dim), eps: eps, perHead: true}, nil
	case heads * dim:
		return qkNorm{w: clone(w, heads*dim), eps: eps}, nil
	}
	return qkNorm{}, fmt.Errorf("%w: %s has %d weights, want HeadDim = %d (per head) or %d (all heads)", ErrBuffer, name, len(w), dim, heads*dim)
}

// normEps resolves LayerConfig.NormEps.
func normEps(eps float32) (float32, error) {
	if eps == 0 {
		return 1e-6, nil
	}
	if !(eps > 0 && eps <= math.MaxFloat32) {
		return 0, fmt.Errorf("%w: NormEps = %v, must be 0 (1e-6) or finite and > 0", ErrOption, eps)
	}
	return eps, nil
}

// apply normalizes one token's heads rows of dim, x, in place.
func (n *qkNorm) apply(x []float32, heads, dim int) {
	if n.w == nil {
		return
	}
	if !n.perHead {
		n.scale(x[:heads*dim], n.w)
		return
	}
	for h := 0; h < heads; h++ {
		n.scale(x[h*dim:(h+1)*dim], n.w)
	}
}

// scale applies the norm to v with weights w (len(w) == len(v)). The sum
// of squares runs in float64, so it neither overflows nor loses the small
// terms.
func (n *qkNorm) scale(v, w []float32) {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	inv := float32(1 / math.Sqrt(ss/float64(len(v))+float64(n.eps)))
	w = w[:len(v)]
	for i, x := range v {
		v[i] = x * inv * w[i]
	}
}
