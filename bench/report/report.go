package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xlbproject/xlb/bench/harness"
	"github.com/xlbproject/xlb/bench/study"
	"golang.org/x/sys/unix"
)

// Report is everything one run measured. Figure groups are flat maps of
// numbers, keyed as report.json shows them (group.key, e.g.
// ns_per_pkt.est_hit_v4); a group or key is absent when its part did not
// run or failed.
type Report struct {
	Machine Machine `json:"machine"`
	Smoke   bool    `json:"smoke"`
	// Parts says how each part that was asked for went, in run order.
	Parts []PartRun `json:"parts"`

	// ns_per_pkt: the forwarder alone (wrapper subtracted), median over
	// runs; _best the fastest run minus the fastest calibration; _raw
	// with the test-run loop and the wrapper; _stateless the same job
	// without a connection table (harness.TableNone).
	NsPerPkt          map[string]float64 `json:"ns_per_pkt,omitempty"`
	NsPerPktBest      map[string]float64 `json:"ns_per_pkt_best,omitempty"`
	NsPerPktRaw       map[string]float64 `json:"ns_per_pkt_raw,omitempty"`
	NsPerPktStateless map[string]float64 `json:"ns_per_pkt_stateless,omitempty"`
	// NsPerPktReference: a fixed earlier forwarder (bench/reference)
	// measured side by side with this build's, the default path's
	// scenarios; VsReference: this build's figure over it, same run
	// (targets: a regression of the default path shows). VsStateless:
	// the forwarder's figure over ns_per_pkt_stateless's.
	NsPerPktReference map[string]float64 `json:"ns_per_pkt_reference,omitempty"`
	VsReference       map[string]float64 `json:"vs_reference,omitempty"`
	VsStateless       map[string]float64 `json:"vs_stateless,omitempty"`
	// NsPerPktCachedTable: the forwarder with a connection table of 16K
	// entries per CPU (128 KiB, in the CPU's caches), the same scenarios:
	// the cost of the code without the table's memory latency.
	NsPerPktCachedTable map[string]float64 `json:"ns_per_pkt_cached_table,omitempty"`
	// NsPerPktMethod: the forwarder per forwarding method,
	// "<method>.<scenario>" (methods.go).
	NsPerPktMethod map[string]float64 `json:"ns_per_pkt_method,omitempty"`
	// MppsMethod: one core doing the forwarder's work per method, 1000 /
	// ns_per_pkt_method ("<method>_v4", nat_forward, nat_reply);
	// MethodVsGRE: method figures over GRE's of the same run (targets).
	MppsMethod  map[string]float64 `json:"mpps_method,omitempty"`
	MethodVsGRE map[string]float64 `json:"method_vs_gre,omitempty"`
	// NsPerPktSched: the forwarder per scheduler, side by side,
	// "<scheduler>.<scenario>"; SchedVsMaglev: a new flow's cost over
	// maglev's, "<scheduler>_new_flow" (sched.go).
	NsPerPktSched map[string]float64 `json:"ns_per_pkt_sched,omitempty"`
	SchedVsMaglev map[string]float64 `json:"sched_vs_maglev,omitempty"`
	// LoadLatencyNs: one dependent load over random lines of a region,
	// by region size ("mib1", "mib8", "mib16"), on the pkt part's CPU.
	LoadLatencyNs map[string]float64 `json:"load_latency_ns,omitempty"`
	// PktHarness describes the per-packet measurement: CPU, table size,
	// runs, packets per run, the test-run loop and wrapper costs.
	PktHarness map[string]float64 `json:"pkt_harness,omitempty"`
	// PktBreakdown: scenario -> stage -> ns/packet (see the pkt part).
	PktBreakdown map[string]float64 `json:"pkt_breakdown,omitempty"`

	MppsOneCore map[string]float64 `json:"mpps_one_core,omitempty"`
	// MppsOneCoreSplit: native XDP, the forwarder's NAPI thread alone on
	// the measured CPU (throughput.PlacementSplit).
	MppsOneCoreSplit map[string]float64 `json:"mpps_one_core_split,omitempty"`
	MppsGenericXDP   map[string]float64 `json:"mpps_generic_xdp,omitempty"`
	// VsReflector: mpps_one_core over the same live chain with an
	// XDP_TX-only program in the forwarder's place, by traffic.
	VsReflector map[string]float64 `json:"vs_reflector,omitempty"`
	// TputMethod: native XDP, shared placement, Mpps on one core per
	// forwarding method and traffic kind, live frames
	// ("<method>_v4_<traffic>", tput_methods.go).
	TputMethod map[string]float64 `json:"tput_method,omitempty"`
	// Throughput holds whatever else bench/throughput reports
	// (latency added per packet, receivers' counts ...).
	Throughput map[string]float64 `json:"throughput,omitempty"`

	// TableGenMs: maglev.Build, median ms, keys m<M>_n<N>[_weighted].
	TableGenMs map[string]float64 `json:"table_gen_ms,omitempty"`
	// TableGenMinMs: the fastest run of each.
	TableGenMinMs map[string]float64 `json:"table_gen_min_ms,omitempty"`
	// TableGenReferenceMs: the Maglev paper's Pseudocode 1 written plainly
	// (tablegen_reference.go), median ms, keys as TableGenMs;
	// TableGenVsReference: maglev.Build over it, timed alternately.
	TableGenReferenceMs map[string]float64 `json:"table_gen_reference_ms,omitempty"`
	TableGenVsReference map[string]float64 `json:"table_gen_vs_reference,omitempty"`
	// TableIncremental: one backend's weight changes; per table size and
	// change, the time to the new table and the entries that differ.
	TableIncremental map[string]float64 `json:"table_incremental,omitempty"`

	Conntrack map[string]float64 `json:"conntrack,omitempty"`
	Control   map[string]float64 `json:"control,omitempty"`
	Sync      map[string]float64 `json:"sync,omitempty"`  // connection sync (sync.go)
	Kube      map[string]float64 `json:"kube,omitempty"`  // the Kubernetes source (kube.go)
	Scale     map[string]float64 `json:"scale,omitempty"` // 1 and 2 cores (scale.go)

	// HashBalance: flow hash -> "n<N>" -> balance of the real captures'
	// flows over N workers (study.HashStudyResult.BalanceReport).
	HashBalance       map[string]map[string]study.HashFigure `json:"hash_balance,omitempty"`
	HashNs            map[string]float64                     `json:"hash_ns,omitempty"`
	HashVarianceRatio map[string]float64                     `json:"hash_variance_ratio,omitempty"`
	HashSource        string                                 `json:"hash_source,omitempty"`
	HashConclusion    string                                 `json:"hash_conclusion,omitempty"`

	// ConsistentBalance: method -> "m<M>" -> shares (the paper's Fig. 11);
	// ConsistentDisruption: method -> "m<M>" -> "p<percent>" -> fraction
	// of entries changed (Fig. 12).
	ConsistentBalance    map[string]map[string]study.BalanceFigure `json:"consistent_balance,omitempty"`
	ConsistentDisruption map[string]map[string]map[string]float64  `json:"consistent_disruption,omitempty"`

	// Targets compares figures with the performance targets.
	Targets []Target `json:"targets"`
	// Reference are published figures to compare with.
	Reference []Reference `json:"reference"`
	// Plots are the PNG files written beside the report.
	Plots []string `json:"plots,omitempty"`
	// Details keeps every run of every part for inspection.
	Details Details `json:"details"`

	// md holds each part's Markdown section, by part name.
	md map[string]string
	// notes are Target.Note by target key.
	notes map[string]string
}

