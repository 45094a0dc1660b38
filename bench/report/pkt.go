package report

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/xlbproject/xlb/bench/harness"
	"github.com/xlbproject/xlb/bench/reference"
)

// pktKeys names the report key of each harness scenario.
var pktKeys = map[harness.Scenario]string{
	harness.TCPHit4:     "est_hit_v4",
	harness.TCPHit6:     "est_hit_v6",
	harness.UDPHit4:     "udp_hit",
	harness.SYNSameFlow: "syn_same_flow",
	harness.NewFlow:     "new_flow",
	harness.NewFlowUDP:  "new_flow_udp",
	harness.NewFlowFull: "new_flow_full",
	harness.Cycled:      "cycled_100k",
}

// pktOptions are the harness options of a part: full size or smoke, on
// the runner's CPU, progress to stdout when verbose.
func (b *runner) pktOptions() harness.Options {
	o := harness.DefaultOptions()
	if b.o.Smoke {
		o = harness.SmokeOptions()
	}
	o.CPU = b.o.CPU
	if b.o.PktRuns > 0 {
		o.Runs = b.o.PktRuns
	}
	if b.o.Verbose {
		o.Logf = func(format string, args ...any) { b.printf("    "+format+"\n", args...) }
	}
	return o
}

// pkt measures the forwarder per packet, every scenario of the harness,
// side by side with o.PktTables.
func (b *runner) pkt() error {
	if len(b.o.PktBuilds) > 0 {
		return b.pktBuilds()
	}
	tables := []harness.Table{harness.TableXLB}
	for _, t := range b.o.PktTables {
		if t != harness.TableXLB {
			tables = append(tables, t)
		}
	}
	if len(b.o.PktTables) == 0 {
		tables = append(tables, harness.TableNone)
	}
	o := b.pktOptions()
	if len(b.o.PktScenarios) > 0 {
		o.Scenarios = b.o.PktScenarios
	}
	b.printf("  BPF_PROG_TEST_RUN on CPU %d, %d conntrack entries per CPU, %d runs of %d packets per figure, tables %v\n",
		o.CPU, o.Entries, o.Runs, o.Repeat, tables)
	res, err := harness.MeasureTables(tables, o)
	if err != nil {
		return err
	}
	b.r.Details.Pkt = res
	xlb := res[0]
	b.putForwarder(xlb)
	for _, r := range res[1:] {
		if r.Table != harness.TableNone {
			continue
		}
		for _, f := range r.Figures {
			if key, ok := pktKeys[f.Scenario]; ok {
				b.r.set("ns_per_pkt_stateless."+key, f.Ns)
			}
		}
	}
	b.putVsStateless(xlb)
	if err := b.pktReference(o, xlb); err != nil {
		return err
	}
	if err := b.pktMemory(o, xlb); err != nil {
		return err
	}
	for _, f := range xlb.Figures {
		key := "ns_per_pkt." + pktKeys[f.Scenario]
		note := fmt.Sprintf("fastest run %.0f ns", f.Best)
		if v, ok := b.r.Figure("ns_per_pkt_stateless." + pktKeys[f.Scenario]); ok {
			note += fmt.Sprintf("; without a connection table %.0f ns", v)
		}
		if v, ok := b.r.Figure("ns_per_pkt_cached_table." + pktKeys[f.Scenario]); ok {
			note += fmt.Sprintf("; with a cache-resident table %.0f ns", v)
		}
		if v, ok := b.r.Figure("load_latency_ns.mib8"); ok && (f.Scenario == harness.NewFlow || f.Scenario == harness.NewFlowFull || f.Scenario == harness.Cycled) {
			note += fmt.Sprintf("; one random load in 8 MiB %.0f ns", v)
		}
		b.targetNote(key, "%s", note)
	}
	b.r.set("pkt_harness.cpu", float64(xlb.CPU))
	b.r.set("pkt_harness.entries_per_cpu", float64(xlb.Entries))
	b.r.set("pkt_harness.runs", float64(o.Runs))
	b.r.set("pkt_harness.packets_per_run", float64(o.Repeat))
	b.r.set("pkt_harness.test_run_loop_ns", xlb.Harness)
	b.r.set("pkt_harness.table_fill_before_full", xlb.Fill)
	for m, w := range xlb.Wrapper {
		b.r.set("pkt_harness.wrapper_ns_"+strings.ReplaceAll(m.String(), " ", "_"), w)
	}
	b.r.set("pkt_harness.seconds", xlb.Elapsed.Seconds())
	b.printf("  test-run loop alone %.0f ns/packet; table %.4f full before new_flow_full\n", xlb.Harness, xlb.Fill)
	b.r.md["pkt"] = harness.Markdown(res)
	if err := b.breakdown(); err != nil {
		return err
	}
	return b.pktMethods(o) // methods.go
}

