// Package throughput measures how many packets per second the forwarder
// moves on one CPU with the program attached to an interface (XDP native,
// or generic for comparison: the analog of the Maglev paper's Fig. 8, kernel
// bypass vs the kernel's receive path), for the paper's three kinds of
// traffic (Fig. 9): a SYN of a new flow every packet, the ACKs of K
// established flows, and one constant 5-tuple.
//
// # Topology
//
// One veth pair in a network namespace of its own (and a mount namespace,
// for that namespace's sysfs), nothing else:
//
//	generator end "g"                         node end "n" (the node's NIC)
//	  gen_tx by BPF_PROG_TEST_RUN,              10.0.0.11/24, xlb attached
//	  LIVE_FRAMES, XDP_TX ---- frames ---->     (native or generic): GRE to a
//	  gen_count (native XDP) <-- GRE ------     backend, next hop = "g"'s MAC,
//	  checks, counts, drops                     XDP_TX back out of "n"
//
// gen_tx (bpf/gen_tput.c) writes a 64-byte TCP/IPv4 frame to the VIP with
// this packet's 5-tuple and answers XDP_TX; with
// BPF_F_TEST_XDP_LIVE_FRAMES the kernel transmits it on "g", i.e. hands it
// to the receive ring of "n", whose NAPI poll runs the forwarder. The
// forwarder's XDP_TX puts the encapsulated frame on the receive ring of
// "g", whose NAPI poll runs gen_count: it checks that the frame is GRE from
// the node to a backend carrying the generated packet, counts it (and per
// backend), and drops it. Nothing reaches a network stack. The backends'
// next hop is resolved from the namespace's FIB and neighbour table
// (kernelnet.LookupNextHop, as xlbd does) and cached in the reals.
//
// # Where the work runs
//
// A veth runs XDP in the NAPI poll of its receive ring, and a transmit
// schedules the peer's NAPI on the CPU that transmits, as a softirq there.
// So by default everything runs on the generator's CPU: the test run makes
// a batch of 64 frames with bottom halves disabled, flushes them to "n"'s
// ring, and when it enables bottom halves again the softirq polls "n"
// (the forwarder), whose XDP_TX flush schedules "g"'s poll in the same
// softirq (gen_count). The generator, the forwarder and the receiver then
// share one CPU, one after the other, with no wakeups and no IPIs. That is
// PlacementShared (the default): everything on Options.CPU. Its CPU time
// per packet (the generator thread's, whose context runs the softirqs, plus
// the CPU's ksoftirqd's) is the whole chain's; the same chain with
// gen_reflect (XDP_TX, nothing else) in place of the forwarder
// (Options.Baseline) is the chain without the forwarder, and the
// difference is the forwarder's own cost per packet ("forwarder alone").
//
// PlacementSplit gives both veth ends threaded NAPI and pins the kernel
// threads, at SCHED_FIFO 1 (a NIC's poll runs in softirq context, which no
// task preempts): the forwarder's ("napi/<n>-…") alone on Options.CPU,
// the receiver's with the generator on Options.GenCPU. The forwarder's CPU
// then does only the forwarder's share: take frames off the ring, run the
// program, queue the XDP_TX frames on the peer's ring and wake the peer's
// thread (with generic XDP: also build an skb and run the receive path up
// to the generic hook, and the stack's transmit). Measured on this kind of
// machine (a 2-vCPU nested KVM guest) it is dominated by the veth
// hand-off between CPUs, not by the forwarder: every poll that empties the
// ring ends with a wakeup of the peer's thread (an IPI, a VM exit in a
// guest: __napi_schedule was ~10% of the forwarder thread's samples), the
// frames and ring slots written on the other CPU miss in cache
// (veth_xdp_rcv ~9%), the thread sleeps and is woken again (finish_task_
// switch ~7%), while the program itself was ~16%; and the generator CPU,
// shared with the receiver's thread, cannot keep the ring full, so the
// forwarder's thread is rarely saturated (Figure.Busy). Its figures are
// still reported (CPU time per packet of that thread) but they measure
// the veth pair on a VM more than the forwarder.
//
// # What a figure is
//
// Each run keeps the generator running for Warmup and then Duration;
// counters are read at both ends of the Duration window. Mpps = frames
// gen_count accepted (encapsulated toward a backend) in the window /
// window length: the packet rate at the receivers. CPUNs = CPU time of the
// measured work in the window / those frames, read per task
// (/proc/<pid>/schedstat), so other tasks on the machine (which take part
// of the CPU: Busy < 1) do not lower it; CapacityMpps = 1000 / CPUNs is
// the rate one whole CPU doing that work gives, the "Mpps on one core"
// (Results' headline figures). A figure is the median over Runs runs,
// forwarder and baseline runs interleaved. Every run is checked (ErrCheck):
// the receiver saw only frames encapsulated toward a backend, the
// forwarder's XDP_TX count matches the receiver's, its connection table
// hit (established, constant) or missed (SYN) for every packet, nothing
// was dropped; and one sampled frame per traffic kind is parsed in Go
// (packet.ParseTunnel: GRE from the node to a backend, outer checksum,
// the generated packet inside).
//
// Latency (Options.LatencyProbes), after the throughput runs: single
// stamped packets (one test run each) timed from gen_tx's
// bpf_ktime_get_ns() to gen_count's, with the forwarder and with
// gen_reflect; the difference of the medians is the latency the forwarder
// adds. The probes always run with both NAPI polls in softirq context on
// Options.CPU, inside the probe's test run (with threaded NAPI each probe
// would mostly time two kernel threads' wakeups: tens of microseconds).
//
// Generated frames are 64 bytes, TCP/IPv4 to one VIP (port 80) with
// Options.Backends GRE backends; inner checksums are not updated for the
// varied source (the forwarder does not check them). A BPF_PROG_TEST_RUN
// call adds its program to the kernel's XDP dispatcher and removes it
// afterwards (code patching and an RCU grace period: 25-45 ms per call
// here); gen_tx is therefore kept attached to a spare veth pair for the
// whole measurement, and each call then costs microseconds.
//
// Options.Methods measures the same traffic again with the VIP's reals
// on each forwarding method in turn (methods.go: GRE, GUE, DR, NAT
// forward; passes in alternating order, GRE again as the reference of
// the same passes): gen_count then counts only what that method sends to
// a backend (GUE: UDP from the node to a backend's GUE port around the
// generated packet; DR: the generated frame to the backend's own MAC,
// which the harness caches as the backend's next hop; NAT: the generated
// packet with its destination rewritten to a backend's address and
// port), and every run is checked as GRE's are. NATReply (established
// traffic only) generates the backend's replies of the established flows
// instead (their xlb_nat entries written first, as the forward path
// would) and counts the frames from the VIP to the clients against the
// forwarder's nat_reply count.
//
// SYNFlood (flood.go) reuses the generator outside this harness: a spoofed
// SYN flood with valid checksums into a lab node's receive ring, with the
// gen_sink program closing the loop (the e2e SYN-flood acceptance test).
//
// Needs root (CAP_SYS_ADMIN for the namespaces, CAP_BPF, CAP_NET_ADMIN),
// veth and a bpffs.
package throughput

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
)