// Details are the raw results behind the figures.
type Details struct {
	Pkt               []harness.Results       `json:"pkt,omitempty"`
	Breakdown         []harness.Results       `json:"pkt_breakdown,omitempty"`
	Conntrack         []harness.Results       `json:"conntrack_lookup,omitempty"`
	TableGen          []GenResult             `json:"table_gen,omitempty"`
	Incremental       []IncrementalResult     `json:"table_incremental,omitempty"`
	TableGenReference []ReferenceResult       `json:"table_gen_reference,omitempty"`
	Consistent        *study.ConsistentResult `json:"consistent,omitempty"`
	HashStudy         *study.HashStudyResult  `json:"hash_study,omitempty"`
	ControlCold       []ColdCommit            `json:"control_cold,omitempty"`
	ControlDelta      []ChangeResult          `json:"control_changes,omitempty"`
	Capacity          *Capacity               `json:"control_capacity,omitempty"`
	Throughput        any                     `json:"throughput,omitempty"`
	Memory            []MapMemory             `json:"conntrack_memory,omitempty"`
	Profiles          map[string]string       `json:"profiles,omitempty"`
	Kube              *KubeResult             `json:"kube,omitempty"`
}

// Machine is where the figures were measured.
type Machine struct {
	CPUModel      string `json:"cpu_model"`
	CPUFamily     string `json:"cpu_family"`
	CPUModelID    string `json:"cpu_model_id"`
	CPUs          int    `json:"cpus"`
	Hypervisor    bool   `json:"hypervisor"`
	CacheSize     string `json:"cache_size,omitempty"`
	MemTotalMiB   int    `json:"mem_total_mib"`
	Kernel        string `json:"kernel"`
	KernelVersion string `json:"kernel_version"`
	GoVersion     string `json:"go_version"`
	EBPFModule    string `json:"cilium_ebpf"`
	Date          string `json:"date"`
	// LoadAvg is the 1-minute load average when the run started.
	LoadAvg float64 `json:"loadavg_1m"`
	Command string  `json:"command"`
}

