package fallback

// HeadScores is the scores of a decode step of one query row per head over
// K rows whose heads lie side by side in each key's row (BSHD):
//
//	s[j*lds+h] = Σ_{d<dk} q[h*dk+d] · k(j, h*dk+d)   for j < nk, h < heads
//
// with k(j, c) element c of key j's row (k.Ld apart) as float32: float32,
// float16 and bfloat16 rows widened, int8 rows (head dims whole blocks of
// 32) times their block's scale.
func HeadScores(s []float32, lds int, q []float32, k KVRows, nk, heads, dk int) {
	for j := 0; j < nk; j++ {
		for h := 0; h < heads; h++ {
			var acc float32
			for d, x := range q[h*dk : (h+1)*dk] {
				acc += x * k.at(j, h*dk+d)
			}
			s[j*lds+h] = acc
		}
	}
}

// HeadPV is the PV of a decode step of one query row per head over V rows
// whose heads lie side by side in each key's row (BSHD), after the online
// softmax's rescale:
//
//	o[h*ldo+d] = alpha[h]·o[h*ldo+d] + Σ_{j<nk} p[j*ldp+h] · v(j, h*dv+d)
//
// for h < heads, d < dv, the sum in key order.
func HeadPV(o []float32, ldo int, p []float32, ldp int, v KVRows, alpha []float32, nk, heads, dv int) {
	for h := 0; h < heads; h++ {
		for d := range o[h*ldo : h*ldo+dv] {
			o[h*ldo+d] *= alpha[h]
		}
	}
	for j := 0; j < nk; j++ {
		for h := 0; h < heads; h++ {
			w := p[j*ldp+h]
			for d := range o[h*ldo : h*ldo+dv] {
				o[h*ldo+d] += w * v.at(j, h*dv+d)
			}
		}
	}
}

// at returns element c of row j of r (float32, float16, bfloat16, or int8
// times its block's scale) as float32.
func (r KVRows) at(j, c int) float32 {
	switch r.Type {
	case KVFloat32:
		return r.F32[j*r.Ld+c]
	case KVInt8:
		return float32(r.I8[j*r.Ld+c]) * r.S[j*r.LdS+c/Int8Block]
	case KVBFloat16:
		return BF16ToF32(r.U16[j*r.Ld+c])
	default:
		return F16ToF32(r.U16[j*r.Ld+c])
	}
}