// Traffic is one of the paper's traffic kinds (Fig. 9).
type Traffic string

// Traffic kinds.
const (
	// SYN: a TCP SYN of a new flow (new source address and port) every
	// packet: a connection-table miss, a Maglev lookup and an insert each
	// time (after the first ~Entries packets the table is full and every
	// insert replaces the entry idle longest).
	SYN Traffic = "syn"
	// Established: ACKs of Options.Flows flows round robin, tracked
	// before the window (connection-table hits).
	Established Traffic = "established"
	// Constant: ACKs of one 5-tuple (a hit on one cache-hot entry).
	Constant Traffic = "constant"
)

// AllTraffic lists the traffic kinds in report order.
func AllTraffic() []Traffic { return []Traffic{SYN, Established, Constant} }

// Placement is how the work is spread over CPUs (see the package doc).
type Placement string

// Placements.
const (
	// PlacementShared: generator, forwarder and receiver on Options.CPU,
	// one softirq chain.
	PlacementShared Placement = "shared"
	// PlacementSplit: the forwarder's NAPI thread alone on Options.CPU;
	// the generator and the receiver's NAPI thread on Options.GenCPU.
	PlacementSplit Placement = "split"
)

// Options size a measurement. DefaultOptions gives the full size; zero
// fields of a literal take its defaults, except CPU and GenCPU (0 is a CPU).
type Options struct {
	Mode      datapath.Mode // ModeNative (default) or ModeGeneric
	Placement Placement     // default PlacementShared
	CPU       int           // the forwarder's CPU
	GenCPU    int           // PlacementSplit: the generator's and receiver's CPU (not CPU)
	Duration  time.Duration // measured window of one run (default 2 s)
	Warmup    time.Duration // traffic before the window (default 300 ms)
	Runs      int           // runs per figure; the median is reported (default 5)
	Flows     int           // K of Established (default 10000)
	Traffic   []Traffic     // default AllTraffic
	// Baseline also measures every traffic kind with gen_reflect (XDP_TX
	// of the unchanged frame) in place of the forwarder, interleaved; it
	// gives the "forwarder alone" figures.
	Baseline bool
	// LatencyProbes is the number of single timed packets per traffic
	// kind, with the forwarder and (always) with gen_reflect (0: none).
	LatencyProbes int
	// Forwarder settings.
	ConntrackEntries uint32 // per CPU (default 1 << 20)
	Backends         int    // of the one VIP (default 10)
	TableSize        uint32 // Maglev M, prime (default 65537)
	// Methods also measures every traffic kind with the VIP's reals on
	// each of these forwarding methods, in passes of alternating order
	// (Results.Methods; nil: none). Not with LatencyProbes' unthreaded
	// probes: those are GRE's.
	Methods []Method
	// Logf receives progress lines (nil: none).
	Logf func(format string, args ...any)
}

