package config

import (
	"net/netip"
	"strings"
	"testing"
)

func TestKubernetesSection(t *testing.T) {
	const head = "node: {interface: eth0, address: 10.0.0.11}\n"
	c, err := Parse([]byte(head+"kubernetes:\n  address_pools: [10.250.0.0/24, \"fd00:250::/120\"]\n"), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	k := c.Kubernetes
	if k == nil || k.Kubeconfig != "" || k.LoadBalancerClass != DefaultLoadBalancerClass {
		t.Fatalf("kubernetes = %+v, want in-cluster with the default class", k)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.250.0.0/24"), netip.MustParsePrefix("fd00:250::/120")}
	if len(k.AddressPools) != 2 || k.AddressPools[0] != want[0] || k.AddressPools[1] != want[1] {
		t.Fatalf("address_pools = %v, want %v", k.AddressPools, want)
	}
	if !k.Contains(netip.MustParseAddr("10.250.0.9")) || k.Contains(netip.MustParseAddr("10.251.0.9")) {
		t.Error("Contains does not follow the pools")
	}
	if len(c.Services) != 0 || len(c.Pools) != 0 {
		t.Error("services and pools should be empty")
	}
	roundTrip(t, c)

	for _, tc := range []struct{ name, in, want string }{
		{"host bits", "kubernetes: {address_pools: [10.250.0.1/24]}\n", "has bits set past its length: write 10.250.0.0/24"},
		{"not a CIDR", "kubernetes: {address_pools: [10.250.0.1]}\n", "is not a CIDR"},
		{"overlap", "kubernetes: {address_pools: [10.250.0.0/24, 10.250.0.128/25]}\n", "overlaps address_pools[0]"},
		{"multicast", "kubernetes: {address_pools: [224.0.0.0/24]}\n", "not a range of unicast addresses"},
		{"empty class", "kubernetes: {load_balancer_class: \"\"}\n", "load_balancer_class: must not be empty"},
		{"unknown key", "kubernetes: {pools: [10.250.0.0/24]}\n", "unknown field \"pools\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(head+tc.in), "c.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
