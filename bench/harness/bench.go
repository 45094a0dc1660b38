// Package bench measures the forwarder per packet, and the same job with
// kernel LRU hash maps as the connection table, with BPF_PROG_TEST_RUN on
// one pinned CPU (docs/PERFORMANCE.md, "The connection table against LRU maps").
//
// How a figure is taken. The runs happen on one OS thread pinned to
// Options.CPU, inside a network namespace private to that thread, where a
// veth end is the ingress device and the backends are routed through a
// permanent neighbour on it (the forwarder's bpf_fib_lookup succeeds and
// answers XDP_TX, as on a one-armed load balancer). The forwarder is
// loaded with internal/datapath.Load (maps pinned in a private directory,
// removed afterwards) and given one VIP per scenario family (TCP v4, UDP
// v4, TCP v6) with Options.Backends backends each, GRE. The LRU variants
// are bench_lru (bpf/bench.c): the forwarder's job with another connection
// table, reading the forwarder's own maps.
//
// BPF_PROG_TEST_RUN with repeat > 1 hands each iteration the frame the
// previous one produced, so every run goes through bench_wrap: it restores
// the template frame, writes the flow number (same flow, a new flow per
// packet, or K flows round robin) and tail-calls the program under test.
// The wrapper's own cost is measured with a target that only returns
// XDP_TX, in a run just before each real run, and subtracted. Tables
// measured together are interleaved: in each of Options.Runs rounds every
// table has one run of Options.Repeat packets, taken in slices of at most
// 32768 packets side by side with the other tables' (measure.go), so
// neighbours and drift hit them alike; each program is loaded
// Options.Instances times and used in turn (instances.go). A figure is the
// median over the rounds, Figure.Rel its ratio to the first table's, slice
// by slice; the kernel reports whole nanoseconds per packet.
//
// Every run is checked: the last verdict is XDP_TX and the last frame a
// GRE packet to a backend, and the forwarder's counters (xlb_stats, which
// bench_lru shares) say that every packet was forwarded with XDP_TX and
// hit or missed the connection table as the scenario intends.
//
// Needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN for the namespace), a
// mounted or mountable bpffs and veth.
package harness

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

// Table is the connection table under test.
type Table string

// Tables. Sizes are per CPU in the sense that one CPU may track
// Options.Entries flows.
const (
	// TableXLB is the forwarder itself (bpf/xlb.c): the per-CPU slices of
	// 8-way buckets, Options.Entries per CPU.
	TableXLB Table = "xlb"
	// TableLRUHash is one BPF_MAP_TYPE_LRU_HASH shared by all CPUs (common
	// LRU list) of Options.Entries entries, keyed by the 5-tuple.
	TableLRUHash Table = "lru_hash"
	// TableLRUNoCommon is an LRU_HASH with BPF_F_NO_COMMON_LRU: one hash
	// table, one LRU list per CPU; Options.Entries * CPUs entries, so that
	// each CPU's list holds Options.Entries.
	TableLRUNoCommon Table = "lru_hash_percpu_lru"
	// TableLRUPercpuHash is BPF_MAP_TYPE_LRU_PERCPU_HASH of Options.Entries
	// entries: shared keys and LRU list, one value per CPU.
	TableLRUPercpuHash Table = "lru_percpu_hash"
	// TableNone is the LRU program without a connection table: the Maglev
	// table for every packet (the stateless floor).
	TableNone Table = "none"
)

// Tables lists every table in the order reports show them.
func Tables() []Table {
	return []Table{TableXLB, TableLRUHash, TableLRUNoCommon, TableLRUPercpuHash, TableNone}
}

// Scenario names a traffic pattern.
type Scenario string

