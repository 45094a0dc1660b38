package datapath

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/testenv"
)

// cpuCounts is one CPU's share of the counters an explain must not move:
// service 7's and its reals', and the global ones by name.
func cpuCounts(t *testing.T, d *Datapath, cpu int) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	var g []xlbXlbGlobal
	if err := d.objs.XlbStats.Lookup(uint32(0), &g); err != nil {
		t.Fatal(err)
	}
	for i, n := range StatNames() {
		out[n] = g[cpu].Count[i]
	}
	for name, k := range map[string]struct {
		m  *ebpf.Map
		id uint32
	}{"svc7": {d.objs.XlbSvcStats, 7}, "real7": {d.objs.XlbRealStats, 7}, "real8": {d.objs.XlbRealStats, 8}} {
		var c []xlbXlbCounters
		if err := k.m.Lookup(k.id, &c); err != nil {
			t.Fatal(err)
		}
		out[name+"_packets"], out[name+"_bytes"], out[name+"_new_flows"] = c[cpu].Packets, c[cpu].Bytes, c[cpu].NewFlows
	}
	return out
}

// explainState: fixtureState and service 7 (vip4:8080/tcp) whose table
// gives real rid (10.0.1.7 or 10.0.1.8), and service 9 (vip4:9090/tcp)
// without a backend.
func explainState(rid uint32) *State {
	st := fixtureState()
	st.Reals.Set(7, Real{Addr: netip.MustParseAddr("10.0.1.7"), SvcID: 7, Active: true})
	st.Reals.Set(8, Real{Addr: netip.MustParseAddr("10.0.1.8"), SvcID: 7, Active: true})
	st.Services[VIPKey{Addr: vip4, Port: 8080, Proto: 6}] = &Service{SvcID: 7, Encap: EncapGRE, Table: slices.Repeat([]uint32{rid}, 7)}
	st.Services[VIPKey{Addr: vip4, Port: 9090, Proto: 6}] = &Service{SvcID: 9, Encap: EncapGRE, Table: make([]uint32, 7)}
	return st
}

