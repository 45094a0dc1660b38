// Package apitest provides an in-memory api.Backend for tests of the API
// server, xlbctl and the metrics exporter. It keeps a parsed config as the
// running config and behaves like xlbd's controller would, without a data
// plane: counters are whatever the test sets.
package apitest

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/packet"
)

// Config is the fake's initial running config: two services, one with two
// pools, a health check, an IPv6 VIP.
const Config = `node:
  name: fake
  interface: eth0
  address: 10.0.0.1
  address6: 2001:db8::1
health_checks:
  web: {type: tcp, port: 80}
pools:
  web:
    health_check: web
    backends:
      - {address: 10.0.1.1, weight: 2}
      - {address: 10.0.1.2}
  spare:
    backends: [{address: 10.0.2.1}]
  dns:
    backends: [{address: 2001:db8:1::1}, {address: 2001:db8:1::2}]
services:
  - {name: web, vip: 10.0.0.100, port: 80, protocol: tcp, pools: [web, spare]}
  - {name: dns, vip: "2001:db8::100", port: 53, protocol: udp, pools: [dns], table_size: 251}
`

// Fake is an in-memory api.Backend. Exported fields may be set by tests
// before use; use Lock/Unlock around changes while a server runs.
type Fake struct {
	sync.Mutex
	Info     api.StatusInfo
	Global   []api.Counter
	Entries  []api.ConntrackEntry // the connection table
	HasBGP   bool
	Err      error // when set, every method fails with it
	desired  *config.Desired
	counters map[api.BackendRef]api.Counters
	conns    map[api.BackendRef][2]int64 // active, inactive connections
	svcCount map[string]api.Counters
	override map[api.BackendRef]*api.Override
	// OnRead is called (locked) when Services reads the counters, e.g. to
	// advance them between two readings.
	OnRead func(f *Fake)
	// Applied records the configs ApplyConfig committed.
	Applied [][]byte
}

// New returns a Fake running Config, with a status, global counters and a
// few connection table entries.
func New() *Fake {
	cfg, err := config.Parse([]byte(Config), "fake.yaml")
	if err != nil {
		panic(err)
	}
	in, tpl, fill := uint64(3), uint64(2), 0.625
	f := &Fake{
		Info: api.StatusInfo{
			Node: "fake", Interface: "eth0", XDPMode: "native", ProgramID: 42, PinDir: "/sys/fs/bpf/xlb/fake",
			Version: "test", StartedAt: time.Unix(1700000000, 0).UTC(),
			SelfCheck: api.SelfCheck{OK: true, CheckedAt: time.Unix(1700000100, 0).UTC()},
			TX:        api.TXCheck{OK: true},
			BGP: []api.BGPSession{{Peer: netip.MustParseAddr("10.0.0.254"), ASN: 65000, State: "established",
				Uptime: 90 * time.Second, Advertised: 2, GracefulRestart: true}},
			Config: api.ConfigInfo{Source: "/etc/xlb/xlb.yaml", CommittedAt: time.Unix(1700000050, 0).UTC(), Generation: 1},
			Conntrack: api.ConntrackOccupancy{Capacity: 1 << 20, InUse: &in, Templates: &tpl, Fill: &fill,
				Defence: map[string]bool{"secure_tcp": true, "drop_entry": false, "drop_packet": false}},
		},
		Global: []api.Counter{
			{Name: "pass_not_ip", Value: 10}, {Name: "pass_not_vip", Value: 20},
			{Name: "forward_tx", Value: 1000}, {Name: "ct_hit", Value: 900}, {Name: "ct_miss", Value: 100},
			{Name: "nexthop_fallback", Value: 1}, {Name: "drop_no_backend", Value: 5},
		},
		HasBGP:   true,
		desired:  cfg.Desired(),
		counters: map[api.BackendRef]api.Counters{},
		conns:    map[api.BackendRef][2]int64{},
		svcCount: map[string]api.Counters{},
		override: map[api.BackendRef]*api.Override{},
	}
	web1 := api.BackendRef{Service: "web", Address: netip.MustParseAddr("10.0.1.1")}
	f.counters[web1] = api.Counters{Packets: 600, Bytes: 60000, NewFlows: 60}
	f.conns[web1] = [2]int64{12, 3}
	f.counters[api.BackendRef{Service: "web", Address: netip.MustParseAddr("10.0.1.2")}] = api.Counters{Packets: 400, Bytes: 40000, NewFlows: 40}
	f.svcCount["web"] = api.Counters{Packets: 1000, Bytes: 100000, NewFlows: 100}
	f.Entries = []api.ConntrackEntry{
		{CPU: 0, Bucket: 7, Way: 0, Tag: 0xabcdef1, RealID: 1, Backend: web1.Address, Service: "web", State: api.CTEstablished, Age: 2 * time.Second},
		{CPU: 1, Bucket: 9, Way: 3, Tag: 0x1234567, RealID: 2, Backend: netip.MustParseAddr("10.0.1.2"), Service: "web", State: api.CTSyn, Age: time.Second},
		{CPU: 1, Bucket: 12, Way: 1, Tag: 0x0fedcba, RealID: 4, Backend: netip.MustParseAddr("2001:db8:1::1"), Service: "dns", State: api.CTEstablished, Age: 400 * time.Second, Expired: true},
	}
	f.refreshInfo()
	return f
}

