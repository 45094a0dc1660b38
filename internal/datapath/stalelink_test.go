package datapath

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/internal/state"
)

// addVeth creates the veth pair xlbt0/xlbt1 in the current namespace, up,
// and returns xlbt0's ifindex.
func addVeth(t *testing.T) int {
	t.Helper()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "xlbt0", HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 0x11}}, PeerName: "xlbt1"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"xlbt0", "xlbt1"} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			t.Fatal(err)
		}
		netlink.LinkSetUp(l)
	}
	l, _ := netlink.LinkByName("xlbt0")
	return l.Attrs().Index
}

// TestStaleLinkReplaced: the interface of a pinned forwarder is deleted
// (its XDP link is detached by the kernel, the pin stays); the next Open,
// on a new interface of the same name, replaces the stale link with a
// warning instead of refusing, and keeps the pinned maps: the committed
// state, a conntrack bucket and the operator state are as they were.
func TestStaleLinkReplaced(t *testing.T) {
	newTestDatapath(t, Options{}) // root and bpffs checks
	inNewNetns(t, func() {
		first := addVeth(t)
		d := newTestDatapath(t, Options{Interface: "xlbt0"})
		d.Close()
		o := d.opts
		dp, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		defer Cleanup(o.PinDir)
		st := &State{Node: Node{Addr4: netip.MustParseAddr("10.0.0.11"), Timeouts: defaultT},
			Services: map[VIPKey]*Service{{Addr: vip4, Port: 80, Proto: 6}: {SvcID: 1, Encap: EncapGRE, Table: []uint32{1, 1, 1, 1, 1, 1, 1}}},
			Reals:    state.RealsOf(map[uint32]Real{1: {Addr: netip.MustParseAddr("10.0.0.101"), SvcID: 1, Active: true}})}
		if _, err := dp.Apply(st); err != nil {
			t.Fatal(err)
		}
		bucket := xlbCtBucket{Way: [8]uint64{0x1234_5678_9abc_def0, 0, 0, 0, 0, 0, 0, 42}}
		if err := dp.objs.XlbCt.Update(uint32(3), &bucket, 0); err != nil {
			t.Fatal(err)
		}
		if err := dp.SaveOperatorState([]byte(`{"version":1}`)); err != nil {
			t.Fatal(err)
		}
		dp.Close()

		l, _ := netlink.LinkByName("xlbt0")
		if err := netlink.LinkDel(l); err != nil {
			t.Fatal(err)
		}
		second := addVeth(t)
		var logs strings.Builder
		o.Logger = testLogger(&logs)
		dp2, err := Open(o)
		if err != nil {
			t.Fatalf("Open after the interface was replaced (ifindex %d -> %d): %v", first, second, err)
		}
		defer dp2.Close()
		if dp2.Adopted() || !strings.Contains(logs.String(), "level=WARN msg=\"the pinned XDP link's interface is gone") {
			t.Fatalf("adopted %v; log:\n%s", dp2.Adopted(), logs.String())
		}
		pl, err := link.LoadPinnedLink(o.PinDir+"/link", nil)
		if err != nil {
			t.Fatal(err)
		}
		info, err := pl.Info()
		pl.Close()
		if err != nil || int(info.XDP().Ifindex) != second {
			t.Fatalf("the pinned link is on ifindex %d (%v), want %d", info.XDP().Ifindex, err, second)
		}
		requireSameState(t, dp2.Snapshot(), st)
		var got xlbCtBucket
		if err := dp2.objs.XlbCt.Lookup(uint32(3), &got); err != nil || got != bucket {
			t.Fatalf("conntrack bucket after the replacement: %+v (%v), want %+v", got, err, bucket)
		}
		if doc, err := dp2.OperatorState(); err != nil || string(doc) != `{"version":1}` {
			t.Fatalf("operator state after the replacement: %q (%v)", doc, err)
		}
	})
}

// testLogger logs as text into w, debug level and up.
func testLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