// runOn runs f's frame once on cpu (tracked like any packet).
func runOn(t *testing.T, d *Datapath, cpu int, f packet.Flow) {
	t.Helper()
	done := make(chan error)
	go func() {
		restore, err := pinThread(cpu)
		if err == nil {
			defer restore()
			_, _, err = d.RunPacket(f.Frame())
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// loadOn runs other traffic through the program on cpu until stop is
// closed, counting its packets in ran (dropped) and fwd (forwarded), in
// rounds of: a batch of 2^18 runs of drop's frame (a repeated test run
// hands the program the frame as the previous run left it, so the batch is
// of a packet the program drops unchanged: VIP match, conntrack lookup,
// flood budget, Maglev, drop_no_backend), then 256 single runs of new flows
// of fwd's service (forwarded, each writes a conntrack entry).
func loadOn(d *Datapath, cpu int, drop, fwd packet.Flow, stop <-chan struct{}, ran *atomic.Uint64) error {
	restore, err := pinThread(cpu)
	if err != nil {
		return err
	}
	defer restore()
	frame := drop.Frame()
	for round := 0; ; round++ {
		select {
		case <-stop:
			return nil
		default:
		}
		// Large batches: a test run of more than one packet costs a
		// dispatcher update or two (tens of ms) besides its packets.
		const batch = 1 << 18
		if _, err := d.Program().Run(&ebpf.RunOptions{Data: frame, Repeat: batch}); err != nil {
			return err
		}
		for i := range 256 {
			f := fwd
			f.SrcPort = uint16(20000 + (round*256+i)%40000)
			if _, _, err := d.RunPacket(f.Frame()); err != nil {
				return err
			}
		}
		ran.Add(batch + 256)
	}
}

// explainCase is an explained packet and the answer it must get.
type explainCase struct {
	name    string
	f       packet.Flow
	verdict uint32
	ct      ProbeCT
	backend string // "" when dropped
	reason  string
}

// checkExplain explains c's packet once and checks the answer.
func checkExplain(t *testing.T, d *Datapath, c explainCase) {
	t.Helper()
	ex, err := d.Explain(c.f)
	if err != nil {
		t.Fatal(err)
	}
	var backend string
	if tun, err := packet.ParseTunnel(ex.Frame); err == nil {
		backend = tun.Backend.String()
	}
	if ex.Verdict != c.verdict || !ex.Answered || ex.CT != c.ct || ex.Reason != c.reason || backend != c.backend {
		t.Fatalf("explain %s: verdict %d answered %v ct %d reason %q backend %q; want verdict %d ct %d reason %q backend %q",
			c.name, ex.Verdict, ex.Answered, ex.CT, ex.Reason, backend, c.verdict, c.ct, c.reason, c.backend)
	}
}

// withoutAge drops the entries' ages (they grow with the clock).
func withoutAge(es []CTEntry) []CTEntry {
	out := slices.Clone(es)
	for i := range out {
		out[i].Age = 0
	}
	return out
}

// TestExplainReadOnlyUnderLoad: Explain answers exactly (verdict, backend,
// the program's own conntrack result and drop reason) while other traffic
// runs through the same program on the other CPU, and it writes no
// conntrack entry and moves no conntrack, service or real counter (its
// CPU's share of them is unchanged; selfcheck_probe counts each).
func TestExplainReadOnlyUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("50,000 explains under load on the other CPU, tens of seconds: make test runs it, -short (make check) does not")
	}
	d := newTestDatapath(t, Options{})
	if n, err := ebpf.PossibleCPU(); err != nil || n < 2 {
		testenv.Unavailable(t, "the explain-under-load test needs 2 CPUs (the load takes one), have %d (%v)", n, err)
	}
	if _, err := d.Apply(explainState(7)); err != nil {
		t.Fatal(err)
	}
	flow := func(port uint16, flags uint8) packet.Flow {
		return packet.Flow{Src: client4, Dst: vip4, SrcPort: port, DstPort: 8080, Proto: packet.ProtoTCP, TCPFlags: flags}
	}
	a, b, load, n := flow(1001, packet.ACK), flow(1002, packet.ACK), flow(1003, packet.ACK), flow(1004, packet.ACK)
	runOn(t, d, 0, a) // tracked on CPU 0, toward real 7
	runOn(t, d, 1, b) // tracked on CPU 1, toward real 7
	// The table now gives real 8: a tracked flow keeps real 7, a new one gets 8.
	if _, err := d.Apply(explainState(8)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ctTick) // an entry an explain refreshed would be younger than a tick
	stop, loadErr := make(chan struct{}), make(chan error, 1)
	var ran atomic.Uint64
	loadStart := time.Now()
	drop := flow(1006, packet.ACK)
	drop.DstPort = 9090
	go func() { loadErr <- loadOn(d, 1, drop, load, stop, &ran) }()
	stopLoad := sync.OnceFunc(func() {
		close(stop)
		if err := <-loadErr; err != nil {
			t.Errorf("load: %v", err)
		}
		t.Logf("the other traffic: %d packets in %v on CPU 1 (%.2f Mpps)", ran.Load(),
			time.Since(loadStart).Round(time.Millisecond), float64(ran.Load())/time.Since(loadStart).Seconds()/1e6)
	})
	defer stopLoad()
	restore, err := pinThread(0)
	if err != nil {
		t.Fatal(err)
	}
	defer restore()
	nodrop := flow(1005, packet.SYN)
	nodrop.DstPort = 9090
	cases := []explainCase{
		{"hit on this CPU", a, xdpTX, ProbeCTHit, "10.0.1.7", ""},
		{"hit on the other CPU", b, xdpTX, ProbeCTRemoteHit, "10.0.1.7", ""},
		{"untracked ACK", n, xdpTX, ProbeCTMiss, "10.0.1.8", ""},
		{"untracked SYN", flow(1004, packet.SYN), xdpTX, ProbeCTMiss, "10.0.1.8", ""},
		{"no backend", nodrop, xdpDrop, ProbeCTMiss, "", "drop_no_backend"},
	}
	for ran.Load() == 0 { // the load runs
		time.Sleep(10 * time.Millisecond)
	}
	ents0 := map[string][]CTEntry{}
	for _, c := range cases {
		ents0[c.name] = withoutAge(flowEntries(t, d, c.f))
	}
	cnt0, t0 := cpuCounts(t, d, 0), time.Now()
	const rounds = 10000
	for range rounds {
		for _, c := range cases {
			checkExplain(t, d, c)
		}
	}
	elapsed := time.Since(t0)
	cnt1 := cpuCounts(t, d, 0)
	for _, c := range cases {
		if e := flowEntries(t, d, c.f); !slices.Equal(withoutAge(e), ents0[c.name]) {
			t.Errorf("explain %s changed the flow's entries: %+v -> %+v", c.name, ents0[c.name], e)
		} else if c.ct != ProbeCTMiss && (len(e) != 1 || e[0].Age < time.Duration(1)<<ctTickShift) {
			t.Errorf("explain %s: entry %+v, want one, not refreshed (older than a tick)", c.name, e)
		}
	}
	for k, v := range cnt0 {
		want := v
		switch k {
		case "selfcheck_probe":
			want += rounds * 4 // a drop counts its reason only
		case "drop_no_backend":
			want += rounds
		case "forward_tx":
			want += rounds * 4
		}
		if (strings.HasPrefix(k, "ct_") || strings.HasPrefix(k, "flood_") || strings.Contains(k, "7_") ||
			strings.Contains(k, "8_") || k == "selfcheck_probe" || k == "drop_no_backend" || k == "forward_tx") &&
			cnt1[k] != want {
			t.Errorf("explains moved %s on their CPU: %d -> %d, want %d", k, v, cnt1[k], want)
		}
	}
	t.Logf("%d explains in %v, exact and read only", rounds*len(cases), elapsed.Round(time.Millisecond))
	stopLoad()
	if c := cpuCounts(t, d, 1); c["drop_no_backend"]+c["svc7_new_flows"] < ran.Load() {
		t.Fatalf("the other traffic: %d dropped and %d new flows of service 7 on CPU 1, want %d in all",
			c["drop_no_backend"], c["svc7_new_flows"], ran.Load())
	}
	if ran.Load() == 0 {
		t.Fatalf("no other traffic ran during the explains")
	}
}
