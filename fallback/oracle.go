// Package fallback is fastattn's pure Go: the float64 reference that defines
// the semantics (the oracle every other path is tested against) and the
// generic micro-kernels that run where no assembly does.
package fallback

import "math"

// Spec describes one attention problem for the oracle, with every default
// already resolved: nothing in it is optional except where it says so.
type Spec struct {
	Batch, Heads, KVHeads int  // B, H, Hkv; H % Hkv == 0
	QLen, KVLen           int  // Lq; Lk is the stored key length (the stride of K and V)
	HeadDim, ValueDim     int  // Dk (Q and K), Dv (V and the output)
	HeadsMajor            bool // BHSD when true, BSHD when false

	Scale   float64 // multiplies q·k
	Softcap float64 // s = c·tanh(s/c) when > 0

	Causal    bool
	OffsetSet bool // when false the causal offset is KVLens[b] - QLen (bottom-right)
	Offset    int  // the causal offset when OffsetSet
	Window    int  // sliding window (with Causal): key j needs j > i + off - Window; 0 = off

	KVLens []int // valid keys per batch; nil means KVLen for every batch

	Bias                 []float32 // additive, [BiasBatch][BiasHeads][QLen][KVLen]; nil = none
	BiasBatch, BiasHeads int       // 1 (broadcast) or Batch / Heads
}

// index returns the offset of row (b, s, h) of a tensor with n heads and
// seqLen positions in the layout of sp, in units of rows of width dim.
func (sp *Spec) index(b, s, h, n, seqLen, dim int) int {
	if sp.HeadsMajor {
		return ((b*n+h)*seqLen + s) * dim
	}
	return ((b*seqLen+s)*n + h) * dim
}

// Visible reports whether query row i of batch b may see key j under the
// causal, window and key-length rules of sp (bias is not a rule here).
func (sp *Spec) Visible(b, i, j int) bool {
	lk := sp.KVLen
	if sp.KVLens != nil {
		lk = sp.KVLens[b]
	}
	if j >= lk {
		return false
	}
	if !sp.Causal {
		return true
	}
	off := lk - sp.QLen
	if sp.OffsetSet {
		off = sp.Offset
	}
	if j > i+off {
		return false
	}
	return sp.Window <= 0 || j > i+off-sp.Window
}

// Attention computes attention in float64, straight from the definition, and
// returns the output in the layout of sp ([B][Lq][H][Dv] or [B][H][Lq][Dv])
// and the log-sum-exp [B][H][Lq]. A row that sees no key gets zeros and an
// LSE of -Inf.
func Attention(sp Spec, q, k, v []float32) (out, lse []float64) {
	B, H, Lq, Lk := sp.Batch, sp.Heads, sp.QLen, sp.KVLen
	Dk, Dv := sp.HeadDim, sp.ValueDim
	group := H / sp.KVHeads
	out = make([]float64, B*Lq*H*Dv)
	lse = make([]float64, B*H*Lq)
	scores := make([]float64, Lk)
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			g := h / group
			for i := 0; i < Lq; i++ {
				qi := q[sp.index(b, i, h, H, Lq, Dk):][:Dk]
				maxScore := math.Inf(-1)
				for j := 0; j < Lk; j++ {
					scores[j] = math.Inf(-1)
					if !sp.Visible(b, i, j) {
						continue
					}
					kj := k[sp.index(b, j, g, sp.KVHeads, Lk, Dk):][:Dk]
					dot := 0.0
					for d := range qi {
						dot += float64(qi[d]) * float64(kj[d])
					}
					s := sp.Scale * dot
					if sp.Softcap > 0 {
						s = sp.Softcap * math.Tanh(s/sp.Softcap)
					}
					if sp.Bias != nil {
						bb, bh := b%sp.BiasBatch, h%sp.BiasHeads
						s += float64(sp.Bias[((bb*sp.BiasHeads+bh)*Lq+i)*Lk+j])
					}
					scores[j] = s
					maxScore = math.Max(maxScore, s)
				}
				o := out[sp.index(b, i, h, H, Lq, Dv):][:Dv]
				if math.IsInf(maxScore, -1) {
					lse[(b*H+h)*Lq+i] = math.Inf(-1)
					continue // sees no key: zeros
				}
				sum := 0.0
				for j := 0; j < Lk; j++ {
					if math.IsInf(scores[j], -1) {
						continue
					}
					p := math.Exp(scores[j] - maxScore)
					sum += p
					vj := v[sp.index(b, j, g, sp.KVHeads, Lk, Dv):][:Dv]
					for d := range o {
						o[d] += p * float64(vj[d])
					}
				}
				for d := range o {
					o[d] /= sum
				}
				lse[(b*H+h)*Lq+i] = maxScore + math.Log(sum)
			}
		}
	}
	return out, lse
}

// Linear computes y = x·w + bias in float64: x is [m][n_in], w is [n_in][n_out]
// (the stored [in][out] layout of the MHA weights), bias is [n_out] or nil.
func Linear(x, w, bias []float32, m, nIn, nOut int) []float64 {
	y := make([]float64, m*nOut)
	for i := 0; i < m; i++ {
		row := y[i*nOut : (i+1)*nOut]
		for j := range row {
			if bias != nil {
				row[j] = float64(bias[j])
			}
		}
		for p := 0; p < nIn; p++ {
			xv := float64(x[i*nIn+p])
			wr := w[p*nOut : (p+1)*nOut]
			for j := range row {
				row[j] += xv * float64(wr[j])
			}
		}
	}
	return y
}
