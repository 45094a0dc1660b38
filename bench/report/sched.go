package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/xlbproject/xlb/bench/harness"
	"github.com/xlbproject/xlb/bench/stats"
)

// schedScenarios are what the sched part measures per scheduler: a new
// flow (the scheduler chooses) and an established hit (it is not asked).
var schedScenarios = []harness.Scenario{harness.NewFlow, harness.TCPHit4}

// schedKey is a scheduler's name as a report key.
func schedKey(name string) string {
	return strings.NewReplacer("-", "_", "+", "_").Replace(name)
}

// schedABSpecs are the schedulers an A/B of builds measures (16 targets
// at most: two builds).
var schedABSpecs = []string{"maglev", "rr", "wrr", "lc", "wlc", "sed", "nq", "rr+persistence"}

// sched measures the forwarder per packet with every scheduler
// (harness.Schedulers), side by side in this run: ns_per_pkt_sched
// <scheduler>.<scenario>, and sched_vs_maglev.<scheduler>_new_flow, a new
// flow's cost over maglev's: the median over the rounds of the ratio of
// the two runs of a round (each run minus its calibration). With
// Options.PktBuilds (one object), schedABSpecs of this build and of that
// one, side by side; the figures are this build's.
func (b *runner) sched() error {
	o := b.pktOptions()
	o.Scenarios = schedScenarios
	specs, builds := harness.Schedulers(), b.o.PktBuilds
	if len(builds) > 0 {
		specs = slices.DeleteFunc(specs, func(s harness.SchedSpec) bool { return !slices.Contains(schedABSpecs, s.Name) })
		builds = builds[:1]
	}
	b.printf("  BPF_PROG_TEST_RUN on CPU %d, %d schedulers side by side, builds: this one %v, %d backends each, %d runs of %d packets per figure\n",
		o.CPU, len(specs), builds, o.Backends, o.Runs, o.Repeat)
	all, err := harness.MeasureSchedulerBuilds(builds, specs, o)
	if err != nil {
		return err
	}
	res := all[:len(specs)]
	for _, r := range all[len(specs):] {
		for _, f := range r.Figures {
			b.printf("  %-40s %-16s %-14s %6.1f ns  best %4.0f\n", r.Build, r.Sched, f.Scenario, f.Ns, f.Best)
		}
	}
	for _, r := range res {
		for _, f := range r.Figures {
			b.put("ns_per_pkt_sched."+schedKey(r.Sched)+"."+pktKeys[f.Scenario], f.Ns, "ns", fmt.Sprintf("best %.0f", f.Best))
		}
	}
	maglev, _ := res[0].Figure(harness.NewFlow)
	var rows strings.Builder
	for _, r := range res[1:] {
		f, ok := r.Figure(harness.NewFlow)
		if !ok {
			continue
		}
		ratio := pairedRatio(f, maglev)
		key := "sched_vs_maglev." + schedKey(r.Sched) + "_new_flow"
		b.put(key, ratio, "×", fmt.Sprintf("ratio of medians %.2f", f.Ns/maglev.Ns))
		b.targetNote(key, "%s %.0f ns, maglev %.0f ns (medians)", r.Sched, f.Ns, maglev.Ns)
		fmt.Fprintf(&rows, "| %s | %.0f | %.0f | %.2f |\n", r.Sched, f.Ns, maglev.Ns, ratio)
	}
	b.r.md["sched"] = harness.Markdown(all) + "\nA new flow over maglev's, run by run (each run minus its calibration, " +
		"median over the rounds):\n\n| scheduler | new flow, ns | maglev, ns | × maglev |\n|---|---:|---:|---:|\n" + rows.String()
	return b.schedScale()
}

// schedScaleBackends are the list lengths schedScale measures, and
// schedScaleSpecs the schedulers: the least family walks the whole list.
var (
	schedScaleBackends = []int{8, 64, 256}
	schedScaleSpecs    = []string{"maglev", "lc", "wlc"}
)

// schedScale measures a new flow with the schedulers of schedScaleSpecs
// side by side, at each length of schedScaleBackends (every VIP that
// many backends): ns_per_pkt_sched.<scheduler>_b<n>.new_flow and
// sched_vs_maglev.<scheduler>_new_flow_b<n>, over maglev's at the same
// length (pairedRatio).
func (b *runner) schedScale() error {
	specs := slices.DeleteFunc(harness.Schedulers(), func(s harness.SchedSpec) bool { return !slices.Contains(schedScaleSpecs, s.Name) })
	var rows strings.Builder
	for _, n := range schedScaleBackends {
		o := b.pktOptions()
		o.Scenarios = []harness.Scenario{harness.NewFlow}
		o.Backends = n
		res, err := harness.MeasureSchedulers(specs, o)
		if err != nil {
			return fmt.Errorf("%d backends: %w", n, err)
		}
		maglev, _ := res[0].Figure(harness.NewFlow)
		for _, r := range res {
			f, ok := r.Figure(harness.NewFlow)
			if !ok {
				continue
			}
			b.put(fmt.Sprintf("ns_per_pkt_sched.%s_b%d.new_flow", schedKey(r.Sched), n), f.Ns, "ns", fmt.Sprintf("best %.0f", f.Best))
			if r.Sched == "maglev" {
				continue
			}
			ratio := pairedRatio(f, maglev)
			key := fmt.Sprintf("sched_vs_maglev.%s_new_flow_b%d", schedKey(r.Sched), n)
			b.put(key, ratio, "×", fmt.Sprintf("ratio of medians %.2f", f.Ns/maglev.Ns))
			b.targetNote(key, "%s %.0f ns, maglev %.0f ns (medians, %d backends)", r.Sched, f.Ns, maglev.Ns, n)
			fmt.Fprintf(&rows, "| %s | %d | %.0f | %.0f | %.2f |\n", r.Sched, n, f.Ns, maglev.Ns, ratio)
		}
	}
	b.r.md["sched"] += "\nThe least schedulers walk the whole list: a new flow by the number of backends, over maglev's with as many " +
		"(side by side at each length):\n\n| scheduler | backends | new flow, ns | maglev, ns | × maglev |\n|---|---:|---:|---:|---:|\n" + rows.String()
	return nil
}

// pairedRatio is the median over the rounds of f's run over base's run of
// the same round, each minus its calibration: runs of one round are
// measured back to back, so the ratio is freer of drift than the ratio of
// the medians.
func pairedRatio(f, base harness.Figure) float64 {
	n := min(len(f.Runs), len(base.Runs), len(f.Calib), len(base.Calib))
	var rs []float64
	for i := range n {
		if d := base.Runs[i] - base.Calib[i]; d > 0 {
			rs = append(rs, (f.Runs[i]-f.Calib[i])/d)
		}
	}
	if len(rs) == 0 {
		return f.Ns / base.Ns
	}
	return stats.Median(rs)
}
