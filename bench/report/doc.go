// Package report runs xlb's benchmarks (the performance targets of
// docs/DESIGN.md, measured) and writes their report: bench/out/report.json,
// report.md and PNG plots. cmd/xlb-bench is its command line; `make bench`
// runs every part at full size, `make bench-smoke` the short mode CI uses.
//
// Each part measures one thing with the package that owns it:
//
//	pkt        ns per packet of the forwarder (bench/harness: BPF_PROG_TEST_RUN,
//	           one pinned CPU, restore-and-tail-call wrapper subtracted), v4 and v6
//	sched      ns per packet of a new flow and a hit with each scheduler and with
//	           persistence, side by side with maglev (harness.MeasureSchedulers)
//	tput       Mpps on one core with live frames (bench/throughput)
//	tablegen   maglev.Build time (medians, one pinned core) and the entries one
//	           backend's weight change moves
//	balance    the Maglev paper's Fig. 11 and 12 (bench/study)
//	flowhash   the flow-hash comparison on the real captures (bench/study)
//	conntrack  bytes per tracked flow from the kernel's map memory accounting
//	           (memlock in /proc/self/fdinfo), 20 M flows, per-packet cost once full
//	control    3,000 services x 30 backends: file -> data plane, and one backend's
//	           change -> data plane (config.Parse, plan.Planner, datapath.Commit)
//
// Figures are printed as they are measured and gathered in a Report whose
// JSON keys are stable (RequiredKeys lists those a full report must have);
// Targets compares them with the performance targets as measured / target.
// Benchmarks are not tests: every time is a median over repeated runs, and
// the machine (CPU model, kernel, Go) is recorded beside them. Options.Smoke
// makes every part short (the whole run in well under two minutes): it
// proves the parts work, its figures are not for quoting.
//
// The privileged parts (pkt, sched, tput, conntrack, control) need root, bpffs and
// veth, as bench/harness and internal/datapath's tests do; each works in a
// private bpffs pin directory (and network namespace where an interface is
// needed) that it removes afterwards.
package report
