package datapath

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
)

func TestJudgeTX(t *testing.T) {
	for _, c := range []struct {
		sent, tx, dropped uint64
		ok                bool
	}{
		{100, 100, 0, true},
		{100, 250, 0, true}, // the stack's own packets count too
		{100, 50, 0, true},  // frames in flight at the read
		{100, 3, 97, false},
		{100, 0, 0, false},
	} {
		got := judgeTX("eth0", c.sent, c.tx, c.dropped)
		if (got == "") != c.ok {
			t.Errorf("sent %d, tx %d, dropped %d: %q, want ok %v", c.sent, c.tx, c.dropped, got, c.ok)
		}
	}
}

// attachPassXDP attaches an XDP_PASS program to l in native mode, in the
// namespace the calling (locked) thread is in.
func attachPassXDP(t *testing.T, l netlink.Link) {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, XDPPass), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := netlink.LinkSetXdpFdWithFlags(l, p.FD(), nl.XDP_FLAGS_DRV_MODE); err != nil {
		t.Fatal(err)
	}
}

// inNetns runs fn with the (locked) thread in ns, then returns to back.
func inNetns(t *testing.T, ns, back netns.NsHandle, fn func()) {
	t.Helper()
	if err := netns.Set(ns); err != nil {
		t.Fatal(err)
	}
	defer netns.Set(back)
	fn()
}

// TestTXCheckVethPeer attaches to a veth whose peer is in another
// namespace and runs no XDP program: auto picks generic; native attaches
// but its transmit check names the peer, until the peer runs XDP; a peer
// set down fails it again.
func TestTXCheckVethPeer(t *testing.T) {
	newTestDatapath(t, Options{}) // root and bpffs checks
	inNewNetns(t, func() {
		here, other := vethPeerElsewhere(t)
		var peer netlink.Link
		inNetns(t, other, here, func() {
			peer, _ = netlink.LinkByName("xlbt1")
			netlink.LinkSetUp(peer)
		})
		dp, o := openOnTestPins(t, "xlbt0", ModeAuto)
		if dp.Mode() != ModeGeneric || !dp.TX().OK {
			t.Fatalf("auto: mode %s, tx %+v; want generic, ok", dp.Mode(), dp.TX())
		}
		dp.Close()
		Cleanup(o.PinDir)

		o.Mode = ModeNative
		dp, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { dp.Close(); Cleanup(o.PinDir) }()
		if tx := dp.TX(); tx.OK || !strings.Contains(tx.Detail, "peer veth xlbt1") || !strings.Contains(tx.Detail, "has no XDP program") || !strings.Contains(tx.Detail, "netns id") {
			t.Fatalf("native, peer without XDP: %+v", tx)
		}
		if err := dp.SelfCheck(); !errors.Is(err, ErrNoTransmit) || !errors.Is(err, ErrSelfCheck) {
			t.Fatalf("self-check, peer without XDP: %v", err)
		}
		inNetns(t, other, here, func() { attachPassXDP(t, peer) })
		if err := dp.SelfCheck(); err != nil {
			t.Fatalf("self-check, peer with XDP: %v", err)
		}
		inNetns(t, other, here, func() { netlink.LinkSetDown(peer) })
		if tx := dp.CheckTX(); tx.OK || !strings.Contains(tx.Detail, "is down") {
			t.Fatalf("native, peer down: %+v", tx)
		}
	})
}

// vethPeerElsewhere creates, in the (locked) thread's namespace here, the
// veth xlbt0 (up) whose peer xlbt1 (down) is in a new namespace other;
// both handles are closed when the test ends.
func vethPeerElsewhere(t *testing.T) (here, other netns.NsHandle) {
	t.Helper()
	here, _ = netns.Get()
	t.Cleanup(func() { here.Close() })
	other, err := netns.New() // switches the thread
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	netns.Set(here)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "xlbt0", HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 0x11}},
		PeerName: "xlbt1", PeerNamespace: netlink.NsFd(int(other))}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	link, _ := netlink.LinkByName("xlbt0")
	netlink.LinkSetUp(link)
	return here, other
}