// AddCounters adds c to backend (service, addr) and to its service.
func (f *Fake) AddCounters(service, addr string, c api.Counters) {
	r := api.BackendRef{Service: service, Address: netip.MustParseAddr(addr)}
	f.counters[r] = add(f.counters[r], c)
	f.svcCount[service] = add(f.svcCount[service], c)
}

func add(a, b api.Counters) api.Counters {
	return api.Counters{Packets: a.Packets + b.Packets, Bytes: a.Bytes + b.Bytes, NewFlows: a.NewFlows + b.NewFlows}
}

// Desired returns the running config.
func (f *Fake) Desired() *config.Desired {
	f.Lock()
	defer f.Unlock()
	return f.desired
}

func (f *Fake) refreshInfo() {
	f.Info.Config.Services = len(f.desired.Services)
	n := 0
	for i := range f.desired.Services {
		n += len(backends(&f.desired.Services[i]))
	}
	f.Info.Config.Backends = n
	f.Info.Overrides = len(f.override)
	f.Info.Drained = f.Info.Drained && f.HasBGP
}

type member struct {
	pool string
	b    config.Backend
}

func backends(s *config.DesiredService) []member {
	var out []member
	seen := map[netip.Addr]bool{}
	for _, p := range s.Pools {
		for _, b := range p.Backends {
			if !seen[b.Addr] {
				seen[b.Addr] = true
				out = append(out, member{p.Name, b})
			}
		}
	}
	return out
}

// Status implements api.Backend.
func (f *Fake) Status(ctx context.Context) (api.StatusInfo, error) {
	f.Lock()
	defer f.Unlock()
	if f.Err != nil {
		return api.StatusInfo{}, f.Err
	}
	f.refreshInfo()
	return f.Info, nil
}

// Services implements api.Backend: the running config with overrides
// applied; every backend healthy, in the data plane, owning table entries
// by weight within the first pool.
func (f *Fake) Services(ctx context.Context) ([]api.ServiceInfo, error) {
	f.Lock()
	defer f.Unlock()
	if f.Err != nil {
		return nil, f.Err
	}
	if f.OnRead != nil {
		f.OnRead(f)
	}
	var out []api.ServiceInfo
	id := uint32(0)
	for i := range f.desired.Services {
		s := &f.desired.Services[i]
		si := api.ServiceInfo{
			Name: s.Name, ID: uint32(i + 1), VIP: s.VIP, Port: s.Port, Proto: api.Proto(s.Proto),
			Scheduler: s.Scheduler.String(), TableSize: s.TableSize, Encap: s.Encap.String(),
			Counters: f.svcCount[s.Name],
		}
		vip := fmt.Sprintf("%s/%d", netip.AddrPortFrom(s.VIP, s.Port), s.Proto) // as the prober names it
		for j := range f.Info.Prober.Probes {
			if f.Info.Prober.Probes[j].VIP == vip {
				p := f.Info.Prober.Probes[j]
				si.Probe = &p
			}
		}
		if p := s.Persistence; p.Timeout != 0 {
			si.Persistence = &api.Persistence{Timeout: p.Timeout, Group: p.Group,
				Netmask: uint8(config.Prefix(p.Netmask, 32)), Netmask6: uint8(config.Prefix(p.Netmask6, 128))}
		}
		for _, p := range s.Pools {
			si.Pools = append(si.Pools, p.Name)
		}
		if len(si.Pools) > 0 {
			si.ActivePool = si.Pools[0]
		}
		var sum uint32
		ms := backends(s)
		eff := make([]api.BackendInfo, len(ms))
		for j, m := range ms {
			id++
			ref := api.BackendRef{Service: s.Name, Address: m.b.Addr}
			bi := api.BackendInfo{
				Address: m.b.Addr, Pool: m.pool, Weight: m.b.Weight, Drain: m.b.Drain,
				Health:      api.Health{Check: m.b.HealthCheck, Healthy: true, Known: m.b.HealthCheck != "", Since: time.Unix(1700000000, 0).UTC()},
				InDataPlane: true, RealID: id, Encap: s.EncapFor(m.b).String(), Counters: f.counters[ref],
				ActiveConns: f.conns[ref][0], InactConns: f.conns[ref][1],
			}
			if o := f.override[ref]; o != nil {
				cp := *o
				bi.Override = &cp
				if o.Weight != nil {
					bi.Weight = *o.Weight
				}
				if o.Drain != nil {
					bi.Drain = *o.Drain
				}
			}
			if m.pool == si.ActivePool && !bi.Drain {
				sum += bi.Weight
			}
			eff[j] = bi
		}
		for j := range eff {
			if eff[j].Pool == si.ActivePool && !eff[j].Drain && sum > 0 {
				eff[j].TableEntries = uint32(uint64(s.TableSize) * uint64(eff[j].Weight) / uint64(sum))
			}
		}
		si.Backends = eff
		out = append(out, si)
	}
	return out, nil
}

