package harness

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/kernelnet"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/progrun"
	"github.com/xlbproject/xlb/internal/state"
	"golang.org/x/sys/unix"
)

// harness is one loaded forwarder instance, the wrapper, and the programs
// under test (targets), on the calling (pinned, namespaced) thread. All
// targets read the same state and count into the same xlb_stats; each has
// its own connection table.
type harness struct {
	o       Options
	ifindex int
	ncpu    int
	pinDir  string
	dp      *datapath.Datapath
	dpOpts  datapath.Options // dp's
	pinned  []*ebpf.Map
	repl    map[string]*ebpf.Map
	stats   *ebpf.Map // xlb_stats (per CPU)
	ct      *ebpf.Map // xlb_ct
	shift   uint32    // log2(buckets per CPU) of xlb_ct
	base    *benchObjects
	targets []*target
	loaded  map[instKey]*instances // instances.go
	fib     bool                   // forwarding is on on the ingress device
	sent    benchXlbStat           // the counter of a packet sent: forward_tx, or nat_reply for NAT replies
	zero    []benchCtBucket        // a CPU slice of empty buckets
	sync    syncState              // sync.go
	schedOf *target                // whose svc_sched the maps hold (sched.go)
}

// target is one program under test and its connection table.
type target struct {
	table Table
	stop  Stage
	fib   bool // bpf_fib_lookup succeeds (forwarding on)
	// inst are the loads of the program (instances.go); prog is the one
	// the next run uses.
	prog  *ebpf.Program
	inst  *instances
	sched schedWrite // written before each run (targetSpec.sched)
	res   Results
}

func (t *target) String() string { return t.res.label() }

// targetSpec says what to load and how to run it: table, stopped at stage
// stop, with forwarding off on the ingress (noFIB).
type targetSpec struct {
	table Table
	stop  Stage
	noFIB bool
	// object: for TableXLB, the forwarder of this object file (another
	// build) instead of this build's, on the same maps.
	object string
	sync   bool // connection sync's decision records on (MeasureSync)
	// sched: for TableXLB, every VIP's scheduler during this target's
	// runs (MeasureSchedulers).
	sched *SchedSpec
	// apart: targets of the same program share its instances unless
	// their apart differs (MeasureBuilds: the same object twice is two
	// programs, as the A/B of a build against itself must be).
	apart int
}

