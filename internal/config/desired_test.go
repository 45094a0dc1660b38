package config

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func addrs(bs []Backend) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.Addr.String()
	}
	return out
}

// nested has four pools nesting with shared sub-pools and repeated backends.
const nested = `node: {interface: eth0, address: 10.0.0.11}
pools:
  top:
    backends: [{address: 10.0.0.1}]
    include: [x, y]
  x:
    backends: [{address: 10.0.0.2}, {address: 10.0.0.3}]
    include: [z]
  y:
    backends: [{address: 10.0.0.3}, {address: 10.0.0.4}]
    include: [z]
  z:
    backends: [{address: 10.0.0.5}, {address: 10.0.0.1}]
services:
  - {name: top, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [top]}
  - {name: y, vip: 10.200.0.1, port: 81, protocol: tcp, pools: [y, z]}
`

func TestNestedPoolsDedupe(t *testing.T) {
	c, err := Parse([]byte(nested), "nested.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := c.Desired()
	for _, tc := range []struct {
		name    string
		service int
		pool    int
		want    []string
	}{
		// top's own, then x's, then z (through x), then y's; z is visited
		// once and 10.0.0.1 and 10.0.0.3 keep their first place.
		{"diamond", 0, 0, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.5", "10.0.0.4"}},
		{"sub-pool", 1, 0, []string{"10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.1"}},
		{"leaf", 1, 1, []string{"10.0.0.5", "10.0.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := addrs(d.Services[tc.service].Pools[tc.pool].Backends)
			if !slices.Equal(got, tc.want) {
				t.Errorf("backends = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPoolCycles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pools string
		want  []string // the cycles, in the order reported
	}{
		{"self", "  a: {include: [a], backends: [{address: 10.0.0.1}]}\n", []string{"a -> a"}},
		{"pair", "  a: {include: [b]}\n  b: {include: [a]}\n", []string{"a -> b -> a"}},
		{"long", "  a: {include: [b]}\n  b: {include: [c]}\n  c: {include: [d]}\n  d: {include: [b]}\n",
			[]string{"b -> c -> d -> b"}},
		{"two cycles", "  a: {include: [b, c]}\n  b: {include: [a]}\n  c: {include: [c]}\n",
			[]string{"a -> b -> a", "c -> c"}},
		{"cycle below an acyclic root", "  r: {include: [a], backends: [{address: 10.0.0.1}]}\n  a: {include: [b]}\n  b: {include: [a]}\n",
			[]string{"a -> b -> a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte("node: {interface: eth0}\npools:\n"+tc.pools), "c.yaml")
			if err == nil {
				t.Fatal("Parse accepted a pool cycle")
			}
			var got []string
			for _, e := range err.(ErrorList) {
				if e.Err == ErrPoolCycle {
					got = append(got, strings.TrimSuffix(strings.TrimPrefix(e.Msg, "pool cycle "), ": a pool must not include itself"))
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("cycles = %q, want %q\n%v", got, tc.want, err)
			}
		})
	}
}

// TestDesiredCyclicHandBuilt checks that Desired terminates on an invalid
// Config that was never validated.
func TestDesiredCyclicHandBuilt(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.1")
	c := &Config{
		Pools: []Pool{
			{Name: "a", Include: []string{"b", "missing"}, Backends: []Backend{{Addr: a, Weight: 1}}},
			{Name: "b", Include: []string{"a", "b"}, Backends: []Backend{{Addr: a, Weight: 9}}},
		},
		Services: []Service{{Name: "s", Pools: []string{"a", "b", "nope"}}},
	}
	d := c.Desired()
	if got := addrs(d.Services[0].Pools[0].Backends); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Errorf("pool a = %v", got)
	}
	if n := len(d.Services[0].Pools[2].Backends); n != 0 {
		t.Errorf("unknown pool resolved to %d backends", n)
	}
}

func TestDesiredFull(t *testing.T) {
	c, err := Load("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := c.Desired()
	a := netip.MustParseAddr
	want := []DesiredService{
		{
			Name: "web", VIP: a("203.0.113.1"), Port: 443, Proto: ProtoTCP,
			Scheduler: SchedulerMaglev, TableSize: 251, Encap: EncapIPIP,
			Pools: []DesiredPool{
				{Name: "primary", Backends: []Backend{
					{Addr: a("198.51.100.1"), Weight: 10},
					{Addr: a("198.51.100.2"), Weight: 0, Encap: EncapGRE, Drain: true},
					{Addr: a("2001:db8:1::1"), Weight: 65535, Encap: EncapIPIP},
					{Addr: a("198.51.100.9"), Weight: 1},
				}},
				{Name: "backup", Backends: []Backend{{Addr: a("198.51.100.9"), Weight: 1}}},
			},
		},
		{
			Name: "all-udp", VIP: a("2001:db8:ffff::1"), Port: 0, Proto: ProtoUDP,
			Scheduler: SchedulerMaglev, TableSize: 4194301, Encap: EncapGRE,
			Pools: []DesiredPool{{Name: "backup", Backends: []Backend{{Addr: a("198.51.100.9"), Weight: 1}}}},
		},
	}
	if !reflect.DeepEqual(d.Services, want) {
		t.Fatalf("Desired().Services:\n got %+v\nwant %+v", d.Services, want)
	}
	if !reflect.DeepEqual(d.Node, c.Node) {
		t.Errorf("Desired().Node = %+v, want %+v", d.Node, c.Node)
	}

	web := &d.Services[0]
	if got := web.EncapFor(web.Pools[0].Backends[0]); got != EncapIPIP {
		t.Errorf("EncapFor(no override) = %v, want the service's ipip", got)
	}
	if got := web.EncapFor(web.Pools[0].Backends[1]); got != EncapGRE {
		t.Errorf("EncapFor(gre override) = %v, want gre", got)
	}

	// The desired state shares no memory with the Config, nor services
	// with each other.
	d.Node.GatewayMAC[0] = 0xff
	d.Services[1].Pools[0].Backends[0].Weight = 99
	if c.Node.GatewayMAC[0] == 0xff {
		t.Error("Desired().Node.GatewayMAC aliases the Config's")
	}
	if web.Pools[1].Backends[0].Weight == 99 {
		t.Error("two services share a backend slice")
	}
	if c.Pools[1].Backends[0].Weight == 99 {
		t.Error("Desired backends alias the Config's")
	}
}

func TestActiveBackends(t *testing.T) {
	a := netip.MustParseAddr
	active := Backend{Addr: a("10.0.0.1"), Weight: 1}
	drained := Backend{Addr: a("10.0.0.2"), Weight: 1, Drain: true}
	zero := Backend{Addr: a("10.0.0.3"), Weight: 0}
	backup := Backend{Addr: a("10.0.0.9"), Weight: 1}
	for _, tc := range []struct {
		name     string
		pools    []DesiredPool
		wantPool string // "" when no pool is active
	}{
		{"first pool", []DesiredPool{{"p", []Backend{active, drained}}, {"b", []Backend{backup}}}, "p"},
		{"first pool empty", []DesiredPool{{"p", nil}, {"b", []Backend{backup}}}, "b"},
		{"first pool all drained", []DesiredPool{{"p", []Backend{drained}}, {"b", []Backend{backup}}}, "b"},
		{"first pool all weight zero", []DesiredPool{{"p", []Backend{zero, drained}}, {"b", []Backend{backup}}}, "b"},
		{"nothing usable", []DesiredPool{{"p", []Backend{drained}}, {"b", []Backend{zero}}}, ""},
		{"no pools", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &DesiredService{Pools: tc.pools}
			p, ok := s.ActivePool()
			if ok != (tc.wantPool != "") || p.Name != tc.wantPool {
				t.Fatalf("ActivePool() = %q, %v; want %q", p.Name, ok, tc.wantPool)
			}
			if got := s.ActiveBackends(); !reflect.DeepEqual(got, p.Backends) {
				t.Errorf("ActiveBackends() = %v, want the active pool's %v", got, p.Backends)
			}
		})
	}
}
