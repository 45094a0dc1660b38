package decap

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/testenv"
)

// testNet is two network namespaces joined by a veth pair: a sender (the
// load balancer's side, lb4/lb6) and a backend (local4/local6 on its veth,
// vip4/vip6 on loopback) where xlb-decap runs.
type testNet struct {
	sender, backend         netns.NsHandle
	senderName, backendName string
	senderIf, backendIf     string         // veth ends; backendIf names the pins
	raw                     map[[2]int]int // raw sockets, open for the whole test
	t                       *testing.T     // the test that owns the namespaces
}

func randomSuffix(t testing.TB) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// inNS runs fn on a thread switched to ns. If the thread cannot be
// switched back it stays locked, so the runtime retires it.
func inNS(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		return fmt.Errorf("restore netns: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// newNamedNS creates a named namespace (visible to child processes under
// /var/run/netns) and removes it when the test ends.
func newNamedNS(t *testing.T, name string) netns.NsHandle {
	t.Helper()
	var ns netns.NsHandle
	err := func() error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		orig, err := netns.Get()
		if err != nil {
			return err
		}
		defer orig.Close()
		ns, err = netns.NewNamed(name) // switches this thread to it
		if serr := netns.Set(orig); serr != nil {
			panic(fmt.Sprintf("cannot restore netns: %v", serr))
		}
		return err
	}()
	if err != nil {
		t.Fatalf("create netns %s: %v", name, err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete netns %s: %v", name, err)
		}
	})
	return ns
}