// PartRun is how one part went.
type PartRun struct {
	Name    string  `json:"name"`
	Status  string  `json:"status"` // StatusOK, StatusFailed, StatusUnavailable
	Seconds float64 `json:"seconds"`
	// LoadAvg is the 1-minute load average when the part ended: other
	// work on the machine shows here (and in the spread of the runs).
	LoadAvg float64  `json:"loadavg_1m"`
	Error   string   `json:"error,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

// Part statuses.
const (
	StatusOK          = "ok"
	StatusFailed      = "failed"
	StatusUnavailable = "not available"
)

// Target is one of the performance targets and what was measured against
// it.
type Target struct {
	Key  string `json:"key"` // group.key in report.json
	What string `json:"what"`
	Unit string `json:"unit"`
	// AtMost: the target is an upper bound (else a lower bound).
	AtMost bool    `json:"at_most"`
	Target float64 `json:"target"`
	// Measured, Ratio (measured / target) and Met are absent when the
	// figure was not measured.
	Measured *float64 `json:"measured"`
	Ratio    *float64 `json:"ratio"`
	Met      *bool    `json:"met"`
	// Reference: published figures for the same thing.
	Reference string `json:"reference,omitempty"`
	// Note: what else the part measured about this figure (fastest run,
	// split of the time ...).
	Note string `json:"note,omitempty"`
}

// Reference is a published figure.
type Reference struct {
	What   string  `json:"what"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Source string  `json:"source"`
}

