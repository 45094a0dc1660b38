package datapath

import (
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/xlbproject/xlb/internal/config"
)

// KernelRoute is config.RouteLookup by the kernel's FIB (what `ip route
// get` answers): whether a is local, or reached through a gateway, and
// the outgoing interface. xlbd gives it to config.UseRoutes, so methods
// dr and nat are refused toward backends that are not on a directly
// connected segment.
func KernelRoute(a netip.Addr) (config.Route, error) {
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