func newTestNet(t *testing.T) *testNet {
	t.Helper()
	testenv.RequireNetns(t)
	sfx := randomSuffix(t)
	n := &testNet{
		senderName:  "xlbdc-s-" + sfx,
		backendName: "xlbdc-b-" + sfx,
		senderIf:    "xdcs" + sfx,
		backendIf:   "xdcb" + sfx,
		raw:         map[[2]int]int{},
		t:           t,
	}
	n.sender = newNamedNS(t, n.senderName)
	n.backend = newNamedNS(t, n.backendName)

	sh, err := netlink.NewHandleAt(n.sender)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	bh, err := netlink.NewHandleAt(n.backend)
	if err != nil {
		t.Fatal(err)
	}
	defer bh.Close()

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: n.senderIf},
		PeerName:      n.backendIf,
		PeerNamespace: netlink.NsFd(int(n.backend)),
	}
	if err := sh.LinkAdd(veth); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	setup := func(h *netlink.Handle, ifname string, addrs []string) {
		t.Helper()
		l, err := h.LinkByName(ifname)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			p, err := netlink.ParseAddr(a)
			if err != nil {
				t.Fatal(err)
			}
			p.Flags = unix.IFA_F_NODAD
			if err := h.AddrAdd(l, p); err != nil {
				t.Fatalf("add %s to %s: %v", a, ifname, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	setup(sh, "lo", nil)
	setup(sh, n.senderIf, []string{lb4.String() + "/24", lb6.String() + "/64"})
	setup(bh, "lo", []string{vip4.String() + "/32", vip6.String() + "/128"})
	setup(bh, n.backendIf, []string{local4.String() + "/24", local6.String() + "/64"})

	// The sender reaches the VIPs directly too, for the non-tunnel check.
	sl, err := sh.LinkByName(n.senderIf)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ dst, gw netip.Addr }{{vip4, local4}, {vip6, local6}} {
		route := &netlink.Route{
			LinkIndex: sl.Attrs().Index,
			Dst:       &net.IPNet{IP: r.dst.AsSlice(), Mask: net.CIDRMask(r.dst.BitLen(), r.dst.BitLen())},
			Gw:        r.gw.AsSlice(),
		}
		if err := sh.RouteAdd(route); err != nil {
			t.Fatalf("add route to %s: %v", r.dst, err)
		}
	}

	// Inner sources (the clients) have no route back in the backend.
	err = inNS(n.backend, func() error {
		for _, f := range []string{"all", "default", n.backendIf} {
			p := filepath.Join("/proc/sys/net/ipv4/conf", f, "rp_filter")
			if err := os.WriteFile(p, []byte("0"), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("rp_filter: %v", err)
	}
	return n
}

// attach runs Attach in the backend namespace and makes sure the pins go
// when the test ends, whatever happened.
func (n *testNet) attach(t *testing.T, mode Mode) {
	t.Helper()
	t.Cleanup(func() { n.cleanupPins(t) })
	if err := inNS(n.backend, func() error { return Attach(n.backendIf, mode) }); err != nil {
		t.Fatalf("Attach: %v", err)
	}
}

func (n *testNet) cleanupPins(t *testing.T) {
	err := inNS(n.backend, func() error { return Detach(n.backendIf) })
	if err != nil && !errors.Is(err, ErrNotAttached) {
		t.Errorf("cleanup: %v", err)
	}
	os.RemoveAll(n.pinDir(t))
}

// pinDir returns the backend interface's pin directory.
func (n *testNet) pinDir(t *testing.T) string {
	t.Helper()
	var dir string
	if err := inNS(n.backend, func() (err error) { dir, err = pinDir(n.backendIf); return err }); err != nil {
		t.Fatal(err)
	}
	return dir
}

func (n *testNet) status(t *testing.T) State {
	t.Helper()
	var st State
	err := inNS(n.backend, func() (err error) {
		st, err = Status(n.backendIf)
		return err
	})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	return st
}

// xdpProgID returns the ID of the XDP program the kernel reports on the
// backend's veth (0: none).
func (n *testNet) xdpProgID(t *testing.T) uint32 {
	t.Helper()
	h, err := netlink.NewHandleAt(n.backend)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(n.backendIf)
	if err != nil {
		t.Fatal(err)
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return x.ProgId
	}
	return 0
}

// listenUDP opens a UDP socket on addr:port in the backend namespace.
func (n *testNet) listenUDP(t *testing.T, addr netip.Addr, port uint16) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := inNS(n.backend, func() (err error) {
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, port)))
		return err
	})
	if err != nil {
		t.Fatalf("listen %s:%d: %v", addr, port, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawSocket returns a raw IP socket for protocol proto in the sender
// namespace: the kernel writes the outer IP header, the test the rest.
func (n *testNet) rawSocket(t *testing.T, family, proto int) int {
	t.Helper()
	if fd, ok := n.raw[[2]int{family, proto}]; ok {
		return fd
	}
	var fd int
	err := inNS(n.sender, func() (err error) {
		fd, err = unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		return err
	})
	if err != nil {
		t.Fatalf("raw socket %d/%d: %v", family, proto, err)
	}
	n.t.Cleanup(func() { unix.Close(fd) })
	n.raw[[2]int{family, proto}] = fd
	return fd
}

// sendRaw sends payload from the sender to dst over a raw socket of
// protocol proto.
func (n *testNet) sendRaw(t *testing.T, dst netip.Addr, proto int, payload []byte) {
	t.Helper()
	var (
		fd int
		sa unix.Sockaddr
	)
	if dst.Is4() {
		fd = n.rawSocket(t, unix.AF_INET, proto)
		sa = &unix.SockaddrInet4{Addr: dst.As4()}
	} else {
		fd = n.rawSocket(t, unix.AF_INET6, proto)
		sa = &unix.SockaddrInet6{Addr: dst.As16()}
	}
	if err := unix.Sendto(fd, payload, 0, sa); err != nil {
		t.Fatalf("send to %s proto %d: %v", dst, proto, err)
	}
}

// sendUDP sends a plain UDP datagram from the sender namespace.
func (n *testNet) sendUDP(t *testing.T, dst netip.AddrPort, payload []byte) {
	t.Helper()
	var c net.Conn
	err := inNS(n.sender, func() (err error) {
		c, err = net.Dial("udp", dst.String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(payload); err != nil {
		t.Fatal(err)
	}
}

// receive waits up to d for a datagram carrying want on c, calling resend
// every 200ms meanwhile (the first packet may wait for neighbour
// resolution). It returns the sender's address, or false on timeout.
func receive(t *testing.T, c *net.UDPConn, want []byte, d time.Duration, resend func()) (netip.AddrPort, bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	buf := make([]byte, 2048)
	for time.Now().Before(deadline) {
		resend()
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		for {
			nr, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				break // timeout: resend
			}
			if string(buf[:nr]) == string(want) {
				return from, true
			}
		}
	}
	return netip.AddrPort{}, false
}

// backendLink is a netlink handle in the backend's namespace, closed when
// the test ends, and its link named name.
func (n *testNet) backendLink(t *testing.T, name string) (*netlink.Handle, netlink.Link) {
	t.Helper()
	h, err := netlink.NewHandleAt(n.backend)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return h, l
}