func newHarness(o Options, specs []targetSpec, ifindex int, fib bool) (h *harness, err error) {
	if err := datapath.EnsureBPFFS(); err != nil {
		return nil, err
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	h = &harness{o: o, ifindex: ifindex, ncpu: ncpu, fib: fib, repl: map[string]*ebpf.Map{}, sent: benchXlbStatXLB_STAT_FORWARD_TX,
		pinDir: filepath.Join("/sys/fs/bpf", "xlb-bench-"+hex.EncodeToString(rnd[:]))}
	self := h // the error returns below set h to nil
	defer func() {
		if err != nil {
			self.close()
		}
	}()
	entries := uint32(1 << 14) // xlb_ct is only used by TableXLB
	for _, s := range specs {
		if s.table == TableXLB {
			entries = o.Entries
		}
	}
	h.dpOpts = datapath.Options{Interface: benchIf, PinDir: h.pinDir,
		ConntrackEntries: entries, MaxServices: 64, MaxReals: 1024}
	h.dp, err = datapath.Load(h.dpOpts)
	if err != nil {
		return nil, err
	}
	st, err := benchState(o)
	if err != nil {
		return nil, err
	}
	if fib && !o.FIBPerPacket {
		// As xlbd does: cache each backend's resolved next hop in its real.
		for id, r := range st.Reals.All() {
			if r.NextHop, err = kernelnet.LookupNextHop(r.Addr); err != nil {
				return nil, fmt.Errorf("next hop of %s: %w", r.Addr, err)
			}
			st.Reals.Set(id, r)
		}
	}
	if _, err := h.dp.Apply(st); err != nil {
		return nil, fmt.Errorf("apply state: %w", err)
	}
	h.shift = datapath.CTGeometry(entries)
	h.zero = make([]benchCtBucket, 1<<h.shift)
	// The forwarder's maps, as datapath pinned them: every bench_lru reads
	// the same state and counts in the same xlb_stats.
	spec, err := loadBench()
	if err != nil {
		return nil, fmt.Errorf("load bench spec: %w", err)
	}
	for name := range spec.Maps {
		if !strings.HasPrefix(name, "xlb_") || slices.Contains(datapath.BuildOwnMaps, name) {
			continue
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(h.pinDir, name), nil)
		if err != nil {
			return nil, fmt.Errorf("open pinned %s: %w", name, err)
		}
		h.pinned = append(h.pinned, m)
		h.repl[name] = m
	}
	h.stats, h.ct = h.repl["xlb_stats"], h.repl["xlb_ct"]
	if h.stats == nil || h.ct == nil {
		return nil, errors.New("bench: forwarder maps xlb_stats/xlb_ct not found")
	}
	// The wrapper and the calibration target come from a collection of
	// their own (its bench_lru is never run).
	if h.base, err = h.loadBench(TableNone, StopNone, nil); err != nil {
		return nil, err
	}
	for _, s := range specs {
		t := &target{table: s.table, stop: s.stop, fib: !s.noFIB, res: Results{Table: s.table, Stop: s.stop,
			CPU: o.CPU, Entries: o.Entries, FIB: !s.noFIB, Build: s.object, Sync: s.sync, Wrapper: map[FlowMode]float64{}}}
		if s.sched != nil {
			t.res.Sched = s.sched.Name
			if t.sched, err = schedValues(o, s.sched); err != nil {
				return nil, err
			}
		}
		if err := h.loadTarget(t, s); err != nil {
			return nil, fmt.Errorf("%s: %w", t, err)
		}
		h.targets = append(h.targets, t)
	}
	return h, h.startSync(specs)
}

// loadTimeSettings are the forwarder's load-time settings (the `volatile
// const`s datapath.LoadSpec sets) for the harness's instance.
func (h *harness) loadTimeSettings() map[string]uint32 {
	return map[string]uint32{"nr_cpus": uint32(h.ncpu), "ct_shift": h.shift,
		"vip_buckets": h.repl["xlb_vip_index"].MaxEntries()}
}

// setVariables sets spec's variables to vals.
func setVariables(spec *ebpf.CollectionSpec, vals map[string]uint32) error {
	for name, v := range vals {
		sv := spec.Variables[name]
		if sv == nil {
			return fmt.Errorf("no variable %s", name)
		}
		if err := sv.Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	return nil
}

// loadError wraps a load failure, with the whole verifier log if the
// verifier refused a program.
func loadError(what string, err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("%s: %+v", what, ve)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// loadBench loads bench.c with table t as bench_lru's connection table;
// table, when not nil, is that table (another instance's).
func (h *harness) loadBench(t Table, stop Stage, table *ebpf.Map) (*benchObjects, error) {
	spec, err := loadBench()
	if err != nil {
		return nil, fmt.Errorf("load bench spec: %w", err)
	}
	for name, m := range h.repl {
		spec.Maps[name].MaxEntries, spec.Maps[name].Flags = m.MaxEntries(), m.Flags()
	}
	lru := spec.Maps["bench_lru_ct"]
	kind := benchBenchCtKindBENCH_CT_LRU
	switch t {
	case TableLRUHash:
		lru.MaxEntries = h.o.Entries
	case TableLRUNoCommon:
		lru.Flags |= unix.BPF_F_NO_COMMON_LRU
		lru.MaxEntries = h.o.Entries * uint32(h.ncpu)
	case TableLRUPercpuHash:
		lru.Type = ebpf.LRUCPUHash
		lru.MaxEntries = h.o.Entries
	default: // the program needs the map to exist
		lru.MaxEntries = 64 * uint32(h.ncpu)
		kind = benchBenchCtKindBENCH_CT_NONE
	}
	vals := h.loadTimeSettings()
	vals["bench_ct"], vals["bench_stop"] = uint32(kind), uint32(stop)
	if err := setVariables(spec, vals); err != nil {
		return nil, err
	}
	repl := h.repl
	if table != nil {
		repl = maps.Clone(h.repl)
		repl["bench_lru_ct"] = table
	}
	objs := new(benchObjects)
	if err := spec.LoadAndAssign(objs, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		return nil, loadError("load bench programs", err)
	}
	return objs, nil
}

func (h *harness) close() {
	if h == nil {
		return
	}
	h.stopSync()
	for _, in := range h.loaded {
		in.close()
	}
	if h.base != nil {
		h.base.Close()
	}
	for _, m := range h.pinned {
		m.Close()
	}
	if h.dp != nil {
		h.dp.Close()
	}
	os.RemoveAll(h.pinDir)
}

// testRun runs prog repeat times over frame with the harness's ingress
// device and returns the last verdict, the kernel's ns per run (whole
// nanoseconds, rounded down) and the last output frame. A run interrupted
// by a signal is started again.
func (h *harness) testRun(prog *ebpf.Program, frame []byte, repeat uint32) (uint32, uint32, []byte, error) {
	r, err := progrun.Run(progrun.XDP{Prog: prog, Data: frame, Out: make([]byte, len(frame)+256),
		Ifindex: h.ifindex, Repeat: repeat, Retry: true})
	return r.Verdict, r.Duration, r.Out, err
}

// snap is what a run is checked against: this CPU's forwarder counters and
// the wrapper's iteration count.
type snap struct {
	count [benchXlbStatXLB_STAT__MAX]uint64
	iters uint64
}

func (h *harness) snapshot() (snap, error) {
	var s snap
	var per []benchXlbGlobal
	if err := h.stats.Lookup(uint32(0), &per); err != nil {
		return s, fmt.Errorf("read xlb_stats: %w", err)
	}
	if h.o.CPU >= len(per) {
		return s, fmt.Errorf("xlb_stats has %d cpus", len(per))
	}
	s.count = per[h.o.CPU].Count
	if err := h.base.BenchIters.Get(&s.iters); err != nil {
		return s, fmt.Errorf("read bench_iters: %w", err)
	}
	return s, nil
}

// setTarget makes bench_wrap tail-call p.
func (h *harness) setTarget(p *ebpf.Program) error {
	if err := h.base.BenchTarget.Put(uint32(0), p); err != nil {
		return fmt.Errorf("set tail-call target: %w", err)
	}
	return nil
}

// setFlow loads the wrapper's template and flow numbering (the next
// packet is flow number base).
func (h *harness) setFlow(frame []byte, mode FlowMode, varOff, base, flows uint32) error {
	var head [32]byte // BENCH_HEAD
	if len(frame) < len(head) {
		return fmt.Errorf("bench: frame of %d bytes, at least %d needed", len(frame), len(head))
	}
	copy(head[:], frame)
	var tail [64]byte // BENCH_TAIL
	deep := uint32(0)
	if h.o.Method == state.EncapNAT { // NAT rewrites the headers in place
		deep = uint32(min(len(frame)-len(head), len(tail)-1))
	}
	copy(tail[:deep], frame[len(head):])
	for _, set := range []struct {
		v   *ebpf.Variable
		val any
	}{
		{h.base.BenchHead, head}, {h.base.BenchTail, tail}, {h.base.BenchTailLen, deep}, {h.base.BenchLen, uint32(len(frame))}, {h.base.BenchMode, uint32(mode)},
		{h.base.BenchVarOff, varOff}, {h.base.BenchBase, base}, {h.base.BenchFlows, flows},
		{h.base.BenchPos, uint32(0)},
	} {
		if err := set.v.Set(set.val); err != nil {
			return fmt.Errorf("set %s: %w", set.v, err)
		}
	}
	return nil
}

// calibrate is one run of the wrapper tail-calling bench_tx, which must
// answer XDP_TX and count nothing.
func (h *harness) calibrate(frame []byte, repeat uint32) (float64, error) {
	if err := h.setTarget(h.base.BenchTx); err != nil {
		return 0, err
	}
	ns, _, err := h.run(frame, repeat)
	if err != nil {
		return 0, err
	}
	if len(ns.moved) > 0 {
		return 0, fmt.Errorf("%w: calibration target moved %v", ErrCounters, ns.moved)
	}
	return ns.ns, nil
}

// anyStat as the expected counter checks the forwarding only.
const anyStat = benchXlbStatXLB_STAT__MAX

// measure is one checked run of repeat packets of t: every packet must be
// forwarded (XDP_TX) and add to expect (unless anyStat); with a stop, only
// the verdict is checked.
func (h *harness) measure(t *target, frame []byte, repeat uint32, expect benchXlbStat) (float64, error) {
	if err := h.useSched(t); err != nil {
		return 0, err
	}
	if err := h.setTarget(t.prog); err != nil {
		return 0, err
	}
	if err := h.syncFor(t); err != nil {
		return 0, err
	}
	if t.fib != h.fib {
		if err := setForwarding(t.fib, false); err != nil {
			return 0, err
		}
		h.fib = t.fib
	}
	r, out, err := h.run(frame, repeat)
	if err == nil {
		err = h.syncCheck(t, r)
	}
	if err != nil || t.stop != StopNone {
		return r.ns, err
	}
	bad := r.delta[h.sent] != r.iters
	// A new flow may falsely hit (bucket and 28-bit tag collision, ~3e-8
	// per lookup in a full table): allow 1 in 100000.
	if expect != anyStat {
		if got := r.delta[expect]; got > r.iters || r.iters-got > r.iters/100000 {
			bad = true
		}
	}
	if bad {
		return 0, fmt.Errorf("%w: %d packets, want every one %s and %s; counters moved: %v",
			ErrCounters, r.iters, statName(h.sent), statName(expect), r.moved)
	}
	if err := checkOutput(out, h.o.Method); err != nil {
		return 0, err
	}
	return r.ns, nil
}

type runResult struct {
	ns    float64
	iters uint64 // packets the wrapper saw
	delta [benchXlbStatXLB_STAT__MAX]uint64
	moved []string // nonzero deltas, named
}

// run runs the wrapper over frame repeat times; the last verdict must be
// XDP_TX.
func (h *harness) run(frame []byte, repeat uint32) (runResult, []byte, error) {
	var r runResult
	before, err := h.snapshot()
	if err != nil {
		return r, nil, err
	}
	ret, ns, out, err := h.testRun(h.base.BenchWrap, frame, repeat)
	if err != nil {
		return r, nil, err
	}
	after, err := h.snapshot()
	if err != nil {
		return r, nil, err
	}
	r.ns = float64(ns)
	r.iters = after.iters - before.iters
	for i := range r.delta {
		r.delta[i] = after.count[i] - before.count[i]
		if r.delta[i] != 0 {
			r.moved = append(r.moved, fmt.Sprintf("%s=%d", statName(benchXlbStat(i)), r.delta[i]))
		}
	}
	if ret != xdpTX {
		return r, nil, fmt.Errorf("%w: %d, want XDP_TX (%d); counters moved: %v", ErrVerdict, ret, xdpTX, r.moved)
	}
	if r.iters < uint64(repeat) {
		return r, nil, fmt.Errorf("%w: the wrapper ran %d times, repeat %d", ErrCounters, r.iters, repeat)
	}
	return r, out, nil
}

// checkTunnel checks the last output frame: GRE from the node to one of
// the backends, to the gateway's MAC.
func checkTunnel(out []byte) error {
	tun, err := packet.ParseTunnel(out)
	if err != nil {
		return fmt.Errorf("%w: output is not a tunnel: %v", ErrVerdict, err)
	}
	p4, p6 := netip.MustParsePrefix(backendNet4), netip.MustParsePrefix(backendNet6)
	if tun.Kind != "gre" || !(p4.Contains(tun.Backend) || p6.Contains(tun.Backend)) ||
		!slices.Equal(out[:6], gwMAC) {
		return fmt.Errorf("%w: output %s to %s, dst MAC % x", ErrVerdict, tun.Kind, tun.Backend, out[:6])
	}
	return nil
}

// empty removes every flow t tracks.
func (h *harness) empty(t *target) error {
	switch t.table {
	case TableNone:
		return nil
	case TableXLB:
		if _, err := h.ct.BatchUpdate(h.sliceKeys(), h.zero, nil); err != nil {
			return fmt.Errorf("empty xlb_ct: %w", err)
		}
		return nil
	}
	_, err := h.walkLRU(t, true)
	return err
}

// sliceKeys are the xlb_ct indexes of this CPU's slice.
func (h *harness) sliceKeys() []uint32 {
	keys := make([]uint32, len(h.zero))
	for i := range keys {
		keys[i] = uint32(h.o.CPU)<<h.shift | uint32(i)
	}
	return keys
}

// walkLRU counts (and with del, removes) the entries of t's LRU table.
func (h *harness) walkLRU(t *target, del bool) (int, error) {
	m := t.inst.objs[0].BenchLruCt
	const chunk = 8192
	keys := make([]benchLruKey, chunk)
	nv := chunk
	if t.table == TableLRUPercpuHash {
		nv *= h.ncpu
	}
	vals := make([]benchLruVal, nv)
	var cursor ebpf.MapBatchCursor
	total := 0
	for {
		var n int
		var err error
		if del {
			n, err = m.BatchLookupAndDelete(&cursor, keys, vals, nil)
		} else {
			n, err = m.BatchLookup(&cursor, keys, vals, nil)
		}
		total += n
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// fill returns the share of this CPU's entries of t in use.
func (h *harness) fill(t *target) (float64, error) {
	switch t.table {
	case TableNone:
		return 1, nil
	case TableXLB:
		// Nonzero 8-byte ways of this CPU's slice (a used way is never 0:
		// its state is not FREE).
		var b benchCtBucket
		used := 0
		for _, k := range h.sliceKeys() {
			if err := h.ct.Lookup(k, &b); err != nil {
				return 0, err
			}
			for _, w := range b.Way {
				if w != 0 {
					used++
				}
			}
		}
		return float64(used) / float64(len(h.zero)*len(b.Way)), nil
	}
	n, err := h.walkLRU(t, false)
	return float64(n) / float64(h.o.Entries), err
}

// statName names a counter as the forwarder's BTF does.
func statName(s benchXlbStat) string {
	if names := datapath.StatNames(); int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("stat %d", uint32(s))
}
