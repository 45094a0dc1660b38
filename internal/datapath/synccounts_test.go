package datapath

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/packet"
)

// installOne runs xlb_sync_apply with one peer decision for the TCP flow
// client4:sport -> vip4:80.
func installOne(t *testing.T, d *Datapath, sport uint16, rid uint32, state uint8, age uint16) {
	t.Helper()
	f := packet.Flow{Src: client4, Dst: vip4, SrcPort: sport, DstPort: 80, Proto: packet.ProtoTCP}
	in := []SyncInstall{{Hash: flowHash(f), HashBits: 64, RealID: rid, State: state, Proto: 6, Age: age}}
	if err := d.InstallSync(in); err != nil {
		t.Fatal(err)
	}
}

// A flow installed from a peer (xlb_sync_apply) counts as a connection of
// its backend on this node as soon as it is installed, follows the peer's
// state reports, moves from the real of an expired entry it replaces, is
// not counted when this node keeps its own live flow, and leaves the
// counts when the sweep frees it.
func TestSyncInstallCounted(t *testing.T) {
	d := newTestDatapath(t, Options{})
	pinCPU(t)
	st := fixtureState()
	other := netip.MustParseAddr("10.0.1.99")
	st.Reals.Set(7, Real{Addr: other, SvcID: 1, Active: true}) // in service 1, not in its table
	st.Node.Timeouts = Timeouts{TCPSyn: time.Second, TCP: time.Hour, TCPFin: time.Hour, UDP: time.Hour}
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	const syn, est, closing = 1, 2, 3

	installOne(t, d, 42000, 7, est, 0)
	wantConns(t, d, 7, 1, 0)
	installOne(t, d, 42001, 7, syn, 0)
	wantConns(t, d, 7, 1, 1)
	// The peer's state reports move the counts; a repeat moves nothing.
	installOne(t, d, 42001, 7, est, 0)
	installOne(t, d, 42001, 7, est, 0)
	wantConns(t, d, 7, 2, 0)
	installOne(t, d, 42000, 7, closing, 0)
	wantConns(t, d, 7, 1, 1)
	// A synced flow's packets reaching this node are forwarded by it and
	// counted once.
	if b := sendTCP(t, d, 42001, packet.ACK); b != other {
		t.Fatalf("synced flow went to %s, want the peer's backend %s", b, other)
	}
	wantConns(t, d, 7, 1, 1)

	// This node's own live flow is kept: the peer's install counts nowhere.
	if b := sendTCP(t, d, 42002, packet.SYN); b != be4 {
		t.Fatalf("local flow went to %s, want %s", b, be4)
	}
	wantConns(t, d, 1, 0, 1)
	installOne(t, d, 42002, 7, est, 0)
	wantConns(t, d, 1, 0, 1)
	wantConns(t, d, 7, 1, 1)
	if c, err := d.SyncCounters(); err != nil || c.Applied != 5 || c.Kept != 1 {
		t.Fatalf("sync counters %+v (%v), want 5 applied, 1 kept", c, err)
	}

	// Once the local SYN entry has timed out (1 s), a peer's decision
	// replaces it: the count moves from real 1 to real 7.
	time.Sleep(1500 * time.Millisecond)
	installOne(t, d, 42002, 7, est, 0)
	wantConns(t, d, 1, 0, 0)
	wantConns(t, d, 7, 2, 1)

	// A decision the peer last saw long ago (SYN, 10 ticks ~2.7 s idle)
	// is counted once installed, and the sweep frees and uncounts it
	// with the same timeouts; the live synced flows stay.
	installOne(t, d, 42003, 7, syn, 10)
	wantConns(t, d, 7, 2, 2)
	freed, live, err := d.SweepConntrack()
	if err != nil {
		t.Fatal(err)
	}
	if freed != 1 || live != 3 {
		t.Errorf("sweep freed %d, left %d live; want 1, 3", freed, live)
	}
	wantConns(t, d, 7, 2, 1)
}

// TestSyncRefreshWithinTimeout: a flow whose timeout is shorter than two
// refresh periods is reported at least every half timeout (here UDP 2 s,
// 8 ticks: every 4 ticks instead of 64), so a peer's copy, which carries
// the time of the last report, is not swept while the flow is live here.
func TestSyncRefreshWithinTimeout(t *testing.T) {
	d := newTestDatapath(t, Options{})
	pinCPU(t)
	st := fixtureState()
	st.Node.Timeouts = Timeouts{TCPSyn: time.Minute, TCP: time.Hour, TCPFin: time.Minute, UDP: 2 * time.Second}
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	r, err := d.SyncReader()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := d.SetSync(true, SyncRefreshShift); err != nil {
		t.Fatal(err)
	}
	u := packet.Flow{Src: client4, Dst: vip4, SrcPort: 5354, DstPort: 53, Proto: packet.ProtoUDP}
	run(t, d.Program(), u.Frame())
	time.Sleep(4*ctTick + ctTick/4) // a 4-tick boundary crossed, under the 2 s timeout
	run(t, d.Program(), u.Frame())
	got := readSync(t, r)
	if len(got) != 2 || got[0].Kind != SyncNew || got[1].Kind != SyncRefresh {
		t.Fatalf("records %+v, want new then refresh within 4 ticks", got)
	}
}
