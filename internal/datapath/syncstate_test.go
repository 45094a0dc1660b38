package datapath

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

// natSyncDatapath loads methodsState plus service 12, vipNAT4:81 to the
// same NAT backend as service 3 (be4:8080), with records on and a reader.
func natSyncDatapath(t *testing.T) (*Datapath, *SyncReader) {
	t.Helper()
	d := newTestDatapath(t, Options{})
	pinCPU(t)
	st := methodsState()
	st.Reals.Set(12, Real{Addr: be4, Port: 8080, SvcID: 12, Active: true})
	st.Services[VIPKey{Addr: vipNAT4, Port: 81, Proto: 6}] = &Service{SvcID: 12, Encap: state.EncapNAT, Table: []uint32{12, 12, 12, 12, 12, 12, 12}}
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
	return d, r
}

// natReply is the reply to fwd from backend from:port, and the frame it
// must leave as (its source rewritten to vip:vport) when tracked.
func natReply(fwd packet.Flow, from netip.Addr, port uint16, vip netip.Addr, vport uint16) (in, out []byte) {
	r := fwd
	r.Src, r.SrcPort, r.Dst, r.DstPort = from, port, fwd.Src, fwd.SrcPort
	r.TCPFlags = packet.ACK
	back := r
	back.Src, back.SrcPort = vip, vport
	return r.Frame(), back.Frame()
}

// TestSyncReportsNAT: a NAT flow new to the forwarder is reported twice:
// its connection (a flow record) and its reply entry (SyncNAT: client,
// client port, VIP port; IPv4 and IPv6); a flow of another method makes
// no NAT record, and a tracked NAT flow's later packets make none.
func TestSyncReportsNAT(t *testing.T) {
	d, r := natSyncDatapath(t)
	for _, c := range []struct {
		f   packet.Flow
		rid uint32
	}{
		{methodsFlow(client4, vipNAT4, packet.ProtoTCP, 80), 3},
		{methodsFlow(client6, vipNAT6, packet.ProtoUDP, 53), 6},
	} {
		c.f.SrcPort = 41234
		run(t, d.Program(), c.f.Frame())
		got := readSync(t, r)
		if len(got) == 2 && got[0].Kind == SyncNAT {
			got[0], got[1] = got[1], got[0]
		}
		if len(got) != 2 || got[0].Kind != SyncNew || got[1].Kind != SyncNAT {
			t.Fatalf("%v: records %+v, want a new flow and its NAT entry", c.f.Dst, got)
		}
		n := got[1]
		client, _ := addrBytes(c.f.Src)
		if n.RealID != c.rid || n.Client != client || n.ClientPort() != 41234 || n.VIPPort() != c.f.DstPort {
			t.Fatalf("%v: NAT record %+v (ports %d, %d), want real %d, client %v:41234, VIP port %d",
				c.f.Dst, n, n.ClientPort(), n.VIPPort(), c.rid, c.f.Src, c.f.DstPort)
		}
		c.f.TCPFlags = packet.ACK
		run(t, d.Program(), c.f.Frame())
		for _, x := range readSync(t, r) {
			if x.Kind == SyncNAT {
				t.Fatalf("%v: a tracked flow's packet reported its NAT entry again", c.f.Dst)
			}
		}
	}
	run(t, d.Program(), methodsFlow(client4, vipDR4, packet.ProtoTCP, 80).Frame())
	if got := readSync(t, r); len(got) != 1 || got[0].Kind != SyncNew {
		t.Fatalf("DR flow: records %+v, want its flow record only", got)
	}
}