// DefaultOptions returns the full measurement: native XDP, shared
// placement on the last CPU, with the baseline and 2000 latency probes per
// traffic kind. GenCPU (for PlacementSplit) is the CPU before it.
func DefaultOptions() Options {
	n := runtime.NumCPU()
	o := Options{CPU: n - 1, GenCPU: max(n-2, 0), Baseline: true, LatencyProbes: 2000}
	o.defaults() // cannot fail for these values
	return o
}

// SmokeOptions returns a short measurement (well under 20 s): one run of
// each traffic kind, short windows, baseline and a few latency probes.
func SmokeOptions() Options {
	o := DefaultOptions()
	o.Duration = 500 * time.Millisecond
	o.Warmup = 200 * time.Millisecond
	o.Runs = 1
	o.Baseline = true
	o.LatencyProbes = 200
	return o
}

func (o *Options) defaults() error {
	if o.Mode == "" || o.Mode == datapath.ModeAuto {
		o.Mode = datapath.ModeNative
	}
	if o.Placement == "" {
		o.Placement = PlacementShared
	}
	if o.Duration == 0 {
		o.Duration = 2 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = 300 * time.Millisecond
	}
	if o.Runs == 0 {
		o.Runs = 5
	}
	if o.Flows == 0 {
		o.Flows = 10000
	}
	if len(o.Traffic) == 0 {
		o.Traffic = AllTraffic()
	}
	if o.ConntrackEntries == 0 {
		o.ConntrackEntries = 1 << 20
	}
	if o.Backends == 0 {
		o.Backends = 10
	}
	if o.TableSize == 0 {
		o.TableSize = 65537
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	switch o.Mode {
	case datapath.ModeNative, datapath.ModeGeneric:
	default:
		return fmt.Errorf("throughput: mode %q: native or generic", o.Mode)
	}
	n := runtime.NumCPU()
	if o.CPU < 0 || o.CPU >= n {
		return fmt.Errorf("%w: cpu %d (cpus 0-%d)", errNoCPU, o.CPU, n-1)
	}
	switch o.Placement {
	case PlacementShared:
	case PlacementSplit:
		if o.GenCPU < 0 || o.GenCPU >= n {
			return fmt.Errorf("%w: generator cpu %d (cpus 0-%d)", errNoCPU, o.GenCPU, n-1)
		}
		if o.GenCPU == o.CPU {
			return errors.New("throughput: split placement needs GenCPU != CPU (or use PlacementShared)")
		}
	default:
		return fmt.Errorf("throughput: placement %q: split or shared", o.Placement)
	}
	if o.Flows < 1 || o.Flows > 1<<24 {
		return errors.New("throughput: flows must be in [1, 1<<24]")
	}
	if o.Backends < 1 || o.Backends > 200 {
		return errors.New("throughput: backends must be in [1, 200]")
	}
	if o.Runs < 1 || o.Duration < 10*time.Millisecond {
		return errors.New("throughput: at least one run of at least 10 ms")
	}
	for _, t := range o.Traffic {
		switch t {
		case SYN, Established, Constant:
		default:
			return fmt.Errorf("throughput: unknown traffic %q", t)
		}
	}
	for _, m := range o.Methods {
		if _, ok := methodEncap[m]; !ok {
			return fmt.Errorf("throughput: unknown method %q: gre, gue, dr or nat", m)
		}
	}
	return nil
}

// Results is one measurement: one attach mode, one placement.
type Results struct {
	Mode      datapath.Mode // as attached
	Placement Placement
	CPU       int // the forwarder's
	GenCPU    int // the generator's (PlacementSplit)
	Flows     int // K of Established
	Entries   uint32
	CPUModel  string
	Kernel    string
	// Mpps on one core: Figure.CapacityMpps of the forwarder's figures
	// (PlacementShared: one CPU running generator, forwarder and receiver;
	// PlacementSplit: one CPU running the forwarder's NAPI thread). 0 for
	// a kind not measured.
	SynMpps, EstablishedMpps, ConstantMpps float64
	// The forwarder alone on one core (Figure.ForwarderOnlyMpps; needs
	// Options.Baseline).
	SynForwarderOnlyMpps, EstablishedForwarderOnlyMpps, ConstantForwarderOnlyMpps float64
	Figures                                                                       []Figure // the forwarder, per traffic kind
	Baseline                                                                      []Figure // gen_reflect in its place (Options.Baseline)
	// Methods: the forwarder per forwarding method and traffic kind
	// (Options.Methods), GRE included, measured in the same passes.
	Methods []Figure
	Elapsed time.Duration
}

// Figure returns the forwarder's figure of traffic t.
func (r Results) Figure(t Traffic) (Figure, bool) {
	for _, f := range r.Figures {
		if f.Traffic == t {
			return f, true
		}
	}
	return Figure{}, false
}

// Figure is one traffic kind through one program (the forwarder or
// gen_reflect): medians over the runs.
type Figure struct {
	Traffic Traffic
	Program string // "xlb" or "reflect"
	// Method is the reals' forwarding method of a Results.Methods
	// figure ("" elsewhere: GRE).
	Method Method
	Mpps   float64 // received at the receiver per second of the window
	// NsPerPacket is 1000 / Mpps (wall clock).
	NsPerPacket float64
	// CPUNs is the CPU time per received packet of the measured work:
	// with PlacementSplit the forwarder's NAPI thread (the forwarder's
	// core); with PlacementShared the generator's thread and the CPU's
	// ksoftirqd (the whole chain: generator, forwarder, receiver). Unlike
	// Mpps it does not depend on what else the machine ran meanwhile.
	CPUNs float64
	// CapacityMpps is 1000 / CPUNs: the rate one whole CPU doing this
	// work gives. Busy is the share of the window that work had its CPU
	// (1 = all of it).
	CapacityMpps float64
	Busy         float64
	// BestCPUNs is the lowest CPUNs of the runs: the figure with the
	// quietest neighbours (medians of one figure spread by tens of percent
	// on a busy machine).
	BestCPUNs float64
	// ForwarderNs is CPUNs with PlacementSplit (the forwarder's NAPI
	// thread alone), 0 with PlacementShared.
	ForwarderNs float64
	// With Options.Baseline, for the forwarder: CPUNs minus gen_reflect's
	// CPUNs for the same traffic and placement, i.e. the forwarder's own
	// cost beyond a program that only answers XDP_TX, and 1000 / that.
	ForwarderOnlyNs   float64
	ForwarderOnlyMpps float64
	// ForwarderOnlyBestNs is BestCPUNs minus gen_reflect's BestCPUNs.
	ForwarderOnlyBestNs float64
	Runs                []Run
	Latency             *Latency // Options.LatencyProbes
}

// Run is one measured window with its raw counters.
type Run struct {
	Seconds  float64 // window length
	Offered  uint64  // frames the generator made in the window
	Received uint64  // frames gen_count accepted (encapsulated, or plain for gen_reflect)
	Mpps     float64
	// Receiver: every frame gen_count saw in the window (RxTotal), those
	// that were neither a correct encapsulation nor the plain frame (RxBad).
	RxTotal, RxBad uint64
	// Forwarder: its global counters' increments in the window, by name
	// (datapath.StatNames); only nonzero ones.
	Forwarder map[string]uint64
	// Backends counts encapsulated frames per backend over the whole run
	// (index b-1 is the backend 10.0.1.b).
	Backends []uint64
	// CPU is the CPU time of the measured work in the window (see
	// Figure.CPUNs).
	CPU time.Duration
	// Whole run, measured after the generator stopped and the rings
	// drained: frames the forwarder sent with XDP_TX that gen_count never
	// saw (the receiver's ring overflowed); at most 1% or the run fails.
	LostAfterForwarder uint64
}

// Latency is the timed single packets of one traffic kind (ns).
type Latency struct {
	Probes            int
	Median, P99, Mean float64 // with the forwarder
	Min               float64
	BaselineMedian    float64 // with gen_reflect
	BaselineMin       float64
	// Added is Median - BaselineMedian: what the forwarder adds.
	Added float64
}

// Measure runs the measurement o describes. It fails on a run whose
// counters are inconsistent (ErrCheck).
func Measure(ctx context.Context, o Options) (Results, error) {
	if err := o.defaults(); err != nil {
		return Results{}, err
	}
	if err := datapath.EnsureBPFFS(); err != nil {
		return Results{}, err
	}
	res := Results{Mode: o.Mode, Placement: o.Placement, CPU: o.CPU, GenCPU: o.GenCPU,
		Flows: o.Flows, Entries: o.ConntrackEntries}
	if o.Placement == PlacementShared {
		res.GenCPU = o.CPU
	}
	res.CPUModel, res.Kernel = machine()
	start := time.Now()
	threadCPU := o.GenCPU
	if o.Placement == PlacementShared {
		threadCPU = o.CPU
	}
	err := onPrivateThread(threadCPU, func(sysfs string) error {
		h, err := newHarness(o, sysfs)
		if err != nil {
			return err
		}
		defer h.close()
		return h.measureAll(ctx, &res)
	})
	res.Elapsed = time.Since(start)
	return res, err
}

// ErrCheck reports a run whose counters disagree with what was sent.
var ErrCheck = errors.New("throughput: counters inconsistent")

// Summary is a Markdown table of r's figures (medians).
func (r Results) Summary() string {
	var s strings.Builder
	where := fmt.Sprintf("forwarder's NAPI thread alone on CPU %d, generator and receiver on CPU %d", r.CPU, r.GenCPU)
	what := "the forwarder's NAPI thread"
	if r.Placement == PlacementShared {
		where = fmt.Sprintf("generator, forwarder and receiver on CPU %d", r.CPU)
		what = "the whole chain"
	}
	fmt.Fprintf(&s, "\n%s XDP, %s placement (%s); %d established flows, %d conntrack entries per CPU; %s, kernel %s\n\n",
		r.Mode, r.Placement, where, r.Flows, r.Entries, r.CPUModel, r.Kernel)
	fmt.Fprintf(&s, "| traffic | Mpps received | CPU ns/packet (%s), median (best) | Mpps per whole CPU | CPU busy | reflector Mpps | reflector CPU ns/packet | forwarder alone ns/packet (best) | forwarder alone Mpps | latency median ns (reflector) | added ns |\n", what)
	s.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, f := range r.Figures {
		refl, reflNs, only, onlyMpps, lat, added := "—", "—", "—", "—", "—", "—"
		for _, b := range r.Baseline {
			if b.Traffic == f.Traffic {
				refl, reflNs = fmt.Sprintf("%.2f", b.Mpps), fmt.Sprintf("%.0f", b.CPUNs)
			}
		}
		if f.ForwarderOnlyNs != 0 {
			only = fmt.Sprintf("%.0f (%.0f)", f.ForwarderOnlyNs, f.ForwarderOnlyBestNs)
		}
		if f.ForwarderOnlyMpps > 0 {
			onlyMpps = fmt.Sprintf("%.2f", f.ForwarderOnlyMpps)
		}
		if l := f.Latency; l != nil {
			lat = fmt.Sprintf("%.0f (%.0f)", l.Median, l.BaselineMedian)
			added = fmt.Sprintf("%.0f", l.Added)
		}
		fmt.Fprintf(&s, "| %s | %.2f | %.0f (%.0f) | %.2f | %.0f%% | %s | %s | %s | %s | %s | %s |\n", f.Traffic, f.Mpps, f.CPUNs,
			f.BestCPUNs, f.CapacityMpps, 100*f.Busy, refl, reflNs, only, onlyMpps, lat, added)
	}
	if len(r.Methods) > 0 {
		fmt.Fprintf(&s, "\nBy forwarding method (the same passes, alternating order):\n\n"+
			"| method | traffic | Mpps received | CPU ns/packet (%s), median (best) | Mpps per whole CPU | CPU busy |\n|---|---|---:|---:|---:|---:|\n", what)
		for _, f := range r.Methods {
			fmt.Fprintf(&s, "| %s | %s | %.2f | %.0f (%.0f) | %.2f | %.0f%% |\n", f.Method, f.Traffic, f.Mpps, f.CPUNs, f.BestCPUNs,
				f.CapacityMpps, 100*f.Busy)
		}
	}
	return s.String()
}
