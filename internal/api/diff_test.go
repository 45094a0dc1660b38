package api

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
)

const diffBase = `node: {name: n, interface: eth0, address: 10.0.0.1}
health_checks:
  tcp80: {type: tcp, port: 80}
pools:
  a:
    health_check: tcp80
    backends: [{address: 10.0.1.1}, {address: 10.0.1.2, weight: 2}]
  b:
    backends: [{address: 10.0.2.1}]
services:
  - {name: web, vip: 10.0.0.100, port: 80, protocol: tcp, pools: [a, b]}
  - {name: dns, vip: 10.0.0.53, port: 53, protocol: udp, pools: [b]}
`

func desired(t *testing.T, y string) *config.Desired {
	t.Helper()
	c, err := config.Parse([]byte(y), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c.Desired()
}

func refs(s ...string) []BackendRef {
	var out []BackendRef
	for _, x := range s {
		svc, a, _ := strings.Cut(x, "/")
		out = append(out, BackendRef{svc, netip.MustParseAddr(a)})
	}
	return out
}

func TestDiffDesired(t *testing.T) {
	base := desired(t, diffBase)
	for _, tc := range []struct {
		name string
		old  *config.Desired
		edit func(string) string
		want Diff
	}{
		{name: "same", old: base, edit: func(s string) string { return s }},
		{name: "first config", old: nil, edit: func(s string) string { return s }, want: Diff{
			ServicesAdded:       []string{"web", "dns"},
			BackendsAdded:       refs("dns/10.0.2.1", "web/10.0.1.1", "web/10.0.1.2", "web/10.0.2.1"),
			HealthChecksChanged: []string{"tcp80"},
		}},
		{name: "weight and new backend", old: base, edit: func(s string) string {
			s = strings.Replace(s, "{address: 10.0.1.2, weight: 2}", "{address: 10.0.1.2, weight: 3}, {address: 10.0.1.3}", 1)
			return s
		}, want: Diff{BackendsAdded: refs("web/10.0.1.3"), BackendsChanged: refs("web/10.0.1.2")}},
		{name: "service removed", old: base, edit: func(s string) string {
			return strings.Replace(s, "  - {name: dns, vip: 10.0.0.53, port: 53, protocol: udp, pools: [b]}\n", "", 1)
		}, want: Diff{ServicesRemoved: []string{"dns"}, BackendsRemoved: refs("dns/10.0.2.1")}},
		{name: "service changed", old: base, edit: func(s string) string {
			return strings.Replace(s, "port: 53", "port: 5353", 1)
		}, want: Diff{ServicesChanged: []string{"dns"}}},
		{name: "pool order", old: base, edit: func(s string) string {
			return strings.Replace(s, "pools: [a, b]", "pools: [b, a]", 1)
		}, want: Diff{ServicesChanged: []string{"web"}}},
		{name: "node and check", old: base, edit: func(s string) string {
			s = strings.Replace(s, "address: 10.0.0.1}", "address: 10.0.0.2}", 1)
			return strings.Replace(s, "port: 80}", "port: 81}", 1)
		}, want: Diff{NodeChanged: true, HealthChecksChanged: []string{"tcp80"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DiffDesired(tc.old, desired(t, tc.edit(diffBase)))
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("diff\n got %+v\nwant %+v", got, tc.want)
			}
			if got.Empty() != reflect.DeepEqual(tc.want, Diff{}) {
				t.Fatalf("Empty() = %v", got.Empty())
			}
		})
	}
}