// TestSyncInstallsNAT: a peer's NAT flow makes this node rewrite replies
// it never saw the flow of (IPv4 TCP to a NAT port, IPv6 UDP); a real
// that is not NAT here or that this node does not have is skipped; for
// one reply tuple, this node's own entry to another VIP:port is kept
// against a stale record (replayed, or simply older) and replaced by one
// more than XLB_SYNC_KEEP_TICKS newer.
func TestSyncInstallsNAT(t *testing.T) {
	d, _ := natSyncDatapath(t)
	tcp := methodsFlow(client4, vipNAT4, packet.ProtoTCP, 80)
	tcp.SrcPort = 41300
	udp := methodsFlow(client6, vipNAT6, packet.ProtoUDP, 53)
	udp.SrcPort = 41301
	bad := []SyncNATInstall{
		{RealID: 1, Proto: 6, Client: client4, ClientPort: 41302, VIP: vipDR4, VIPPort: 80},    // DR here
		{RealID: 999, Proto: 6, Client: client4, ClientPort: 41303, VIP: vipNAT4, VIPPort: 80}, // none
		{RealID: 3, Proto: 6, Client: client6, ClientPort: 41304, VIP: vipNAT4, VIPPort: 80},   // families differ
	}
	if err := d.InstallSyncState(append([]SyncNATInstall{
		{RealID: 3, Proto: 6, Client: client4, ClientPort: 41300, VIP: vipNAT4, VIPPort: 80, Age: 2},
		{RealID: 6, Proto: 17, Client: client6, ClientPort: 41301, VIP: vipNAT6, VIPPort: 53},
	}, bad...), nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		f     packet.Flow
		from  netip.Addr
		bport uint16
		vip   netip.Addr
		vport uint16
		what  string
	}{{tcp, be4, 8080, vipNAT4, 80, "IPv4 TCP"}, {udp, be6, 53, vipNAT6, 53, "IPv6 UDP"}} {
		in, want := natReply(c.f, c.from, c.bport, c.vip, c.vport)
		if ret, out := run(t, d.Program(), in); ret != xdpPass || !bytes.Equal(out, want) {
			t.Fatalf("%s reply of a synced flow: verdict %d, not rewritten to %v:%d", c.what, ret, c.vip, c.vport)
		}
	}
	if c, err := d.SyncCounters(); err != nil || c.Applied != 2 || c.Skipped != 3 {
		t.Fatalf("sync counters %+v (%v), want 2 applied, 3 skipped", c, err)
	}

	// One reply tuple (client4:41310 <- be4:8080), two services: this
	// node's own flow to vipNAT4:80 against a peer's to vipNAT4:81.
	own := methodsFlow(client4, vipNAT4, packet.ProtoTCP, 80)
	own.SrcPort = 41310
	run(t, d.Program(), own.Frame())
	peer := SyncNATInstall{RealID: 12, Proto: 6, Client: client4, ClientPort: 41310, VIP: vipNAT4, VIPPort: 81}
	for _, age := range []uint32{40, 0} { // a replay of an old record, then one as recent as ours
		peer.Age = age
		if err := d.InstallSyncState([]SyncNATInstall{peer}, nil); err != nil {
			t.Fatal(err)
		}
	}
	in, want := natReply(own, be4, 8080, vipNAT4, 80)
	if ret, out := run(t, d.Program(), in); ret != xdpPass || !bytes.Equal(out, want) {
		t.Fatalf("own NAT flow's reply after a peer's stale records: verdict %d, not rewritten to its own VIP port", ret)
	}
	if c, _ := d.SyncCounters(); c.Kept != 2 {
		t.Fatalf("sync counters %+v, want 2 kept", c)
	}
	// An own entry recorded 40 ticks ago gives way to the peer's fresh one.
	peer.ClientPort, peer.Age = 41311, 0
	old := SyncNATInstall{RealID: 3, Proto: 6, Client: client4, ClientPort: 41311, VIP: vipNAT4, VIPPort: 80, Age: 40}
	for _, n := range []SyncNATInstall{old, peer} {
		if err := d.InstallSyncState([]SyncNATInstall{n}, nil); err != nil {
			t.Fatal(err)
		}
	}
	own.SrcPort = 41311
	in, want = natReply(own, be4, 8080, vipNAT4, 81)
	if ret, out := run(t, d.Program(), in); ret != xdpPass || !bytes.Equal(out, want) {
		t.Fatalf("reply after a newer peer record: verdict %d, not rewritten to the peer's VIP port 81", ret)
	}
}

// lblcSyncDatapath commits schedState's service with scheduler kind over
// its three backends (weight 2), records on.
func lblcSyncDatapath(t *testing.T, kind state.SchedKind) (*Datapath, *SyncReader) {
	t.Helper()
	d := newTestDatapath(t, Options{})
	pinCPU(t)
	lblcApply(t, d, kind, time.Hour, 0, 1, 2)
	r, err := d.SyncReader()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := d.SetSync(true, SyncRefreshShift); err != nil {
		t.Fatal(err)
	}
	return d, r
}

