package kernelnet

import (
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/xlbproject/xlb/internal/config"
)

// Route is config.RouteLookup by the kernel's FIB (what `ip route
// get` answers): whether a is local, or reached through a gateway, and
// the outgoing interface. xlbd gives it to config.UseRoutes, so methods
// dr and nat are refused toward backends that are not on a directly
// connected segment.
func Route(a netip.Addr) (config.Route, error) {
	nh, err := ResolveNextHop(a)
	if err != nil {
		return config.Route{}, err
	}
	r := config.Route{Local: nh.Local}
	if nh.Gateway {
		r.Gateway = nh.Via
	}
	if l, err := netlink.LinkByIndex(nh.Link); err == nil {
		r.Dev = l.Attrs().Name
	}
	return r, nil
}

// DefaultGateways returns the next hops of this node's default routes,
// IPv4 and IPv6: where NAT replies go on to most clients. Keeping them
// resolved (KeepNeighbour) lets bpf_fib_lookup send a reply from XDP;
// without a neighbour the reply goes to the kernel, whose IPv6 forwarding
// is off unless net.ipv6.conf.all.forwarding is set.
func DefaultGateways() ([]NextHop, error) {
	var out []NextHop
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteList(nil, fam)
		if err != nil {
			return out, err
		}
		for _, r := range routes {
			gw, ok := netip.AddrFromSlice(r.Gw)
			if r.Dst != nil && !r.Dst.IP.IsUnspecified() || !ok || r.Gw == nil {
				continue
			}
			if fam == netlink.FAMILY_V4 {
				gw = gw.Unmap()
			}
			out = append(out, NextHop{Backend: gw, Via: gw, Link: r.LinkIndex, Gateway: true})
		}
	}
	return out, nil
}