// targets are the performance targets (docs/DESIGN.md, Performance
// targets).
var targets = []Target{
	{Key: "ns_per_pkt.est_hit_v4", What: "TCP ACK, established flow, IPv4", Unit: "ns", AtMost: true, Target: 50,
		Reference: "well-known XDP L4LB on a similar machine: 78–81 ns; paper: ~350 ns per packet (whole packet thread)"},
	{Key: "ns_per_pkt.est_hit_v6", What: "TCP ACK, established flow, IPv6", Unit: "ns", AtMost: true, Target: 50,
		Reference: "well-known XDP L4LB on a similar machine: 72–76 ns"},
	{Key: "ns_per_pkt.udp_hit", What: "UDP, tracked flow", Unit: "ns", AtMost: true, Target: 55,
		Reference: "well-known XDP L4LB on a similar machine: 102–106 ns"},
	{Key: "ns_per_pkt.new_flow", What: "new flow every packet, table not full", Unit: "ns", AtMost: true, Target: 100,
		Reference: "well-known XDP L4LB on a similar machine: 536–542 ns"},
	{Key: "ns_per_pkt.new_flow_full", What: "new flow every packet, table full", Unit: "ns", AtMost: true, Target: 120,
		Reference: "well-known XDP L4LB on a similar machine: 858–1016 ns"},
	{Key: "ns_per_pkt.cycled_100k", What: "100k established flows cycled", Unit: "ns", AtMost: true, Target: 100,
		Reference: "well-known XDP L4LB on a similar machine: 244–273 ns"},
	{Key: "vs_reference.est_hit_v4", What: "TCP ACK hit, IPv4, over the reference build's (bench/reference), side by side", Unit: "×", AtMost: true, Target: 1},
	{Key: "vs_reference.est_hit_v6", What: "TCP ACK hit, IPv6, over the reference build's, side by side", Unit: "×", AtMost: true, Target: 1},
	{Key: "vs_reference.udp_hit", What: "UDP hit over the reference build's, side by side", Unit: "×", AtMost: true, Target: 1},
	{Key: "vs_reference.new_flow", What: "new flow over the reference build's, side by side", Unit: "×", AtMost: true, Target: 1},
	{Key: "vs_stateless.est_hit_v4", What: "TCP ACK hit, IPv4, over the same packet without a connection table", Unit: "×", AtMost: true, Target: 1.2},
	{Key: "vs_stateless.udp_hit", What: "UDP hit over the same packet without a connection table", Unit: "×", AtMost: true, Target: 1.2},
	{Key: "sched_vs_maglev.maglev_source_new_flow", What: "new flow (SYN) with maglev-source, over maglev's, side by side", Unit: "×", AtMost: true, Target: 1.3},
	{Key: "sched_vs_maglev.dh_new_flow", What: "new flow (SYN) with dh, over maglev's, side by side", Unit: "×", AtMost: true, Target: 1.3},
	{Key: "sched_vs_maglev.rr_new_flow", What: "new flow (SYN) with rr, over maglev's, side by side", Unit: "×", AtMost: true, Target: 1.3},
	{Key: "sched_vs_maglev.wrr_new_flow", What: "new flow (SYN) with wrr, over maglev's, side by side", Unit: "×", AtMost: true, Target: 1.3},
	{Key: "sched_vs_maglev.lc_new_flow", What: "new flow (SYN) with lc, over maglev's, side by side", Unit: "×", AtMost: true, Target: 1.3},
	{Key: "sched_vs_maglev.wlc_new_flow", What: "new flow (SYN) with wlc, over maglev's, side by side", Unit: "×", AtMost: true, Target: 1.3},
	{Key: "sched_vs_maglev.sed_new_flow", What: "new flow (SYN) with sed, over maglev's, side by side", Unit: "×", AtMost: true, Target: 1.3},
	{Key: "sched_vs_maglev.nq_new_flow", What: "new flow (SYN) with nq, over maglev's, side by side", Unit: "×", AtMost: true, Target: 1.3},
	{Key: "sched_vs_maglev.lblc_new_flow", What: "new flow (SYN) with lblc, over maglev's, side by side", Unit: "×", AtMost: true, Target: 1.3},
	{Key: "sched_vs_maglev.lblcr_new_flow", What: "new flow (SYN) with lblcr, over maglev's, side by side", Unit: "×", AtMost: true, Target: 1.3},
	{Key: "sched_vs_maglev.rr_persistence_new_flow", What: "new flow (SYN) with rr and persistence, over maglev's, side by side", Unit: "×", AtMost: true, Target: 1.3},
	{Key: "sched_vs_maglev.lc_new_flow_b256", What: "new flow (SYN) with lc, 256 backends, over maglev's with 256, side by side", Unit: "×", AtMost: true, Target: 1.3},
	{Key: "sched_vs_maglev.wlc_new_flow_b256", What: "new flow (SYN) with wlc, 256 backends, over maglev's with 256, side by side", Unit: "×", AtMost: true, Target: 1.3},
	{Key: "mpps_one_core.established", What: "established flows, one core, native XDP", Unit: "Mpps", Target: 8,
		Reference: "paper: ~2 Mpps per packet thread (Fig. 8 analog); production XDP LB: 10+ Mpps per host"},
	{Key: "mpps_one_core.syn", What: "SYN (new flows), one core, native XDP", Unit: "Mpps", Target: 8},
	{Key: "vs_reflector.established", What: "established flows, live chain, over an XDP_TX-only program in the forwarder's place", Unit: "×", Target: 0.8},
	{Key: "mpps_one_core.constant", What: "constant 5-tuple, one core, native XDP", Unit: "Mpps", Target: 8},
	{Key: "table_gen_ms.m65537_n1000", What: "Maglev table, N=1000, M=65537, one core", Unit: "ms", AtMost: true, Target: 0.5,
		Reference: "paper: 1.8 ms"},
	{Key: "table_gen_ms.m655373_n1000", What: "Maglev table, N=1000, M=655373, one core", Unit: "ms", AtMost: true, Target: 8,
		Reference: "paper: 22.9 ms"},
	{Key: "table_gen_vs_reference.m65537_n1000", What: "Maglev table over the paper's pseudocode written plainly, N=1000, M=65537, alternate runs", Unit: "×", AtMost: true, Target: 0.35},
	{Key: "table_gen_vs_reference.m655373_n1000", What: "Maglev table over the paper's pseudocode written plainly, N=1000, M=655373, alternate runs", Unit: "×", AtMost: true, Target: 0.35},
	{Key: "conntrack.bytes_per_flow", What: "kernel memory per tracked flow", Unit: "B", AtMost: true, Target: 40,
		Reference: "IPVS: 128 B per connection"},
	{Key: "conntrack.mib_for_20m_flows", What: "memory for 20 M concurrent flows", Unit: "MiB", AtMost: true, Target: 1024,
		Reference: "production XDP LB: 20 M concurrent connections"},
	{Key: "control.apply_3000_services_s", What: "3,000 services × 30 backends, file to data plane, every core building tables", Unit: "s", AtMost: true, Target: 0.6,
		Reference: "production XDP LB: 3,000 services"},
	{Key: "control.one_backend_change_ms", What: "one backend's weight change to data plane (plan + apply)", Unit: "ms", AtMost: true, Target: 3},
	{Key: "method_vs_gre.dr_hit_v4", What: "DR, established flow's ACK, IPv4, over GRE's", Unit: "×", AtMost: true, Target: 1},
	{Key: "method_vs_gre.dr_hit_v6", What: "DR, established flow's ACK, IPv6, over GRE's", Unit: "×", AtMost: true, Target: 1},
	{Key: "method_vs_gre.nat_hit_v4", What: "NAT forward, established flow's ACK, IPv4, over GRE's", Unit: "×", AtMost: true, Target: 1},
	{Key: "method_vs_gre.nat_hit_v6", What: "NAT forward, established flow's ACK, IPv6, over GRE's", Unit: "×", AtMost: true, Target: 1},
	{Key: "method_vs_gre.nat_new_flow", What: "NAT forward, new flow (SYN) every packet, over GRE's", Unit: "×", AtMost: true, Target: 1.5},
	{Key: "method_vs_gre.nat_reply_v4", What: "NAT reply, tracked flow, IPv4, over GRE's ACK", Unit: "×", AtMost: true, Target: 1.2},
	{Key: "method_vs_gre.nat_reply_v6", What: "NAT reply, tracked flow, IPv6, over GRE's ACK", Unit: "×", AtMost: true, Target: 1.2},
	{Key: "sync.new_flow_overhead_pct", What: "new-flow cost with connection sync on, over off", Unit: "%", AtMost: true, Target: 10},
	{Key: "sync.send_flows_per_s", What: "synced flows one node sends, one core", Unit: "flows/s", Target: 1e6},
	{Key: "sync.apply_flows_per_s", What: "synced flows one node applies, one core", Unit: "flows/s", Target: 1e6},
	{Key: "kube.programmed_1000_services_s", What: "1,000 LoadBalancer Services × 20 endpoints, informer sync to data plane", Unit: "s", AtMost: true, Target: 10},
	{Key: "kube.endpointslice_change_ms", What: "one EndpointSlice change to data plane, median", Unit: "ms", AtMost: true, Target: 100},
}

