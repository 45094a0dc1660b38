package decap

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"

	"github.com/xlbproject/xlb/internal/testenv"
)

// helperEnv makes the test binary attach in a namespace and exit instead
// of running tests: "netns-name/ifname".
const helperEnv = "XLB_DECAP_TEST_ATTACH"

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(helperAttach(spec))
	}
	os.Exit(m.Run())
}

func helperAttach(spec string) int {
	name, ifname, _ := strings.Cut(spec, "/")
	ns, err := netns.GetFromName(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ns.Close()
	if err := inNS(ns, func() error { return Attach(ifname, ModeNative) }); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

const serverPort = 5353

// tunnelCase is one kind of encapsulation the namespace tests send.
type tunnelCase struct {
	name    string
	outer   netip.Addr // local4 or local6
	gre     bool
	inner6  bool
	counter decapDecapCounter
}

var tunnelCases = []tunnelCase{
	{"gre 4in4", local4, true, false, decapDecapCounterDECAP_RX_GRE_4IN4},
	{"gre 6in4", local4, true, true, decapDecapCounterDECAP_RX_GRE_6IN4},
	{"gre 4in6", local6, true, false, decapDecapCounterDECAP_RX_GRE_4IN6},
	{"gre 6in6", local6, true, true, decapDecapCounterDECAP_RX_GRE_6IN6},
	{"ipip", local4, false, false, decapDecapCounterDECAP_RX_IPIP_4IN4},
	{"6in4", local4, false, true, decapDecapCounterDECAP_RX_IPIP_6IN4},
	{"4in6", local6, false, false, decapDecapCounterDECAP_RX_IPIP_4IN6},
	{"ip6ip6", local6, false, true, decapDecapCounterDECAP_RX_IPIP_6IN6},
}

// client is the inner source: a client of the VIP with no route back.
func (c tunnelCase) client() netip.Addr {
	if c.inner6 {
		return client6
	}
	return client4
}

// send encapsulates a UDP datagram carrying data for the VIP and sends it
// from the sender to outer.
func (c tunnelCase) send(t *testing.T, n *testNet, outer netip.Addr, data []byte) {
	inner := udp4(client4, vip4, 40000, serverPort, data)
	ethertype, proto := uint16(etherIPv4), protoIPIP
	if c.inner6 {
		inner = udp6(client6, vip6, 40000, serverPort, data)
		ethertype, proto = etherIPv6, protoIPv6
	}
	if c.gre {
		inner = cat(greHdr(0, ethertype), inner)
		proto = protoGRE
	}
	n.sendRaw(t, outer, proto, inner)
}

type servers struct{ v4, v6 *net.UDPConn }

func (s servers) of(c tunnelCase) *net.UDPConn {
	if c.inner6 {
		return s.v6
	}
	return s.v4
}

func (n *testNet) servers(t *testing.T) servers {
	return servers{n.listenUDP(t, vip4, serverPort), n.listenUDP(t, vip6, serverPort)}
}

// expectDecap sends c to outer until the backend's server gets it.
func expectDecap(t *testing.T, n *testNet, srv servers, c tunnelCase, outer netip.Addr, data string) {
	t.Helper()
	from, ok := receive(t, srv.of(c), []byte(data), 5*time.Second, func() { c.send(t, n, outer, []byte(data)) })
	if !ok {
		t.Fatalf("%s to %s: the server got nothing", c.name, outer)
	}
	if from.Addr() != c.client() {
		t.Errorf("%s: datagram from %s, want the inner source %s", c.name, from, c.client())
	}
}

// expectNoDecap sends c to outer for a second and wants nothing delivered.
func expectNoDecap(t *testing.T, n *testNet, srv servers, c tunnelCase, outer netip.Addr, data string) {
	t.Helper()
	if _, ok := receive(t, srv.of(c), []byte(data), time.Second, func() { c.send(t, n, outer, []byte(data)) }); ok {
		t.Fatalf("%s to %s was delivered", c.name, outer)
	}
}

// TestEndToEnd: a backend namespace with xlb-decap on its veth receives
// every kind of tunnel from the sender namespace in a UDP server bound to
// the VIP; plain traffic still flows; after Detach tunnels no longer do.
func TestEndToEnd(t *testing.T) {
	n := newTestNet(t)
	n.attach(t, ModeAuto)
	srv := n.servers(t)

	st := n.status(t)
	if !st.Pinned || !st.Attached || st.Mode != ModeNative {
		t.Fatalf("status after attach: %+v, want pinned, attached, native", st)
	}
	if id := n.xdpProgID(t); id == 0 || uint32(st.ProgramID) != id {
		t.Fatalf("kernel reports XDP program %d on %s, status says %d", id, n.backendIf, st.ProgramID)
	}
	for _, a := range []netip.Addr{local4, local6, vip4, vip6} {
		if !slices.Contains(st.LocalAddrs, a) {
			t.Errorf("local addresses %v lack %s", st.LocalAddrs, a)
		}
	}

	for _, c := range tunnelCases {
		t.Run(c.name, func(t *testing.T) {
			expectDecap(t, n, srv, c, c.outer, "via "+c.name)
		})
	}
	t.Run("plain udp", func(t *testing.T) {
		for _, vip := range []netip.Addr{vip4, vip6} {
			c := srv.v4
			if vip.Is6() {
				c = srv.v6
			}
			dst := netip.AddrPortFrom(vip, serverPort)
			if _, ok := receive(t, c, []byte("plain"), 5*time.Second, func() { n.sendUDP(t, dst, []byte("plain")) }); !ok {
				t.Errorf("plain UDP to %s not delivered", dst)
			}
		}
	})

	st = n.status(t)
	for _, c := range tunnelCases {
		if got := st.Counters[c.counter]; got.Packets == 0 || got.Bytes == 0 {
			t.Errorf("counter %s = %+v after %s", got.Name, got, c.name)
		}
	}
	for i, c := range st.Counters {
		if strings.HasPrefix(c.Name, "drop_") && c.Packets != 0 {
			t.Errorf("counter %d %s = %d, want 0", i, c.Name, c.Packets)
		}
	}
	if st.Counters[decapDecapCounterDECAP_PASS_NOT_TUNNEL].Packets == 0 {
		t.Errorf("pass_not_tunnel did not count the plain datagrams")
	}

	if err := inNS(n.backend, func() error { return Detach(n.backendIf) }); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if id := n.xdpProgID(t); id != 0 {
		t.Fatalf("after Detach the kernel still reports XDP program %d", id)
	}
	if st := n.status(t); st.Pinned {
		t.Fatalf("status after detach: %+v", st)
	}
	if _, err := os.Stat(n.pinDir(t)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pin directory still there: %v", err)
	}
	expectNoDecap(t, n, srv, tunnelCases[0], local4, "after detach")
}

// TestAttachOutlivesProcess attaches from a child process that exits: the
// link stays pinned and attached and keeps decapsulating.
func TestAttachOutlivesProcess(t *testing.T) {
	n := newTestNet(t)
	t.Cleanup(func() { n.cleanupPins(t) })
	srv := n.servers(t)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+n.backendName+"/"+n.backendIf)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("attach in a child process: %v\n%s", err, out)
	}

	if _, err := os.Stat(filepath.Join(n.pinDir(t), pinLink)); err != nil {
		t.Fatalf("link pin: %v", err)
	}
	st := n.status(t)
	if !st.Attached || st.Mode != ModeNative || uint32(st.ProgramID) != n.xdpProgID(t) {
		t.Fatalf("status after the child exited: %+v (kernel: program %d)", st, n.xdpProgID(t))
	}
	expectDecap(t, n, srv, tunnelCases[0], local4, "after the child exited")

	if err := inNS(n.backend, func() error { return Detach(n.backendIf) }); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if id := n.xdpProgID(t); id != 0 {
		t.Fatalf("after Detach the kernel still reports XDP program %d", id)
	}
}

