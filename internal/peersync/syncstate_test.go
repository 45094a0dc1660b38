package peersync

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

// natLBLCState: twoRealState's service by NAT to port 8080, lblc over
// both backends.
func natLBLCState(id1, id2 uint32) *state.State {
	st := twoRealState(id1, id2, be1)
	st.Node.NAT = true
	for _, id := range []uint32{id1, id2} {
		r, _ := st.Reals.Get(id)
		r.Port = 8080
		st.Reals.Set(id, r)
	}
	svc := st.Services[vipKey]
	svc.Encap = state.EncapNAT
	svc.Sched = state.Sched{Kind: state.SchedLBLC, Proto: 6, Expire: time.Hour,
		List: []state.SchedEnt{{RealID: id1, Weight: 1}, {RealID: id2, Weight: 1}}}
	return st
}

// natOn returns n's NAT reply entry for client:cport, if any.
func natOn(t *testing.T, n *node, cport uint16) (datapath.NATEntry, bool) {
	t.Helper()
	var got datapath.NATEntry
	found := false
	if err := n.dp.NATEntries(func(e datapath.NATEntry) bool {
		if e.Client == client && e.ClientPort == cport {
			got, found = e, true
		}
		return !found
	}); err != nil {
		t.Fatal(err)
	}
	return got, found
}

// TestSyncNATAndLBLC: A's NAT flow (its reply entry) and lblc entry reach
// B as A makes them, in B's real ids; a node joining later (C) gets both
// in its bulk copy. Records naming a backend the receiver does not have
// are counted unknown.
func TestSyncNATAndLBLC(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	aAddr, bAddr, cAddr := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.2"), freePort(t, "127.0.0.4")
	a := startNode(t, ctx, "a", aAddr, []netip.AddrPort{bAddr, cAddr}, natLBLCState(1, 2))
	b := startNode(t, ctx, "b", bAddr, []netip.AddrPort{aAddr}, natLBLCState(5, 6))

	f := packet.Flow{Src: client, Dst: vip, SrcPort: 41000, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN}
	out := make([]byte, 2048)
	if ret, err := a.dp.Program().Run(datapathRun(f.Frame(), out)); err != nil || ret != 3 {
		t.Fatalf("A: verdict %d, %v", ret, err)
	}
	waitFor(t, "B to install A's NAT entry", func() bool { _, ok := natOn(t, b, 41000); return ok })
	e, _ := natOn(t, b, 41000)
	if e.RealID != 5 || e.Backend != be1 || e.BackendPort != 8080 || e.VIP != vip || e.VIPPort != 80 {
		t.Fatalf("B's NAT entry %+v, want real 5, be1:8080 for %v:80", e, vip)
	}
	waitFor(t, "B to install A's lblc entry", func() bool {
		e, found, _ := b.dp.LBLC(1, vip)
		return found && slices.Equal(e.Reals, []uint32{5})
	})

	// A's entries as they are when C joins: its own, and a moved lblc.
	if err := a.dp.InstallSyncState(nil, []datapath.SyncLBLCInstall{{SvcID: 1, Dst: vip, Reals: []uint32{2}}}); err != nil {
		t.Fatal(err)
	}
	c := startNode(t, ctx, "c", cAddr, []netip.AddrPort{aAddr}, natLBLCState(9, 10))
	if n := c.s.BulkSync(ctx, 3*time.Second); n != 1 {
		t.Fatalf("bulk copy: %d of 1 peers answered", n)
	}
	if e, ok := natOn(t, c, 41000); !ok || e.RealID != 9 {
		t.Fatalf("C's NAT entry after the bulk copy: %+v (found %v), want real 9", e, ok)
	}
	if e, found, err := c.dp.LBLC(1, vip); err != nil || !found || !slices.Equal(e.Reals, []uint32{10}) {
		t.Fatalf("C's lblc entry after the bulk copy: %+v (found %v, %v), want real 10", e, found, err)
	}

	// A backend B does not have: counted, nothing installed.
	unknown0 := b.s.Stats().Unknown
	a.s.sendState(&Message{Type: MsgFlows, NATs: []NAT{{VIP: vip, Port: 80, Proto: 6, Backend: netip.MustParseAddr("10.0.1.99"),
		Client: client, ClientPort: 41001, VIPPort: 80}}}, nil)
	waitFor(t, "B to count the unknown backend", func() bool { return b.s.Stats().Unknown == unknown0+1 })
	if _, ok := natOn(t, b, 41001); ok {
		t.Fatal("B installed a NAT entry for a backend it does not have")
	}
}