// references are published figures the report quotes; the Maglev paper's
// over-provision figures are study.PaperOverProvision's, after the first
// three.
var references = slices.Insert(fixedReferences, 3, paperOverProvision()...)

// paperOverProvision lists the Maglev paper's over-provision factors of
// the comparators (Fig. 11), in percent, as study.PaperOverProvision
// gives them.
func paperOverProvision() []Reference {
	var out []Reference
	for _, m := range []int{study.SmallM, study.LargeM} {
		for _, method := range study.Methods {
			if op, ok := study.PaperOverProvision(method, m); ok {
				name := strings.ToUpper(string(method[:1])) + string(method[1:])
				out = append(out, Reference{fmt.Sprintf("%s over-provision, N=1000, M=%d", name, m),
					math.Round(op*1000) / 10, "%", "Maglev paper, Fig. 11"})
			}
		}
	}
	return out
}

var fixedReferences = []Reference{
	{"packet thread time per packet", 350, "ns", "Maglev paper, section 3.2"},
	{"Maglev table generation, N=1000, M=65537", 1.8, "ms", "Maglev paper, section 5.3"},
	{"Maglev table generation, N=1000, M=655373", 22.9, "ms", "Maglev paper, section 5.3"},
	{"well-known XDP L4LB, TCP ACK hit", 81, "ns", "measured outside this repository on a 2-vCPU KVM guest of the same kind (BPF_PROG_TEST_RUN, 1M entries per CPU)"},
	{"well-known XDP L4LB, UDP hit", 106, "ns", "the same measurement"},
	{"well-known XDP L4LB, new flow, table not full", 536, "ns", "the same measurement"},
	{"well-known XDP L4LB, new flow, table full", 1016, "ns", "the same measurement"},
	{"well-known XDP L4LB, 100k flows cycled", 273, "ns", "the same measurement"},
	{"IPVS memory per connection", 128, "B", "IPVS (LVS) connection entry"},
}

