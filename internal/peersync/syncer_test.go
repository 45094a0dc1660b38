package peersync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
	"github.com/xlbproject/xlb/internal/testenv"
)

var (
	vip    = netip.MustParseAddr("10.200.0.1")
	be1    = netip.MustParseAddr("10.0.1.1")
	be2    = netip.MustParseAddr("10.0.1.2")
	client = netip.MustParseAddr("192.0.2.7")
	vipKey = state.VIPKey{Addr: vip, Port: 80, Proto: 6}
)

// loadNode loads a forwarder (not attached) in a private pin directory.
func loadNode(t *testing.T) *datapath.Datapath {
	t.Helper()
	testenv.RequireRoot(t)
	if err := datapath.EnsureBPFFS(); err != nil {
		testenv.Unavailable(t, "bpffs: %v", err)
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	dir := filepath.Join("/sys/fs/bpf", "xlb-synctest-"+hex.EncodeToString(rnd[:]))
	t.Cleanup(func() { os.RemoveAll(dir) })
	d, err := datapath.Load(datapath.Options{Interface: "lo", PinDir: dir, ConntrackEntries: 1 << 14, MaxServices: 16, MaxReals: 64})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// twoRealState: the VIP with be1 and be2 under the given ids, its whole
// table pointing to pick.
func twoRealState(id1, id2 uint32, pick netip.Addr) *state.State {
	st := state.Empty()
	st.Node = state.Node{Addr4: netip.MustParseAddr("10.0.0.11"), GatewayMAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xfe},
		Timeouts: state.Timeouts{TCPSyn: time.Minute, TCP: 15 * time.Minute, TCPFin: 2 * time.Minute, UDP: 5 * time.Minute}}
	st.Reals.Set(id1, state.Real{Addr: be1, SvcID: 1, Active: true})
	st.Reals.Set(id2, state.Real{Addr: be2, SvcID: 1, Active: true})
	tbl := make([]uint32, 7)
	for i := range tbl {
		tbl[i] = id1
		if pick == be2 {
			tbl[i] = id2
		}
	}
	st.Services[vipKey] = &state.Service{SvcID: 1, Encap: state.EncapIPIP, Table: tbl}
	return st
}

func freePort(t *testing.T, ip string) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

type node struct {
	dp   *datapath.Datapath
	s    *Syncer
	addr netip.AddrPort
}

func startNode(t *testing.T, ctx context.Context, name string, addr netip.AddrPort, peers []netip.AddrPort, st *state.State) *node {
	t.Helper()
	dp := loadNode(t)
	if _, err := dp.Apply(st); err != nil {
		t.Fatal(err)
	}
	s, err := New(dp, Options{Node: name, Listen: addr, Peers: peers, Key: testKey, HelloInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.SetState(st, "v1")
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { <-done })
	return &node{dp: dp, s: s, addr: addr}
}

// outerDst runs f through n's forwarder and returns the backend it was
// sent to (the outer IPv4 destination).
func (n *node) outerDst(t *testing.T, f packet.Flow) netip.Addr {
	t.Helper()
	out := make([]byte, 2048)
	opts := datapathRun(f.Frame(), out)
	ret, err := n.dp.Program().Run(opts)
	if err != nil || ret != 3 { // XDP_TX
		t.Fatalf("flow %v: verdict %d, %v", f, ret, err)
	}
	return netip.AddrFrom4([4]byte(opts.DataOut[14+16 : 14+20]))
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func applied(t *testing.T, d *datapath.Datapath) uint64 {
	c, err := d.SyncCounters()
	if err != nil {
		t.Fatal(err)
	}
	return c.Applied
}

// TestSyncMovedFlowKeepsBackend: node A forwards a new flow to be1; its
// decision reaches B, whose own table gives be2 (ids differ too), and the
// flow's next packet through B goes to be1; a flow A never saw follows B's
// table. A node joining later (C) gets A's flows by a bulk copy.
func TestSyncMovedFlowKeepsBackend(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	aAddr, bAddr, cAddr := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.2"), freePort(t, "127.0.0.4")
	a := startNode(t, ctx, "a", aAddr, []netip.AddrPort{bAddr, cAddr}, twoRealState(1, 2, be1))
	b := startNode(t, ctx, "b", bAddr, []netip.AddrPort{aAddr}, twoRealState(5, 6, be2))

	f := packet.Flow{Src: client, Dst: vip, SrcPort: 40000, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN}
	if got := a.outerDst(t, f); got != be1 {
		t.Fatalf("A sent the SYN to %s", got)
	}
	f.TCPFlags = packet.ACK
	a.outerDst(t, f) // established: a state change, sent too
	waitFor(t, "B to install A's decisions", func() bool { return applied(t, b.dp) >= 2 })
	if got := b.outerDst(t, f); got != be1 {
		t.Fatalf("moved flow went to %s on B, want be1 (A's decision)", got)
	}
	g := f
	g.SrcPort = 40001
	if got := b.outerDst(t, g); got != be2 {
		t.Fatalf("a flow A never saw went to %s on B, want be2 (B's table)", got)
	}
	st := b.s.Stats()
	if st.Received < 2 || st.Unknown != 0 || a.s.Stats().Sent < 2 {
		t.Fatalf("stats: A %+v, B %+v", a.s.Stats(), st)
	}

	// C joins: its bulk copy from A (B is not its peer) brings f.
	c := startNode(t, ctx, "c", cAddr, []netip.AddrPort{aAddr}, twoRealState(9, 10, be2))
	if n := c.s.BulkSync(ctx, 3*time.Second); n != 1 {
		t.Fatalf("bulk copy: %d of 1 peers answered", n)
	}
	if got := c.outerDst(t, f); got != be1 {
		t.Fatalf("after the bulk copy the flow went to %s on C, want be1", got)
	}
	// Hellos: every node sees its peers up; A's fingerprint differs from
	// B's (other tables): a mismatch.
	waitFor(t, "hellos", func() bool {
		ps := b.s.Peers()
		return len(ps) == 1 && ps[0].State == "up" && ps[0].Node == "a"
	})
	if ps := b.s.Peers(); !ps[0].Mismatch || ps[0].ConfigVersion != "v1" {
		t.Fatalf("B's view of A: %+v, want a fingerprint mismatch", ps[0])
	}
}

// TestSyncRefusesBadMessages: a message from an unknown address, a
// replayed, a forged, an oversized and another version's message are each
// refused and counted, and nothing is installed.
func TestSyncRefusesBadMessages(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	aAddr, bAddr := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.2")
	b := startNode(t, ctx, "b", bAddr, []netip.AddrPort{aAddr}, twoRealState(5, 6, be2))
	flows := []Flow{{VIP: vip, Port: 80, Proto: 6, Backend: be1, Hash: 12345, HashBits: 64, State: 2}}
	good, err := Encode(testKey, &Message{Type: MsgFlows, Seq: 1, Time: time.Now().UnixNano(), Flows: flows})
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := Encode(make([]byte, 32), &Message{Type: MsgFlows, Seq: 2, Time: time.Now().UnixNano(), Flows: flows})
	old, _ := Encode(testKey, &Message{Type: MsgFlows, Seq: 3, Time: time.Now().Add(-time.Hour).UnixNano(), Flows: flows})
	other := append([]byte(nil), good...)
	other[4] = 2
	sendFrom := func(src string, b []byte) {
		c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)}, net.UDPAddrFromAddrPort(bAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	sendFrom("127.0.0.1", good)
	waitFor(t, "the good message", func() bool { return applied(t, b.dp) == 1 })
	sendFrom("127.0.0.1", good)               // replayed
	sendFrom("127.0.0.1", old)                // an hour old
	sendFrom("127.0.0.3", good)               // unknown sender
	sendFrom("127.0.0.1", forged)             // another key
	sendFrom("127.0.0.1", other)              // version 2
	sendFrom("127.0.0.1", make([]byte, 1500)) // oversized
	sendFrom("127.0.0.1", good[:40])          // truncated
	want := map[string]uint64{RejectReplay: 2, RejectUnknownSender: 1, RejectAuth: 1, RejectVersion: 1, RejectOversized: 1, RejectMalformed: 1}
	waitFor(t, "the rejections", func() bool {
		r := b.s.Stats().Rejected
		for k, v := range want {
			if r[k] != v {
				return false
			}
		}
		return true
	})
	if n := applied(t, b.dp); n != 1 {
		t.Fatalf("%d installs, want only the good message's", n)
	}
}

func datapathRun(frame, out []byte) *ebpf.RunOptions {
	return &ebpf.RunOptions{Data: frame, DataOut: out, Repeat: 1}
}