// putForwarder records the forwarder's per-packet figures.
func (b *runner) putForwarder(xlb harness.Results) {
	for _, f := range xlb.Figures {
		key, ok := pktKeys[f.Scenario]
		if !ok {
			continue
		}
		b.put("ns_per_pkt."+key, f.Ns, "ns", fmt.Sprintf("best %.0f, raw %.0f, wrapper %.0f", f.Best, f.Raw, f.Wrapper))
		b.r.set("ns_per_pkt_best."+key, f.Best)
		b.r.set("ns_per_pkt_raw."+key, f.Raw)
	}
}

// putVsStateless records each of the forwarder's figures over the same
// job without a connection table (ns_per_pkt_stateless), measured in the
// same run.
func (b *runner) putVsStateless(xlb harness.Results) {
	for _, f := range xlb.Figures {
		key := pktKeys[f.Scenario]
		floor, ok := b.r.Figure("ns_per_pkt_stateless." + key)
		if key == "" || !ok || floor <= 0 {
			continue
		}
		b.put("vs_stateless."+key, f.Ns/floor, "×", fmt.Sprintf("%.0f ns tracked, %.0f ns without a connection table (same run)", f.Ns, floor))
	}
}

// referenceScenarios are the default path's scenarios, measured side by
// side with the reference build (bench/reference).
var referenceScenarios = []harness.Scenario{harness.TCPHit4, harness.TCPHit6, harness.UDPHit4, harness.NewFlow}

// pktReference measures this build's forwarder side by side with the
// reference build's (bench/reference: a fixed earlier forwarder, loaded
// on this build's maps) on the default path's scenarios that xlb's run
// has, and records this build's figure over the reference's (vs_reference,
// targets at most 1): a regression of the default path shows in every
// full report.
func (b *runner) pktReference(o harness.Options, xlb harness.Results) error {
	o.Scenarios = nil
	for _, s := range referenceScenarios {
		if _, ok := xlb.Figure(s); ok {
			o.Scenarios = append(o.Scenarios, s)
		}
	}
	if len(o.Scenarios) == 0 {
		return nil
	}
	dir, err := os.MkdirTemp("", "xlb-bench-reference")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path, err := reference.WriteFile(dir)
	if err != nil {
		return err
	}
	res, err := harness.MeasureBuilds([]string{path}, o)
	if err != nil {
		return fmt.Errorf("reference build %s: %w", reference.Name, err)
	}
	for _, ref := range res[1].Figures {
		this, ok := res[0].Figure(ref.Scenario)
		key := pktKeys[ref.Scenario]
		if !ok || ref.Ns <= 0 {
			continue
		}
		b.put("ns_per_pkt_reference."+key, ref.Ns, "ns", fmt.Sprintf("build %s, best %.0f", reference.Name, ref.Best))
		b.put("vs_reference."+key, this.Ns/ref.Ns, "×", fmt.Sprintf("this build %.0f ns, %s %.0f ns, side by side", this.Ns, reference.Name, ref.Ns))
	}
	return nil
}

// pktMemory measures what separates the figures at scale from the code's
// own cost: the forwarder with a connection table that stays in the CPU's
// caches (16K entries per CPU) on the scenarios that touch one bucket per
// packet, and the latency of a dependent load over random lines of 1, 8
// and 16 MiB (the per-CPU slice of 1M entries is 8 MiB) on the same CPU.
func (b *runner) pktMemory(o harness.Options, full harness.Results) error {
	o.Entries = 1 << 14
	o.Scenarios = nil
	for _, s := range []harness.Scenario{harness.TCPHit4, harness.NewFlowFull} {
		if _, ok := full.Figure(s); ok {
			o.Scenarios = append(o.Scenarios, s)
		}
	}
	if len(o.Scenarios) > 0 {
		res, err := harness.MeasureForwarder(o)
		if err != nil {
			return fmt.Errorf("cache-resident table: %w", err)
		}
		for _, f := range res.Figures {
			b.put("ns_per_pkt_cached_table."+pktKeys[f.Scenario], f.Ns, "ns",
				fmt.Sprintf("%d entries per CPU; best %.0f", o.Entries, f.Best))
		}
	}
	for _, mib := range []int{1, 8, 16} {
		ns, err := harness.LoadLatency(o.CPU, mib<<20)
		if err != nil {
			return err
		}
		b.put(fmt.Sprintf("load_latency_ns.mib%d", mib), ns, "ns", fmt.Sprintf("dependent loads over random lines of %d MiB, CPU %d", mib, o.CPU))
	}
	return nil
}

