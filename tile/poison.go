package tile

import "github.com/fastattn/fastattn/fallback"

// A masked key must contribute nothing to a row, whatever K and V hold
// there. Its weight is exactly 0 (exp(-Inf)), but the PV kernel still
// multiplies that 0 into the key's value row, and 0·NaN and 0·Inf are NaN.
// So in the blocks that mask (edges, bias), a key that some row does not
// see and whose value row is not finite is "poisoned": PV runs on the keys
// around it, and the poisoned key is added by hand to the rows that see it
// (where its NaN or Inf belongs).

// poisoned reports whether a value row of the block (nk rows of ValueDim
// at stride ldv in v) holds a NaN or an Inf. It runs the PV kernel on
// one row of zero weights: the result is 0 where every value is finite and
// NaN where one is not (0·Inf and 0·NaN are NaN), at the kernel's speed —
// a fraction of the block's own PV — instead of a scalar scan.
func (r *itemRun) poisoned(v []float32, ldv, nk int) bool {
	dv := r.p.ValueDim
	probe := r.ws.probe[:dv]
	clear(probe)
	r.ks.PV(probe, dv, r.ws.zeros[:nk], 1, v, ldv, nil, 1, nk, dv)
	for _, x := range probe {
		if x != 0 {
			return true
		}
	}
	return false
}

// pvPoisoned is the PV update of rows [r0, r1) of a block with poisoned
// keys: the kernel on each run of clean keys (the first run applies the
// rescale alpha), and each poisoned key added to the rows that see it.
func (r *itemRun) pvPoisoned(kb, nk, r0, r1 int, v []float32, ldv int) {
	ks, p, it, ws, rp := r.ks, r.p, r.it, r.ws, r.rp
	dv := p.ValueDim
	s, o := ws.s, ws.o
	alpha := ws.al[r0:]
	from := 0
	run := func(to int) { // keys [from, to) through the kernel
		if to > from {
			ks.PV(o[r0*dv:], dv, s[from*rp+r0:], rp, v[from*ldv:], ldv, alpha, r1-r0, to-from, dv)
			alpha = nil
		} else if alpha != nil {
			ks.PV(o[r0*dv:], dv, nil, 0, nil, 0, alpha, r1-r0, 0, dv)
			alpha = nil
		}
	}
	for c := 0; c < nk; c++ {
		vc := v[c*ldv:][:dv]
		if !ws.masked[c] || fallback.NonFinite(vc) < 0 {
			continue
		}
		run(c)
		for row := r0; row < r1; row++ {
			hh, ii := row/it.nq, row%it.nq
			if !p.visible(it.b, it.h0+hh, it.i0+ii, kb+c) {
				continue
			}
			w, or := s[c*rp+row], o[row*dv:(row+1)*dv]
			for j, x := range vc {
				or[j] += w * x
			}
		}
		from = c + 1
	}
	run(nk)
}
