package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fastattn/fastattn/mha"
)

// Case is one attention shape of the table.
type Case struct {
	B, H, Hkv, Lq, Lk, D int
	Dv                   int  // the value dim; 0 means D
	VInK                 bool // V is the first Dv elements of each K row (-vink)
	Causal               bool
	Layout               mha.Layout
	KV                   mha.DType   // storage of K and V
	Variant              variant     // semantics on top of the mask (variants.go)
	Compute              mha.Compute // the arithmetic of the products (-compute)
}

// String is the shape in the table's form: D=Dk, or D=Dk/Dv when they
// differ, then "+vink" with V inside K.
func (c Case) String() string {
	s := fmt.Sprintf("B=%d,H=%d,Hkv=%d,Lq=%d,Lk=%d,D=%s", c.B, c.H, c.Hkv, c.Lq, c.Lk, c.dims())
	if c.VInK {
		s += "+vink"
	}
	return s
}

// dims is "Dk", or "Dk/Dv" when they differ.
func (c Case) dims() string {
	if c.ValueDim() == c.D {
		return strconv.Itoa(c.D)
	}
	return fmt.Sprintf("%d/%d", c.D, c.ValueDim())
}

// ValueDim is Dv.
func (c Case) ValueDim() int {
	if c.Dv == 0 {
		return c.D
	}
	return c.Dv
}

// layoutName is a layout's name in the table and in flags.
func layoutName(l mha.Layout) string { return strings.ToLower(l.String()) }

// Path is the case in benchmark-name form, one key per path element so
// benchstat can group by any of them: B=1/H=16/L=1024/D=128 for
// self-attention shapes, with Hkv, Lq and Lk spelled out otherwise.
func (c Case) Path() string {
	if c.ValueDim() != c.D {
		return fmt.Sprintf("B=%d/H=%d/Hkv=%d/Lq=%d/Lk=%d/Dk=%d/Dv=%d", c.B, c.H, c.Hkv, c.Lq, c.Lk, c.D, c.ValueDim())
	}
	if c.Lq == c.Lk && c.H == c.Hkv {
		return fmt.Sprintf("B=%d/H=%d/L=%d/D=%d", c.B, c.H, c.Lq, c.D)
	}
	return fmt.Sprintf("B=%d/H=%d/Hkv=%d/Lq=%d/Lk=%d/D=%d", c.B, c.H, c.Hkv, c.Lq, c.Lk, c.D)
}

// Decode reports whether the case is a decode step (one query row).
func (c Case) Decode() bool { return c.Lq == 1 }

// Pairs returns the (query, key) pairs a call computes: Lq·Lk, or under the
// causal mask (bottom-right) the pairs with j <= i + Lk - Lq, less the
// keys a variant's padding or window removes.
func (c Case) Pairs() float64 {
	if !c.Causal && c.Variant.window == 0 && !c.Variant.padded() {
		return float64(c.Lq) * float64(c.Lk)
	}
	n := 0.0
	for i := 0; i < c.Lq; i++ {
		lo, hi := c.visible(i)
		n += float64(hi - lo)
	}
	return n
}

// FLOPs is 2·(Dk+Dv)·B·H·pairs.
func (c Case) FLOPs() float64 {
	return 2 * float64(c.D+c.ValueDim()) * float64(c.B*c.H) * c.Pairs()
}

// KVBytes is the K and V a call reads: B·Hkv·Lk rows of Dk and of Dv
// elements (of Dk only with V inside K: each row is read once), 4 bytes
// each, 2 for 16-bit storage, 1 for int8 or 1/2 for int4 (16 bytes a
// block of 32), plus a 4-byte scale per 32 (Lk: the keys kept, for a
// padded variant).
func (c Case) KVBytes() float64 {
	row := func(d int) float64 {
		switch c.KV {
		case mha.Float16, mha.BFloat16:
			return 2 * float64(d)
		case mha.Int8:
			return float64(d) + 4*float64(mha.QuantBlocks(d))
		case mha.Int4:
			return float64(mha.Int4RowBytes(d)) + 4*float64(mha.QuantBlocks(d))
		}
		return 4 * float64(d)
	}
	lk := c.Lk
	if c.Variant.padded() {
		lk = c.keep()
	}
	per := row(c.D) + row(c.ValueDim())
	if c.VInK {
		per = row(c.D)
	}
	return float64(c.B*c.Hkv*lk) * per
}