// Scenarios. Flows are TCP unless named otherwise; v4 unless named v6.
const (
	TCPHit4     Scenario = "tcp_ack_hit_v4" // ACK of one established flow
	TCPHit6     Scenario = "tcp_ack_hit_v6"
	UDPHit4     Scenario = "udp_hit_v4"    // one tracked UDP flow
	SYNSameFlow Scenario = "syn_same_flow" // SYN of one flow, repeated
	NewFlow     Scenario = "new_flow"      // a new flow (SYN) every packet, table emptied before each run
	NewFlowUDP  Scenario = "new_flow_udp"  // the same with UDP: a non-SYN miss, the forwarder also reads the other CPUs' slices
	NewFlowFull Scenario = "new_flow_full" // a new flow (SYN) every packet, every entry of the table in use
	Cycled      Scenario = "cycled"        // ACKs of Options.CycleFlows established flows, round robin
	// NAT replies (Options.Method EncapNAT only; not in Scenarios): an
	// ACK from the first backend's natBackendPort to the client of a
	// tracked NAT flow (its xlb_nat entry written first), rewritten to the
	// VIP and sent by the FIB (natreply.go).
	NATReply4 Scenario = "nat_reply_v4"
	NATReply6 Scenario = "nat_reply_v6"
	// The same to Options.CycleFlows clients round robin, each with its
	// xlb_nat entry: far more clients than next-hop cache slots
	// (bpf/nathop.h), so every reply asks the FIB, as a flow's first does.
	NATReplyCycled4 Scenario = "nat_reply_cycled_v4"
	NATReplyCycled6 Scenario = "nat_reply_cycled_v6"
)

// Scenarios lists every scenario in the order reports show them.
func Scenarios() []Scenario {
	return []Scenario{TCPHit4, TCPHit6, UDPHit4, SYNSameFlow, NewFlow, NewFlowUDP, NewFlowFull, Cycled}
}

// FlowMode is how the wrapper changes the flow between packets (enum
// bench_flow_mode).
type FlowMode uint32

// Flow modes; the values are the C enum's.
const (
	SameFlow  = FlowMode(benchBenchFlowModeBENCH_SAME)
	NewFlows  = FlowMode(benchBenchFlowModeBENCH_NEW)
	CycleFlow = FlowMode(benchBenchFlowModeBENCH_CYCLE)
)

func (m FlowMode) String() string {
	switch m {
	case SameFlow:
		return "same flow"
	case NewFlows:
		return "new flow per packet"
	case CycleFlow:
		return "K flows cycled"
	}
	return fmt.Sprintf("mode %d", uint32(m))
}

// Stage is where bench_lru stops for elimination (enum bench_stage): it
// answers XDP_TX right after the stage, so the difference between two
// stops is what the stage costs.
type Stage uint32

// Stages; the values are the C enum's.
const (
	StopNone   = Stage(benchBenchStageBENCH_STOP_NONE)   // the whole job
	StopParse  = Stage(benchBenchStageBENCH_STOP_PARSE)  // parse_packet
	StopVIP    = Stage(benchBenchStageBENCH_STOP_VIP)    // + VIP match, node settings, flow hash
	StopSelect = Stage(benchBenchStageBENCH_STOP_SELECT) // + connection table / Maglev, real checks
	StopStats  = Stage(benchBenchStageBENCH_STOP_STATS)  // + service and real counters
	StopEncap  = Stage(benchBenchStageBENCH_STOP_ENCAP)  // + encapsulation; the rest is the next hop
)

func (s Stage) String() string {
	switch s {
	case StopNone:
		return "whole job"
	case StopParse:
		return "parse"
	case StopVIP:
		return "+ VIP, node, flow hash"
	case StopSelect:
		return "+ table, Maglev, real"
	case StopStats:
		return "+ counters"
	case StopEncap:
		return "+ encapsulation"
	}
	return fmt.Sprintf("stage %d", uint32(s))
}

