package mha

import (
	"math"
	"math/rand/v2"
	"testing"
)

// optionSet is a named set of options; the bias and key lengths are built
// for the shape at hand.
type optionSet struct {
	causal, window, softcap, scale, kvlens, bias, offset, lse bool
	bidir, mask, alibi, sinks                                 bool
}

func (f optionSet) build(rng *rand.Rand, s Shape) Options {
	s, _ = s.resolve()
	var o Options
	o.Causal = f.causal || (f.window && !f.bidir) || f.offset
	if f.window || f.bidir {
		o.Window = 1 + rng.IntN(s.KVLen+1)
	}
	if f.softcap {
		o.Softcap = 0.5 + 2*rng.Float32()
	}
	if f.scale {
		o.Scale = 0.05 + rng.Float32()
	}
	if f.offset {
		off := rng.IntN(s.KVLen+s.QLen+1) - s.QLen/2 - 1 // negative too
		o.QueryOffset = &off
	}
	if f.kvlens {
		o.KVLens = make([]int, s.Batch)
		for b := range o.KVLens {
			o.KVLens[b] = rng.IntN(s.KVLen + 1) // 0 too: no key at all
		}
	}
	// A broadcast size: 1, full, or (for query rows) 0 meaning full.
	pick := func(full int, zeroFull bool) (set, n int) {
		switch rng.IntN(3) {
		case 0:
			return 1, 1
		case 1:
			if zeroFull {
				return 0, full
			}
		}
		return full, full
	}
	if f.bias {
		var nb, nh, nq int
		o.BiasBatch, nb = pick(s.Batch, false)
		o.BiasHeads, nh = pick(s.Heads, false)
		o.BiasQLen, nq = pick(s.QLen, true)
		o.Bias = random(rng, nb*nh*nq*s.KVLen)
		for i := range o.Bias {
			o.Bias[i] *= 4
			if rng.IntN(10) == 0 {
				o.Bias[i] = float32(math.Inf(-1))
			}
		}
	}
	if f.mask {
		var nb, nh, nq int
		o.MaskBatch, nb = pick(s.Batch, false)
		o.MaskHeads, nh = pick(s.Heads, false)
		o.MaskQLen, nq = pick(s.QLen, true)
		o.Mask = make([]bool, nb*nh*nq*s.KVLen)
		pad := rng.IntN(2) == 0 // key padding: a masked tail per row
		for r := 0; r < nb*nh*nq; r++ {
			keep := rng.IntN(s.KVLen + 1)
			for j := range s.KVLen {
				if pad {
					o.Mask[r*s.KVLen+j] = j < keep
				} else {
					o.Mask[r*s.KVLen+j] = rng.IntN(5) != 0
				}
			}
		}
	}
	if f.alibi {
		// Negative slopes too. |slope·distance| stays below 16 so that no
		// weight underflows float32 (a ±Inf value under an underflowed
		// weight is NaN, not ±Inf: see the package doc); TestALiBiFar
		// covers large distances.
		o.ALiBi = make([]float32, s.Heads)
		for h := range o.ALiBi {
			o.ALiBi[h] = (rng.Float32() - 0.2) * 16 / float32(s.KVLen+s.QLen)
		}
	}
	if f.sinks {
		o.Sinks = make([]float32, s.Heads)
		for h := range o.Sinks {
			o.Sinks[h] = 6*rng.Float32() - 3
		}
	}
	return o
}

// randomOptions picks each option with probability 1/3.
func randomOptions(rng *rand.Rand) optionSet {
	p := func() bool { return rng.IntN(3) == 0 }
	return optionSet{causal: p(), window: p(), softcap: p(), scale: p(), kvlens: p(), bias: p(), offset: p(),
		bidir: p(), mask: p(), alibi: p(), sinks: p()}
}

// randomShape returns a shape with the given head dim and lengths and
// random batch, heads (MHA, GQA or MQA), value dim and layout.
func randomShape(rng *rand.Rand, dk, lq, lk int) Shape {
	hkv := 1 + rng.IntN(2)
	group := []int{1, 2, 3}[rng.IntN(3)]
	dv := dk
	if rng.IntN(2) == 0 {
		dv = 1 + rng.IntN(40)
	}
	return Shape{Batch: 1 + rng.IntN(2), Heads: hkv * group, KVHeads: hkv, QLen: lq, KVLen: lk,
		HeadDim: dk, ValueDim: dv, Layout: Layout(rng.IntN(2))}
}

// TestHeadDims covers every head dim 1..130 (every vector tail) with random
// lengths and options.
func TestHeadDims(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for dk := 1; dk <= 130; dk++ {
		s := randomShape(rng, dk, 1+rng.IntN(24), 1+rng.IntN(70))
		checkCase(t, rng, s, randomOptions(rng).build(rng, s))
	}
}

// TestLengths covers query and key lengths 1..300 (every block tail), with
// Lq = 1 (decode) and Lq != Lk.
func TestLengths(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	lengths := []int{1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 95, 127, 128, 129, 191, 255, 256, 257, 300}
	if !longTests() {
		lengths = lengths[:len(lengths)/2]
	}
	for _, lq := range lengths {
		for _, lk := range []int{1, lq, 1 + rng.IntN(300), 300} {
			dk := []int{4, 8, 13, 16, 32}[rng.IntN(5)]
			s := randomShape(rng, dk, lq, lk)
			checkCase(t, rng, s, randomOptions(rng).build(rng, s))
		}
		s := randomShape(rng, 16, 1, lq) // decode against lq keys
		checkCase(t, rng, s, randomOptions(rng).build(rng, s))
	}
}