// RequiredKeys are the report.json keys every full report must have, as
// group.key (hash_balance is checked for at least one hash and worker
// count).
var RequiredKeys = []string{
	"ns_per_pkt.est_hit_v4", "ns_per_pkt.est_hit_v6", "ns_per_pkt.udp_hit", "ns_per_pkt.syn_same_flow",
	"ns_per_pkt.new_flow", "ns_per_pkt.new_flow_full", "ns_per_pkt.cycled_100k",
	"mpps_one_core.syn", "mpps_one_core.established", "mpps_one_core.constant",
	"mpps_generic_xdp.established",
	"table_gen_ms.m65537_n1000", "table_gen_ms.m655373_n1000",
	"table_gen_vs_reference.m65537_n1000", "table_gen_vs_reference.m655373_n1000",
	"conntrack.bytes_per_flow", "conntrack.mib_for_20m_flows",
	"control.apply_3000_services_s", "control.one_backend_change_ms",
}

// groups maps a group name to its field.
func (r *Report) groupPtr(name string) *map[string]float64 {
	switch name {
	case "ns_per_pkt":
		return &r.NsPerPkt
	case "ns_per_pkt_best":
		return &r.NsPerPktBest
	case "ns_per_pkt_raw":
		return &r.NsPerPktRaw
	case "ns_per_pkt_stateless":
		return &r.NsPerPktStateless
	case "ns_per_pkt_reference":
		return &r.NsPerPktReference
	case "vs_reference":
		return &r.VsReference
	case "vs_stateless":
		return &r.VsStateless
	case "vs_reflector":
		return &r.VsReflector
	case "ns_per_pkt_cached_table":
		return &r.NsPerPktCachedTable
	case "ns_per_pkt_method":
		return &r.NsPerPktMethod
	case "mpps_method":
		return &r.MppsMethod
	case "method_vs_gre":
		return &r.MethodVsGRE
	case "ns_per_pkt_sched":
		return &r.NsPerPktSched
	case "sched_vs_maglev":
		return &r.SchedVsMaglev
	case "load_latency_ns":
		return &r.LoadLatencyNs
	case "pkt_harness":
		return &r.PktHarness
	case "pkt_breakdown":
		return &r.PktBreakdown
	case "mpps_one_core":
		return &r.MppsOneCore
	case "mpps_one_core_split":
		return &r.MppsOneCoreSplit
	case "mpps_generic_xdp":
		return &r.MppsGenericXDP
	case "tput_method":
		return &r.TputMethod
	case "throughput":
		return &r.Throughput
	case "table_gen_ms":
		return &r.TableGenMs
	case "table_gen_min_ms":
		return &r.TableGenMinMs
	case "table_gen_reference_ms":
		return &r.TableGenReferenceMs
	case "table_gen_vs_reference":
		return &r.TableGenVsReference
	case "table_incremental":
		return &r.TableIncremental
	case "conntrack":
		return &r.Conntrack
	case "control":
		return &r.Control
	case "sync":
		return &r.Sync
	case "kube":
		return &r.Kube
	case "scale":
		return &r.Scale
	case "hash_ns":
		return &r.HashNs
	case "hash_variance_ratio":
		return &r.HashVarianceRatio
	}
	return nil
}