// pktBuilds measures this build's forwarder side by side with the
// forwarders of o.PktBuilds and prints each figure of each; the report
// keeps this build's figures.
func (b *runner) pktBuilds() error {
	o := b.pktOptions()
	if len(b.o.PktScenarios) > 0 {
		o.Scenarios = b.o.PktScenarios
	}
	b.printf("  BPF_PROG_TEST_RUN on CPU %d, %d conntrack entries per CPU, %d runs of %d packets per figure; this build and %v side by side\n",
		o.CPU, o.Entries, o.Runs, o.Repeat, b.o.PktBuilds)
	res, err := harness.MeasureBuilds(b.o.PktBuilds, o)
	if err != nil {
		return err
	}
	b.r.Details.Pkt = res
	b.putForwarder(res[0])
	for _, r := range res {
		build := r.Build
		if build == "" {
			build = "this build"
		}
		for _, f := range r.Figures {
			b.printf("  %-40s %-16s %6.1f ns  best %4.0f  × %.3f of this build\n", build, f.Scenario, f.Ns, f.Best, f.Rel)
		}
	}
	b.r.md["pkt"] = harness.Markdown(res)
	return nil
}

// breakdownScenarios are the scenarios the stage breakdown measures.
var breakdownScenarios = []harness.Scenario{harness.TCPHit4, harness.TCPHit6, harness.UDPHit4, harness.NewFlow, harness.Cycled}

// breakdown measures where the time of a packet goes, by elimination
// (harness.MeasureBreakdown): the forwarder's job without a connection table
// stopped after each stage, the whole job with the route lookup off and
// on, and the forwarder with it off and on, side by side. It is the
// profile of the per-packet figures: this VM has no PMU, so neither
// `bpftool prog profile` nor perf's hardware counters work here.
func (b *runner) breakdown() error {
	o := b.pktOptions()
	o.Scenarios = breakdownScenarios
	if len(b.o.PktScenarios) > 0 {
		o.Scenarios = slices.DeleteFunc(slices.Clone(b.o.PktScenarios), func(s harness.Scenario) bool { return s == harness.NewFlowFull })
		if len(o.Scenarios) == 0 {
			return nil
		}
	}
	b.printf("  stage breakdown (harness.MeasureBreakdown): %d tables side by side, scenarios %v\n", 9, o.Scenarios)
	res, err := harness.MeasureBreakdown(o)
	if err != nil {
		return fmt.Errorf("breakdown: %w", err)
	}
	b.r.Details.Breakdown = res
	for _, r := range res {
		label := breakdownLabel(r)
		for _, f := range r.Figures {
			b.r.set("pkt_breakdown."+pktKeys[f.Scenario]+"."+label, f.Ns)
		}
	}
	for _, s := range o.Scenarios {
		var parts []string
		for _, r := range res {
			if f, ok := r.Figure(s); ok {
				parts = append(parts, fmt.Sprintf("%s %.0f", breakdownLabel(r), f.Ns))
			}
		}
		b.printf("  %-14s %s\n", pktKeys[s], strings.Join(parts, ", "))
	}
	b.r.md["pkt"] += "\nWhere the time goes, by elimination (`harness.MeasureBreakdown`, same runs as above but " +
		"measured together): the stateless job (`none`) stopped after each stage, then whole with the route lookup " +
		"off and on, and the forwarder (`xlb`) with it off and on. The difference between two columns is what a stage costs.\n\n" +
		harness.Markdown(res)
	return nil
}

// breakdownLabel names a breakdown result as its report key.
func breakdownLabel(r harness.Results) string {
	l := string(r.Table)
	switch r.Stop {
	case harness.StopParse:
		l += "_stop_parse"
	case harness.StopVIP:
		l += "_stop_vip_hash"
	case harness.StopSelect:
		l += "_stop_select"
	case harness.StopStats:
		l += "_stop_counters"
	case harness.StopEncap:
		l += "_stop_encap"
	}
	if !r.FIB {
		l += "_fib_off"
	}
	return l
}