// TestLocalAddrs: a tunnel to an address added after Attach passes
// through untouched until SyncLocalAddrs learns it.
func TestLocalAddrs(t *testing.T) {
	n := newTestNet(t)
	n.attach(t, ModeGeneric)
	srv := n.servers(t)
	extra := netip.MustParseAddr("192.0.2.77")

	h, lo := n.backendLink(t, "lo")
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: extra.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := h.AddrAdd(lo, addr); err != nil {
		t.Fatal(err)
	}

	c := tunnelCases[0]
	expectNoDecap(t, n, srv, c, extra, "before sync")
	if st := n.status(t); st.Counters[decapDecapCounterDECAP_PASS_NOT_LOCAL].Packets == 0 {
		t.Errorf("pass_not_local did not count: %+v", st.Counters)
	}

	var got []netip.Addr
	err := inNS(n.backend, func() (err error) {
		got, err = SyncLocalAddrs(n.backendIf)
		return err
	})
	if err != nil {
		t.Fatalf("SyncLocalAddrs: %v", err)
	}
	if !slices.Contains(got, extra) {
		t.Fatalf("SyncLocalAddrs returned %v, without %s", got, extra)
	}
	expectDecap(t, n, srv, c, extra, "after sync")

	if err := h.AddrDel(lo, addr); err != nil {
		t.Fatal(err)
	}
	err = inNS(n.backend, func() (err error) {
		got, err = SyncLocalAddrs(n.backendIf)
		return err
	})
	if err != nil {
		t.Fatalf("SyncLocalAddrs: %v", err)
	}
	if st := n.status(t); slices.Contains(st.LocalAddrs, extra) || !slices.Contains(st.LocalAddrs, local4) {
		t.Fatalf("local addresses after removing %s: %v", extra, st.LocalAddrs)
	}
}

