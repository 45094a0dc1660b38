package report

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/xlbproject/xlb/bench/stats"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/plan"
	"github.com/xlbproject/xlb/internal/state"
	"github.com/xlbproject/xlb/internal/testenv/genconfig"
)

// scale measures what a second core gives, for the model of
// docs/PERFORMANCE.md ("Scaling with cores"): planning the 3,000
// services of the control part with GOMAXPROCS 1 (one table worker)
// against GOMAXPROCS 2 (two). One and two alternate, round by round, so
// that the machine's other load weighs on both alike.
func (b *runner) scale(ctx context.Context) error {
	if runtime.NumCPU() < 2 {
		return fmt.Errorf("%w: one CPU here, two needed", errUnavailable)
	}
	rounds := 7
	if b.o.Smoke {
		rounds = 2
	}
	var md strings.Builder
	if err := b.scalePlan(ctx, rounds, &md); err != nil {
		return err
	}
	b.r.md["scale"] = md.String()
	return nil
}

// scalePlan times plan.Planner.Plan of the control part's config (3,000
// services x 30 backends, M = 16381) into an empty state, with
// GOMAXPROCS and table workers 1, then 2, rounds times.
func (b *runner) scalePlan(ctx context.Context, rounds int, md *strings.Builder) error {
	cfg, err := config.Parse(genconfig.Control(ctlServices, ctlBackends, ctlTable, -1, 0), "bench.yaml")
	if err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	desired := cfg.Desired()
	lim := plan.Limits{MaxServices: 4096, MaxReals: ctlMaxReals}
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)
	b.printf("  plan of %d services x %d backends (M = %d) into an empty state, GOMAXPROCS 1 then 2 (table workers alike), %d rounds\n",
		ctlServices, ctlBackends, ctlTable, rounds)
	var one, two []float64
	for range rounds {
		for _, procs := range []int{1, 2} {
			if err := ctx.Err(); err != nil {
				return err
			}
			runtime.GOMAXPROCS(procs)
			runtime.GC()
			p := plan.NewPlanner(lim)
			p.SetWorkers(procs)
			start := time.Now()
			if _, err := p.Plan(state.Empty(), plan.Input{Desired: desired}); err != nil {
				return fmt.Errorf("plan: %w", err)
			}
			d := ms(time.Since(start))
			if procs == 1 {
				one = append(one, d)
			} else {
				two = append(two, d)
			}
		}
	}
	m1, m2 := stats.Median(one), stats.Median(two)
	b.put("scale.plan_3000_1cpu_ms", m1, "ms", "GOMAXPROCS 1, one table worker (median)")
	b.put("scale.plan_3000_2cpu_ms", m2, "ms", "GOMAXPROCS 2, two table workers, alternate runs (median)")
	b.put("scale.plan_speedup_2cpu", m1/m2, "×", "plan time on 1 CPU over plan time on 2")
	fmt.Fprintf(md, "Planning 3,000 services × 30 backends (M = 16381) into an empty state, %d rounds alternating:\n\n", rounds)
	md.WriteString("| CPUs (GOMAXPROCS, table workers) | plan ms, median | runs |\n|---:|---:|---|\n")
	fmt.Fprintf(md, "| 1 | %s | %s |\n| 2 | %s | %s |\n\nSpeedup on 2: %.2f×.\n\n", fmtNum(m1), fmtRuns(one), fmtNum(m2), fmtRuns(two), m1/m2)
	return nil
}

// fmtRuns lists figures for a table cell.
func fmtRuns(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmtNum(x)
	}
	return strings.Join(s, ", ")
}
