package harness

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The private network namespace every measurement runs in. BPF_PROG_TEST_RUN
// resolves the ingress ifindex, and bpf_fib_lookup the routes and
// neighbours, in the calling thread's namespace: one veth end is the
// ingress device, the backends' prefixes are routed through a permanent
// neighbour on it, so the forwarder's FIB lookup succeeds with the ingress
// as egress (XDP_TX), as on a one-armed load balancer.
const (
	benchIf     = "xb0"
	benchIfPeer = "xb1"
)

var (
	nodeMAC = net.HardwareAddr{0x02, 0xb0, 0, 0, 0, 0x11}
	gwMAC   = net.HardwareAddr{0x02, 0xb0, 0, 0, 0, 0x01}
)

// onPinnedThread runs fn on a fresh OS thread pinned to cpu, inside a new
// network namespace private to that thread. The thread is never unlocked:
// Go discards it, and the namespace with its devices goes with it.
//
// Other tasks on the same CPU do not inflate the figures: the kernel's
// test-run loop stops its clock while it yields the CPU (a busy loop
// pinned to the CPU left them unchanged).
func onPinnedThread(cpu int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			errc <- fmt.Errorf("pin thread to cpu %d: %w", cpu, err)
			return
		}
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("new network namespace: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// setupNetns creates the veth pair, addresses, routes and neighbours in the
// calling thread's (private) namespace, sets forwarding (setForwarding) and
// returns the ingress ifindex.
func setupNetns(fib bool) (int, error) {
	nl, err := netlink.NewHandle()
	if err != nil {
		return 0, fmt.Errorf("netlink: %w", err)
	}
	defer nl.Close()
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: benchIf, HardwareAddr: nodeMAC, MTU: 1500},
		PeerName:  benchIfPeer,
	}
	if err := nl.LinkAdd(veth); err != nil {
		return 0, fmt.Errorf("add veth (needs CONFIG_VETH): %w", err)
	}
	link, err := nl.LinkByName(benchIf)
	if err != nil {
		return 0, err
	}
	peer, err := nl.LinkByName(benchIfPeer)
	if err != nil {
		return 0, err
	}
	for _, l := range []netlink.Link{link, peer} {
		if err := nl.LinkSetUp(l); err != nil {
			return 0, fmt.Errorf("set %s up: %w", l.Attrs().Name, err)
		}
	}
	for _, a := range []string{nodeV4.String() + "/24", nodeV6.String() + "/64"} {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			return 0, err
		}
		addr.Flags = unix.IFA_F_NODAD
		if err := nl.AddrAdd(link, addr); err != nil {
			return 0, fmt.Errorf("address %s: %w", a, err)
		}
	}
	for _, gw := range []string{gwV4.String(), gwV6.String()} {
		ip := net.ParseIP(gw)
		fam := netlink.FAMILY_V6
		if ip.To4() != nil {
			fam = netlink.FAMILY_V4
		}
		if err := nl.NeighAdd(&netlink.Neigh{LinkIndex: link.Attrs().Index, Family: fam,
			State: netlink.NUD_PERMANENT, IP: ip, HardwareAddr: gwMAC}); err != nil {
			return 0, fmt.Errorf("neighbour %s: %w", gw, err)
		}
	}
	for _, r := range []struct{ dst, gw string }{
		{backendNet4, gwV4.String()}, {backendNet6, gwV6.String()},
		// the clients, for NAT replies (their FIB lookup)
		{clientNet4, gwV4.String()}, {clientNet6, gwV6.String()}, {cycleNet4, gwV4.String()},
	} {
		_, dst, err := net.ParseCIDR(r.dst)
		if err != nil {
			return 0, err
		}
		if err := nl.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst,
			Gw: net.ParseIP(r.gw)}); err != nil {
			return 0, fmt.Errorf("route %s: %w", r.dst, err)
		}
	}
	if err := setForwarding(fib, true); err != nil {
		return 0, err
	}
	return link.Attrs().Index, nil
}

// setForwarding turns IPv4 and IPv6 forwarding on or off on the ingress
// device (and with all, for every device). With forwarding off,
// bpf_fib_lookup answers BPF_FIB_LKUP_RET_FWD_DISABLED at once and the
// forwarder uses its fallback gateway: the difference is what the route
// and neighbour lookup costs.
func setForwarding(on, all bool) error {
	v := []byte("0")
	if on {
		v = []byte("1")
	}
	paths := []string{"ipv4/conf/" + benchIf + "/forwarding", "ipv6/conf/" + benchIf + "/forwarding"}
	if all {
		paths = append([]string{"ipv4/conf/all/forwarding", "ipv6/conf/all/forwarding"}, paths...)
	}
	// /proc/sys/net is the namespace of the thread that opens the file: the
	// caller is locked to the namespace's only thread.
	for _, p := range paths {
		if err := os.WriteFile(filepath.Join("/proc/sys/net", p), v, 0o644); err != nil {
			return fmt.Errorf("sysctl %s: %w", p, err)
		}
	}
	return nil
}