// TestAttachDetachErrors covers the calls an operator gets wrong.
func TestAttachDetachErrors(t *testing.T) {
	n := newTestNet(t)
	n.attach(t, ModeGeneric)
	if st := n.status(t); st.Mode != ModeGeneric {
		t.Errorf("mode = %v, want generic", st.Mode)
	}

	in := func(fn func() error) error { return inNS(n.backend, fn) }
	if err := in(func() error { return Attach(n.backendIf, ModeGeneric) }); !errors.Is(err, ErrAttached) {
		t.Errorf("second Attach: %v, want ErrAttached", err)
	}
	if err := in(func() error { return Attach("xdc-missing", ModeAuto) }); err == nil || !strings.Contains(err.Error(), "find interface") {
		t.Errorf("Attach to a missing interface: %v", err)
	}
	if err := in(func() error { return Detach(n.backendIf) }); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if err := in(func() error { return Detach(n.backendIf) }); !errors.Is(err, ErrNotAttached) {
		t.Errorf("second Detach: %v, want ErrNotAttached", err)
	}
	if err := in(func() error { _, err := SyncLocalAddrs(n.backendIf); return err }); !errors.Is(err, ErrNotAttached) {
		t.Errorf("SyncLocalAddrs when detached: %v, want ErrNotAttached", err)
	}
	if st := n.status(t); st.Pinned || st.Attached || st.Counters != nil {
		t.Errorf("status when detached: %+v", st)
	}

	// Another program on the hook (attached the old way, by netlink):
	// auto mode must not fall back to generic, and must say why.
	var other decapObjects
	if err := loadDecapObjects(&other, nil); err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	setXDP := func(fd int) error {
		return in(func() error {
			l, err := netlink.LinkByName(n.backendIf)
			if err != nil {
				return err
			}
			return netlink.LinkSetXdpFdWithFlags(l, fd, nl.XDP_FLAGS_SKB_MODE)
		})
	}
	if err := setXDP(other.XlbDecap.FD()); err != nil {
		t.Fatal(err)
	}
	defer setXDP(-1)
	err := in(func() error { return Attach(n.backendIf, ModeAuto) })
	if err == nil || !strings.Contains(err.Error(), "another XDP program") {
		t.Errorf("Attach over another program: %v", err)
	}
	if _, err := os.Stat(n.pinDir(t)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed Attach left its pin directory: %v", err)
	}
}

// TestInterfaceGone: deleting the interface ends the attachment; Status
// says so, Prune removes the pins, and a new interface of the same name
// can be attached without a detach first.
func TestInterfaceGone(t *testing.T) {
	n := newTestNet(t)
	n.attach(t, ModeNative)

	h, l := n.backendLink(t, n.backendIf)
	if err := h.LinkDel(l); err != nil {
		t.Fatal(err)
	}

	st := n.status(t)
	if !st.Pinned || st.Attached {
		t.Errorf("status after the interface went: %+v, want pinned, not attached", st)
	}
	removed, err := Prune()
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if !slices.Contains(removed, n.pinDir(t)) {
		t.Errorf("Prune removed %v, not %s", removed, n.pinDir(t))
	}
	if _, err := os.Stat(n.pinDir(t)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pin directory still there: %v", err)
	}

	// Interface gone again, pins left: a new interface of the same name
	// gets attached over the stale pins.
	recreate := func() {
		t.Helper()
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: n.backendIf}, PeerName: n.backendIf + "p"}
		if err := h.LinkAdd(veth); err != nil {
			t.Fatal(err)
		}
	}
	recreate()
	n.attach(t, ModeGeneric)
	l, err = h.LinkByName(n.backendIf)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	recreate()
	n.attach(t, ModeGeneric)
	if st := n.status(t); !st.Attached {
		t.Errorf("status after attaching over stale pins: %+v", st)
	}
}

// TestSameNameTwoNamespaces: two namespaces, each with an interface of the
// same name (a lab's backends all have eth0), attach independently.
func TestSameNameTwoNamespaces(t *testing.T) {
	testenv.RequireNetns(t)
	sfx := randomSuffix(t)
	ifname := "xdcn" + sfx
	var dirs []string
	for i := range 2 {
		ns := newNamedNS(t, fmt.Sprintf("xlbdc-n%d-%s", i, sfx))
		h, err := netlink.NewHandleAt(ns)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: ifname}, PeerName: ifname + "p"}); err != nil {
			t.Fatal(err)
		}
		in := func(fn func() error) error { return inNS(ns, fn) }
		var dir string
		if err := in(func() (err error) { dir, err = pinDir(ifname); return err }); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
		t.Cleanup(func() {
			if err := in(func() error { return Detach(ifname) }); err != nil && !errors.Is(err, ErrNotAttached) {
				t.Errorf("cleanup: %v", err)
			}
		})
		if err := in(func() error { return Attach(ifname, ModeGeneric) }); err != nil {
			t.Fatalf("Attach in namespace %d: %v", i, err)
		}
	}
	if dirs[0] == dirs[1] {
		t.Fatalf("both namespaces pin at %s", dirs[0])
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, pinLink)); err != nil {
			t.Errorf("link pin: %v", err)
		}
	}
}
