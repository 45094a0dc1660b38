package api

import (
	"cmp"
	"net/netip"
	"reflect"
	"slices"

	"github.com/xlbproject/xlb/internal/config"
)

// Diff summarises what a new config changes against the running one.
// Services are matched by name, backends by (service, address).
type Diff struct {
	ServicesAdded, ServicesRemoved []string
	// ServicesChanged: VIP, port, protocol, scheduler, table size, encap,
	// pool list, min_healthy or withdraw_when_down differ.
	ServicesChanged []string
	BackendsAdded   []BackendRef
	BackendsRemoved []BackendRef
	// BackendsChanged: weight, drain, encap, health check or pool differ.
	BackendsChanged     []BackendRef
	NodeChanged         bool
	BGPChanged          bool
	HealthChecksChanged []string // added, removed or changed, by name
}

// Empty reports whether the new config changes nothing.
func (d Diff) Empty() bool {
	return len(d.ServicesAdded)+len(d.ServicesRemoved)+len(d.ServicesChanged)+
		len(d.BackendsAdded)+len(d.BackendsRemoved)+len(d.BackendsChanged)+
		len(d.HealthChecksChanged) == 0 && !d.NodeChanged && !d.BGPChanged
}

// DiffDesired compares the running desired state old (nil: none yet) with
// next. Services are listed in config order (removed ones in old's order),
// backends by service name then address, health checks by name.
func DiffDesired(old, next *config.Desired) Diff {
	first := old == nil
	if first {
		old = &config.Desired{}
	}
	var d Diff
	oldSvc := map[string]*config.DesiredService{}
	for i := range old.Services {
		oldSvc[old.Services[i].Name] = &old.Services[i]
	}
	newSvc := map[string]bool{}
	for i := range next.Services {
		n := &next.Services[i]
		newSvc[n.Name] = true
		o, ok := oldSvc[n.Name]
		if !ok {
			d.ServicesAdded = append(d.ServicesAdded, n.Name)
			for a := range backendsOf(n) {
				d.BackendsAdded = append(d.BackendsAdded, BackendRef{n.Name, a})
			}
			continue
		}
		if serviceChanged(o, n) {
			d.ServicesChanged = append(d.ServicesChanged, n.Name)
		}
		ob, nb := backendsOf(o), backendsOf(n)
		for a, b := range nb {
			if x, ok := ob[a]; !ok {
				d.BackendsAdded = append(d.BackendsAdded, BackendRef{n.Name, a})
			} else if x != b {
				d.BackendsChanged = append(d.BackendsChanged, BackendRef{n.Name, a})
			}
		}
		for a := range ob {
			if _, ok := nb[a]; !ok {
				d.BackendsRemoved = append(d.BackendsRemoved, BackendRef{n.Name, a})
			}
		}
	}
	for i := range old.Services {
		o := &old.Services[i]
		if newSvc[o.Name] {
			continue
		}
		d.ServicesRemoved = append(d.ServicesRemoved, o.Name)
		for a := range backendsOf(o) {
			d.BackendsRemoved = append(d.BackendsRemoved, BackendRef{o.Name, a})
		}
	}
	for _, l := range []*[]BackendRef{&d.BackendsAdded, &d.BackendsRemoved, &d.BackendsChanged} {
		slices.SortFunc(*l, compareRefs)
	}
	d.NodeChanged = !first && !reflect.DeepEqual(old.Node, next.Node)
	d.BGPChanged = !reflect.DeepEqual(old.BGP, next.BGP)
	for name, h := range next.HealthChecks {
		if o, ok := old.HealthChecks[name]; !ok || !reflect.DeepEqual(o, h) {
			d.HealthChecksChanged = append(d.HealthChecksChanged, name)
		}
	}
	for name := range old.HealthChecks {
		if _, ok := next.HealthChecks[name]; !ok {
			d.HealthChecksChanged = append(d.HealthChecksChanged, name)
		}
	}
	slices.Sort(d.HealthChecksChanged)
	return d
}

func compareRefs(a, b BackendRef) int {
	if c := cmp.Compare(a.Service, b.Service); c != 0 {
		return c
	}
	return a.Address.Compare(b.Address)
}

// backendSetting is what DiffDesired compares of one backend.
type backendSetting struct {
	pool   string
	weight uint32
	drain  bool
	encap  config.Encap
	check  string
}

// backendsOf flattens a service's pools: each address once, with the first
// pool that has it.
func backendsOf(s *config.DesiredService) map[netip.Addr]backendSetting {
	out := map[netip.Addr]backendSetting{}
	for _, p := range s.Pools {
		for _, b := range p.Backends {
			if _, ok := out[b.Addr]; !ok {
				out[b.Addr] = backendSetting{p.Name, b.Weight, b.Drain, b.Encap, b.HealthCheck}
			}
		}
	}
	return out
}

func serviceChanged(o, n *config.DesiredService) bool {
	if o.VIP != n.VIP || o.Port != n.Port || o.Proto != n.Proto || o.Scheduler != n.Scheduler ||
		o.TableSize != n.TableSize || o.Encap != n.Encap || o.MinHealthy != n.MinHealthy ||
		o.WithdrawWhenDown != n.WithdrawWhenDown || len(o.Pools) != len(n.Pools) {
		return true
	}
	for i := range o.Pools {
		if o.Pools[i].Name != n.Pools[i].Name {
			return true
		}
	}
	return false
}

// ParseApplied parses a config sent to ApplyConfig and returns it with
// its source, o.Source ("api" when empty), which its errors name as the
// file.
func ParseApplied(yaml []byte, o ApplyOptions) (*config.Config, string, error) {
	src := o.Source
	if src == "" {
		src = "api"
	}
	cfg, err := config.Parse(yaml, src)
	return cfg, src, err
}