// Shape is the case as an mha.Shape.
func (c Case) Shape() mha.Shape {
	return mha.Shape{Batch: c.B, Heads: c.H, KVHeads: c.Hkv, QLen: c.Lq, KVLen: c.Lk, HeadDim: c.D,
		ValueDim: c.ValueDim(), ValueInKey: c.VInK, Layout: c.Layout}
}

// defaultCases are the shapes of the README table: (B, H, Hkv, Lq, Lk, D).
var defaultCases = []Case{
	{B: 1, H: 8, Hkv: 8, Lq: 512, Lk: 512, D: 64},
	{B: 1, H: 8, Hkv: 8, Lq: 2048, Lk: 2048, D: 64},
	{B: 1, H: 16, Hkv: 16, Lq: 1024, Lk: 1024, D: 128},
	{B: 1, H: 32, Hkv: 32, Lq: 1, Lk: 4096, D: 128},
	{B: 1, H: 32, Hkv: 8, Lq: 1, Lk: 8192, D: 128},
	{B: 8, H: 32, Hkv: 8, Lq: 1, Lk: 2048, D: 128},
}

// quickCases are the shapes of -quick: the README table's first prefill
// shape and its GQA decode step, with short timings.
var quickCases = []Case{
	{B: 1, H: 8, Hkv: 8, Lq: 512, Lk: 512, D: 64},
	{B: 1, H: 32, Hkv: 8, Lq: 1, Lk: 8192, D: 128},
}

// parseShape reads "B,H,Hkv,Lq,Lk,D", D either one head dim or "Dk/Dv".
func parseShape(s string) (Case, error) {
	f := strings.Split(s, ",")
	if len(f) != 6 {
		return Case{}, fmt.Errorf("shape %q: want B,H,Hkv,Lq,Lk,D (D: a head dim, or Dk/Dv)", s)
	}
	dk, dv, split := strings.Cut(f[5], "/")
	f[5] = dk
	if split {
		f = append(f, dv)
	}
	var v [7]int
	for i, x := range f {
		n, err := strconv.Atoi(strings.TrimSpace(x))
		if err != nil || n < 1 {
			return Case{}, fmt.Errorf("shape %q: %q is not a positive integer", s, x)
		}
		v[i] = n
	}
	return Case{B: v[0], H: v[1], Hkv: v[2], Lq: v[3], Lk: v[4], D: v[5], Dv: v[6]}, nil
}

// LayerCase is one MHA layer shape: projections and causal attention over
// B sequences of L tokens.
type LayerCase struct {
	B, L, DModel, H, Hkv, D int
}

func (c LayerCase) String() string {
	return fmt.Sprintf("layer %s,L=%d", c.model(), c.L)
}

// model is the layer's shape and batch, without the length.
func (c LayerCase) model() string {
	return fmt.Sprintf("dm=%d,H=%d,Hkv=%d,D=%d,B=%d", c.DModel, c.H, c.Hkv, c.D, c.B)
}

// FLOPs counts the four projections and the causal attention.
func (c LayerCase) FLOPs() float64 {
	m := float64(c.B * c.L)
	proj := 2 * m * float64(c.DModel) * float64(c.H*c.D+2*c.Hkv*c.D+c.H*c.D)
	att := Case{B: c.B, H: c.H, Hkv: c.Hkv, Lq: c.L, Lk: c.L, D: c.D, Causal: true}
	return proj + att.FLOPs()
}

var defaultLayers = []LayerCase{
	{B: 1, L: 512, DModel: 512, H: 8, Hkv: 8, D: 64},
	{B: 1, L: 512, DModel: 4096, H: 32, Hkv: 8, D: 128},
}

var quickLayers = []LayerCase{{B: 1, L: 128, DModel: 256, H: 4, Hkv: 2, D: 64}}