// GlobalCounters implements api.Backend.
func (f *Fake) GlobalCounters(ctx context.Context) ([]api.Counter, error) {
	f.Lock()
	defer f.Unlock()
	if f.Err != nil {
		return nil, f.Err
	}
	return slices.Clone(f.Global), nil
}

// ApplyConfig implements api.Backend like xlbd: parse, diff, commit.
func (f *Fake) ApplyConfig(ctx context.Context, yaml []byte, o api.ApplyOptions) (api.ApplyResult, error) {
	cfg, src, err := api.ParseApplied(yaml, o)
	if err != nil {
		return api.ApplyResult{}, err
	}
	f.Lock()
	defer f.Unlock()
	if f.Err != nil {
		return api.ApplyResult{}, f.Err
	}
	if cfg.Node.Interface != f.desired.Node.Interface {
		return api.ApplyResult{}, fmt.Errorf("node.interface %q -> %q: setting cannot change without a restart: %w",
			f.desired.Node.Interface, cfg.Node.Interface, api.ErrFailedPrecondition)
	}
	d := cfg.Desired()
	res := api.ApplyResult{Diff: api.DiffDesired(f.desired, d), Generation: f.Info.Config.Generation}
	if o.DryRun {
		return res, nil
	}
	f.desired = d
	f.Info.Config.Generation++
	f.Info.Config.Source = "api (" + src + ")"
	f.Applied = append(f.Applied, slices.Clone(yaml))
	if o.ResetOverrides {
		clear(f.override)
	}
	for _, r := range res.Diff.BackendsRemoved {
		delete(f.override, r)
	}
	res.Committed, res.Generation = true, f.Info.Config.Generation
	return res, nil
}

// SetBackend implements api.Backend.
func (f *Fake) SetBackend(ctx context.Context, u api.BackendUpdate) ([]api.BackendRef, error) {
	f.Lock()
	defer f.Unlock()
	if f.Err != nil {
		return nil, f.Err
	}
	var refs []api.BackendRef
	for i := range f.desired.Services {
		s := &f.desired.Services[i]
		if u.Service != "" && s.Name != u.Service {
			continue
		}
		for _, m := range backends(s) {
			if m.b.Addr == u.Address {
				refs = append(refs, api.BackendRef{Service: s.Name, Address: m.b.Addr})
			}
		}
	}
	if len(refs) == 0 {
		where := "any service"
		if u.Service != "" {
			where = "service " + u.Service
		}
		return nil, fmt.Errorf("backend %s is not in %s of the running config: %w", u.Address, where, api.ErrNotFound)
	}
	for _, r := range refs {
		if u.Reset {
			delete(f.override, r)
			continue
		}
		o := f.override[r]
		if o == nil {
			o = &api.Override{Since: time.Unix(1700000200, 0).UTC()}
			f.override[r] = o
		}
		if u.Weight != nil {
			w := *u.Weight
			o.Weight = &w
		}
		if u.Drain != nil {
			d := *u.Drain
			o.Drain = &d
		}
	}
	return refs, nil
}

