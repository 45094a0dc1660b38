package lab

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// SetVIPRoutes replaces the router's routes for each prefix with one via the
// given hosts' LAN addresses (of the prefix's family): a plain route for one
// host, a multipath (ECMP) route for several. The router hashes flows over
// the next hops by 5-tuple (fib_multipath_hash_policy=3 over addresses, protocol and ports). With no host it
// removes the routes.
func (l *Lab) SetVIPRoutes(prefixes []netip.Prefix, via ...*Host) error {
	gws := func(p netip.Prefix) []netip.Addr {
		var out []netip.Addr
		for _, h := range via {
			out = append(out, h.Addr(p.Addr()))
		}
		return out
	}
	return l.setVIPRoutes(prefixes, gws)
}

// SetVIPRoutesVia is SetVIPRoutes with the next hops given by address
// (those of the family of each prefix are used): e.g. a node's second
// interface.
func (l *Lab) SetVIPRoutesVia(prefixes []netip.Prefix, via ...netip.Addr) error {
	return l.setVIPRoutes(prefixes, func(p netip.Prefix) []netip.Addr {
		var out []netip.Addr
		for _, a := range via {
			if a.Is4() == p.Addr().Is4() {
				out = append(out, a)
			}
		}
		return out
	})
}

func (l *Lab) setVIPRoutes(prefixes []netip.Prefix, gwsOf func(netip.Prefix) []netip.Addr) error {
	r := l.Router
	h, err := r.netlink()
	if err != nil {
		return err
	}
	eth1, err := h.LinkByName("eth1")
	if err != nil {
		return fmt.Errorf("eth1 in %s: %w", r.Name, err)
	}
	idx := eth1.Attrs().Index
	for _, p := range prefixes {
		p = p.Masked()
		rt := &netlink.Route{Dst: ipNet(p), LinkIndex: idx}
		via := gwsOf(p)
		if len(via) == 0 {
			if err := h.RouteDel(rt); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("delete route %v in %s: %w", p, r.Name, err)
			}
			continue
		}
		if len(via) == 1 {
			rt.Gw = via[0].AsSlice()
		} else {
			rt.LinkIndex = 0
			for _, a := range via {
				rt.MultiPath = append(rt.MultiPath, &netlink.NexthopInfo{LinkIndex: idx, Gw: a.AsSlice()})
			}
		}
		if err := h.RouteReplace(rt); err != nil {
			return fmt.Errorf("route %v via %d hosts in %s: %w", p, len(via), r.Name, err)
		}
	}
	return nil
}

// VIPRoute describes the router's route for one prefix.
type VIPRoute struct {
	Prefix   netip.Prefix
	NextHops []netip.Addr
}

// VIPRoutes reads the router's routes for the given prefixes (a prefix with
// no route is left out).
func (l *Lab) VIPRoutes(prefixes []netip.Prefix) ([]VIPRoute, error) {
	h, err := l.Router.netlink()
	if err != nil {
		return nil, err
	}
	var out []VIPRoute
	for _, p := range prefixes {
		p = p.Masked()
		family := netlink.FAMILY_V4
		if p.Addr().Is6() {
			family = netlink.FAMILY_V6
		}
		rts, err := h.RouteListFiltered(family, &netlink.Route{Dst: ipNet(p)}, netlink.RT_FILTER_DST)
		if err != nil {
			return nil, fmt.Errorf("list routes %v in %s: %w", p, l.Router.Name, err)
		}
		for _, rt := range rts {
			vr := VIPRoute{Prefix: p}
			if rt.Gw != nil {
				a, _ := netip.AddrFromSlice(rt.Gw)
				vr.NextHops = append(vr.NextHops, a.Unmap())
			}
			for _, nh := range rt.MultiPath {
				a, _ := netip.AddrFromSlice(nh.Gw)
				vr.NextHops = append(vr.NextHops, a.Unmap())
			}
			out = append(out, vr)
		}
	}
	return out, nil
}
