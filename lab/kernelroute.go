package lab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
)

// KernelRoute returns the next hops of the router's kernel route for
// prefix exactly (main table), sorted: several for a multipath (ECMP)
// route, none when there is no route. If several routes for prefix exist
// (different metrics), it is the one the kernel uses, of the lowest metric.
func (l *Lab) KernelRoute(prefix netip.Prefix) ([]netip.Addr, error) {
	h, err := l.Router.netlink()
	if err != nil {
		return nil, err
	}
	prefix = prefix.Masked()
	family := netlink.FAMILY_V4
	if prefix.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	rts, err := h.RouteListFiltered(family, &netlink.Route{Dst: ipNet(prefix)}, netlink.RT_FILTER_DST)
	if err != nil {
		return nil, fmt.Errorf("list routes %v in %s: %w", prefix, l.Router.Name, err)
	}
	var best *netlink.Route
	for i := range rts {
		if best == nil || rts[i].Priority < best.Priority {
			best = &rts[i]
		}
	}
	if best == nil {
		return nil, nil
	}
	var nhs []netip.Addr
	add := func(gw []byte) {
		if a, ok := netip.AddrFromSlice(gw); ok {
			nhs = append(nhs, a.Unmap())
		}
	}
	if best.Gw != nil {
		add(best.Gw)
	}
	for _, nh := range best.MultiPath {
		if nh.Gw != nil {
			add(nh.Gw)
		} else if nh.Via != nil {
			if v, ok := nh.Via.(*netlink.Via); ok {
				add(v.Addr)
			}
		}
	}
	slices.SortFunc(nhs, netip.Addr.Compare)
	return nhs, nil
}

// NodeNextHops returns the LAN addresses of the family of like of the
// given nodes (indexes into Nodes; all nodes if none), sorted: the next
// hops of a VIP route over those nodes.
func (l *Lab) NodeNextHops(like netip.Addr, nodes ...int) []netip.Addr {
	if len(nodes) == 0 {
		for i := range l.Nodes {
			nodes = append(nodes, i)
		}
	}
	var as []netip.Addr
	for _, i := range nodes {
		as = append(as, l.Nodes[i].Addr(like))
	}
	slices.SortFunc(as, netip.Addr.Compare)
	return slices.Compact(as)
}

func sameAddrs(got, want []netip.Addr) bool {
	w := slices.Clone(want)
	slices.SortFunc(w, netip.Addr.Compare)
	return slices.Equal(got, slices.Compact(w))
}

// WaitRoute polls the router's kernel route for prefix (KernelRoute, every
// 20 ms) until its next hops are want, in any order (none: no route), and
// returns how long that took. The error, on timeout, tells what the kernel
// and the router's BIRD held.
func (l *Lab) WaitRoute(ctx context.Context, prefix netip.Prefix, want []netip.Addr, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		got, err := l.KernelRoute(prefix)
		if err != nil {
			return time.Since(start), err
		}
		if sameAddrs(got, want) {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("router route %v: next hops %v, want %v (waited %v: %w)%s",
				prefix, got, want, time.Since(start).Round(time.Millisecond), ctx.Err(), l.birdState(prefix))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// KeepsRoute checks the router's kernel route for prefix every 20 ms for d
// and fails as soon as its next hops are not want (in any order): a route
// that must not change, e.g. during a graceful restart.
func (l *Lab) KeepsRoute(ctx context.Context, prefix netip.Prefix, want []netip.Addr, d time.Duration) error {
	start := time.Now()
	for {
		got, err := l.KernelRoute(prefix)
		if err != nil {
			return err
		}
		if !sameAddrs(got, want) {
			return fmt.Errorf("router route %v changed after %v: next hops %v, want %v%s",
				prefix, time.Since(start).Round(time.Millisecond), got, want, l.birdState(prefix))
		}
		if time.Since(start) >= d {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// birdState describes the router BIRD's view of prefix, if one runs.
func (l *Lab) birdState(prefix netip.Prefix) string {
	l.mu.Lock()
	b := l.routerBIRD
	l.mu.Unlock()
	if b == nil || b.Exited() {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return "; " + b.describe(ctx, prefix)
}

// SetLinkUp sets the switch port of host h up or down: down is a pulled
// cable. The host's interface loses its carrier and nothing it sent is
// delivered; its peers notice only by their timers (a BGP hold timer, a
// TCP retransmission timeout).
func (l *Lab) SetLinkUp(h *Host, up bool) error {
	sw, port, err := l.switchPort(h)
	if err != nil {
		return err
	}
	if up {
		err = sw.LinkSetUp(port)
	} else {
		err = sw.LinkSetDown(port)
	}
	if err != nil {
		return fmt.Errorf("set switch port %s %s: %w", h.Short, map[bool]string{true: "up", false: "down"}[up], err)
	}
	return nil
}
