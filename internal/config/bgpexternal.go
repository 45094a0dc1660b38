package config

// bgp.mode: external (docs/BGP.md, "Bring your own routing daemon"): xlbd
// runs no speaker; it keeps one host route per VIP the node should receive
// in a kernel routing table (bgp.route_table), or a /32 or /128 address
// per VIP on a dummy interface (bgp.dummy_interface), and the host's own
// routing daemon (BIRD, FRR) announces them.

// BGPMode says who speaks BGP for the node.
type BGPMode uint8

const (
	// BGPSpeaker: xlbd's embedded speaker announces the VIPs.
	BGPSpeaker BGPMode = iota
	// BGPExternal: xlbd keeps kernel routes; another daemon announces.
	BGPExternal
)

var bgpModeNames = []enumName[BGPMode]{{"speaker", BGPSpeaker}, {"external", BGPExternal}}

func (m BGPMode) String() string { return enumString(bgpModeNames, m) }

// Kernel routing tables that are not the operator's to give: unspec and
// the kernel's default and local tables.
const (
	routeTableUnspec  = 0
	routeTableDefault = 253
	routeTableLocal   = 255
)

// speakerOnly and externalOnly are the only of the bgp keys of each mode.
var (
	speakerOnly = &onlyWhen[BGP]{doc: "Only in mode speaker", why: func(b *BGP) string {
		if b.Mode == BGPExternal {
			return "not with bgp.mode: external (the routing daemon of the host has the sessions): remove it, or configure it in that daemon"
		}
		return ""
	}}
	externalOnly = &onlyWhen[BGP]{doc: "Only in mode external", why: func(b *BGP) string {
		if b.Mode != BGPExternal {
			return "only with bgp.mode: external"
		}
		return ""
	}}
)

func validateBGPExternal(b *BGP, node *Node, c *collector) {
	switch {
	case b.RouteTable == 0 && b.DummyInterface == "":
		c.errf(join(kBGP, kRouteTable), ErrRequired, "required with bgp.mode: external: the kernel routing table to keep the VIP routes in (or bgp.dummy_interface)")
	case b.RouteTable != 0 && b.DummyInterface != "":
		c.errf(join(kBGP, kDummyInterface), ErrInvalid, "give bgp.route_table or bgp.dummy_interface, not both")
	}
	switch t := b.RouteTable; t {
	case routeTableDefault, routeTableLocal:
		c.errf(join(kBGP, kRouteTable), ErrInvalid, "%d is a table of the kernel's own (253 default, 255 local): choose another (e.g. 100)", t)
	}
	switch n := b.DummyInterface; {
	case n == "":
	case !validIfName(n):
		c.errf(join(kBGP, kDummyInterface), ErrInvalid, "%q is not a valid interface name (1 to 15 bytes, no '/', ':' or spaces)", n)
	case n == node.Interface:
		c.errf(join(kBGP, kDummyInterface), ErrInvalid, "%q is node.interface: the VIP addresses go on a dummy interface of their own", n)
	}
}
