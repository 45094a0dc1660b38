package report

import (
	"errors"
	"image/color"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var errNoTargets = errors.New("no target measured")

// plotTargets writes targets.png: log10(measured / target) for every
// measured target, so that a bar above 0 misses its target by that many
// orders of magnitude. For "≥" targets the ratio is inverted (target /
// measured), so that below 0 is always better.
func (b *runner) plotTargets() (string, error) {
	var vals plotter.Values
	var names []string
	for _, t := range b.r.Targets {
		if t.Ratio == nil || *t.Ratio <= 0 {
			continue
		}
		v := *t.Ratio
		name := strings.TrimPrefix(strings.TrimPrefix(t.Key, "ns_per_pkt."), "control.")
		if !t.AtMost {
			v = 1 / v
			name += " (inv.)"
		}
		vals = append(vals, math.Log10(v))
		names = append(names, name)
	}
	if len(vals) == 0 {
		return "", errNoTargets
	}
	p := plot.New()
	p.Title.Text = "xlb: measured against target (below 0 meets the target)"
	p.Y.Label.Text = "log10(measured / target)"
	bars, err := plotter.NewBarChart(vals, vg.Points(14))
	if err != nil {
		return "", err
	}
	bars.Color = color.RGBA{R: 0x33, G: 0x66, B: 0xcc, A: 0xff}
	one, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: 0}, {X: float64(len(vals)) - 0.5, Y: 0}})
	if err != nil {
		return "", err
	}
	one.Color = color.RGBA{R: 0xcc, A: 0xff}
	one.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(plotter.NewGrid(), bars, one)
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = 0.8
	p.X.Tick.Label.XAlign = -0.9
	p.X.Tick.Label.YAlign = -0.3
	const name = "targets.png"
	if err := p.Save(10*vg.Inch, 5*vg.Inch, filepath.Join(b.o.Out, name)); err != nil {
		return "", err
	}
	b.printf("plot: %s\n", filepath.Join(b.o.Out, name))
	return name, nil
}
