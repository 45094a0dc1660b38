package config

import (
	"net/netip"
	"slices"
)

// Desired is the state the data plane should have according to one Config:
// the node settings and every service with its pools resolved to flat backend
// lists. It is computed without I/O and shares no memory with the Config.
type Desired struct {
	Node Node
	// Services are in config order.
	Services []DesiredService
}

// DesiredService is one service with its pools resolved.
type DesiredService struct {
	Name      string
	VIP       netip.Addr
	Port      uint16 // 0: all ports
	Proto     Proto
	Scheduler Scheduler
	TableSize uint32
	// Encap is the service's encapsulation; a backend's own Encap, when not
	// EncapUnset, overrides it.
	Encap Encap
	// Pools are in the service's order of preference.
	Pools []DesiredPool
}

// DesiredPool is one pool flattened: its own backends, then those of the pools
// it includes, depth first in include order, each address once (the first
// occurrence wins; Parse rejects occurrences with different settings).
type DesiredPool struct {
	Name     string
	Backends []Backend
}

// Desired resolves c into the desired state. c must be valid (returned by
// Parse or Load, or accepted by Validate); on an invalid Config the result is
// unspecified but Desired still terminates without panicking.
func (c *Config) Desired() *Desired {
	idx := poolIndex(c.Pools)
	flat := map[string][]Backend{}
	d := &Desired{Node: c.Node, Services: make([]DesiredService, 0, len(c.Services))}
	d.Node.GatewayMAC = slices.Clone(c.Node.GatewayMAC)
	for _, s := range c.Services {
		ds := DesiredService{
			Name: s.Name, VIP: s.VIP, Port: s.Port, Proto: s.Proto,
			Scheduler: s.Scheduler, TableSize: s.TableSize, Encap: s.Encap,
			Pools: make([]DesiredPool, 0, len(s.Pools)),
		}
		for _, name := range s.Pools {
			bs, ok := flat[name]
			if !ok {
				members := flatten(idx, name, nil)
				bs = make([]Backend, len(members))
				for i, m := range members {
					bs[i] = m.Backend
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

// ActivePool returns the pool the service takes new flows from: the first of
// its pools, in order of preference, that holds a usable backend (SPEC
// F-CFG3). ok is false when no pool does; the service then has nowhere to
// send new flows.
//
// Today a backend is usable when it is not draining and has a non-zero
// weight; health checks (SPEC F-CTL1) will add "and is healthy", so the
// active pool will then depend on state outside the Config.
func (s *DesiredService) ActivePool() (p DesiredPool, ok bool) {
	for _, p := range s.Pools {
		if slices.ContainsFunc(p.Backends, usable) {
			return p, true
		}
	}
	return DesiredPool{}, false
}

// ActiveBackends returns all the backends of the active pool (see ActivePool),
// draining and zero-weight ones included, so that their tracked flows keep
// going; nil when no pool has a usable backend. The slice is the pool's own:
// the caller must not modify it.
func (s *DesiredService) ActiveBackends() []Backend {
	p, _ := s.ActivePool()
	return p.Backends
}

// usable reports whether b can take new flows, which makes its pool eligible.
func usable(b Backend) bool { return !b.Drain && b.Weight > 0 }

// EncapFor returns the encapsulation of packets from service s to backend b:
// b's override, or the service's.
func (s *DesiredService) EncapFor(b Backend) Encap {
	if b.Encap != EncapUnset {
		return b.Encap
	}
	return s.Encap
}
