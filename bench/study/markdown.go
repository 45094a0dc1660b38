package study

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// WriteBalanceMarkdown writes results (Balance) as a Markdown table, with
// the paper's over-provision factor beside each where it gives one, and,
// for results that have a matching entry in spreads (BalanceSets, same
// method and table size; spreads may be nil), the mean and range of the
// over-provision factor over several backend sets.
func WriteBalanceMarkdown(w io.Writer, results []BalanceResult, spreads []BalanceSpread) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "| method | N | M | entries min–max | min share | max share | over-provision | paper | over-provision over backend sets: mean (min–max) |")
	fmt.Fprintln(bw, "|---|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range results {
		paper := "—"
		if op, ok := PaperOverProvision(r.Method, r.M); ok {
			paper = pct(op)
		}
		spread := "—"
		for _, s := range spreads {
			if s.Method == r.Method && s.M == r.M {
				spread = fmt.Sprintf("%s (%s–%s), %d sets", pct(s.OverProvisionMean),
					pct(s.OverProvisionMin), pct(s.OverProvisionMax), s.Sets)
			}
		}
		fmt.Fprintf(bw, "| %s | %d | %d | %d–%d | %.3f | %.3f | %s | %s | %s |\n",
			r.Method, r.N, r.M, r.MinEntries, r.MaxEntries, r.MinShare, r.MaxShare,
			pct(r.OverProvision), paper, spread)
	}
	return bw.Flush()
}

// WriteDisruptionMarkdown writes points (one or more Disruption results
// concatenated) as a Markdown table: one row per failure percentage, one
// column per (method, table size) with the mean percentage of entries
// changed (and its range over the repetitions), and a column with the
// percentage that belonged to the removed backends (the minimum any method
// must change; from the first series).
func WriteDisruptionMarkdown(w io.Writer, points []DisruptionPoint) error {
	ss := series(points)
	if len(ss) == 0 {
		return ErrNothingToPlot
	}
	bw := bufio.NewWriter(w)
	var head, rule strings.Builder
	head.WriteString("| failed % | k | removed backends' entries % |")
	rule.WriteString("|---:|---:|---:|")
	for _, s := range ss {
		fmt.Fprintf(&head, " %s M=%d: changed %% (min–max) |", s[0].Method, s[0].M)
		rule.WriteString("---:|")
	}
	fmt.Fprintln(bw, head.String())
	fmt.Fprintln(bw, rule.String())
	for i, first := range ss[0] {
		fmt.Fprintf(bw, "| %g | %d | %.2f |", first.Percent, first.Removed, 100*first.Owned)
		for _, s := range ss {
			if i >= len(s) || s[i].Percent != first.Percent {
				bw.WriteString(" — |")
				continue
			}
			fmt.Fprintf(bw, " %.2f (%.2f–%.2f) |", 100*s[i].Changed, 100*s[i].ChangedMin, 100*s[i].ChangedMax)
		}
		bw.WriteString("\n")
	}
	fmt.Fprintf(bw, "\nN=%d, %d repetitions per point; the same backends are removed for every method (seed %#x).\n",
		ss[0][0].N, ss[0][0].Reps, uint64(DisruptionSeed))
	return bw.Flush()
}

