package config

import (
	"net/netip"
	"slices"
	"strings"
)

// Desired is the state the data plane should have according to one Config:
// the node settings and every service with its pools resolved to flat backend
// lists. It is computed without I/O and shares no memory with the Config.
type Desired struct {
	Node Node
	// Services are in config order.
	Services []DesiredService
	// HealthChecks are the checks some backend of some service uses, by
	// name (Backend.HealthCheck).
	HealthChecks map[string]HealthCheck
	// BGP is the speaker's configuration; nil when the file has none.
	BGP *BGP
}

// DesiredService is one service with its pools resolved.
type DesiredService struct {
	Name      string
	VIP       netip.Addr
	Port      uint16 // 0: all ports
	Proto     Proto
	Scheduler Scheduler
	// SourceNetmask, SourceNetmask6: see Service (0: the whole address).
	SourceNetmask, SourceNetmask6 uint8
	// Persistence is the service's; the zero value (Timeout 0) when it
	// has none.
	Persistence Persistence
	TableSize   uint32
	// Encap is the service's encapsulation; a backend's own Encap, when not
	// EncapUnset, overrides it.
	Encap Encap
	// Pools are in the service's order of preference.
	Pools []DesiredPool
	// MinHealthy is the share of a pool's backends that must be usable
	// for the pool to be chosen; see ActivePoolWith.
	MinHealthy float64
	// WithdrawWhenDown: see Service.WithdrawWhenDown and AnnouncedVIPs.
	WithdrawWhenDown bool
	// Fragments: see Service.Fragments.
	Fragments bool
}

// DesiredPool is one pool flattened: its own backends, then those of the pools
// it includes, depth first in include order, each address once (the first
// occurrence wins; Parse rejects occurrences with different settings). Each
// backend's HealthCheck is the check in effect for it: its own, else that of
// the pool listing it, else the one that pool inherits from the pool
// including it; "" when none applies (the backend counts as healthy).
type DesiredPool struct {
	Name     string
	Backends []Backend
}

// Desired resolves c into the desired state. c must be valid (returned by
// Parse or Load, or accepted by Validate); on an invalid Config the result is
// unspecified but Desired still terminates without panicking.
func (c *Config) Desired() *Desired {
	idx := poolIndex(c.Pools)
	checks := checkIndex(c.HealthChecks)
	flat := map[string][]Backend{}
	d := &Desired{
		Node:         c.Node,
		Services:     make([]DesiredService, 0, len(c.Services)),
		HealthChecks: map[string]HealthCheck{},
	}
	d.Node.GatewayMAC = slices.Clone(c.Node.GatewayMAC)
	d.Node.FragmentPool = slices.Clone(c.Node.FragmentPool)
	if c.BGP != nil {
		d.BGP = c.BGP.clone()
	}
	for _, s := range c.Services {
		ds := DesiredService{
			Name: s.Name, VIP: s.VIP, Port: s.Port, Proto: s.Proto,
			Scheduler: s.Scheduler, TableSize: s.TableSize, Encap: s.Encap,
			Pools:      make([]DesiredPool, 0, len(s.Pools)),
			MinHealthy: s.MinHealthy, WithdrawWhenDown: s.WithdrawWhenDown, Fragments: s.Fragments,
			SourceNetmask: s.SourceNetmask, SourceNetmask6: s.SourceNetmask6,
		}
		if s.Persistence != nil {
			ds.Persistence = *s.Persistence
		}
		for _, name := range s.Pools {
			bs, ok := flat[name]
			if !ok {
				members := flatten(idx, name, nil)
				bs = make([]Backend, len(members))
				for i, m := range members {
					bs[i] = m.Backend
					if h, ok := checks[m.HealthCheck]; ok {
						if _, done := d.HealthChecks[h.Name]; !done {
							d.HealthChecks[h.Name] = h.clone()
						}
					}
				}
				flat[name] = bs
			}
			// Each service gets its own copy, so that a caller changing one
			// service's backends does not change another's.
			ds.Pools = append(ds.Pools, DesiredPool{Name: name, Backends: slices.Clone(bs)})
		}
		d.Services = append(d.Services, ds)
	}
	return d
}

// ActivePool returns the pool the service takes new flows from when every
// checked backend is healthy: ActivePoolWith(nil).
func (s *DesiredService) ActivePool() (p DesiredPool, ok bool) {
	return s.ActivePoolWith(nil)
}

