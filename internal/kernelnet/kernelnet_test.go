package kernelnet

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/testenv"
)

var (
	hereMAC = net.HardwareAddr{2, 0, 0, 0x77, 0, 1}
	peerMAC = net.HardwareAddr{2, 0, 0, 0x77, 0, 2}
)

// segment makes, in the test's namespace, the veth kn0 (10.77.0.1/24,
// fd77::1/64, MTU 1400) up with its peer kn1 up, a permanent neighbour
// 10.77.0.2 (peerMAC) on kn0, a route to 10.88.0.0/16 through it and a
// default route through 10.77.0.254 and fd77::fe. It returns kn0.
func segment(t *testing.T) netlink.Link {
	t.Helper()
	testenv.InNewNetns(t)
	lo, _ := netlink.LinkByName("lo")
	must(t, netlink.LinkSetUp(lo))
	must(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "kn0", MTU: 1400, HardwareAddr: hereMAC}, PeerName: "kn1"}))
	kn0, err := netlink.LinkByName("kn0")
	must(t, err)
	kn1, err := netlink.LinkByName("kn1")
	must(t, err)
	for _, a := range []string{"10.77.0.1/24", "fd77::1/64"} {
		addr, _ := netlink.ParseAddr(a)
		addr.Flags = unix.IFA_F_NODAD
		must(t, netlink.AddrAdd(kn0, addr))
	}
	must(t, netlink.LinkSetUp(kn0))
	must(t, netlink.LinkSetUp(kn1))
	must(t, netlink.NeighAdd(&netlink.Neigh{LinkIndex: kn0.Attrs().Index, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
		IP: net.ParseIP("10.77.0.2"), HardwareAddr: peerMAC}))
	_, dst, _ := net.ParseCIDR("10.88.0.0/16")
	must(t, netlink.RouteAdd(&netlink.Route{LinkIndex: kn0.Attrs().Index, Dst: dst, Gw: net.ParseIP("10.77.0.2")}))
	must(t, netlink.RouteAdd(&netlink.Route{LinkIndex: kn0.Attrs().Index, Gw: net.ParseIP("10.77.0.254")}))
	must(t, netlink.RouteAdd(&netlink.Route{LinkIndex: kn0.Attrs().Index, Gw: net.ParseIP("fd77::fe")}))
	return kn0
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestNextHops resolves next hops and routes on a segment of known
// content: a connected neighbour, a gateway, a local address, an address
// whose neighbour is not resolved, and the default routes.
func TestNextHops(t *testing.T) {
	kn0 := segment(t)
	idx := kn0.Attrs().Index
	a := netip.MustParseAddr
	for _, c := range []struct {
		to   string
		want NextHop
	}{
		{"10.77.0.2", NextHop{Backend: a("10.77.0.2"), Via: a("10.77.0.2"), Link: idx}},
		{"10.88.1.1", NextHop{Backend: a("10.88.1.1"), Via: a("10.77.0.2"), Link: idx, Gateway: true}},
		{"10.99.0.1", NextHop{Backend: a("10.99.0.1"), Via: a("10.77.0.254"), Link: idx, Gateway: true}},
		{"fd77::9", NextHop{Backend: a("fd77::9"), Via: a("fd77::9"), Link: idx}},
	} {
		got, err := ResolveNextHop(a(c.to))
		if err != nil || got != c.want {
			t.Errorf("ResolveNextHop(%s) = %+v, %v; want %+v", c.to, got, err, c.want)
		}
	}
	if got, err := ResolveNextHop(a("10.77.0.1")); err != nil || !got.Local {
		t.Errorf("ResolveNextHop of a local address = %+v, %v; want Local", got, err)
	}

	if r, err := Route(a("10.88.1.1")); err != nil || r.Gateway != a("10.77.0.2") || r.Dev != "kn0" || r.Local {
		t.Errorf("Route(10.88.1.1) = %+v, %v; want gateway 10.77.0.2 on kn0", r, err)
	}
	if r, err := Route(a("10.77.0.2")); err != nil || r.Gateway.IsValid() || r.Dev != "kn0" {
		t.Errorf("Route(10.77.0.2) = %+v, %v; want connected on kn0", r, err)
	}
	if r, err := Route(a("10.77.0.1")); err != nil || !r.Local {
		t.Errorf("Route(10.77.0.1) = %+v, %v; want local", r, err)
	}

	nh, err := LookupNextHop(a("10.88.1.1"))
	if err != nil || nh.Ifindex != uint32(idx) || nh.MTU != 1400 || net.HardwareAddr(nh.DMAC[:]).String() != peerMAC.String() ||
		net.HardwareAddr(nh.SMAC[:]).String() != hereMAC.String() || nh.Local {
		t.Errorf("LookupNextHop(10.88.1.1) = %+v, %v; want kn0 (MTU 1400) from %s to %s", nh, err, hereMAC, peerMAC)
	}
	if nh, err := LookupNextHop(a("10.77.0.9")); err != nil || nh.Ifindex != 0 {
		t.Errorf("LookupNextHop of an unresolved neighbour = %+v, %v; want the zero next hop", nh, err)
	}
	if nh, err := LookupNextHop(a("10.77.0.1")); err != nil || !nh.Local {
		t.Errorf("LookupNextHop of a local address = %+v, %v; want Local", nh, err)
	}

	gws, err := DefaultGateways()
	want := []NextHop{
		{Backend: a("10.77.0.254"), Via: a("10.77.0.254"), Link: idx, Gateway: true},
		{Backend: a("fd77::fe"), Via: a("fd77::fe"), Link: idx, Gateway: true},
	}
	if err != nil || !slices.Equal(gws, want) {
		t.Errorf("DefaultGateways() = %+v, %v; want %+v", gws, err, want)
	}
}

