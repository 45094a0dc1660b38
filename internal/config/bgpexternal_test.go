package config

import (
	"strings"
	"testing"
)

const externalBase = "node: {name: n1, interface: eth0, address: 10.0.0.1}\npools: {p: {backends: [{address: 10.0.1.1}]}}\nservices: [{name: s, vip: 10.9.0.1, port: 80, protocol: tcp, pools: [p]}, {name: s6, vip: \"fd00::1\", port: 80, protocol: tcp, pools: [p]}]\n"

// TestBGPExternal: bgp.mode external takes a routing table or a dummy
// interface, needs no peer of the VIPs' families, and round-trips.
func TestBGPExternal(t *testing.T) {
	for _, tc := range []struct {
		yaml  string
		table uint32
		iface string
	}{
		{"bgp: {mode: external, route_table: 100}\n", 100, ""},
		{"bgp: {mode: external, dummy_interface: xlb-vips}\n", 0, "xlb-vips"},
	} {
		c, err := Parse([]byte(externalBase+tc.yaml), "x.yaml")
		if err != nil {
			t.Fatalf("%s: %v", tc.yaml, err)
		}
		if b := c.BGP; b.Mode != BGPExternal || b.RouteTable != tc.table || b.DummyInterface != tc.iface || b.ASN != 0 || len(b.Peers) != 0 {
			t.Fatalf("%s: %+v", tc.yaml, b)
		}
		roundTrip(t, c)
	}
	c, err := Parse([]byte(externalBase+"bgp: {mode: speaker, asn: 65001, peers: [{address: 10.0.0.254, asn: 65000}], next_hop6: \"fd00::11\"}\n"), "x.yaml")
	if err != nil || c.BGP.Mode != BGPSpeaker {
		t.Fatalf("mode speaker: %v", err)
	}
}

// TestBGPExternalRejects: each mistake is named with file, line and what
// to do.
func TestBGPExternalRejects(t *testing.T) {
	for _, tc := range []struct{ bgp, want string }{
		{"{mode: external}", "x.yaml:4: bgp.route_table: required with bgp.mode: external"},
		{"{mode: external, route_table: 100, dummy_interface: d0}", "bgp.dummy_interface: give bgp.route_table or bgp.dummy_interface, not both"},
		{"{mode: external, route_table: 255}", "bgp.route_table: 255 is a table of the kernel's own"},
		{"{mode: external, route_table: 253}", "bgp.route_table: 253 is a table of the kernel's own"},
		{"{mode: external, dummy_interface: eth0}", `bgp.dummy_interface: "eth0" is node.interface`},
		{"{mode: external, dummy_interface: \"a/b\"}", `bgp.dummy_interface: "a/b" is not a valid interface name`},
		{"{mode: external, route_table: 100, asn: 65001}", "x.yaml:4: bgp.asn: not with bgp.mode: external"},
		{"{mode: external, route_table: 100, peers: []}", "bgp.peers: not with bgp.mode: external"},
		{"{mode: speaker, asn: 65001, route_table: 100, peers: [{address: 10.0.0.254, asn: 65000}]}", "x.yaml:4: bgp.route_table: only with bgp.mode: external"},
		{"{mode: bird, route_table: 100}", "bgp.mode: "},
	} {
		_, err := Parse([]byte(externalBase+"bgp: "+tc.bgp+"\n"), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bgp: %s: error %v, want %q", tc.bgp, err, tc.want)
		}
	}
}