// ConntrackDump implements api.Backend.
func (f *Fake) ConntrackDump(ctx context.Context, flt api.ConntrackFilter) (api.ConntrackDump, error) {
	f.Lock()
	defer f.Unlock()
	if f.Err != nil {
		return api.ConntrackDump{}, f.Err
	}
	d := api.ConntrackDump{Capacity: f.Info.Conntrack.Capacity}
	for _, e := range f.Entries {
		d.InUse++
		if (flt.Service != "" && e.Service != flt.Service) ||
			(flt.Backend.IsValid() && e.Backend != flt.Backend) ||
			(flt.State != 0 && e.State != flt.State) ||
			(e.Expired && !flt.IncludeExpired) {
			continue
		}
		d.Matched++
		if len(d.Entries) < flt.Limit {
			d.Entries = append(d.Entries, e)
		}
	}
	return d, nil
}

// Explain implements api.Backend: a packet to a VIP goes to the first
// backend of the active pool in a GRE frame; anything else passes.
func (f *Fake) Explain(ctx context.Context, p api.ExplainPacket) (api.Explanation, error) {
	f.Lock()
	defer f.Unlock()
	if f.Err != nil {
		return api.Explanation{}, f.Err
	}
	flow := packet.Flow{Src: p.Src.Addr(), Dst: p.Dst.Addr(), SrcPort: p.Src.Port(), DstPort: p.Dst.Port(),
		Proto: uint8(p.Proto), TCPFlags: p.TCPFlags}
	in := flow.Frame()
	for i := range f.desired.Services {
		s := &f.desired.Services[i]
		if s.VIP != p.Dst.Addr() || (s.Port != 0 && s.Port != p.Dst.Port()) || api.Proto(s.Proto) != p.Proto {
			continue
		}
		b := s.Pools[0].Backends[0]
		src := f.desired.Node.Address
		if b.Addr.Is6() {
			src = f.desired.Node.Address6
		}
		inner := flow.IP()
		et := []byte{0x08, 0x00}
		if p.Dst.Addr().Is6() {
			et = []byte{0x86, 0xdd}
		}
		gre := append([]byte{0, 0}, et...)
		var outer []byte
		if b.Addr.Is4() {
			outer = packet.IPv4(src, b.Addr, packet.ProtoGRE, 0, 64, nil, append(gre, inner...))
		} else {
			outer = packet.IPv6(src, b.Addr, packet.ProtoGRE, 0, 64, nil, append(gre, inner...))
		}
		et2 := uint16(packet.EtherIPv4)
		if b.Addr.Is6() {
			et2 = packet.EtherIPv6
		}
		frame := packet.Ethernet([6]byte{2, 0, 0, 0, 0, 2}, [6]byte{2, 0, 0, 0, 0, 1}, 0, et2, outer)
		return api.Explanation{
			Action: 3, Service: s.Name, Backend: b.Addr, RealID: 1, Encap: s.EncapFor(b).String(),
			Conntrack: api.CTMiss, Frame: frame, Reason: "new flow: Maglev lookup",
		}, nil
	}
	return api.Explanation{Action: 2, Conntrack: api.CTNotLookedUp, Frame: in, Reason: "no VIP matches: passed to the kernel (pass_not_vip)"}, nil
}

// NodeDrain implements api.Backend.
func (f *Fake) NodeDrain(ctx context.Context) (bool, error) {
	f.Lock()
	defer f.Unlock()
	if !f.HasBGP {
		return false, fmt.Errorf("no bgp section in the config: nothing to drain: %w", api.ErrFailedPrecondition)
	}
	changed := !f.Info.Drained
	f.Info.Drained = true
	return changed, nil
}

// NodeUndrain implements api.Backend.
func (f *Fake) NodeUndrain(ctx context.Context) (bool, error) {
	f.Lock()
	defer f.Unlock()
	if !f.HasBGP {
		return false, fmt.Errorf("no bgp section in the config: nothing to undrain: %w", api.ErrFailedPrecondition)
	}
	changed := f.Info.Drained
	f.Info.Drained = false
	return changed, nil
}

var _ api.Backend = (*Fake)(nil)
