package study

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// ErrNothingToPlot is returned by the Plot functions for empty input.
var ErrNothingToPlot = errors.New("nothing to plot")

// Figure size of every plot.
const (
	plotWidth  = 8 * vg.Inch
	plotHeight = 5 * vg.Inch
)

// PlotBalance writes the paper's Fig. 11 as a PNG to path: for each
// result (one method at one table size), a bar for the largest and one for
// the smallest share, and a marker at 1 + the paper's over-provision factor
// where the paper gives one.
func PlotBalance(path string, results []BalanceResult) error {
	if len(results) == 0 {
		return ErrNothingToPlot
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Load balance of %d backends (Maglev paper Fig. 11)", results[0].N)
	p.Y.Label.Text = "share of a backend (entries / (M/N))"
	var maxs, mins plotter.Values
	var paper plotter.XYs
	labels := make([]string, len(results))
	for i, r := range results {
		maxs = append(maxs, r.MaxShare)
		mins = append(mins, r.MinShare)
		labels[i] = fmt.Sprintf("%s\nM=%d", r.Method, r.M)
		if op, ok := PaperOverProvision(r.Method, r.M); ok {
			paper = append(paper, plotter.XY{X: float64(i), Y: 1 + op})
		}
	}
	w := vg.Points(18)
	bmax, err := plotter.NewBarChart(maxs, w)
	if err != nil {
		return err
	}
	bmax.Color, bmax.Offset = plotutil.Color(0), -w/2
	bmin, err := plotter.NewBarChart(mins, w)
	if err != nil {
		return err
	}
	bmin.Color, bmin.Offset = plotutil.Color(1), w/2
	p.Add(plotter.NewGrid(), bmax, bmin)
	p.Legend.Add("max share", bmax)
	p.Legend.Add("min share", bmin)
	if len(paper) > 0 {
		s, err := plotter.NewScatter(paper)
		if err != nil {
			return err
		}
		s.GlyphStyle = draw.GlyphStyle{Color: color.Black, Radius: vg.Points(4), Shape: draw.CrossGlyph{}}
		p.Add(s)
		p.Legend.Add("paper: 1 + over-provision", s)
	}
	one, err := hline(-0.5, float64(len(results))-0.5, 1)
	if err != nil {
		return err
	}
	p.Add(one)
	p.NominalX(labels...)
	// Leave room above the tallest bar or marker for the legend.
	top := 1.0
	for _, r := range results {
		top = max(top, r.MaxShare)
		if op, ok := PaperOverProvision(r.Method, r.M); ok {
			top = max(top, 1+op)
		}
	}
	p.Y.Min, p.Y.Max = 0, top*1.3
	var ticks []plot.Tick
	for v := 0.0; v <= p.Y.Max; v += 0.2 {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', 1, 64)})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Legend.Top = true
	return p.Save(plotWidth, plotHeight, path)
}

// PlotDisruption writes the paper's Fig. 12 as a PNG to path: the mean
// percentage of table entries changed against the percentage of backends
// removed, one line per (method, table size) in points (as Disruption
// returns them, concatenated for several calls).
func PlotDisruption(path string, points []DisruptionPoint) error {
	if len(points) == 0 {
		return ErrNothingToPlot
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Resilience to backend changes, N=%d, %d repetitions (Maglev paper Fig. 12)",
		points[0].N, points[0].Reps)
	p.X.Label.Text = "concurrent backend failures (%)"
	p.Y.Label.Text = "table entries changed (%)"
	p.Add(plotter.NewGrid())
	for i, s := range series(points) {
		xys := make(plotter.XYs, len(s))
		for j, pt := range s {
			xys[j] = plotter.XY{X: pt.Percent, Y: 100 * pt.Changed}
		}
		l, sc, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		l.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		sc.Shape = plotutil.Shape(i)
		p.Add(l, sc)
		p.Legend.Add(fmt.Sprintf("%s M=%d", s[0].Method, s[0].M), l, sc)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.X.Min, p.Y.Min = 0, 0
	return p.Save(plotWidth, plotHeight, path)
}

// series splits points into runs of one (method, table size), in order of
// first appearance.
func series(points []DisruptionPoint) [][]DisruptionPoint {
	type key struct {
		m Method
		M int
	}
	var order []key
	by := map[key][]DisruptionPoint{}
	for _, pt := range points {
		k := key{pt.Method, pt.M}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], pt)
	}
	out := make([][]DisruptionPoint, len(order))
	for i, k := range order {
		out[i] = by[k]
	}
	return out
}

// PlotHashBalance writes, as a PNG to path, the coefficient of variation
// of flows per worker against the number of workers N for every hash on
// one dataset of a HashStudy (the session-persistence study's Fig. 2, with
// the ideal CV of a random assignment as a dashed black line). Both axes
// are logarithmic.
func PlotHashBalance(path string, dr DatasetResult) error {
	if len(dr.Balance) == 0 {
		return ErrNothingToPlot
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Flow hash balance: %s, %d flows", dr.Dataset.Name, dr.Dataset.Flows)
	p.X.Label.Text = "workers N"
	p.Y.Label.Text = "flows per worker: coefficient of variation (%)"
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	var hashes []string
	rows := map[string]plotter.XYs{}
	ideal := map[int]float64{}
	for _, b := range dr.Balance {
		if _, ok := rows[b.Hash]; !ok {
			hashes = append(hashes, b.Hash)
		}
		// A CV of 0 cannot be drawn on a log axis: floor it at 0.01%.
		rows[b.Hash] = append(rows[b.Hash], plotter.XY{X: math.Log2(float64(b.N)), Y: max(100*b.CV, 0.01)})
		ideal[b.N] = 100 * b.IdealCV
	}
	var ticks []plot.Tick
	var ixy plotter.XYs
	for _, xy := range rows[hashes[0]] {
		n := int(math.Round(math.Exp2(xy.X)))
		ticks = append(ticks, plot.Tick{Value: xy.X, Label: strconv.Itoa(n)})
		ixy = append(ixy, plotter.XY{X: xy.X, Y: max(ideal[n], 0.01)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	for i, h := range hashes {
		l, sc, err := plotter.NewLinePoints(rows[h])
		if err != nil {
			return err
		}
		l.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
		sc.Shape = plotutil.Shape(i)
		p.Add(l, sc)
		p.Legend.Add(h, l, sc)
	}
	// Leave room above the lines for the legend (a log axis: a factor).
	top := 0.0
	for _, xys := range rows {
		for _, xy := range xys {
			top = max(top, xy.Y)
		}
	}
	p.Y.Max = top * 20
	il, err := plotter.NewLine(ixy)
	if err != nil {
		return err
	}
	il.Color, il.Dashes, il.Width = color.Black, []vg.Length{vg.Points(6), vg.Points(3)}, vg.Points(1.5)
	p.Add(il)
	p.Legend.Add("random assignment (ideal)", il)
	p.Legend.Top, p.Legend.Left = true, true
	return p.Save(plotWidth, plotHeight, path)
}

// hline is a horizontal thin black line at y from x0 to x1.
func hline(x0, x1, y float64) (*plotter.Line, error) {
	l, err := plotter.NewLine(plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}})
	if err != nil {
		return nil, err
	}
	l.Color, l.Width = color.Black, vg.Points(0.75)
	l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	return l, nil
}