// Options size a measurement. DefaultOptions gives the full size; zero
// fields of a literal take those defaults, except CPU (0 is CPU 0).
type Options struct {
	CPU       int    // the CPU every run is pinned to
	Entries   uint32 // connection table entries per CPU (default 1 << 20)
	Backends  int    // backends per VIP (default 10, at most 256)
	TableSize uint32 // Maglev M, prime (default 65537)
	Repeat    uint32 // packets per run (default 1 << 18; NewFlow runs at most Entries/4)
	Runs      int    // runs per figure, the median is reported (default 21)
	// Instances: each program under test is loaded this many times and
	// the runs use them in turn, so that no figure hangs on where the
	// kernel placed one load's code (instances.go; default 8).
	Instances  int
	CycleFlows uint32 // flows of the Cycled scenario (default 100000)
	Scenarios  []Scenario
	// NoFIB leaves forwarding off on the ingress device: the forwarder's
	// bpf_fib_lookup returns at once and the fallback gateway is used (to
	// see what the route and neighbour lookup costs; see MeasureBreakdown).
	NoFIB bool
	// FIBPerPacket leaves the reals without a cached next hop, so the
	// forwarder calls bpf_fib_lookup for every packet (xlbd caches them).
	FIBPerPacket bool
	// Stop makes bench_lru answer XDP_TX after this stage (not for
	// TableXLB, whose program is the forwarder's, nor with NewFlowFull,
	// whose pre-fill needs the whole job). Runs are then checked for the
	// verdict only. See MeasureStages.
	Stop Stage
	// Method is the forwarding method of every service (0: GRE). With
	// EncapNAT the backends listen on natBackendPort.
	Method state.Encap
	// Sched is the scheduler of every VIP (state.SchedMaglev by default):
	// list schedulers get all the VIP's backends at weight 1,
	// maglev-source the whole client address.
	Sched state.SchedKind
	// Persist, when not 0, makes every VIP persistent with this timeout
	// (each client its own template).
	Persist time.Duration
	// Logf receives progress lines (nil: none).
	Logf func(format string, args ...any)
}

// DefaultOptions returns the full-size measurement on the last CPU (CPU 0
// takes most device interrupts).
func DefaultOptions() Options {
	o := Options{CPU: runtime.NumCPU() - 1}
	o.defaults() // cannot fail for these values
	return o
}

// SmokeOptions returns a short measurement (seconds) with the full-size
// tables: for tests that check the harness and the programs, not figures.
func SmokeOptions() Options {
	o := DefaultOptions()
	o.Repeat = 20000
	o.Runs = 3
	o.Instances = 2
	return o
}