// Figure returns the figure key ("group.key") and whether it was measured.
func (r *Report) Figure(key string) (float64, bool) {
	g, k, ok := strings.Cut(key, ".")
	if !ok {
		return 0, false
	}
	p := r.groupPtr(g)
	if p == nil || *p == nil {
		return 0, false
	}
	v, ok := (*p)[k]
	return v, ok
}

// set records a figure; it panics on an unknown group (a programming
// error).
func (r *Report) set(key string, v float64) {
	g, k, _ := strings.Cut(key, ".")
	p := r.groupPtr(g)
	if p == nil {
		panic("report: unknown figure group " + g)
	}
	if *p == nil {
		*p = map[string]float64{}
	}
	(*p)[k] = v
}

// target returns the target for key, if any.
func targetFor(key string) (Target, bool) {
	for _, t := range targets {
		if t.Key == key {
			return t, true
		}
	}
	return Target{}, false
}

// evaluate fills t's measured fields from v.
func (t Target) evaluate(v float64) Target {
	ratio := v / t.Target
	met := v <= t.Target
	if !t.AtMost {
		met = v >= t.Target
	}
	t.Measured, t.Ratio, t.Met = &v, &ratio, &met
	return t
}

// computeTargets compares every target with the report's figures.
func (r *Report) computeTargets() {
	r.Targets = nil
	for _, t := range targets {
		if v, ok := r.Figure(t.Key); ok {
			t = t.evaluate(v)
		}
		t.Note = r.notes[t.Key]
		r.Targets = append(r.Targets, t)
	}
	r.Reference = references
}

// Missing returns the required keys the report lacks or whose value is
// not a positive number, and "hash_balance" if it has no figure.
func (r *Report) Missing() []string {
	var out []string
	for _, k := range RequiredKeys {
		if v, ok := r.Figure(k); !ok || !(v > 0) {
			out = append(out, k)
		}
	}
	n := 0
	for _, byN := range r.HashBalance {
		for _, f := range byN {
			if f.CV > 0 {
				n++
			}
		}
	}
	if n == 0 {
		out = append(out, "hash_balance")
	}
	return out
}

// writeJSON writes the report to path.
func (r *Report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// machine describes this machine.
func machine() Machine {
	m := Machine{
		CPUs:      runtime.NumCPU(),
		GoVersion: runtime.Version(),
		Date:      time.Now().UTC().Format(time.RFC3339),
		Command:   strings.Join(os.Args, " "),
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			switch {
			case k == "model name" && m.CPUModel == "":
				m.CPUModel = v
			case k == "cpu family" && m.CPUFamily == "":
				m.CPUFamily = v
			case k == "model" && m.CPUModelID == "":
				m.CPUModelID = v
			case k == "cache size" && m.CacheSize == "":
				m.CacheSize = v
			case k == "flags" && !m.Hypervisor:
				m.Hypervisor = slices.Contains(strings.Fields(v), "hypervisor")
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.Atoi(f[1])
				m.MemTotalMiB = kb / 1024
			}
		}
	}
	m.LoadAvg = loadAvg()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
		m.KernelVersion = unix.ByteSliceToString(u.Version[:])
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/cilium/ebpf" {
				m.EBPFModule = d.Version
			}
		}
	}
	return m
}

// loadAvg returns the 1-minute load average (0 if unknown).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