// WriteHashStudyMarkdown writes r (HashStudy) as Markdown: the source of
// the captures, the datasets, the hashes, then for the first dataset the
// variance ratio of every hash on every dataset, the coefficient of
// variation and max/mean of flows per worker for each hash and N, the CV for
// every other dataset, and the time per hash.
func WriteHashStudyMarkdown(w io.Writer, r HashStudyResult) error {
	if len(r.Datasets) == 0 {
		return ErrNothingToPlot
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "Captures: %s.\n\n", r.Source)
	fmt.Fprintln(bw, "| dataset | files | packets | distinct TCP/UDP flows | distinct sources |")
	fmt.Fprintln(bw, "|---|---|---:|---:|---:|")
	for _, d := range r.Datasets {
		fmt.Fprintf(bw, "| %s | %s | %d | %d | %d |\n", d.Dataset.Name, strings.Join(d.Dataset.Files, ", "),
			d.Dataset.Packets, d.Dataset.Flows, d.Dataset.Sources)
	}
	fmt.Fprintln(bw, "\n| hash | definition |")
	fmt.Fprintln(bw, "|---|---|")
	for _, h := range r.Hashes {
		fmt.Fprintf(bw, "| %s | %s |\n", h.Name, h.Doc)
	}
	fmt.Fprintf(bw, "\nVariance of flows per worker relative to a random assignment, mean over N = %v "+
		"(1: as good as chance; HashQuality):\n\n| dataset |", r.Workers)
	for _, q := range r.Datasets[0].Quality {
		fmt.Fprintf(bw, " %s |", q.Hash)
	}
	bw.WriteString("\n|---|" + strings.Repeat("---:|", len(r.Datasets[0].Quality)) + "\n")
	for _, d := range r.Datasets {
		fmt.Fprintf(bw, "| %s |", d.Dataset.Name)
		for _, q := range d.Quality {
			fmt.Fprintf(bw, " %.2f |", q.VarianceRatio)
		}
		bw.WriteString("\n")
	}
	main := r.Datasets[0]
	fmt.Fprintf(bw, "\nDataset %s: coefficient of variation of flows per worker (%%).\n\n", main.Dataset.Name)
	writeHashGrid(bw, r.Workers, main, func(b HashBalance) string { return fmt.Sprintf("%.2f", 100*b.CV) }, true)
	fmt.Fprintf(bw, "\nDataset %s: busiest worker / mean.\n\n", main.Dataset.Name)
	writeHashGrid(bw, r.Workers, main, func(b HashBalance) string { return fmt.Sprintf("%.3f", b.MaxOverMean) }, false)
	for _, d := range r.Datasets[1:] {
		fmt.Fprintf(bw, "\nDataset %s (%d flows): CV (%%).\n\n", d.Dataset.Name, d.Dataset.Flows)
		writeHashGrid(bw, r.Workers, d, func(b HashBalance) string { return fmt.Sprintf("%.2f", 100*b.CV) }, true)
	}
	fmt.Fprintf(bw, "\nTime per hash over the %d flows of %s (Go %s, %s; loop and call overhead alone: %.1f ns).\n\n",
		r.TimingFlows, main.Dataset.Name, r.GoVersion, r.GOARCH, r.LoopNs)
	fmt.Fprintln(bw, "| hash | ns/hash (median) | ns/hash (fastest run) |")
	fmt.Fprintln(bw, "|---|---:|---:|")
	for _, t := range r.Timing {
		fmt.Fprintf(bw, "| %s | %.1f | %.1f |\n", t.Hash, t.NsPerHash, t.NsMin)
	}
	return bw.Flush()
}

// writeHashGrid writes one row per hash and one column per worker count,
// plus a row with the ideal CV if ideal is set.
func writeHashGrid(bw *bufio.Writer, workers []int, d DatasetResult, cell func(HashBalance) string, ideal bool) {
	bw.WriteString("| hash |")
	for _, n := range workers {
		fmt.Fprintf(bw, " N=%d |", n)
	}
	bw.WriteString("\n|---|" + strings.Repeat("---:|", len(workers)) + "\n")
	var row []string
	last := ""
	flush := func() {
		if last != "" {
			fmt.Fprintf(bw, "| %s | %s |\n", last, strings.Join(row, " | "))
		}
	}
	idealRow := map[int]float64{}
	for _, b := range d.Balance {
		if b.Hash != last {
			flush()
			last, row = b.Hash, nil
		}
		row = append(row, cell(b))
		idealRow[b.N] = b.IdealCV
	}
	flush()
	if ideal {
		bw.WriteString("| *random (ideal)* |")
		for _, n := range workers {
			fmt.Fprintf(bw, " *%.2f* |", 100*idealRow[n])
		}
		bw.WriteString("\n")
	}
}

// pct formats a fraction as a percentage with one decimal.
func pct(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }
