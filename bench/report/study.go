package report

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/xlbproject/xlb/bench/study"
	"github.com/xlbproject/xlb/internal/testenv/traces"
)

// balance runs the consistent-hashing study (the Maglev paper's Fig. 11
// and 12): Maglev, Karger (1000 views) and Rendezvous hashing, N = 1000,
// M = 65537 and 655373, 0–10% of backends failed, 200 repetitions.
func (b *runner) balance() error {
	o := study.PaperConsistentOptions()
	if b.o.Smoke {
		o = study.ConsistentOptions{N: 1000, Ms: []int{study.SmallM}, Percents: []float64{0, 5, 10}, Reps: 3}
	}
	b.printf("  N=%d, M=%v, failures %v%%, %d repetitions, %d backend sets\n", o.N, o.Ms, o.Percents, o.Reps, o.Sets)
	cr, err := study.ConsistentStudy(o)
	if err != nil {
		return err
	}
	b.r.Details.Consistent = &cr
	b.r.ConsistentBalance = study.BalanceReport(cr.Balance)
	b.r.ConsistentDisruption = study.DisruptionReport(cr.Disruption)
	for _, r := range cr.Balance {
		paper := ""
		if op, ok := study.PaperOverProvision(r.Method, r.M); ok {
			paper = fmt.Sprintf("paper %.1f%%", 100*op)
		}
		b.printf("  consistent_balance.%s.m%d: max share %.3f, min share %.3f, over-provision %.1f%% %s\n",
			r.Method, r.M, r.MaxShare, r.MinShare, 100*r.OverProvision, paper)
	}
	for _, p := range cr.Disruption {
		if p.Percent == 0 || (p.Percent != 1 && p.Percent != 5 && p.Percent != 10) {
			continue
		}
		b.printf("  consistent_disruption.%s.m%d.p%g: %.2f%% of entries changed (%.2f%% were the failed backends')\n",
			p.Method, p.M, p.Percent, 100*p.Changed, 100*p.Owned)
	}
	var md bytes.Buffer
	md.WriteString("Balance (Fig. 11): share of a backend = its entries / (M/N); over-provision = largest share − 1.\n\n")
	if err := study.WriteBalanceMarkdown(&md, cr.Balance, cr.Spread); err != nil {
		return err
	}
	md.WriteString("\nDisruption (Fig. 12): entries whose backend changes when k random backends fail at once.\n\n")
	if err := study.WriteDisruptionMarkdown(&md, cr.Disruption); err != nil {
		return err
	}
	b.r.md["balance"] = md.String()
	for name, plot := range map[string]func(string) error{
		"balance.png":    func(p string) error { return study.PlotBalance(p, cr.Balance) },
		"disruption.png": func(p string) error { return study.PlotDisruption(p, cr.Disruption) },
	} {
		if err := b.plot(name, plot); err != nil {
			return err
		}
	}
	return nil
}

// plot writes one PNG into the output directory and records it.
func (b *runner) plot(name string, write func(path string) error) error {
	path := filepath.Join(b.o.Out, name)
	if err := write(path); err != nil {
		return fmt.Errorf("plot %s: %w", name, err)
	}
	b.r.Plots = append(b.r.Plots, name)
	slices.Sort(b.r.Plots)
	b.printf("  plot: %s\n", path)
	return nil
}

// flowhash runs the flow-hash study (internal/study) on the captures of
// testdata/traces.
func (b *runner) flowhash() error {
	dir := b.o.TracesDir
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		if dir, err = traces.FindDir(wd); err != nil {
			return fmt.Errorf("%w: %v", errUnavailable, err)
		}
	}
	timing := 2 * time.Second
	if b.o.Smoke {
		timing = 100 * time.Millisecond
	}
	b.printf("  captures in %s: %s\n", dir, traces.Source)
	hr, err := study.HashStudy(dir, nil, timing)
	if err != nil {
		return err
	}
	b.r.Details.HashStudy = &hr
	b.r.HashBalance = hr.BalanceReport()
	b.r.HashSource = hr.Source
	main := hr.Datasets[0]
	b.printf("  dataset %s: %d distinct flows from %d sources (%d packets)\n",
		main.Dataset.Name, main.Dataset.Flows, main.Dataset.Sources, main.Dataset.Packets)
	ns := hr.NsReport()
	q := hr.QualityReport()
	for _, h := range hr.Hashes {
		cvs := []string{}
		for _, n := range hr.Workers {
			if f, ok := b.r.HashBalance[h.Name][fmt.Sprintf("n%d", n)]; ok {
				cvs = append(cvs, fmt.Sprintf("N=%d %.2f%%", n, 100*f.CV))
			}
		}
		b.r.set("hash_variance_ratio."+h.Name, q[h.Name])
		b.r.set("hash_ns."+h.Name, ns[h.Name])
		b.printf("  hash_balance.%-16s variance ratio %6.2f (1 = random), %5.1f ns/hash; CV %s\n",
			h.Name, q[h.Name], ns[h.Name], strings.Join(cvs, ", "))
	}
	b.r.HashConclusion = hashConclusion(q, ns)
	b.printf("  conclusion: %s\n", b.r.HashConclusion)
	var md bytes.Buffer
	if err := study.WriteHashStudyMarkdown(&md, hr); err != nil {
		return err
	}
	b.r.md["flowhash"] = md.String()
	return b.plot("hash_balance.png", func(p string) error { return study.PlotHashBalance(p, main) })
}

// hashConclusion says what the study means for the forwarder's flow hash
// v1: kept if it balances the real flows about as well as the best of the
// strong hashes (Toeplitz, CRC-16), and changed otherwise.
func hashConclusion(q, ns map[string]float64) string {
	v1, ok := q[study.HashFlowV1]
	if !ok {
		return "flow hash v1 was not measured"
	}
	best, bestName := 0.0, ""
	for _, h := range []string{study.HashToeplitz, study.HashCRC16} {
		if v, ok := q[h]; ok && (bestName == "" || v < best) {
			best, bestName = v, h
		}
	}
	if bestName == "" {
		return fmt.Sprintf("flow hash v1: variance ratio %.2f (1 = random)", v1)
	}
	verdict := "confirmed: the forwarder keeps flow hash v1"
	if v1 > 1.5*best && v1 > 1.5 {
		verdict = "flow hash v1 balances the real flows clearly worse than " + bestName + ": reconsider it"
	}
	return fmt.Sprintf("%s — variance ratio %.2f vs %s %.2f and source mod N %.2f (1 = as good as chance); "+
		"%.1f ns/hash vs Toeplitz %.1f and CRC-16 %.1f in Go",
		verdict, v1, bestName, best, q[study.HashSrcModN], ns[study.HashFlowV1], ns[study.HashToeplitz], ns[study.HashCRC16])
}