// lblcRecords are the SyncLBLC records among recs.
func lblcRecords(recs []SyncDecision) (out []SyncDecision) {
	for _, r := range recs {
		if r.Kind == SyncLBLC {
			out = append(out, r)
		}
	}
	return out
}

// TestSyncReportsLBLC: an lblc entry is reported when it is made and when
// its backend changes (service id and a real of it), not for each new
// flow that uses it unchanged.
func TestSyncReportsLBLC(t *testing.T) {
	d, r := lblcSyncDatapath(t, state.SchedLBLC)
	lblcConn(t, d, 2000)
	if got := lblcRecords(readSync(t, r)); len(got) != 1 || got[0].Hash != 1 || got[0].RealID != 1 {
		t.Fatalf("new entry: records %+v, want one for service 1", got)
	}
	lblcConn(t, d, 2001)
	lblcConn(t, d, 2002)
	if got := lblcRecords(readSync(t, r)); len(got) != 0 {
		t.Fatalf("entry used unchanged: records %+v, want none", got)
	}
	lblcConn(t, d, 2003) // the first backend is overloaded: the second is recorded
	if got := lblcRecords(readSync(t, r)); len(got) != 1 || got[0].RealID != 2 {
		t.Fatalf("changed entry: records %+v, want one naming real 2", got)
	}
}

// TestSyncInstallsLBLC: a peer's lblc entry becomes this node's choice for
// the destination, for a node that never scheduled it; this node's entry
// changed more recently than the peer's is kept (a stale or replayed
// record); one the peer changed later takes the peer's backend; lblcr
// takes the whole set; a service that is not lblc here, or backends
// this node does not have, are skipped.
func TestSyncInstallsLBLC(t *testing.T) {
	d, _ := lblcSyncDatapath(t, state.SchedLBLC)
	if err := d.InstallSyncState(nil, []SyncLBLCInstall{{SvcID: 1, Dst: vip4, Reals: []uint32{3}, Used: 1, Modified: 5}}); err != nil {
		t.Fatal(err)
	}
	if got := lblcEntry(t, d); !slices.Equal(got, []uint32{3}) {
		t.Fatalf("entry after the peer's %v, want real 3", got)
	}
	if b := lblcConn(t, d, 2100); b != 2 {
		t.Fatalf("a new connection went to backend %d, want the peer's choice (index 2)", b)
	}
	// Stale: changed 100 ticks ago at the peer, 5 here.
	if err := d.InstallSyncState(nil, []SyncLBLCInstall{{SvcID: 1, Dst: vip4, Reals: []uint32{1}, Modified: 100}}); err != nil {
		t.Fatal(err)
	}
	if got := lblcEntry(t, d); !slices.Equal(got, []uint32{3}) {
		t.Fatalf("entry after a stale record %v, want real 3 kept", got)
	}
	// Newer: changed at the peer just now.
	if err := d.InstallSyncState(nil, []SyncLBLCInstall{{SvcID: 1, Dst: vip4, Reals: []uint32{2}}}); err != nil {
		t.Fatal(err)
	}
	if got := lblcEntry(t, d); !slices.Equal(got, []uint32{2}) {
		t.Fatalf("entry after a newer record %v, want real 2", got)
	}
	bad := []SyncLBLCInstall{
		{SvcID: 2, Dst: vip4, Reals: []uint32{1}},  // no such service
		{SvcID: 1, Dst: vip4, Reals: []uint32{99}}, // no such backend
	}
	if err := d.InstallSyncState(nil, bad); err != nil {
		t.Fatal(err)
	}
	if c, err := d.SyncCounters(); err != nil || c.Applied != 2 || c.Kept != 1 || c.Skipped != 2 {
		t.Fatalf("sync counters %+v (%v), want 2 applied, 1 kept, 2 skipped", c, err)
	}

	lblcApply(t, d, state.SchedLBLCR, time.Hour, 0, 1, 2)
	time.Sleep(ctTick) // the set changed here a tick before the peer's record
	if err := d.InstallSyncState(nil, []SyncLBLCInstall{{SvcID: 1, Dst: vip4, Reals: []uint32{1, 3}}}); err != nil {
		t.Fatal(err)
	}
	if got := lblcEntry(t, d); !slices.Equal(got, []uint32{1, 3}) {
		t.Fatalf("lblcr set after the peer's %v, want [1 3]", got)
	}
}
