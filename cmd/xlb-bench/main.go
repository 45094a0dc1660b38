// Command xlb-bench measures xlb and writes bench/out/report.json,
// report.md and PNG plots (bench/report). `make bench` runs
// `xlb-bench all`, `make bench-smoke` `xlb-bench -smoke all`.
//
//	xlb-bench [flags] all | pkt tput tablegen balance flowhash conntrack control ...
//	xlb-bench -docs docs/PERFORMANCE.md [-report bench/report.json]
//
// Needs root for pkt, tput, conntrack and control (BPF, network
// namespaces, bpffs). With -docs it measures nothing: it rewrites the
// page's generated figures from a report (`make performance`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/xlbproject/xlb/bench/harness"
	"github.com/xlbproject/xlb/bench/report"
)

func main() {
	var o report.Options
	var tables, scenarios string
	flag.StringVar(&o.Out, "out", "bench/out", "directory for report.json, report.md and the plots")
	flag.BoolVar(&o.Smoke, "smoke", false, "short runs of every part (proves they work; not figures to quote)")
	flag.IntVar(&o.CPU, "cpu", 0, "CPU to pin single-core measurements to (0: the last CPU)")
	flag.StringVar(&o.ProfileDir, "profile", "", "write Go CPU profiles of the Go parts (tablegen, control) to this directory")
	flag.StringVar(&o.TracesDir, "traces", "", "directory of the flow-hash study's captures (default: $XLB_TRACES_DIR, else testdata/traces of the module)")
	flag.StringVar(&tables, "pkt-tables", "", "comma-separated tables the pkt part measures beside the forwarder: none, lru_hash, lru_hash_percpu_lru, lru_percpu_hash (default none)")
	flag.StringVar(&scenarios, "pkt-scenarios", "", "comma-separated scenarios of the pkt part (default all): "+strings.Join(scenarioNames(), ", "))
	flag.IntVar(&o.PktRuns, "pkt-runs", 0, "runs per figure of the pkt part (default 21; with -pkt-scenarios, to profile one scenario)")
	flag.BoolVar(&o.Verbose, "v", false, "print every run of the per-packet harness")
	var docs, reportPath string
	flag.StringVar(&docs, "docs", "", "measure nothing: rewrite the generated figures of this page (docs/PERFORMANCE.md) from -report")
	flag.StringVar(&reportPath, "report", "bench/report.json", "with -docs, the report.json to take the figures from")
	var builds string
	flag.StringVar(&builds, "pkt-builds", "", "comma-separated forwarder objects of other builds (internal/datapath/xlb_bpfel.o) the pkt part measures side by side with this build's (an A/B of a data-plane change); the sched part, the first one's schedulers")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: xlb-bench [flags] all | %s ...\n", strings.Join(report.Parts, " | "))
		flag.PrintDefaults()
	}
	flag.Parse()
	if docs != "" {
		if err := report.WriteDocs(docs, reportPath); err != nil {
			fmt.Fprintf(os.Stderr, "xlb-bench: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if tables != "" {
		for _, t := range strings.Split(tables, ",") {
			o.PktTables = append(o.PktTables, harness.Table(strings.TrimSpace(t)))
		}
	}
	if builds != "" {
		o.PktBuilds = strings.Split(builds, ",")
	}
	if scenarios != "" {
		for _, s := range strings.Split(scenarios, ",") {
			o.PktScenarios = append(o.PktScenarios, harness.Scenario(strings.TrimSpace(s)))
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal ends the process at once
	}()
	_, err := report.Run(ctx, flag.Args(), o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "xlb-bench: %v\n", err)
		if errors.Is(err, report.ErrUnknownPart) || len(flag.Args()) == 0 {
			flag.Usage()
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func scenarioNames() []string {
	var out []string
	for _, s := range harness.Scenarios() {
		out = append(out, string(s))
	}
	return out
}
