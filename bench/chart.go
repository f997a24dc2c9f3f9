package main

import (
	"fmt"
	"image/color"
	"os"

	"github.com/fastattn/fastattn/mha"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// chartLengths are the sequence lengths of the chart (self-attention,
// B=1, H=8, D=64, no mask, one thread).
var chartLengths = []int{128, 256, 512, 1024, 2048}

// chart measures GFLOP/s against sequence length for every kernel set and
// draws it, with each set's one-thread FMA peak as a horizontal line.
func chart(cfg *config, path string) error {
	lengths := chartLengths
	if cfg.quick {
		lengths = lengths[:3]
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("fastattn on %s: B=1, H=8, D=64, no mask, 1 thread", cpuModel())
	p.X.Label.Text = "sequence length"
	p.Y.Label.Text = "GFLOP/s"
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, L := range lengths {
		ticks = append(ticks, plot.Tick{Value: float64(L), Label: fmt.Sprint(L)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Legend.Top = true
	p.Legend.Left = true
	top := 0.0 // the highest line, for headroom above it for the legend
	palette := []color.RGBA{{0x1f, 0x77, 0xb4, 255}, {0xd6, 0x27, 0x28, 255}, {0x2c, 0xa0, 0x2c, 255}, {0x94, 0x67, 0xbd, 255}}
	for i, ks := range cfg.sets {
		e, err := mha.NewEngine(mha.Config{ISA: ks.Name, Threads: 1})
		if err != nil {
			return err
		}
		pts := make(plotter.XYs, len(lengths))
		for j, L := range lengths {
			fmt.Fprintf(os.Stderr, "chart: %s L=%d\n", ks.Name, L)
			c := Case{B: 1, H: 8, Hkv: 8, Lq: L, Lk: L, D: 64}
			q, k, v := fill(L*8*64), fill(L*8*64), fill(L*8*64)
			o := make([]float32, len(q))
			d, err := Median(func() error { return e.Attention(o, q, k, v, c.Shape(), nil) }, cfg.minTime/2)
			if err != nil {
				return err
			}
			pts[j] = plotter.XY{X: float64(L), Y: c.FLOPs() / d.Seconds() / 1e9}
			top = max(top, pts[j].Y)
		}
		e.Close()
		col := palette[i%len(palette)]
		line, marks, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		line.Color, marks.Color = col, col
		p.Add(line, marks)
		p.Legend.Add(ks.Name, line, marks)
		if peak := PeakGFLOPS(ks, 1, FMA); peak > 0 {
			top = max(top, peak)
			flat := plotter.XYs{{X: float64(lengths[0]), Y: peak}, {X: float64(lengths[len(lengths)-1]), Y: peak}}
			pl, err := plotter.NewLine(flat)
			if err != nil {
				return err
			}
			pl.Color, pl.Dashes = col, []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(pl)
			p.Legend.Add(ks.Name+" FMA peak", pl)
		}
	}
	p.Y.Min, p.Y.Max = 0, 1.45*top
	p.X.Min, p.X.Max = float64(lengths[0])/1.2, float64(lengths[len(lengths)-1])*1.2
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
