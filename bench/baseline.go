package main

import (
	"math"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// Baseline is the attention a Go user writes today without fastattn:
// gonum's blas32 Sgemm for Q·Kᵀ and P·V, the softmax with math.Exp, one
// goroutine per head (at most threads at a time). It materializes the
// Lq×Lk scores of each head.
type Baseline struct {
	c      Case
	scores [][]float32 // one Lq×Lk buffer per head
}

// NewBaseline allocates the score buffers of c.
func NewBaseline(c Case) *Baseline {
	b := &Baseline{c: c, scores: make([][]float32, c.B*c.H)}
	for i := range b.scores {
		b.scores[i] = make([]float32, c.Lq*c.Lk)
	}
	return b
}

// Run computes attention of the BSHD tensors q, k, v into out.
func (bl *Baseline) Run(out, q, k, v []float32, threads int) {
	c := bl.c
	sem := make(chan struct{}, threads)
	var wg sync.WaitGroup
	for b := 0; b < c.B; b++ {
		for h := 0; h < c.H; h++ {
			wg.Add(1)
			sem <- struct{}{}
			go func(b, h int) {
				defer func() { <-sem; wg.Done() }()
				bl.head(out, q, k, v, b, h)
			}(b, h)
		}
	}
	wg.Wait()
}

func (bl *Baseline) head(out, q, k, v []float32, b, h int) {
	c := bl.c
	g := h / (c.H / c.Hkv)
	D, Dv := c.D, c.ValueDim()
	Q := blas32.General{Rows: c.Lq, Cols: D, Stride: c.H * D, Data: q[(b*c.Lq*c.H+h)*D:]}
	K := blas32.General{Rows: c.Lk, Cols: D, Stride: c.Hkv * D, Data: k[(b*c.Lk*c.Hkv+g)*D:]}
	V := blas32.General{Rows: c.Lk, Cols: Dv, Stride: c.Hkv * Dv, Data: v[(b*c.Lk*c.Hkv+g)*Dv:]}
	O := blas32.General{Rows: c.Lq, Cols: Dv, Stride: c.H * Dv, Data: out[(b*c.Lq*c.H+h)*Dv:]}
	S := blas32.General{Rows: c.Lq, Cols: c.Lk, Stride: c.Lk, Data: bl.scores[b*c.H+h]}
	blas32.Gemm(blas.NoTrans, blas.Trans, float32(1/math.Sqrt(float64(D))), Q, K, 0, S)
	for i := 0; i < c.Lq; i++ {
		row := S.Data[i*c.Lk : (i+1)*c.Lk]
		visible := c.Lk
		if c.Causal {
			visible = min(c.Lk, i+c.Lk-c.Lq+1)
		}
		mx := math.Inf(-1)
		for _, x := range row[:visible] {
			mx = math.Max(mx, float64(x))
		}
		sum := 0.0
		for j := range row {
			p := 0.0
			if j < visible {
				p = math.Exp(float64(row[j]) - mx)
			}
			row[j] = float32(p)
			sum += p
		}
		for j := range row {
			row[j] = float32(float64(row[j]) / sum)
		}
	}
	blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, S, V, 0, O)
}