// ActivePoolWith returns the pool the service takes new flows from (the
// first of its ordered pools with enough usable backends). A backend is
// usable when it is not draining, has a non-zero weight
// and is healthy: its HealthCheck is "" or healthy reports true for it
// (healthy is not called for unchecked backends; nil means "all healthy").
//
// The active pool is the first pool, in order of preference, whose usable
// backends are at least MinHealthy of its eligible ones (those not draining,
// with a non-zero weight: draining is an operator's choice, not ill health)
// and at least one. When no pool reaches MinHealthy, the first pool with any
// usable backend serves rather than none. ok is false when no pool has a
// usable backend; the service then has nowhere to send new flows.
func (s *DesiredService) ActivePoolWith(healthy func(Backend) bool) (p DesiredPool, ok bool) {
	fallback := -1
	for i, p := range s.Pools {
		usable, eligible := 0, 0
		for _, b := range p.Backends {
			if !b.Drain && b.Weight > 0 {
				eligible++
				if isHealthy(b, healthy) {
					usable++
				}
			}
		}
		if usable == 0 {
			continue
		}
		if fallback < 0 {
			fallback = i
		}
		if meetsShare(usable, eligible, s.MinHealthy) {
			return p, true
		}
	}
	if fallback >= 0 {
		return s.Pools[fallback], true
	}
	return DesiredPool{}, false
}

// meetsShare reports whether usable is at least share of eligible, with a
// tolerance for the rounding of share (0.3 of 10 is 3).
func meetsShare(usable, eligible int, share float64) bool {
	return float64(usable) >= share*float64(eligible)-1e-9
}

// ActiveBackends returns all the backends of the active pool (see ActivePool),
// draining and zero-weight ones included, so that their tracked flows keep
// going; nil when no pool has a usable backend. The slice is the pool's own:
// the caller must not modify it.
func (s *DesiredService) ActiveBackends() []Backend {
	p, _ := s.ActivePool()
	return p.Backends
}

// UsableBackends returns the backends of the active pool (see ActivePoolWith)
// that take new flows: the ones a Maglev table is built from. nil when no
// pool has a usable backend. The slice is new.
func (s *DesiredService) UsableBackends(healthy func(Backend) bool) []Backend {
	p, _ := s.ActivePoolWith(healthy)
	var out []Backend
	for _, b := range p.Backends {
		if usable(b) && isHealthy(b, healthy) {
			out = append(out, b)
		}
	}
	return out
}

// usable reports whether b may take new flows as far as the configuration
// goes (health aside).
func usable(b Backend) bool { return !b.Drain && b.Weight > 0 }

func isHealthy(b Backend, healthy func(Backend) bool) bool {
	return b.HealthCheck == "" || healthy == nil || healthy(b)
}

// AnnouncedVIPs returns the VIP addresses BGP should announce, sorted and each
// once: an address is announced while some service on it either does not ask
// for withdrawal (WithdrawWhenDown) or has a usable backend (healthy as in
// ActivePoolWith). Services on one address with other ports or protocols keep
// it announced for each other.
func (d *Desired) AnnouncedVIPs(healthy func(Backend) bool) []netip.Addr {
	want := map[netip.Addr]bool{}
	for i := range d.Services {
		s := &d.Services[i]
		if want[s.VIP] {
			continue
		}
		if !s.WithdrawWhenDown {
			want[s.VIP] = true
		} else if _, ok := s.ActivePoolWith(healthy); ok {
			want[s.VIP] = true
		}
	}
	out := make([]netip.Addr, 0, len(want))
	for a := range want {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// HealthKey identifies one health-checked target: a backend address probed
// with a named check. Health state is kept per key.
type HealthKey struct {
	Addr  netip.Addr
	Check string
}

// String formats k as "web@10.0.1.1" (check@address).
func (k HealthKey) String() string { return k.Check + "@" + k.Addr.String() }

// HealthTarget is one target to probe: an address and the check to probe it
// with. Check's slices are shared with the Desired it came from; treat them
// as read-only.
type HealthTarget struct {
	Addr  netip.Addr
	Check HealthCheck
}

// Key returns the target's key.
func (t HealthTarget) Key() HealthKey { return HealthKey{t.Addr, t.Check.Name} }

// HealthTargets returns every (backend address, check) pair that some pool of
// some service uses, each once however many pools and services include it
// (docs/DESIGN.md, Pools), sorted by check name, then address. Draining and zero-weight
// backends are included, so their health is known when they return.
func (d *Desired) HealthTargets() []HealthTarget {
	seen := map[HealthKey]bool{}
	var out []HealthTarget
	for _, s := range d.Services {
		for _, p := range s.Pools {
			for _, b := range p.Backends {
				k := HealthKey{b.Addr, b.HealthCheck}
				if b.HealthCheck == "" || seen[k] {
					continue
				}
				h, ok := d.HealthChecks[b.HealthCheck]
				if !ok {
					continue // an invalid Config: nothing to probe with
				}
				seen[k] = true
				out = append(out, HealthTarget{Addr: b.Addr, Check: h})
			}
		}
	}
	slices.SortFunc(out, func(a, b HealthTarget) int {
		if c := strings.Compare(a.Check.Name, b.Check.Name); c != 0 {
			return c
		}
		return a.Addr.Compare(b.Addr)
	})
	return out
}

// EncapFor returns the encapsulation of packets from service s to backend b:
// b's override, or the service's.
func (s *DesiredService) EncapFor(b Backend) Encap {
	if b.Encap != EncapUnset {
		return b.Encap
	}
	return s.Encap
}
