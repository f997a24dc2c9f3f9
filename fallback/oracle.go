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

// Index returns the offset of row (b, s, h) of a tensor with n heads and
// seqLen positions in the layout of sp, in units of rows of width dim.
func (sp *Spec) Index(b, s, h, n, seqLen, dim int) int {
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
// and the log-sum-exp [B][H][Lq].
//
// It defines what every path computes, non-finite values included:
//   - A key a row does not see (causal, window, key length, a -Inf bias
//     entry) contributes nothing, whatever its K and V hold.
//   - A score is Scale·(q·k) as float32 holds it: beyond ±MaxFloat32 it is
//     ±Inf. Softcap maps it (+Inf to +Softcap) but keeps -Inf; then the
//     bias is added.
//   - A visible score that is NaN or +Inf makes the row's output and LSE
//     NaN. A visible score of -Inf weighs 0 (exp(-Inf)), and its value row
//     is still multiplied by that 0, so a NaN there reaches the output as it
//     does for any visible key.
//   - A row that sees keys whose scores are all -Inf is NaN (the result
//     depends on values float32 lost); a row that sees no key gets zeros and
//     an LSE of -Inf.
func Attention(sp Spec, q, k, v []float32) (out, lse []float64) {
	B, H, Lq, Lk := sp.Batch, sp.Heads, sp.QLen, sp.KVLen
	Dk, Dv := sp.HeadDim, sp.ValueDim
	group := H / sp.KVHeads
	out = make([]float64, B*Lq*H*Dv)
	lse = make([]float64, B*H*Lq)
	scores := make([]float64, Lk)
	seen := make([]bool, Lk)
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			g := h / group
			for i := 0; i < Lq; i++ {
				qi := q[sp.Index(b, i, h, H, Lq, Dk):][:Dk]
				o := out[sp.Index(b, i, h, H, Lq, Dv):][:Dv]
				at := (b*H+h)*Lq + i
				maxScore, nan, any := math.Inf(-1), false, false
				for j := 0; j < Lk; j++ {
					seen[j] = false
					if !sp.Visible(b, i, j) {
						continue
					}
					s := sp.score(qi, k[sp.Index(b, j, g, sp.KVHeads, Lk, Dk):][:Dk])
					if sp.Bias != nil {
						bb, bh := b%sp.BiasBatch, h%sp.BiasHeads
						x := float64(sp.Bias[((bb*sp.BiasHeads+bh)*Lq+i)*Lk+j])
						if math.IsInf(x, -1) {
							continue // masked by the bias
						}
						s += x
					}
					seen[j], scores[j], any = true, s, true
					nan = nan || math.IsNaN(s) || math.IsInf(s, 1)
					maxScore = math.Max(maxScore, s)
				}
				switch {
				case !any: // sees no key: zeros
					lse[at] = math.Inf(-1)
					continue
				case nan || math.IsInf(maxScore, -1):
					for d := range o {
						o[d] = math.NaN()
					}
					lse[at] = math.NaN()
					continue
				}
				sum := 0.0
				for j := 0; j < Lk; j++ {
					if !seen[j] {
						continue
					}
					p := math.Exp(scores[j] - maxScore)
					sum += p
					vj := v[sp.Index(b, j, g, sp.KVHeads, Lk, Dv):][:Dv]
					for d := range o {
						o[d] += p * float64(vj[d])
					}
				}
				for d := range o {
					o[d] /= sum
				}
				lse[at] = maxScore + math.Log(sum)
			}
		}
	}
	return out, lse
}

// score returns the softcapped score of query row qi and key row kj: the
// dot product times Scale, at the float32 range (±Inf beyond it), then
// Softcap·tanh(s/Softcap), which keeps -Inf.
func (sp *Spec) score(qi, kj []float32) float64 {
	dot := 0.0
	for d := range qi {
		dot += float64(qi[d]) * float64(kj[d])
	}
	s := sp.Scale * dot
	if math.Abs(s) > math.MaxFloat32 {
		s = math.Inf(int(math.Copysign(1, s)))
	}
	if sp.Softcap > 0 && !math.IsInf(s, -1) {
		s = sp.Softcap * math.Tanh(s/sp.Softcap)
	}
	return s
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
