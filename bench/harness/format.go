package harness

import (
	"fmt"
	"strings"
)

// Markdown renders results side by side: one row per scenario, one column
// per table, cells "median (best)" in ns/packet with the wrapper
// subtracted (Figure.Ns, Figure.Best), then the harness figures of the
// first result.
func Markdown(results []Results) string {
	if len(results) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| ns/packet |")
	for _, r := range results {
		fmt.Fprintf(&b, " %s |", r.label())
	}
	b.WriteString("\n|---|")
	for range results {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	var order []Scenario
	seen := map[Scenario]bool{}
	for _, r := range results {
		for _, f := range r.Figures {
			if !seen[f.Scenario] {
				seen[f.Scenario] = true
				order = append(order, f.Scenario)
			}
		}
	}
	for _, s := range order {
		fmt.Fprintf(&b, "| %s |", s)
		for _, r := range results {
			if f, ok := r.Figure(s); ok {
				fmt.Fprintf(&b, " %.0f (%.0f) |", f.Ns, f.Best)
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}
	r := results[0]
	fmt.Fprintf(&b, "\ncpu %d, %d entries per CPU; test-run loop alone %.0f ns; wrapper (subtracted):", r.CPU, r.Entries, r.Harness)
	for _, m := range []FlowMode{SameFlow, NewFlows, CycleFlow} {
		if w, ok := r.Wrapper[m]; ok {
			fmt.Fprintf(&b, " %s %.0f ns;", m, w)
		}
	}
	b.WriteString("\n")
	return b.String()
}

// label names a result's column: the table, the stage it stopped at, and
// whether the FIB lookup was off.
func (r Results) label() string {
	l := string(r.Table) + stopSuffix(r.Stop)
	if r.Build != "" {
		l += "@" + r.Build
	}
	if r.Sched != "" {
		l += " " + r.Sched
	}
	if !r.FIB {
		l += " (FIB off)"
	}
	if r.Sync {
		l += " (sync on)"
	}
	return l
}
