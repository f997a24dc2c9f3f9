// Package fallback is fastattn's pure Go: the float64 reference that defines
// the semantics (the oracle every other path is tested against) and the
// generic micro-kernels that run where no assembly does.
//
// This package is fastattn's machinery, not its API: its exported names
// carry no compatibility promise and change whenever the kernels do.
// Programs use package mha, which exposes none of its types.
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
	OffsetSet bool // when false the offset is KVLens[b] - QLen (bottom-right)
	Offset    int  // the offset when OffsetSet: query row i is at key position i + off
	// Window, when > 0, keeps key j only if j > i + off - Window and, without
	// Causal, also j < i + off + Window (bidirectional local attention).
	Window int

	KVLens []int // valid keys per batch; nil means KVLen for every batch

	// Bias is added to the scores, [BiasBatch][BiasHeads][BiasQLen][KVLen],
	// broadcast over each dimension that is 1; nil = none.
	Bias                           []float32
	BiasBatch, BiasHeads, BiasQLen int // 1 or Batch / Heads / QLen; BiasQLen 0 means QLen

	// Mask keeps key j for row (b, h, i) where true,
	// [MaskBatch][MaskHeads][MaskQLen][KVLen] broadcast like Bias; nil = none.
	Mask                           []bool
	MaskBatch, MaskHeads, MaskQLen int // 1 or Batch / Heads / QLen; MaskQLen 0 means QLen

	// Slopes, when not nil, are the ALiBi slopes of the query heads: score
	// (b, h, i, j) gains Slopes[h]·(j - (i + off)).
	Slopes []float32
	// Sinks, when not nil, are one logit per query head that joins every
	// softmax denominator of the head with a value of zero.
	Sinks []float32
}

// Broadcast returns the index of entry (b, h, i, j) of a tensor of
// [nb][nh][nq][lk] that broadcasts over each of nb, nh, nq that is 1.
func Broadcast(b, h, i, j, nb, nh, nq, lk int) int {
	return ((b%nb*nh+h%nh)*nq+i%nq)*lk + j
}

// Filtered reports whether the bias entry of query head h, row i, key j of
// batch b is -Inf or its mask entry false: the key is masked for that row.
func (sp *Spec) Filtered(b, h, i, j int) bool {
	if sp.Mask != nil && !sp.Mask[Broadcast(b, h, i, j, sp.MaskBatch, sp.MaskHeads, orAll(sp.MaskQLen, sp.QLen), sp.KVLen)] {
		return true
	}
	return sp.Bias != nil && math.IsInf(float64(sp.Bias[Broadcast(b, h, i, j, sp.BiasBatch, sp.BiasHeads, orAll(sp.BiasQLen, sp.QLen), sp.KVLen)]), -1)
}

// offset returns the position offset of batch b: query row i stands at
// key position i + off.
func (sp *Spec) offset(b int) int {
	if sp.OffsetSet {
		return sp.Offset
	}
	return sp.keyLen(b) - sp.QLen
}

// keyLen returns the valid keys of batch b.
func (sp *Spec) keyLen(b int) int {
	if sp.KVLens != nil {
		return sp.KVLens[b]
	}
	return sp.KVLen
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
// causal, window and key-length rules of sp (bias and mask are not rules
// here).
func (sp *Spec) Visible(b, i, j int) bool {
	if j >= sp.keyLen(b) {
		return false
	}
	at := i + sp.offset(b)
	if sp.Causal && j > at {
		return false
	}
	return sp.Window <= 0 || (j > at-sp.Window && j < at+sp.Window)
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
//   - A sink is one more key of the softmax, with the sink as its score and a
//     value of zero: it scales the output by sum/(sum + e^sink) and the LSE
//     becomes ln(e^LSE + e^sink) (the sink itself for a row that sees no
//     key; its output stays zeros).
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
					if sp.Filtered(b, h, i, j) {
						continue // masked by the bias or the mask
					}
					s := sp.score(qi, k[sp.Index(b, j, g, sp.KVHeads, Lk, Dk):][:Dk])
					if sp.Bias != nil {
						s += float64(sp.Bias[Broadcast(b, h, i, j, sp.BiasBatch, sp.BiasHeads, orAll(sp.BiasQLen, Lq), Lk)])
					}
					if sp.Slopes != nil {
						s += float64(sp.Slopes[h]) * float64(j-(i+sp.offset(b)))
					}
					seen[j], scores[j], any = true, s, true
					nan = nan || math.IsNaN(s) || math.IsInf(s, 1)
					maxScore = math.Max(maxScore, s)
				}
				switch {
				case !any: // sees no key: zeros
					lse[at] = math.Inf(-1)
					if sp.Sinks != nil {
						lse[at] = float64(sp.Sinks[h])
					}
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
				lse[at] = maxScore + math.Log(sum)
				scale := 1 / sum
				if sp.Sinks != nil { // the denominator grows from e^lse to e^lse + e^sink
					withSink := LogAddExp(lse[at], float64(sp.Sinks[h]))
					scale *= math.Exp(lse[at] - withSink)
					lse[at] = withSink
				}
				for d := range o {
					o[d] *= scale
				}
			}
		}
	}
	return out, lse
}

// LogAddExp returns ln(e^a + e^b) without overflow (a, b not NaN, not
// both +Inf).
func LogAddExp(a, b float64) float64 {
	hi, lo := math.Max(a, b), math.Min(a, b)
	if math.IsInf(lo, -1) {
		return hi
	}
	return hi + math.Log1p(math.Exp(lo-hi))
}

// orAll returns n, or all when n is 0.
func orAll(n, all int) int {
	if n == 0 {
		return all
	}
	return n
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