// TestOptions checks each option alone and combinations, in both layouts,
// with MHA, GQA and MQA.
func TestOptions(t *testing.T) {
	t.Parallel() // a sweep against the oracle: runs beside the other sweeps, after the sequential tests
	rng := rand.New(rand.NewPCG(5, 6))
	sets := map[string]optionSet{
		"none":    {},
		"causal":  {causal: true},
		"window":  {window: true},
		"offset":  {offset: true},
		"softcap": {softcap: true},
		"scale":   {scale: true},
		"kvlens":  {kvlens: true},
		"bias":    {bias: true},
		"all": {causal: true, window: true, offset: true, softcap: true, scale: true, kvlens: true, bias: true,
			mask: true, alibi: true, sinks: true},
		"decode":    {causal: true, kvlens: true, softcap: true},
		"sc+bias":   {softcap: true, bias: true, causal: true},
		"bidir":     {window: true, bidir: true},
		"bidir+off": {window: true, bidir: true, offset: true, kvlens: true},
		"mask":      {mask: true},
		"mask+bias": {mask: true, bias: true, causal: true},
		"alibi":     {alibi: true, causal: true},
		"alibi+all": {alibi: true, bidir: true, window: true, softcap: true, bias: true, kvlens: true, sinks: true},
		"sinks":     {sinks: true},
		"sinks+c":   {sinks: true, causal: true, kvlens: true},
	}
	heads := []struct{ h, hkv int }{{4, 4}, {4, 2}, {6, 1}}
	for name, f := range sets {
		for hi, hh := range heads {
			for _, layout := range []Layout{BSHD, BHSD} {
				for li, l := range []struct{ lq, lk int }{{37, 37}, {5, 150}, {150, 70}, {1, 200}} {
					if !longTests() && (hi+li+int(layout))%2 != 0 {
						continue // half the cases: every head grouping, layout and length still
					}
					s := Shape{Batch: 2, Heads: hh.h, KVHeads: hh.hkv, QLen: l.lq, KVLen: l.lk,
						HeadDim: 24, ValueDim: 20, Layout: layout}
					t.Run(name, func(t *testing.T) { checkCase(t, rng, s, f.build(rng, s)) })
				}
			}
		}
	}
}

// TestAliasedStrides covers BSHD K/V whose rows are a multiple of 4 KiB
// apart (KVHeads·dim·4 bytes), where the flash loop of sets with narrow
// column panels copies each V block contiguous (tile.packsV), with edges,
// padding and every option.
func TestAliasedStrides(t *testing.T) {
	t.Parallel() // a sweep against the oracle: runs beside the other sweeps, after the sequential tests
	rng := rand.New(rand.NewPCG(11, 12))
	for ci, c := range []struct{ h, hkv, dk, dv int }{{8, 8, 64, 128}, {16, 8, 40, 128}, {16, 16, 64, 64}, {32, 16, 17, 64}} {
		for fi, f := range []optionSet{{}, {causal: true}, {causal: true, kvlens: true, alibi: true, sinks: true, bias: true}} {
			if !longTests() && (ci+fi)%2 != 0 {
				continue // half the cases: every shape and option set still
			}
			s := Shape{Batch: 1 + rng.IntN(2), Heads: c.h, KVHeads: c.hkv, QLen: 5 + rng.IntN(80), KVLen: 150 + rng.IntN(400),
				HeadDim: c.dk, ValueDim: c.dv}
			checkCase(t, rng, s, f.build(rng, s))
		}
	}
}

// TestNoKey: rows that see no key give zeros and LSE -Inf, never NaN.
func TestNoKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	s := Shape{Batch: 2, Heads: 2, QLen: 9, KVLen: 12, HeadDim: 8}
	off := -4 // rows 0..3 see nothing
	checkCase(t, rng, s, Options{Causal: true, QueryOffset: &off})
	checkCase(t, rng, s, Options{KVLens: []int{0, 5}})
	checkCase(t, rng, s, Options{Causal: true, KVLens: []int{3, 12}}) // bottom-right: early rows of batch 0 see nothing
	bias := make([]float32, 9*12)
	for i := range bias {
		bias[i] = float32(math.Inf(-1))
	}
	checkCase(t, rng, s, Options{Bias: bias})
}

// TestBigScores: large logits must not overflow the exp (the running max is
// subtracted) and softcap must bound them.
func TestBigScores(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	s := Shape{Batch: 1, Heads: 2, QLen: 20, KVLen: 90, HeadDim: 16}
	checkCase(t, rng, s, Options{Scale: 40})
	checkCase(t, rng, s, Options{Scale: 40, Softcap: 30, Causal: true})
}

func TestReportError(t *testing.T) {
	t.Logf("worst relative error vs float64 oracle so far: out %.3g, lse %.3g (tolerance %.0e)", worstOut, worstLSE, tolOut)
}
