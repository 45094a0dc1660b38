package controller

import (
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
)

// withOverrides changes the overridden backends in a copy and shares every
// pool no override touches with d, which it leaves as it was.
func TestWithOverridesCopiesOnlyWhatChanges(t *testing.T) {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	pool := func(name string, addrs ...string) config.DesiredPool {
		p := config.DesiredPool{Name: name}
		for _, s := range addrs {
			p.Backends = append(p.Backends, config.Backend{Addr: a(s), Weight: 100})
		}
		return p
	}
	d := &config.Desired{Services: []config.DesiredService{
		{Name: "web", Pools: []config.DesiredPool{pool("w1", "10.0.0.1", "10.0.0.2"), pool("w2", "10.0.0.3")}},
		{Name: "dns", Pools: []config.DesiredPool{pool("d1", "10.0.0.2", "10.0.0.4")}},
		{Name: "api", Pools: []config.DesiredPool{pool("a1", "10.0.0.5")}},
	}}
	w50, yes := uint32(50), true
	c := &Controller{overrides: map[overrideKey]*override{
		{"", a("10.0.0.2")}:    {weight: &w50},
		{"dns", a("10.0.0.4")}: {drain: &yes},
		{"web", a("10.0.0.4")}: {weight: &w50}, // web has no such backend
	}}
	out := c.withOverrides(d)
	want := map[string][]config.Backend{
		"w1": {{Addr: a("10.0.0.1"), Weight: 100}, {Addr: a("10.0.0.2"), Weight: 50}},
		"w2": {{Addr: a("10.0.0.3"), Weight: 100}},
		"d1": {{Addr: a("10.0.0.2"), Weight: 50}, {Addr: a("10.0.0.4"), Weight: 100, Drain: true}},
		"a1": {{Addr: a("10.0.0.5"), Weight: 100}},
	}
	for i, s := range out.Services {
		for j, p := range s.Pools {
			if !sameSlice(p.Backends, want[p.Name]) {
				t.Errorf("pool %s: %+v, want %+v", p.Name, p.Backends, want[p.Name])
			}
			orig := d.Services[i].Pools[j]
			shared := &orig.Backends[0] == &p.Backends[0]
			if touched := p.Name == "w1" || p.Name == "d1"; shared == touched {
				t.Errorf("pool %s: shared with d %v", p.Name, shared)
			}
			if orig.Backends[len(orig.Backends)-1].Weight != 100 || orig.Backends[0].Drain {
				t.Errorf("pool %s of d changed: %+v", p.Name, orig.Backends)
			}
		}
	}
	if &out.Services[2].Pools[0] != &d.Services[2].Pools[0] {
		t.Error("a service without overrides does not share its pools")
	}
}

func sameSlice(a, b []config.Backend) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
