package config

import (
	"gopkg.in/yaml.v3"
)

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

// speakerKeys are the bgp keys of the embedded speaker, refused with mode
// external; externalKeys the reverse.
var (
	speakerKeys  = []string{"asn", "router_id", "listen_port", "graceful_restart_time", "shutdown_wait", "next_hop4", "next_hop6", "peers"}
	externalKeys = []string{"route_table", "dummy_interface"}
)

// bgpMode decodes bgp.mode (default speaker) and refuses the keys of the
// other mode, naming the one that applies.
func (d *decoder) bgpMode(f fieldSet, path string) BGPMode {
	mode := BGPSpeaker
	if v := f.get("mode"); v != nil {
		mode, _ = decodeEnum(d, v, join(path, "mode"), bgpModeNames)
	}
	other, why := externalKeys, "only with bgp.mode: external"
	if mode == BGPExternal {
		other, why = speakerKeys, "not with bgp.mode: external (the routing daemon of the host has the sessions): remove it, or configure it in that daemon"
	}
	for _, k := range other {
		if v := f.get(k); v != nil {
			d.c.at(pos(v), join(path, k), ErrInvalid, "%s", why)
		}
	}
	return mode
}

// bgpExternal decodes the keys of mode external into b; the dummy
// interface must not be the node's.
func (d *decoder) bgpExternal(f fieldSet, path string, b *BGP, node Node) {
	d.uint32Fields(f, path, []uint32Field{{"route_table", 1<<32 - 1, &b.RouteTable}})
	if v := f.get("dummy_interface"); v != nil {
		b.DummyInterface, _ = d.str(v, join(path, "dummy_interface"))
		if n := b.DummyInterface; n != "" && n == node.Interface {
			d.c.at(pos(v), join(path, "dummy_interface"), ErrInvalid, "%q is node.interface: the VIP addresses go on a dummy interface of their own", n)
		}
	}
}

func validateBGPExternal(b *BGP, c *collector) {
	switch {
	case b.RouteTable == 0 && b.DummyInterface == "":
		c.errf("bgp.route_table", ErrRequired, "required with bgp.mode: external: the kernel routing table to keep the VIP routes in (or bgp.dummy_interface)")
	case b.RouteTable != 0 && b.DummyInterface != "":
		c.errf("bgp.dummy_interface", ErrInvalid, "give bgp.route_table or bgp.dummy_interface, not both")
	}
	switch t := b.RouteTable; t {
	case routeTableDefault, routeTableLocal:
		c.errf("bgp.route_table", ErrInvalid, "%d is a table of the kernel's own (253 default, 255 local): choose another (e.g. 100)", t)
	}
	if n := b.DummyInterface; n != "" && !validIfName(n) {
		c.errf("bgp.dummy_interface", ErrInvalid, "%q is not a valid interface name (1 to 15 bytes, no '/', ':' or spaces)", n)
	}
}

func bgpExternalNode(b *BGP) *yaml.Node {
	n := mapping("mode", str(b.Mode.String()))
	if b.RouteTable != 0 {
		n.Content = append(n.Content, str("route_table"), integer(uint64(b.RouteTable)))
	}
	if b.DummyInterface != "" {
		n.Content = append(n.Content, str("dummy_interface"), str(b.DummyInterface))
	}
	return n
}