func (o *Options) defaults() error {
	if o.Entries == 0 {
		o.Entries = 1 << 20
	}
	if o.Backends == 0 {
		o.Backends = 10
	}
	if o.TableSize == 0 {
		o.TableSize = 65537
	}
	if o.Repeat == 0 {
		o.Repeat = 1 << 18
	}
	if o.Runs == 0 {
		o.Runs = 21
	}
	if o.Instances == 0 {
		o.Instances = 8
	}
	if o.CycleFlows == 0 {
		o.CycleFlows = 100000
	}
	if len(o.Scenarios) == 0 {
		o.Scenarios = Scenarios()
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.CPU < 0 || o.CPU >= runtime.NumCPU() {
		return fmt.Errorf("bench: cpu %d: this machine has cpus 0-%d", o.CPU, runtime.NumCPU()-1)
	}
	if o.Instances < 1 || o.Instances > 64 {
		return errors.New("bench: instances must be in [1, 64]")
	}
	if o.Backends < 1 || o.Backends > maxBackends {
		return fmt.Errorf("bench: backends must be in [1, %d]", maxBackends)
	}
	if o.Entries < 1<<10 {
		return errors.New("bench: at least 1024 conntrack entries")
	}
	if o.Stop > StopEncap {
		return fmt.Errorf("bench: unknown stage %d", o.Stop)
	}
	if o.CycleFlows > 1<<24 {
		return errors.New("bench: at most 1<<24 cycled flows")
	}
	if o.Entries > 1<<21 {
		return errors.New("bench: at most 1<<21 conntrack entries per CPU")
	}
	return nil
}

// Figure is one scenario's result, in ns per packet. Run i of the
// program under test is paired with calibration run i of the wrapper alone
// (same frame, same flow mode, just before it).
type Figure struct {
	Scenario Scenario
	Mode     FlowMode
	Ns       float64   // median of (run i - calibration i): the program under test alone
	Best     float64   // fastest run - fastest calibration: the figure with quiet neighbours
	Raw      float64   // median of Runs: test-run loop + wrapper + program
	Wrapper  float64   // median of Calib
	Runs     []float64 // raw ns/packet of each run
	Calib    []float64 // ns/packet of each calibration run
	// Rel is the figure against the first target's (MeasureBuilds: this
	// build's), slice by slice (relative). The figure to compare builds
	// with: it does not hang on which spells of neighbours two medians
	// fell in.
	Rel     float64
	slices  []float64 // (slice - its calibration) of each slice, in the order of every target's
	Packets uint64    // packets measured (all runs)
}

// Results is one table's measurement.
type Results struct {
	Table   Table
	CPU     int
	Entries uint32 // per CPU
	FIB     bool   // bpf_fib_lookup succeeded (not Options.NoFIB)
	Stop    Stage  // Options.Stop
	// Build is the forwarder object file measured (MeasureBuilds); empty
	// for this build's forwarder and for the other tables.
	Build string
	Sync  bool // connection sync's decision records on (MeasureSync)
	// Sched names the scheduler setting measured (MeasureSchedulers);
	// empty otherwise.
	Sched string
	// Harness is ns/packet of a program that only returns XDP_TX, run
	// directly: the kernel's test-run loop.
	Harness float64
	// Wrapper is ns/packet of bench_wrap tail-calling that program, per
	// flow mode (median of all calibration runs): what Figure.Ns excludes.
	Wrapper map[FlowMode]float64
	// Fill is the table's occupancy before NewFlowFull (0 if not run; 1 for
	// TableNone).
	Fill    float64
	Figures []Figure
	Elapsed time.Duration // the whole measurement this result was part of
}

// Figure returns the figure of scenario s.
func (r Results) Figure(s Scenario) (Figure, bool) {
	for _, f := range r.Figures {
		if f.Scenario == s {
			return f, true
		}
	}
	return Figure{}, false
}

// MeasureForwarder measures the forwarder (TableXLB).
func MeasureForwarder(o Options) (Results, error) { return Measure(TableXLB, o) }

// MeasureLRU measures the forwarder's job with the kernel LRU table t
// (TableLRUHash, TableLRUNoCommon, TableLRUPercpuHash) or with none
// (TableNone).
func MeasureLRU(t Table, o Options) (Results, error) {
	if t == TableXLB {
		return Results{}, errors.New("bench: MeasureLRU: use MeasureForwarder for the forwarder")
	}
	return Measure(t, o)
}

// Measure runs o.Scenarios against table t alone.
func Measure(t Table, o Options) (Results, error) {
	rs, err := MeasureTables([]Table{t}, o)
	if err != nil {
		return Results{}, err
	}
	return rs[0], nil
}

// Compare measures every table (Tables) side by side with the same
// options; see MeasureTables.
func Compare(o Options) ([]Results, error) { return MeasureTables(Tables(), o) }

// MeasureTables runs o.Scenarios against every table in tables, side by
// side: one forwarder instance and namespace, every table loaded at once,
// and in each round of runs every table has one run, so neighbours and
// drift affect them alike. Results are in the order of tables. The
// instance and namespace are removed before it returns. It fails on the
// first run whose verdicts or counters are not what the scenario intends
// (ErrVerdict, ErrCounters).
func MeasureTables(tables []Table, o Options) ([]Results, error) {
	specs := make([]targetSpec, len(tables))
	for i, t := range tables {
		specs[i] = targetSpec{table: t, stop: o.Stop, noFIB: o.NoFIB}
	}
	return measureSpecs(specs, o)
}

// MeasureStages measures o.Scenarios against table t (not TableXLB) once
// per stage, StopParse to StopNone, side by side like MeasureTables: the
// differences between consecutive results are what each stage costs.
// o.Stop is ignored.
func MeasureStages(t Table, o Options) ([]Results, error) {
	var specs []targetSpec
	for _, s := range []Stage{StopParse, StopVIP, StopSelect, StopStats, StopEncap, StopNone} {
		specs = append(specs, targetSpec{table: t, stop: s, noFIB: o.NoFIB})
	}
	return measureSpecs(specs, o)
}

// MeasureBreakdown measures, side by side, what the forwarder's job costs
// stage by stage: the job without a connection table (TableNone) stopped
// after each stage, the whole job with the FIB lookup off and on, and the
// forwarder (TableXLB) with the FIB lookup off and on. o.Stop and o.NoFIB
// are ignored; o.Scenarios must not include NewFlowFull.
func MeasureBreakdown(o Options) ([]Results, error) {
	var specs []targetSpec
	for _, s := range []Stage{StopParse, StopVIP, StopSelect, StopStats, StopEncap} {
		specs = append(specs, targetSpec{table: TableNone, stop: s})
	}
	specs = append(specs, targetSpec{table: TableNone, noFIB: true}, targetSpec{table: TableNone},
		targetSpec{table: TableXLB, noFIB: true}, targetSpec{table: TableXLB})
	return measureSpecs(specs, o)
}

// MeasureBuilds measures the forwarder of this build and, side by side with
// it, the forwarder of each object file in objects (an xlb_bpfel.o of
// another build of internal/datapath, with the same maps): in each round
// every build has one run, so drift and neighbours affect them alike. This
// is how a change to the data plane is measured against the build before
// it on a shared machine. Results are in the order this build, then
// objects; Results.Build names the object.
func MeasureBuilds(objects []string, o Options) ([]Results, error) {
	specs := []targetSpec{{table: TableXLB, noFIB: o.NoFIB}}
	for i, obj := range objects {
		specs = append(specs, targetSpec{table: TableXLB, noFIB: o.NoFIB, object: obj, apart: i + 1})
	}
	return measureSpecs(specs, o)
}

func measureSpecs(specs []targetSpec, o Options) ([]Results, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if len(specs) == 0 || len(specs) > 16 {
		return nil, errors.New("bench: 1 to 16 tables to measure")
	}
	for _, s := range specs {
		switch s.table {
		case TableXLB, TableLRUHash, TableLRUNoCommon, TableLRUPercpuHash, TableNone:
		default:
			return nil, fmt.Errorf("bench: unknown table %q", s.table)
		}
		if s.stop == StopNone {
			continue
		}
		if s.table == TableXLB {
			return nil, errors.New("bench: the forwarder cannot stop early (stages are for bench_lru)")
		}
		if slices.Contains(o.Scenarios, NewFlowFull) {
			return nil, errors.New("bench: a stop with new_flow_full: the pre-fill needs the whole job")
		}
	}
	var res []Results
	start := time.Now()
	err := onPinnedThread(o.CPU, func() error {
		fib := !specs[0].noFIB
		ifindex, err := setupNetns(fib)
		if err != nil {
			return err
		}
		h, err := newHarness(o, specs, ifindex, fib)
		if err != nil {
			return err
		}
		defer h.close()
		res, err = h.measureAll()
		return err
	})
	for i := range res {
		res[i].Elapsed = time.Since(start)
	}
	return res, err
}

// maxBackends is the most backends per VIP: a scheduler list's length
// (XLB_SCHED_LIST_MAX).
const maxBackends = 256

// Addresses of the measurement (inside the private namespace).
var (
	nodeV4 = netip.MustParseAddr("10.0.0.11")
	nodeV6 = netip.MustParseAddr("fd00::11")
	gwV4   = netip.MustParseAddr("10.0.0.1")
	gwV6   = netip.MustParseAddr("fd00::1")
	vip4   = netip.MustParseAddr("10.200.0.1")
	vip6   = netip.MustParseAddr("fd00:200::1")
	peer4  = netip.MustParseAddr("198.51.100.7")
	peer6  = netip.MustParseAddr("2001:db8::7")
)

const (
	backendNet4 = "10.0.0.0/22" // backends from 10.0.1.1 (the node and gateway's 10.0.0.0/24 is on link)
	backendNet6 = "fd00:1::/64"
	clientNet4  = "198.51.100.0/24" // peer4's
	cycleNet4   = "172.16.0.0/14"   // the cycled flows' (baseCycle): the clients of cycled NAT replies
	clientNet6  = "2001:db8::/64"   // peer6's
)

// Service keys of the state.
var (
	vipTCP4 = state.VIPKey{Addr: vip4, Port: 80, Proto: packet.ProtoTCP}
	vipUDP4 = state.VIPKey{Addr: vip4, Port: 53, Proto: packet.ProtoUDP}
	vipTCP6 = state.VIPKey{Addr: vip6, Port: 80, Proto: packet.ProtoTCP}
)

// benchState is one VIP per scenario family (TCP v4, UDP v4, TCP v6), each
// with o.Backends backends of its family in a Maglev table of o.TableSize,
// GRE.
func benchState(o Options) (*state.State, error) {
	st := &state.State{
		Node: state.Node{Addr4: nodeV4, Addr6: nodeV6, GatewayMAC: gwMAC, Timeouts: state.Timeouts{
			TCPSyn: time.Minute, TCP: 15 * time.Minute, TCPFin: 2 * time.Minute, UDP: 5 * time.Minute}},
		Services: map[state.VIPKey]*state.Service{},
	}
	next := uint32(1)
	for i, key := range []state.VIPKey{vipTCP4, vipUDP4, vipTCP6} {
		var backends []maglev.Backend
		ids := map[string]uint32{}
		for b := 0; b < o.Backends; b++ {
			var a netip.Addr
			if key.Addr.Is4() {
				a = netip.AddrFrom4([4]byte{10, 0, byte(1 + (b+1)/256), byte(b + 1)})
			} else {
				a = netip.MustParseAddr(fmt.Sprintf("fd00:1::%x", b+1))
			}
			backends = append(backends, maglev.Backend{Name: a.String(), Weight: 1})
			ids[a.String()] = next
			r := state.Real{Addr: a, SvcID: uint32(i + 1), Active: true}
			if o.Method == state.EncapNAT {
				r.Port = natBackendPort
			}
			st.Reals.Set(next, r)
			next++
		}
		tbl, err := maglev.Build(backends, o.TableSize)
		if err != nil {
			return nil, fmt.Errorf("maglev table: %w", err)
		}
		entries := make([]uint32, len(tbl.Entries))
		for j, e := range tbl.Entries {
			entries[j] = ids[tbl.Backends[e].Name]
		}
		st.Services[key] = &state.Service{SvcID: uint32(i + 1), Encap: cmp.Or(o.Method, state.EncapGRE), Table: entries,
			Sched: benchSched(o, key.Proto, next-uint32(o.Backends))}
	}
	st.Node.GUEPort, st.Node.NAT = gueBenchPort, o.Method == state.EncapNAT
	return st, nil
}

// benchSched is o's scheduler (and persistence) over the reals first,
// first+1, ... of one VIP, weight 1 each.
func benchSched(o Options, proto uint8, first uint32) state.Sched {
	sc := state.Sched{Kind: o.Sched, Proto: proto}
	info := o.Sched.Info()
	if info != nil && info.HashesSource {
		sc.Plen4, sc.Plen6 = 32, 128
	}
	if (info != nil && info.UsesList()) || o.Persist != 0 {
		for i := range o.Backends {
			sc.List = append(sc.List, state.SchedEnt{RealID: first + uint32(i), Weight: 1})
		}
		sc.Stride = 1
	}
	if o.Persist != 0 {
		sc.Persist = state.Persist{ID: uint32(proto), Timeout: o.Persist, Plen4: 32, Plen6: 128}
	}
	return sc
}

// Flow numbers (the varied source address) of the scenarios: disjoint
// ranges, so the flows of a measurement are never the pre-filled ones.
const (
	baseFill  = 0x0a000000 // 10.0.0.0: pre-fill of NewFlowFull, fillRange per target
	fillRange = 1 << 23    // flows of one target's pre-fill, at most
	baseNew   = 0xc6120000 // 198.18.0.0: new flows
	baseCycle = 0xac100000 // 172.16.0.0: cycled flows
)

// scenario is how one Scenario is run.
type scenario struct {
	name   Scenario
	flow   packet.Flow
	mode   FlowMode
	varOff uint32       // offset of the varied 32-bit field in the frame
	expect benchXlbStat // the counter every packet must add to
	fill   fillMode
}

type fillMode int

const (
	fillEmpty   fillMode = iota // emptied before the scenario
	fillEachRun                 // emptied before every run
	fillFull                    // every entry in use before the scenario
)

// Offsets of the source address's last 32 bits in an untagged frame.
const (
	srcOff4 = 14 + 12
	srcOff6 = 14 + 8 + 12
	// the destination's: the client of a NAT reply
	dstOff4 = 14 + 16
	dstOff6 = 14 + 24 + 12
)

func scenarioOf(s Scenario) (scenario, error) {
	tcp4 := packet.Flow{Src: peer4, Dst: vip4, SrcPort: 40000, DstPort: 80, Proto: packet.ProtoTCP,
		TCPFlags: packet.ACK, DstMAC: [6]byte(nodeMAC), SrcMAC: [6]byte(gwMAC)}
	syn4 := tcp4
	syn4.TCPFlags = packet.SYN
	udp4 := tcp4
	udp4.Proto, udp4.TCPFlags, udp4.DstPort = packet.ProtoUDP, 0, 53
	tcp6 := tcp4
	tcp6.Src, tcp6.Dst = peer6, vip6
	hit, miss := benchXlbStatXLB_STAT_CT_HIT, benchXlbStatXLB_STAT_CT_MISS
	switch s {
	case TCPHit4:
		return scenario{s, tcp4, SameFlow, srcOff4, hit, fillEmpty}, nil
	case TCPHit6:
		return scenario{s, tcp6, SameFlow, srcOff6, hit, fillEmpty}, nil
	case UDPHit4:
		return scenario{s, udp4, SameFlow, srcOff4, hit, fillEmpty}, nil
	case SYNSameFlow:
		return scenario{s, syn4, SameFlow, srcOff4, hit, fillEmpty}, nil
	case NewFlow:
		return scenario{s, syn4, NewFlows, srcOff4, miss, fillEachRun}, nil
	case NewFlowUDP:
		return scenario{s, udp4, NewFlows, srcOff4, miss, fillEachRun}, nil
	case NewFlowFull:
		return scenario{s, syn4, NewFlows, srcOff4, miss, fillFull}, nil
	case Cycled:
		return scenario{s, tcp4, CycleFlow, srcOff4, hit, fillEmpty}, nil
	case NATReply4:
		return scenario{s, natReplyOf(tcp4), SameFlow, srcOff4, benchXlbStatXLB_STAT_NAT_REPLY, fillEmpty}, nil
	case NATReply6:
		return scenario{s, natReplyOf(tcp6), SameFlow, srcOff6, benchXlbStatXLB_STAT_NAT_REPLY, fillEmpty}, nil
	case NATReplyCycled4:
		return scenario{s, natReplyOf(tcp4), CycleFlow, dstOff4, benchXlbStatXLB_STAT_NAT_REPLY, fillEmpty}, nil
	case NATReplyCycled6:
		return scenario{s, natReplyOf(tcp6), CycleFlow, dstOff6, benchXlbStatXLB_STAT_NAT_REPLY, fillEmpty}, nil
	}
	return scenario{}, fmt.Errorf("bench: unknown scenario %q", s)
}

// Sentinel errors of the checks every run passes.
var (
	ErrVerdict  = errors.New("unexpected XDP verdict")
	ErrCounters = errors.New("forwarder counters disagree with the scenario")
)

// XDP verdicts.
const (
	xdpAborted = 0
	xdpDrop    = 1
	xdpPass    = 2
	xdpTX      = 3
)
