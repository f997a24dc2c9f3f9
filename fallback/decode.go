package fallback

import "math"

// DecodeRows is the most query rows one Decode call takes: a decode step's
// rows of one KV head (query heads of the group × new positions).
const DecodeRows = 16

// DecodeKeys is the key block of the generic Decode.
const DecodeKeys = 16

// DecodeScratch is the length of the buf Decode needs.
func DecodeScratch(dk, dv int) int { return DecodeKeys + dk + dv }

// Decode is the fused flash loop of a decode step: rows query rows
// (q: [rows][dk], row-major, pre-scaled) over nk keys that every row
// sees, K and V read once, in blocks of DecodeKeys keys. For each block
// and row r:
//
//	s[c]  = q_r · k_c  (+ alibi[r]·(alibi[rows+r] + c0 + c), if alibi != nil)
//	mNew, base = stepMax(m[r], max_c s[c])   (Softmax's rule)
//	p[c]  = WeightExp32(s[c] - base); alpha = WeightExp32(m[r] - base)
//	l[r]  = l[r]·alpha + Σ_c p[c];  m[r] = mNew
//	o[r][:] = alpha·o[r][:] + Σ_c p[c]·v_c[:dv]
//
// o is [rows][dv]; m and l hold the running state of Softmax. buf holds
// DecodeScratch(dk, dv) floats (the weights of a block and one widened K
// and V row). alibi is nil or the rows' ALiBi slopes followed by their
// distances to key 0 (integers); the term is rounded once, then added,
// as in ScoreBias.
func Decode(q []float32, rows, dk int, k, v KVRows, nk, dv int, o, m, l, buf, alibi []float32) {
	p, kb, vb := buf[:DecodeKeys], buf[DecodeKeys:DecodeKeys+dk], buf[DecodeKeys+dk:][:dv]
	for c0 := 0; c0 < nk; c0 += DecodeKeys {
		n := min(DecodeKeys, nk-c0)
		for r := 0; r < rows; r++ {
			qr := q[r*dk : (r+1)*dk]
			blockMax := float32(math.Inf(-1))
			for c := 0; c < n; c++ {
				kc := k.Row(c0+c, dk, kb)
				sum := float32(0)
				for d, x := range kc {
					sum += x * qr[d]
				}
				if alibi != nil {
					sum += float32(alibi[r] * (alibi[rows+r] + float32(c0+c)))
				}
				p[c] = sum
				blockMax = max32(blockMax, sum)
			}
			mNew, base := stepMax(m[r], blockMax)
			sum := float32(0)
			for c := 0; c < n; c++ {
				p[c] = WeightExp32(p[c] - base)
				sum += p[c]
			}
			alpha := WeightExp32(m[r] - base)
			l[r] = l[r]*alpha + sum
			m[r] = mNew
			or := o[r*dv : (r+1)*dv]
			for j := range or {
				or[j] *= alpha
			}
			for c := 0; c < n; c++ {
				pc := p[c]
				for j, x := range v.Row(c0+c, dv, vb) {
					or[j] += pc * x
				}
			}
		}
	}
}

// max32 is max with a NaN in either argument giving NaN.
func max32(a, b float32) float32 {
	if a != a || b != b {
		return float32(math.NaN())
	}
	return max(a, b)
}

// stepMax is the online softmax's one rule for a block of scores whose
// largest is blockMax, seen by a row whose running max is m: the new
// running max mNew (NaN when either is NaN, so a NaN score poisons the
// row's sum and output rather than being skipped), and the base the
// block's exponentials subtract: mNew, or -MaxFloat32 while no finite
// score has been seen (mNew = -Inf), so that a masked score gives
// exp(-Inf) = 0 instead of exp(-Inf - -Inf) = NaN.
func stepMax(m, blockMax float32) (mNew, base float32) {
	mNew = max32(m, blockMax)
	base = mNew
	if !(base >= -math.MaxFloat32) { // -Inf; a NaN stays NaN
		base = -math.MaxFloat32
	}
	return mNew, base
}
