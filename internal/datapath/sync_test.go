package datapath

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/packet"
)

func flowHash(f packet.Flow) uint64 {
	return maglev.FlowHash(maglev.Tuple{Src: f.Src, Dst: f.Dst, SrcPort: f.SrcPort, DstPort: f.DstPort, Proto: f.Proto})
}

// readSync returns the decision records waiting for the reader.
func readSync(t *testing.T, r *SyncReader) []SyncDecision {
	t.Helper()
	out, err := r.Read(make([]SyncDecision, 0, 64), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// syncTestDatapath loads the forwarder with the fixture state, this test
// on one CPU, records on (refresh every 2^shift ticks) and a reader.
func syncTestDatapath(t *testing.T, shift uint32) (*Datapath, *SyncReader) {
	t.Helper()
	d := newTestDatapath(t, Options{})
	pinCPU(t)
	if _, err := d.Apply(fixtureState()); err != nil {
		t.Fatal(err)
	}
	r, err := d.SyncReader()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := d.SetSync(true, shift); err != nil {
		t.Fatal(err)
	}
	return d, r
}

// TestSyncRingReportsDecisions: with sync on, the forwarder reports a new
// tracked flow, then its state changes (SYN -> established -> closing),
// not every packet; with sync off it reports nothing.
func TestSyncRingReportsDecisions(t *testing.T) {
	d, r := syncTestDatapath(t, SyncRefreshShift)
	f := packet.Flow{Src: client4, Dst: vip4, SrcPort: 40000, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN}
	h := flowHash(f)
	steps := []struct {
		flags uint8
		want  []SyncDecision
	}{
		{packet.SYN, []SyncDecision{{Hash: h, RealID: 1, State: 1, Kind: SyncNew}}},
		{packet.ACK, []SyncDecision{{Hash: h, RealID: 1, State: 2, Kind: SyncState}}},
		{packet.ACK, nil}, // same state, same tick: nothing
		{packet.ACK | packet.PSH, nil},
		{packet.FIN | packet.ACK, []SyncDecision{{Hash: h, RealID: 1, State: 3, Kind: SyncState}}},
	}
	for i, s := range steps {
		f.TCPFlags = s.flags
		if ret, _ := run(t, d.Program(), f.Frame()); ret != xdpTX {
			t.Fatalf("step %d: verdict %d", i, ret)
		}
		got := readSync(t, r)
		if len(got) != len(s.want) || (len(got) == 1 && got[0] != s.want[0]) {
			t.Fatalf("step %d (flags %#x): records %+v, want %+v", i, s.flags, got, s.want)
		}
	}
	u := packet.Flow{Src: client6, Dst: vip6, SrcPort: 5353, DstPort: 53, Proto: packet.ProtoUDP}
	run(t, d.Program(), u.Frame())
	if got := readSync(t, r); len(got) != 1 || got[0] != (SyncDecision{Hash: flowHash(u), RealID: 4, State: 2, Kind: SyncNew}) {
		t.Fatalf("UDP flow: records %+v", got)
	}
	if err := d.SetSync(false, SyncRefreshShift); err != nil {
		t.Fatal(err)
	}
	f.SrcPort, f.TCPFlags = 40001, packet.SYN
	run(t, d.Program(), f.Frame())
	if got := readSync(t, r); len(got) != 0 {
		t.Fatalf("sync off: records %+v", got)
	}
	c, err := d.SyncCounters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Lost != 0 {
		t.Fatalf("counters %+v, want none lost", c)
	}
}

// TestSyncRefreshReported: a live flow is reported again when its entry's
// time crosses a refresh boundary (shift 0: every tick).
func TestSyncRefreshReported(t *testing.T) {
	d, r := syncTestDatapath(t, 0)
	u := packet.Flow{Src: client4, Dst: vip4, SrcPort: 5353, DstPort: 53, Proto: packet.ProtoUDP}
	run(t, d.Program(), u.Frame())
	time.Sleep(ctTick)
	run(t, d.Program(), u.Frame())
	got := readSync(t, r)
	if len(got) != 2 || got[0].Kind != SyncNew || got[1].Kind != SyncRefresh || got[1].State != 2 {
		t.Fatalf("records %+v, want new then refresh", got)
	}
}

// installTestDatapath loads the forwarder with the fixture state and real
// 7 (other) in service 1 but not in its table, this test on one CPU.
func installTestDatapath(t *testing.T) (*Datapath, netip.Addr) {
	t.Helper()
	d := newTestDatapath(t, Options{})
	pinCPU(t)
	st := fixtureState()
	other := netip.MustParseAddr("10.0.1.99")
	st.Reals.Set(7, Real{Addr: other, SvcID: 1, Active: true})
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	return d, other
}

// expectSentTo checks that f's packet goes to backend be in GRE.
func expectSentTo(t *testing.T, d *Datapath, f packet.Flow, be netip.Addr, what string) {
	t.Helper()
	want := expectTunnel(t, f, "gre", be, 0)
	if ret, out := run(t, d.Program(), f.Frame()); ret != xdpTX || string(out) != string(want) {
		t.Fatalf("%s: verdict %d, not sent to %s", what, ret, be)
	}
}

// TestSyncInstallKeepsBackend: a peer's decision installed here makes a
// flow this node never saw go to the peer's real, although this node's
// Maglev table gives another; a flow this node tracks live keeps its own
// real; an install whose bucket this node cannot derive is skipped.
func TestSyncInstallKeepsBackend(t *testing.T) {
	d, other := installTestDatapath(t)
	moved := packet.Flow{Src: client4, Dst: vip4, SrcPort: 41000, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.ACK}
	local := moved
	local.SrcPort = 41001
	run(t, d.Program(), local.Frame()) // tracked here, to real 1
	in := []SyncInstall{
		{Hash: flowHash(moved), HashBits: 64, RealID: 7, State: 2, Proto: 6, Age: 1},
		{Hash: flowHash(local), HashBits: 64, RealID: 7, State: 2, Proto: 6},
		{Hash: flowHash(moved) + 1<<40, HashBits: 3, RealID: 7, State: 2, Proto: 6},
	}
	if err := d.InstallSync(in); err != nil {
		t.Fatal(err)
	}
	c, err := d.SyncCounters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Applied != 1 || c.Kept != 1 || c.Skipped != 1 {
		t.Fatalf("counters %+v, want 1 applied, 1 kept, 1 skipped", c)
	}
	expectSentTo(t, d, moved, other, "moved flow (the peer's real)")
	expectSentTo(t, d, local, be4, "local flow (kept)")
	stats, _ := d.Stats()
	if stats["ct_hit"] != 2 {
		t.Fatalf("ct_hit %d, want 2 (both flows tracked)", stats["ct_hit"])
	}
}

// TestSyncInstallNewerPeerWins: a flow this node tracks live to another
// real, but last saw long before the peer did (the flow was placed again
// elsewhere while this node was away), takes the peer's real; one this
// node saw about as recently as the peer keeps its own.
func TestSyncInstallNewerPeerWins(t *testing.T) {
	d, other := installTestDatapath(t)
	stale := packet.Flow{Src: client4, Dst: vip4, SrcPort: 41010, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.ACK}
	recent := stale
	recent.SrcPort = 41011
	// This node's own entries, to real 1: one last seen 40 ticks ago, one
	// 3 ticks ago (within XLB_SYNC_KEEP_TICKS of the peer's record).
	if err := d.InstallSync([]SyncInstall{
		{Hash: flowHash(stale), HashBits: 64, RealID: 1, State: 2, Proto: 6, Age: 40},
		{Hash: flowHash(recent), HashBits: 64, RealID: 1, State: 2, Proto: 6, Age: 3},
	}); err != nil {
		t.Fatal(err)
	}
	if err := d.InstallSync([]SyncInstall{
		{Hash: flowHash(stale), HashBits: 64, RealID: 7, State: 2, Proto: 6},
		{Hash: flowHash(recent), HashBits: 64, RealID: 7, State: 2, Proto: 6},
	}); err != nil {
		t.Fatal(err)
	}
	c, err := d.SyncCounters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Applied != 3 || c.Kept != 1 {
		t.Fatalf("counters %+v, want 3 applied (2 own, the newer peer's), 1 kept", c)
	}
	expectSentTo(t, d, stale, other, "flow last seen here 40 ticks before the peer (the peer's real)")
	expectSentTo(t, d, recent, be4, "flow seen here 3 ticks before the peer (kept)")
}

// TestSyncLogFullCountsLost: a CPU's records wait in its part of the
// buffer until the reader takes them; when it is full a record is lost
// and counted (the slots the reader has not taken are never written
// again), and once the reader took them records are kept again, in order.
func TestSyncLogFullCountsLost(t *testing.T) {
	d, r := syncTestDatapath(t, SyncRefreshShift)
	flow := func(i int) packet.Flow {
		return packet.Flow{Src: netip.AddrFrom4([4]byte{198, 18, byte(i >> 16), byte(i >> 8)}), Dst: vip4,
			SrcPort: uint16(1024 + i&0xff), DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN}
	}
	const extra = 10
	for i := range SyncSlotsPerCPU + extra {
		if ret, _ := run(t, d.Program(), flow(i).Frame()); ret != xdpTX {
			t.Fatalf("flow %d: verdict %d", i, ret)
		}
	}
	c, err := d.SyncCounters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Lost != extra {
		t.Fatalf("%d records lost, want %d (the buffer holds %d)", c.Lost, extra, SyncSlotsPerCPU)
	}
	got, err := r.Read(make([]SyncDecision, 0, SyncSlotsPerCPU+extra), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != SyncSlotsPerCPU {
		t.Fatalf("read %d records, want %d", len(got), SyncSlotsPerCPU)
	}
	for _, i := range []int{0, 1, SyncSlotsPerCPU - 1} {
		if got[i].Hash != flowHash(flow(i)) || got[i].Kind != SyncNew {
			t.Fatalf("record %d: %+v, want the new flow %d", i, got[i], i)
		}
	}
	last := flow(SyncSlotsPerCPU + extra)
	run(t, d.Program(), last.Frame())
	if got := readSync(t, r); len(got) != 1 || got[0].Hash != flowHash(last) {
		t.Fatalf("after the reader took the records: %+v, want the new flow's", got)
	}
	if c, _ := d.SyncCounters(); c.Lost != extra {
		t.Fatalf("%d records lost after the reader took them, want still %d", c.Lost, extra)
	}
}
