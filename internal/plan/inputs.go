package plan

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/state"
)

// nodeState is the node part of the data plane state: desired's node
// settings and the next hops of the fragment pool's other nodes; nat is
// UsesNAT(desired), which the planner keeps per service.
func nodeState(desired *config.Desired, nh NextHops, nat bool) state.Node {
	n := desired.Node
	return state.Node{
		Addr4: n.Address, Addr6: n.Address6,
		GatewayMAC:   n.GatewayMAC,
		FloodSynRate: n.FloodSynRate,
		// absent or 0: the SYN budget's rate, so a config that set only
		// flood_syn_rate covers every kind of new flow
		FloodNewFlowRate: cmp.Or(n.FloodNewFlowRate, n.FloodSynRate),
		ICMPEchoRate:     n.ICMPEchoRate,
		ICMPTooBigRate:   n.ICMPTooBigRate,
		Fragments:        fragPool(n, nh),
		TraceRate:        n.TraceRate,
		GUEPort:          n.GUEPort,
		NAT:              nat,
		Timeouts: state.Timeouts{
			TCPSyn: n.Timeouts.TCPSyn, TCP: n.Timeouts.TCP,
			TCPFin: n.Timeouts.TCPFin, UDP: n.Timeouts.UDP,
		},
		Defence: state.Defence{
			SecureTCP: n.Defence.SecureTCP, DropEntry: n.Defence.DropEntry, DropPacket: n.Defence.DropPacket,
			Hysteresis: n.Defence.Hysteresis, SynTimeout: n.Defence.SecureTCPSyn,
			FinTimeout: n.Defence.SecureTCPFin, EntryIdle: n.Defence.DropEntryIdle,
		},
	}
}

// fragPool sorts node.fragment_pool (every node then agrees on the order),
// finds this node in it (validation guarantees it is there) and gives the
// others their next hops.
func fragPool(n config.Node, nh NextHops) state.FragPool {
	addrs := slices.Clone(n.FragmentPool)
	slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.Compare(b) })
	var p state.FragPool
	for i, a := range addrs {
		if a == n.Address || a == n.Address6 {
			p.Self = i
		}
		p.Peers = append(p.Peers, state.FragPeer{Addr: a})
	}
	for i := range p.Peers {
		if i != p.Self {
			p.Peers[i].NextHop = nh.ByAddr[p.Peers[i].Addr]
		}
	}
	return p
}

// UsesNAT reports whether some backend of desired is reached by NAT.
func UsesNAT(d *config.Desired) bool {
	for i := range d.Services {
		if serviceUsesNAT(&d.Services[i]) {
			return true
		}
	}
	return false
}

// serviceUsesNAT reports whether some backend of s is reached by NAT.
func serviceUsesNAT(s *config.DesiredService) bool {
	for _, p := range s.Pools {
		for i := range p.Backends {
			if s.EncapFor(p.Backends[i]) == config.EncapNAT {
				return true
			}
		}
	}
	return false
}

func encapOf(e config.Encap) state.Encap {
	switch e {
	case config.EncapGRE:
		return state.EncapGRE
	case config.EncapIPIP:
		return state.EncapIPIP
	case config.EncapGUE:
		return state.EncapGUE
	case config.EncapDR:
		return state.EncapDR
	case config.EncapNAT:
		return state.EncapNAT
	}
	return state.EncapDefault
}

// backendCount returns the number of backends s's pools list.
func backendCount(s *config.DesiredService) int {
	n := 0
	for _, p := range s.Pools {
		n += len(p.Backends)
	}
	return n
}

// sameService reports whether a and b are equal in every field.
func sameService(a, b *config.DesiredService) bool {
	if a.Name != b.Name || a.VIP != b.VIP || a.Port != b.Port || a.Proto != b.Proto ||
		a.Scheduler != b.Scheduler || a.TableSize != b.TableSize || a.Encap != b.Encap ||
		a.MinHealthy != b.MinHealthy || a.WithdrawWhenDown != b.WithdrawWhenDown || a.Fragments != b.Fragments ||
		a.SourceNetmask != b.SourceNetmask || a.SourceNetmask6 != b.SourceNetmask6 || a.Persistence != b.Persistence ||
		len(a.Pools) != len(b.Pools) {
		return false
	}
	for i := range a.Pools {
		pa, pb := &a.Pools[i], &b.Pools[i]
		if pa.Name != pb.Name {
			return false
		}
		if len(pa.Backends) > 0 && len(pa.Backends) == len(pb.Backends) && &pa.Backends[0] == &pb.Backends[0] {
			continue // the same slice, which its owner does not change (Input.Desired)
		}
		if !sameBackends(pa.Backends, pb.Backends) {
			return false
		}
	}
	return true
}

// sameBackends is slices.Equal(a, b), field by field in one loop: an
// incremental plan compares every backend of every service, and the
// comparison the compiler generates for config.Backend is a call per
// element. TestSameBackendsCoversEveryField keeps the fields in step.
func sameBackends(a, b []config.Backend) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Addr != y.Addr || x.Weight != y.Weight || x.Encap != y.Encap || x.Port != y.Port ||
			x.Drain != y.Drain || x.HealthCheck != y.HealthCheck {
			return false
		}
	}
	return true
}

// healthOf returns healthy(b) for each checked backend of s, in pool order.
func healthOf(s *config.DesiredService, healthy func(config.Backend) bool) []bool {
	var out []bool
	for _, p := range s.Pools {
		for _, b := range p.Backends {
			if b.HealthCheck != "" {
				out = append(out, healthy(b))
			}
		}
	}
	return out
}

// sameHealth reports whether healthOf(s, healthy) would return h.
func sameHealth(h []bool, s *config.DesiredService, healthy func(config.Backend) bool) bool {
	i := 0
	for _, p := range s.Pools {
		for _, b := range p.Backends {
			if b.HealthCheck == "" {
				continue
			}
			if i >= len(h) || h[i] != healthy(b) {
				return false
			}
			i++
		}
	}
	return i == len(h)
}
