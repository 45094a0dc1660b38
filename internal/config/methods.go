package config

import (
	"net/netip"
	"sync/atomic"
)

// Forwarding methods (docs/ARCHITECTURE.md, Forwarding methods): the
// file's method key on services and backends, its older name encap, the
// NAT backend port and node.gue_port, and the checks that need the
// kernel's routes.

// Route is what the kernel's route lookup says about a backend address.
type Route struct {
	// Local: the address is one of this node's own.
	Local bool
	// Gateway is the router the kernel sends through; the zero Addr when
	// the address is on a directly connected segment (or local).
	Gateway netip.Addr
	// Dev names the outgoing interface.
	Dev string
}

// RouteLookup asks the kernel for the route to a.
type RouteLookup func(a netip.Addr) (Route, error)

var routeLookup atomic.Pointer[RouteLookup]

// UseRoutes makes Parse, Load and Validate check the backends of methods
// dr and nat against the routes f gives (nil: no route check, as for a
// file checked away from its node). xlbd sets it to the kernel's lookup.
func UseRoutes(f RouteLookup) {
	if f == nil {
		routeLookup.Store(nil)
		return
	}
	routeLookup.Store(&f)
}

// validateMethods checks what each service's method asks of its
// backends: a port only with nat, one family for dr and nat (no outer
// header crosses families), no GUE port clash with a UDP service that
// uses GUE, and, with a route lookup (UseRoutes), a directly connected
// segment for dr and nat.
func validateMethods(cfg *Config, idx map[string]*Pool, c *collector) {
	var lookup RouteLookup
	if f := routeLookup.Load(); f != nil {
		lookup = *f
	}
	routes := map[netip.Addr]routeAnswer{}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		for _, name := range s.Pools {
			if _, ok := idx[name]; !ok {
				continue
			}
			for _, m := range flatten(idx, name, nil) {
				checkMember(cfg, i, m, c, lookup, routes)
			}
		}
	}
}

type routeAnswer struct {
	r   Route
	err error
}

// checkMember checks backend m of services[i] for its method.
func checkMember(cfg *Config, i int, m member, c *collector, lookup RouteLookup, routes map[netip.Addr]routeAnswer) {
	s := &cfg.Services[i]
	method := s.Encap
	if m.Encap != EncapUnset {
		method = m.Encap
	}
	bp := backendPath(m.pool, m.index)
	if m.Port != 0 && method != EncapNAT {
		c.errf(join(bp, kPort), ErrInvalid,
			"port %d needs method nat, but service %q (%s) sends to this backend with %s: remove port (the VIP's port is kept), or set method: nat on the backend or the service",
			m.Port, s.Name, c.where(servicePath(i)), method)
	}
	if m.Port != 0 && method == EncapNAT && s.Port == 0 {
		c.errf(join(bp, kPort), ErrInvalid,
			"port %d cannot be mapped from service %q (%s), which serves all ports: remove port, or give the service a port",
			m.Port, s.Name, c.where(servicePath(i)))
	}
	if method == EncapGUE && cfg.Node.GUEPort == 0 {
		c.errf(join(kNode, kGUEPort), ErrInvalid,
			"0 is not a UDP port, and backend %s of service %q uses method gue: give 1..65535 (default %d)",
			m.Addr, s.Name, DefaultGUEPort)
	}
	if method == EncapGUE && s.Proto == ProtoUDP && s.Port == cfg.Node.GUEPort {
		c.errf(join(servicePath(i), kPort), ErrInvalid,
			"UDP port %d is node.gue_port%s, the port backend %s receives GUE on: choose another node.gue_port, or another method for the service",
			s.Port, c.onLine(join(kNode, kGUEPort), " (line %d)"), m.Addr)
	}
	if method == EncapNAT && s.Fragments {
		c.errf(join(servicePath(i), kFragments), ErrInvalid,
			"backend %s uses method nat, whose port rewrite later fragments cannot carry: set fragments: false, or use another method",
			m.Addr)
	}
	if method != EncapDR && method != EncapNAT || !m.Addr.IsValid() || !s.VIP.IsValid() {
		return
	}
	if m.Addr.Is4() != s.VIP.Is4() {
		c.errf(bp, ErrInvalid,
			"method %s sends the client's packet without an outer header, so backend %s must be of the family of service %q's VIP %s: use gre, ipip or gue for it",
			method, m.Addr, s.Name, s.VIP)
		return
	}
	if lookup == nil {
		return
	}
	ra, ok := routes[m.Addr]
	if !ok {
		ra.r, ra.err = lookup(m.Addr)
		routes[m.Addr] = ra
	}
	switch {
	case ra.err != nil:
		c.errf(join(bp, kAddress), ErrInvalid, "method %s: no route to backend %s (%v): connect its segment, or use gre, ipip or gue",
			method, m.Addr, ra.err)
	case ra.r.Gateway.IsValid() && method == EncapDR:
		c.errf(join(bp, kAddress), ErrInvalid,
			"method dr needs backend %s on a directly connected segment, but the kernel routes it via %s (dev %s): use gre, ipip or gue for it, or connect the node to its segment",
			m.Addr, ra.r.Gateway, ra.r.Dev)
	case ra.r.Gateway.IsValid():
		c.errf(join(bp, kAddress), ErrInvalid,
			"method nat needs backend %s on a directly connected segment, so that the node can be its route back to the clients, but the kernel routes it via %s (dev %s): use gre, ipip or gue for it, or connect the node to its segment",
			m.Addr, ra.r.Gateway, ra.r.Dev)
	}
}
