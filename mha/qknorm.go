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

// factor returns 1/sqrt(mean(v²) + eps). The sum of squares is float32,
// as HF transformers computes it (a head whose squares overflow float32
// comes out 0, there as here); four running sums keep the loop from
// waiting on one add chain.
func (n *qkNorm) factor(v []float32) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(v); i += 4 {
		x := v[i : i+4 : i+4]
		s0 += x[0] * x[0]
		s1 += x[1] * x[1]
		s2 += x[2] * x[2]
		s3 += x[3] * x[3]
	}
	for ; i < len(v); i++ {
		s0 += v[i] * v[i]
	}
	ss := (s0 + s1) + (s2 + s3)
	return float32(1 / math.Sqrt(float64(ss/float32(len(v)))+float64(n.eps)))
}

// transform applies the norm and then the rotation by the angles cs (nil:
// none) to one token's heads rows of dim, x, in place, in one pass per
// head: y = rotate((x·inv)·w).
func (n *qkNorm) transform(ro *rope, x []float32, heads, dim int, cs []float32) {
	inv := float32(1)
	if n.w != nil && !n.perHead {
		inv = n.factor(x[:heads*dim])
	}
	for h := 0; h < heads; h++ {
		v := x[h*dim : (h+1)*dim]
		var w []float32
		if n.w != nil {
			if n.perHead {
				w, inv = n.w, n.factor(v)
			} else {
				w = n.w[h*dim : (h+1)*dim]
			}
		}
		ro.apply(v, cs, inv, w)
	}
}
