package e2e

import (
	"fmt"
	"image/color"
	"os"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// checkBounds checks, node by node over the traffic's samples, that
// xlbd's resident memory and the conntrack table do not grow: the largest
// value of the last third of the run is at most 1.25 times (RSS, plus
// 16 MiB) and 1.5 times (entries, plus 64) the largest of the first third,
// by when the entries of the churn reach their steady state (the longest
// timeout, 2 h, is a fifth of the short run's clock). The one client
// address holds at most one template per node, the one lblc destination
// (web6's VIP) at most one entry; each must have been seen.
func (r *soakRecorder) checkBounds(t *testing.T) map[string]string {
	t.Helper()
	r.mu.Lock()
	samples := append([]soakSample(nil), r.samples...)
	r.mu.Unlock()
	out := map[string]string{}
	var sawTemplate, sawLBLC bool
	for node := range r.s.daemons {
		var run []soakSample
		for _, s := range samples {
			if s.Node == node && s.Phase == "run" {
				run = append(run, s)
			}
			if s.Node == node && (s.Templates > 1 || s.LBLC > 1) {
				t.Errorf("n%d at %.1fs: %d templates, %d lblc entries; at most 1 each", node+1, s.T, s.Templates, s.LBLC)
			}
			sawTemplate = sawTemplate || s.Templates > 0
			sawLBLC = sawLBLC || s.LBLC > 0
		}
		if len(run) < 6 {
			t.Errorf("n%d: %d samples of the traffic", node+1, len(run))
			continue
		}
		end := run[len(run)-1].T
		first, last := func(s soakSample) bool { return s.T <= end/3 }, func(s soakSample) bool { return s.T >= 2*end/3 }
		rss0, rss1 := maxOf(run, first, func(s soakSample) int64 { return s.RSSKiB }), maxOf(run, last, func(s soakSample) int64 { return s.RSSKiB })
		ct0, ct1 := maxOf(run, first, func(s soakSample) int64 { return s.CT }), maxOf(run, last, func(s soakSample) int64 { return s.CT })
		out[fmt.Sprintf("n%d", node+1)] = fmt.Sprintf("RSS max %d KiB in the first third, %d in the last; conntrack max %d, %d", rss0, rss1, ct0, ct1)
		if rss0 <= 0 || float64(rss1) > 1.25*float64(rss0)+16<<10 {
			t.Errorf("n%d: xlbd's RSS grew: max %d KiB in the first third of the run, %d in the last", node+1, rss0, rss1)
		}
		if ct0 <= 0 || float64(ct1) > 1.5*float64(ct0)+64 {
			t.Errorf("n%d: conntrack entries grew: max %d in the first third of the run, %d in the last", node+1, ct0, ct1)
		}
	}
	if !sawTemplate || !sawLBLC {
		t.Errorf("templates seen: %v, lblc entries seen: %v: the soak did not exercise them", sawTemplate, sawLBLC)
	}
	return out
}

func maxOf(s []soakSample, in func(soakSample) bool, v func(soakSample) int64) int64 {
	m := int64(-1)
	for _, x := range s {
		if in(x) {
			m = max(m, v(x))
		}
	}
	return m
}

var soakColors = []color.Color{color.RGBA{R: 0x33, G: 0x66, B: 0xcc, A: 0xff}, color.RGBA{R: 0xcc, G: 0x44, B: 0x22, A: 0xff}}

// plotSoak draws the samples in four panels over time: xlbd's RSS, the
// conntrack entries, the templates and lblc entries (per node), and the
// test clock's advance in wraps of the 16-bit stamp.
func plotSoak(samples []soakSample, path string) error {
	panels := []struct {
		title, y string
		v        []func(soakSample) float64
		names    []string
	}{
		{"xlbd resident memory", "MiB", []func(soakSample) float64{func(s soakSample) float64 { return float64(s.RSSKiB) / 1024 }}, []string{"RSS"}},
		{"live conntrack entries", "entries", []func(soakSample) float64{func(s soakSample) float64 { return float64(s.CT) }}, []string{"conntrack"}},
		{"persistence templates and lblc entries", "entries", []func(soakSample) float64{
			func(s soakSample) float64 { return float64(s.Templates) }, func(s soakSample) float64 { return float64(s.LBLC) + 0.05 }},
			[]string{"templates", "lblc (+0.05)"}},
		{"data plane clock advance", "wraps of 2^16 ticks", []func(soakSample) float64{func(s soakSample) float64 { return float64(s.Ticks) / soakWrap }}, []string{"clock"}},
	}
	rows := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Y.Label.Text = pn.y
		p.X.Label.Text = "seconds"
		p.Add(plotter.NewGrid())
		for node := 0; node < 2; node++ {
			for k, v := range pn.v {
				var xys plotter.XYs
				for _, s := range samples {
					if y := v(s); s.Node == node && y >= 0 {
						xys = append(xys, plotter.XY{X: s.T, Y: y})
					}
				}
				if len(xys) == 0 {
					continue
				}
				l, err := plotter.NewLine(xys)
				if err != nil {
					return err
				}
				l.Color = soakColors[node]
				if k > 0 {
					l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				}
				p.Add(l)
				p.Legend.Add(fmt.Sprintf("n%d %s", node+1, pn.names[k]), l)
			}
		}
		p.Legend.Top = true
		p.Y.Min = 0
		rows[i] = []*plot.Plot{p}
	}
	img := vgimg.New(vg.Points(900), vg.Points(1100))
	dc := draw.New(img)
	canvases := plot.Align(rows, draw.Tiles{Rows: len(rows), Cols: 1, PadY: vg.Points(12), PadTop: vg.Points(6), PadBottom: vg.Points(6)}, dc)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
