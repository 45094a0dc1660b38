// Package kernelnet asks the kernel's networking what the forwarder
// depends on and cannot see from XDP: routes and next hops (netlink FIB
// lookups), neighbour entries kept resolved, forwarding sysctls and
// whether a veth's peer can receive what XDP sends. It touches no BPF
// map or program.
package kernelnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/xlbproject/xlb/internal/state"
	"golang.org/x/sys/unix"
)

// NextHop is where the kernel sends packets for a backend.
type NextHop struct {
	Backend netip.Addr
	Via     netip.Addr // the neighbour: a gateway, or the backend itself
	Link    int        // outgoing ifindex
	Local   bool       // the address is one of this node's (a local route)
	Gateway bool       // Via is a gateway: the backend is not on a connected segment
}

// ResolveNextHop asks the kernel FIB for the next hop toward a.
func ResolveNextHop(a netip.Addr) (NextHop, error) {
	routes, err := netlink.RouteGet(net.IP(a.AsSlice()))
	if err != nil {
		return NextHop{}, fmt.Errorf("route to %s: %w", a, err)
	}
	if len(routes) == 0 {
		return NextHop{}, fmt.Errorf("no route to %s", a)
	}
	r := routes[0]
	nh := NextHop{Backend: a, Via: a, Link: r.LinkIndex, Local: r.Type == unix.RTN_LOCAL}
	if gw, ok := netip.AddrFromSlice(r.Gw); ok && r.Gw != nil {
		nh.Gateway = true
		nh.Via = gw.Unmap()
		if a.Is6() && !a.Is4In6() {
			nh.Via = gw
		}
	}
	return nh, nil
}

// KeepNeighbour makes the kernel keep the neighbour entry of nh resolved
// (a "managed" entry, Linux >= 5.16: the kernel re-resolves it by itself),
// so bpf_fib_lookup finds a MAC for the first packet of a flow. An entry
// that already exists in a usable state, or was configured by hand, is left
// alone.
func KeepNeighbour(nh NextHop) error {
	family := unix.AF_INET
	if nh.Via.Is6() && !nh.Via.Is4In6() {
		family = unix.AF_INET6
	}
	ip := net.IP(nh.Via.AsSlice())
	existing, err := netlink.NeighList(nh.Link, family)
	if err != nil {
		return fmt.Errorf("list neighbours: %w", err)
	}
	for _, n := range existing {
		if !n.IP.Equal(ip) {
			continue
		}
		if n.FlagsExt&netlink.NTF_EXT_MANAGED != 0 || n.State&(netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0 {
			return nil
		}
	}
	err = netlink.NeighSet(&netlink.Neigh{
		LinkIndex: nh.Link,
		Family:    family,
		IP:        ip,
		Flags:     netlink.NTF_EXT_LEARNED,
		FlagsExt:  netlink.NTF_EXT_MANAGED,
	})
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("managed neighbour %s: %w", nh.Via, err)
	}
	return nil
}

// LookupNextHop returns the resolved next hop toward backend a: the egress
// interface's index, MAC and MTU, and the neighbour's MAC. It returns the
// zero state.NextHop (and no error) while the neighbour is unresolved.
func LookupNextHop(a netip.Addr) (state.NextHop, error) {
	nh, err := ResolveNextHop(a)
	if err != nil {
		return state.NextHop{}, err
	}
	if nh.Local {
		return state.NextHop{Local: true}, nil
	}
	link, err := netlink.LinkByIndex(nh.Link)
	if err != nil {
		return state.NextHop{}, fmt.Errorf("link %d: %w", nh.Link, err)
	}
	family := unix.AF_INET
	if nh.Via.Is6() && !nh.Via.Is4In6() {
		family = unix.AF_INET6
	}
	neighs, err := netlink.NeighList(nh.Link, family)
	if err != nil {
		return state.NextHop{}, fmt.Errorf("list neighbours: %w", err)
	}
	ip := net.IP(nh.Via.AsSlice())
	const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT
	for _, n := range neighs {
		if !n.IP.Equal(ip) || n.State&usable == 0 || len(n.HardwareAddr) != 6 || len(link.Attrs().HardwareAddr) != 6 {
			continue
		}
		c := state.NextHop{Ifindex: uint32(nh.Link), MTU: uint32(link.Attrs().MTU)}
		copy(c.DMAC[:], n.HardwareAddr)
		copy(c.SMAC[:], link.Attrs().HardwareAddr)
		return c, nil
	}
	return state.NextHop{}, nil
}