// TestKeepNeighbour makes a neighbour entry managed, and leaves alone one
// configured by hand.
func TestKeepNeighbour(t *testing.T) {
	kn0 := segment(t)
	idx := kn0.Attrs().Index
	for _, via := range []string{"10.77.0.9", "fd77::9", "10.77.0.2"} {
		if err := KeepNeighbour(NextHop{Via: netip.MustParseAddr(via), Link: idx}); err != nil {
			t.Fatalf("KeepNeighbour(%s): %v", via, err)
		}
	}
	for _, c := range []struct {
		ip      string
		family  int
		managed bool
	}{
		{"10.77.0.9", unix.AF_INET, true},
		{"fd77::9", unix.AF_INET6, true},
		{"10.77.0.2", unix.AF_INET, false}, // permanent, by hand
	} {
		ns, err := netlink.NeighList(idx, c.family)
		must(t, err)
		i := slices.IndexFunc(ns, func(n netlink.Neigh) bool { return n.IP.Equal(net.ParseIP(c.ip)) })
		if i < 0 {
			t.Errorf("no neighbour entry for %s", c.ip)
			continue
		}
		n := ns[i]
		if managed := n.FlagsExt&netlink.NTF_EXT_MANAGED != 0; managed != c.managed {
			t.Errorf("neighbour %s: managed %v, want %v", c.ip, managed, c.managed)
		}
		if !c.managed && n.State != netlink.NUD_PERMANENT {
			t.Errorf("neighbour %s: state %#x, want permanent", c.ip, n.State)
		}
	}
}

// TestEnableForwarding turns forwarding on for one interface only and
// reports a change only when there was one.
func TestEnableForwarding(t *testing.T) {
	segment(t)
	other := "/proc/sys/net/ipv4/conf/kn1/forwarding"
	paths := []string{"/proc/sys/net/ipv4/conf/kn0/forwarding", "/proc/sys/net/ipv6/conf/kn0/forwarding"}
	for _, p := range append(paths, other) {
		must(t, os.WriteFile(p, []byte("0"), 0o644))
	}
	if changed, err := EnableForwarding("kn0"); err != nil || !changed {
		t.Fatalf("EnableForwarding = %v, %v; want a change", changed, err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(b)) != "1" {
			t.Errorf("%s = %q, %v; want 1", p, b, err)
		}
	}
	if b, err := os.ReadFile(other); err != nil || strings.TrimSpace(string(b)) != "0" {
		t.Errorf("%s = %q, %v; want 0 (another interface)", other, b, err)
	}
	if changed, err := EnableForwarding("kn0"); err != nil || changed {
		t.Fatalf("EnableForwarding again = %v, %v; want no change", changed, err)
	}
	if _, err := EnableForwarding("nosuch0"); err == nil {
		t.Fatal("EnableForwarding of an interface that does not exist: no error")
	}
}

// TestNativeTXProblem checks the veth transmit check with the peer in
// the same namespace: nothing against an interface that is not a veth; a
// peer that is down, then up without XDP, named; nothing once the peer
// runs XDP. (A peer in another namespace: the datapath's
// TestTXCheckVethPeer.)
func TestNativeTXProblem(t *testing.T) {
	testenv.InNewNetns(t)
	lo, _ := netlink.LinkByName("lo")
	if p, isVeth, err := LookupVethPeer(lo.Attrs().Index); err != nil || isVeth || p != (VethPeer{}) {
		t.Fatalf("LookupVethPeer(lo) = %+v, %v, %v; want not a veth", p, isVeth, err)
	}
	if problem, err := NativeTXProblem(lo.Attrs().Index, "lo"); problem != "" || err != nil {
		t.Fatalf("NativeTXProblem(lo) = %q, %v; want nothing", problem, err)
	}
	if _, _, err := LookupVethPeer(999); err == nil || errors.Is(err, ErrPeerNotVisible) {
		t.Fatalf("LookupVethPeer of no interface: %v; want an error, not ErrPeerNotVisible", err)
	}

	must(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "kt0"}, PeerName: "kt1"}))
	kt0, _ := netlink.LinkByName("kt0")
	kt1, _ := netlink.LinkByName("kt1")
	must(t, netlink.LinkSetUp(kt0))
	idx := kt0.Attrs().Index
	check := func(stage string, want ...string) {
		t.Helper()
		problem, err := NativeTXProblem(idx, "kt0")
		if err != nil {
			t.Fatalf("%s: %v", stage, err)
		}
		for _, w := range want {
			if !strings.Contains(problem, w) {
				t.Errorf("%s: %q lacks %q", stage, problem, w)
			}
		}
		if len(want) == 0 && problem != "" {
			t.Errorf("%s: %q, want nothing", stage, problem)
		}
	}
	check("peer down", "the peer veth kt1", "of kt0 is down", "xdp_mode: generic")
	must(t, netlink.LinkSetUp(kt1))
	check("peer up without XDP", "the peer veth kt1", "has no XDP program")

	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}}) // XDP_PASS
	must(t, err)
	defer prog.Close()
	must(t, netlink.LinkSetXdpFdWithFlags(kt1, prog.FD(), nl.XDP_FLAGS_DRV_MODE))
	check("peer up with XDP")
	p, isVeth, err := LookupVethPeer(idx)
	if want := (VethPeer{Name: "kt1", Index: kt1.Attrs().Index, NetNsID: -1, Up: true, XDP: true}); err != nil || !isVeth || p != want {
		t.Errorf("LookupVethPeer(kt0) = %+v, %v, %v; want %+v", p, isVeth, err, want)
	}
}
