package controller

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/bgp"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/health"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

// Runtime backend overrides (xlbctl drain/undrain/weight): kept on top of
// the config, across reloads, applies and restarts (operator.go keeps them
// with the pins), until reset or until the backend leaves the config.
type overrideKey struct {
	service string // "" = every service with the address
	addr    netip.Addr
}

type override struct {
	weight *uint32
	drain  *bool
	since  time.Time
}

// withOverrides returns d with the overrides applied (d is not changed).
// The result shares with d every pool no override touches, so the
// planner sees those as unchanged without comparing them
// (plan.Input.Desired).
func (c *Controller) withOverrides(d *config.Desired) *config.Desired {
	if len(c.overrides) == 0 {
		return d
	}
	addrs := make(map[netip.Addr]bool, len(c.overrides))
	for key := range c.overrides {
		addrs[key.addr] = true
	}
	out := *d
	out.Services = slices.Clone(d.Services)
	for i := range out.Services {
		s := &out.Services[i]
		for j := range s.Pools {
			for k := range s.Pools[j].Backends {
				if addrs[s.Pools[j].Backends[k].Addr] {
					c.overrideBackend(s, &d.Services[i], j, k)
				}
			}
		}
	}
	return &out
}

// overrideBackend applies the overrides of backend k of pool j to s, a
// copy of orig: the pools and that pool's backends are copied the first
// time one of them changes.
func (c *Controller) overrideBackend(s, orig *config.DesiredService, j, k int) {
	if len(s.Pools) > 0 && &s.Pools[0] == &orig.Pools[0] {
		s.Pools = slices.Clone(s.Pools)
	}
	p := &s.Pools[j]
	if &p.Backends[0] == &orig.Pools[j].Backends[0] {
		p.Backends = slices.Clone(p.Backends)
	}
	b := &p.Backends[k]
	for _, key := range []overrideKey{{"", b.Addr}, {s.Name, b.Addr}} {
		if o := c.overrides[key]; o != nil {
			if o.weight != nil {
				b.Weight = *o.weight
			}
			if o.drain != nil {
				b.Drain = *o.drain
			}
		}
	}
}

// pruneOverrides drops overrides of backends no longer in d.
func (c *Controller) pruneOverrides(d *config.Desired) {
	for key := range c.overrides {
		if len(c.refs(d, key)) == 0 {
			delete(c.overrides, key)
			c.log.Info("runtime override dropped: the backend is no longer in the config", "service", key.service, "address", key.addr)
		}
	}
}

// refs lists the (service, backend) pairs key names in d.
func (c *Controller) refs(d *config.Desired, key overrideKey) []api.BackendRef {
	var out []api.BackendRef
	for _, s := range d.Services {
		if key.service != "" && key.service != s.Name {
			continue
		}
		found := false
		for _, p := range s.Pools {
			for _, b := range p.Backends {
				found = found || b.Addr == key.addr
			}
		}
		if found {
			out = append(out, api.BackendRef{Service: s.Name, Address: key.addr})
		}
	}
	return out
}

// call runs fn on the controller's loop and waits for it.
func (c *Controller) call(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	select {
	case c.calls <- func() { done <- fn() }:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// API adapts the controller to the gRPC API and the metrics source. Every
// method runs on the controller's loop, so it sees one consistent state.
type API struct {
	ctl     atomic.Pointer[Controller]
	cluster atomic.Pointer[func() *api.ClusterInfo] // SetClusterStatus
	iface   string
	pinDir  string
	version string
	speaker atomic.Pointer[bgp.Speaker]
	// metricsAddr and metricsNote: where metrics are served, or why
	// nowhere (set before Attach).
	metricsAddr, metricsNote string
}

// SetMetrics records where the metrics are served ("" for nowhere) and
// why not, for Status. Call it before Attach.
func (a *API) SetMetrics(addr, note string) { a.metricsAddr, a.metricsNote = addr, note }

// NewAPI returns the API of a controller attached later (Attach): the
// socket can be opened before the data plane is touched, and answers
// Unavailable until then.
func NewAPI(iface, pinDir, version string) *API {
	return &API{iface: iface, pinDir: pinDir, version: version}
}

// Attach sets the controller (and the BGP speaker, may be nil) the API
// serves.
func (a *API) Attach(c *Controller, speaker *bgp.Speaker) {
	a.speaker.Store(speaker)
	a.ctl.Store(c)
}

// ctlr returns the attached controller or ErrUnavailable.
func (a *API) ctlr() (*Controller, error) {
	c := a.ctl.Load()
	if c == nil {
		return nil, fmt.Errorf("%w: xlbd is starting", api.ErrUnavailable)
	}
	return c, nil
}

// bgpCtlr is ctlr for the calls that need the BGP speaker.
func (a *API) bgpCtlr() (*Controller, error) {
	c, err := a.ctlr()
	if err == nil && c.bgp == nil {
		err = fmt.Errorf("%w: no bgp section in the config", api.ErrFailedPrecondition)
	}
	return c, err
}

var _ api.Backend = (*API)(nil)

// Status reports the node, program, self-check, BGP and config.
func (a *API) Status(ctx context.Context) (api.StatusInfo, error) {
	c0, err0 := a.ctlr()
	if err0 != nil {
		return api.StatusInfo{}, err0
	}
	var st api.StatusInfo
	err := c0.call(ctx, func() error {
		c := c0
		st = api.StatusInfo{
			Interface: a.iface, XDPMode: string(c.dp.Mode()), PinDir: a.pinDir, Version: a.version,
			StartedAt: c.info.startedAt, Drained: c.drained, Overrides: len(c.overrides),
			SelfCheck: api.SelfCheck{OK: c.forwarderOK, LastError: c.info.lastCheckErr, CheckedAt: c.info.checkedAt, LastFailureAt: c.info.lastFailureAt},
			Config: api.ConfigInfo{Source: c.sourceText(), CommittedAt: c.info.committedAt, Generation: c.info.generation,
				Services: len(c.state.Services), Backends: c.state.Reals.Len()},
			Conntrack:   api.ConntrackOccupancy{Capacity: c.dp.CTCapacity()},
			MetricsAddr: a.metricsAddr, MetricsNote: a.metricsNote,
			TX:     api.TXCheck{OK: c.dp.TX().OK, Detail: c.dp.TX().Detail},
			Prober: c.proberStatus(),
		}
		if o := c.dp.LastOccupancy(); o != nil { // the sweep's (datapath/conns.go)
			st.Conntrack.InUse, st.Conntrack.Templates = &o.Entries, &o.Templates
			st.Conntrack.Fill, st.Conntrack.Defence = &o.Defence.Fill, map[string]bool{}
			for i, m := range datapath.DefenceModes {
				st.Conntrack.Defence[string(m)] = o.Defence.On[i]
			}
		}
		if c.cfg != nil {
			st.Node = c.cfg.Node.Name
		}
		if info, err := c.dp.Program().Info(); err == nil {
			if id, ok := info.ID(); ok {
				st.ProgramID = uint32(id)
			}
		}
		return nil
	})
	if k, ok := c0.bgp.(*bgp.Kernel); ok && err == nil {
		st.External = &api.ExternalRoutes{Where: k.Where()}
		st.External.Prefixes, st.External.Err = k.Present()
	}
	if fn := a.cluster.Load(); err == nil && fn != nil {
		st.Cluster = (*fn)() // clusterstatus.go
	}
	if sp := a.speaker.Load(); err == nil && sp != nil {
		for _, p := range sp.Status() {
			st.BGP = append(st.BGP, api.BGPSession{Peer: p.Addr, ASN: p.ASN, State: p.State, Uptime: p.Uptime,
				Advertised: p.Advertised, Received: p.Received, GracefulRestart: p.GracefulRestart})
		}
	}
	return st, err
}

func encapName(e state.Encap) string {
	switch e {
	case state.EncapGRE:
		return "gre"
	case state.EncapIPIP:
		return "ipip"
	case state.EncapGUE:
		return "gue"
	case state.EncapDR:
		return "dr"
	case state.EncapNAT:
		return "nat"
	}
	return ""
}

// Services lists every service with every backend of every pool once.
func (a *API) Services(ctx context.Context) ([]api.ServiceInfo, error) {
	c, err := a.ctlr()
	if err != nil {
		return nil, err
	}
	var out []api.ServiceInfo
	err = c.call(ctx, func() error {
		if c.desired == nil {
			return nil
		}
		snap := c.mon.Snapshot()
		probes := c.probesByVIP()
		for i := range c.desired.Services {
			out = append(out, c.serviceInfo(&c.desired.Services[i], snap, probes))
		}
		return nil
	})
	return out, err
}

// serviceInfo is desired service s as the API shows it: its settings, its
// data plane id and counters, and each of its backends once (the first
// pool that lists it).
func (c *Controller) serviceInfo(s *config.DesiredService, snap health.Snapshot, probes map[string]*api.Probe) api.ServiceInfo {
	key := state.VIPKey{Addr: s.VIP, Port: s.Port, Proto: uint8(s.Proto)}
	si := api.ServiceInfo{Name: s.Name, VIP: s.VIP, Port: s.Port, Proto: api.Proto(s.Proto),
		Scheduler: schedName(s.Scheduler), TableSize: s.TableSize, Encap: s.Encap.String(), Probe: probes[key.String()]}
	if p, ok := s.ActivePoolWith(snap.Healthy); ok {
		si.ActivePool = p.Name
	}
	if p := s.Persistence; p.Timeout != 0 {
		si.Persistence = &api.Persistence{Timeout: p.Timeout, Group: p.Group,
			Netmask: uint8(config.Prefix(p.Netmask, 32)), Netmask6: uint8(config.Prefix(p.Netmask6, 128))}
	}
	for _, p := range s.Pools {
		si.Pools = append(si.Pools, p.Name)
	}
	entries := map[uint32]uint32{}
	realOf := map[netip.Addr]uint32{}
	if svc := c.state.Services[key]; svc != nil {
		si.ID = svc.SvcID
		if cnt, err := c.dp.ServiceCounters(svc.SvcID); err == nil {
			si.Counters = api.Counters(cnt)
		}
		for _, rid := range svc.Table {
			entries[rid]++
		}
		for id, r := range c.state.Reals.All() {
			if r.SvcID == svc.SvcID {
				realOf[r.Addr] = id
			}
		}
	}
	seen := map[netip.Addr]bool{}
	for _, p := range s.Pools {
		for _, b := range p.Backends {
			if seen[b.Addr] {
				continue
			}
			seen[b.Addr] = true
			bi := c.backendInfo(s, p.Name, b, snap)
			if rid, ok := realOf[b.Addr]; ok {
				c.realInfo(&bi, rid, entries[rid])
			}
			si.Backends = append(si.Backends, bi)
		}
	}
	return si
}

// backendInfo is backend b of service s, listed by pool, as the config,
// the runtime overrides and the health checks have it.
func (c *Controller) backendInfo(s *config.DesiredService, pool string, b config.Backend, snap health.Snapshot) api.BackendInfo {
	bi := api.BackendInfo{Address: b.Addr, Service: s.Name, Pool: pool, Weight: b.Weight, Drain: b.Drain,
		Encap: s.EncapFor(b).String()}
	for _, k := range []overrideKey{{"", b.Addr}, {s.Name, b.Addr}} {
		if o := c.overrides[k]; o != nil {
			bi.Override = &api.Override{Weight: o.weight, Drain: o.drain, Since: o.since}
		}
	}
	bi.Health = api.Health{Check: b.HealthCheck, Healthy: true, Known: true}
	if b.HealthCheck != "" {
		h := snap[config.HealthKey{Addr: b.Addr, Check: b.HealthCheck}]
		bi.Health = api.Health{Check: b.HealthCheck, Healthy: h.Healthy, Known: h.Known, Since: h.Since,
			LastError: h.LastErr, LastProbe: h.LastProbe}
	}
	return bi
}

// realInfo adds to bi the data plane's view of its real rid: whether it
// is active, its share of the service's table (entries), its counters and
// connections.
func (c *Controller) realInfo(bi *api.BackendInfo, rid, entries uint32) {
	r := c.state.Reals.At(rid)
	bi.RealID = rid
	bi.InDataPlane = r.Active
	bi.Local = r.NextHop.Local
	bi.TableEntries = entries
	if cnt, err := c.dp.RealCounters(rid); err == nil {
		bi.Counters = api.Counters(cnt)
	}
	if cn, err := c.dp.RealConns(rid); err == nil {
		bi.ActiveConns, bi.InactConns = cn.Active, cn.Inactive
	}
}

// schedName is the scheduler's name as the file spells it (maglev when
// none was set).
func schedName(s config.Scheduler) string {
	if s == 0 {
		return config.SchedulerMaglev.String()
	}
	return s.String()
}

// GlobalCounters returns the data plane's global counters.
func (a *API) GlobalCounters(ctx context.Context) ([]api.Counter, error) {
	c0, err0 := a.ctlr()
	if err0 != nil {
		return nil, err0
	}
	st, err := c0.dp.Stats()
	if err != nil {
		return nil, err
	}
	var out []api.Counter
	for _, n := range datapath.StatNames() {
		out = append(out, api.Counter{Name: n, Value: st[n]})
	}
	for _, n := range datapath.HolderStatNames {
		if v, ok := st[n]; ok {
			out = append(out, api.Counter{Name: n, Value: v})
		}
	}
	return out, nil
}

// ApplyConfig validates yaml, reports the diff against the running config
// and, unless dry-run, commits it and writes it to the config file.
func (a *API) ApplyConfig(ctx context.Context, yaml []byte, o api.ApplyOptions) (api.ApplyResult, error) {
	c0, err0 := a.ctlr()
	if err0 != nil {
		return api.ApplyResult{}, err0
	}
	cfg, _, err := api.ParseApplied(yaml, o)
	if err != nil {
		return api.ApplyResult{}, err
	}
	var res api.ApplyResult
	err = c0.call(ctx, func() error {
		c := c0
		if c.cfg != nil {
			if err := immutable(c.cfg.Node, cfg.Node); err != nil {
				return fmt.Errorf("%w: %w", api.ErrFailedPrecondition, err)
			}
			if err := immutableBGP(c.cfg.BGP, cfg.BGP); err != nil {
				return fmt.Errorf("%w: %w", api.ErrFailedPrecondition, err)
			}
		}
		res.Diff = api.DiffDesired(c.base, cfg.Desired())
		res.Generation = c.info.generation
		if o.DryRun {
			return nil
		}
		saved := c.overrides
		if o.ResetOverrides {
			c.overrides = map[overrideKey]*override{}
		}
		c.saveYAML = yaml // written to the file once the maps hold it (record.go)
		err := c.Commit(cfg)
		c.saveYAML = nil
		if err != nil {
			c.overrides = saved
			return err
		}
		c.info.source = "api"
		res.Committed, res.Generation = true, c.info.generation
		return nil
	})
	return res, err
}

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".xlb-config-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// SetBackend sets or clears a runtime override and commits it.
func (a *API) SetBackend(ctx context.Context, u api.BackendUpdate) ([]api.BackendRef, error) {
	c0, err0 := a.ctlr()
	if err0 != nil {
		return nil, err0
	}
	if u.Weight != nil && *u.Weight > config.MaxWeight {
		return nil, fmt.Errorf("%w: weight %d is out of range 0..%d", api.ErrInvalidArgument, *u.Weight, config.MaxWeight)
	}
	var refs []api.BackendRef
	err := c0.call(ctx, func() error {
		c := c0
		if c.base == nil {
			return fmt.Errorf("%w: no config committed yet", api.ErrFailedPrecondition)
		}
		key := overrideKey{u.Service, u.Address}
		if refs = c.refs(c.base, key); len(refs) == 0 {
			return fmt.Errorf("%w: backend %s is in no service%s", api.ErrNotFound, u.Address, map[bool]string{true: " " + u.Service}[u.Service != ""])
		}
		if u.Reset {
			for k := range c.overrides {
				if k.addr == u.Address && (u.Service == "" || k.service == u.Service) {
					delete(c.overrides, k)
				}
			}
		} else {
			o := c.overrides[key]
			if o == nil {
				o = &override{}
				c.overrides[key] = o
			}
			o.since = time.Now()
			if u.Weight != nil {
				w := *u.Weight
				o.weight = &w
			}
			if u.Drain != nil {
				d := *u.Drain
				o.drain = &d
			}
		}
		if err := c.apply(c.withOverrides(c.base), "backend override committed", "override"); err != nil {
			return err
		}
		return c.saveOperator()
	})
	return refs, err
}

// ConntrackDump scans the connection table.
func (a *API) ConntrackDump(ctx context.Context, f api.ConntrackFilter) (api.ConntrackDump, error) {
	c0, err0 := a.ctlr()
	if err0 != nil {
		return api.ConntrackDump{}, err0
	}
	var (
		st    *state.State
		svcOf map[uint32]string
		proto map[uint32]uint8
	)
	err := c0.call(ctx, func() error {
		c := c0
		st = c.state // never changed: read after the call
		svcOf, proto = map[uint32]string{}, map[uint32]uint8{}
		if c.desired != nil {
			for _, s := range c.desired.Services {
				if svc := c.state.Services[state.VIPKey{Addr: s.VIP, Port: s.Port, Proto: uint8(s.Proto)}]; svc != nil {
					svcOf[svc.SvcID], proto[svc.SvcID] = s.Name, uint8(s.Proto)
				}
			}
		}
		return nil
	})
	if err != nil {
		return api.ConntrackDump{}, err
	}
	out := api.ConntrackDump{Capacity: c0.dp.CTCapacity()}
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	scan, timeout := c0.dp.ScanConntrack, func(e datapath.CTEntry, svc uint32) time.Duration {
		return c0.dp.Timeout(e.State, proto[svc])
	}
	if f.Templates { // bpf/persist.h
		out.Capacity = datapath.TemplateCapacity
		// Only live templates are scanned; Age is the time they live on.
		scan, timeout = c0.dp.ScanTemplates, func(datapath.CTEntry, uint32) time.Duration { return math.MaxInt64 }
	}
	err = scan(func(e datapath.CTEntry) bool {
		out.InUse++
		r, ok := st.Reals.Get(e.RealID)
		name := ""
		if ok {
			name = svcOf[r.SvcID]
		}
		expired := ok && e.Age > timeout(e, r.SvcID)
		if (f.Service != "" && f.Service != name) || (f.Backend.IsValid() && (!ok || r.Addr != f.Backend)) ||
			(f.State != 0 && uint8(f.State) != e.State) || (expired && !f.IncludeExpired) {
			return ctx.Err() == nil
		}
		out.Matched++
		if len(out.Entries) < limit {
			ce := api.ConntrackEntry{CPU: e.CPU, Bucket: e.Bucket, Way: e.Way, Tag: e.Tag, RealID: e.RealID,
				Service: name, State: api.CTState(e.State), Age: e.Age, Expired: expired}
			if ok {
				ce.Backend = r.Addr
			}
			out.Entries = append(out.Entries, ce)
		}
		return ctx.Err() == nil
	})
	return out, err
}

// Explain runs a crafted packet through the live program as a self-check
// probe (datapath.Explain): read only, and the conntrack result and drop
// reason are the program's own answer for that packet.
func (a *API) Explain(ctx context.Context, p api.ExplainPacket) (api.Explanation, error) {
	c0, err0 := a.ctlr()
	if err0 != nil {
		return api.Explanation{}, err0
	}
	if !p.Src.IsValid() || !p.Dst.IsValid() || p.Src.Addr().Is4() != p.Dst.Addr().Is4() {
		return api.Explanation{}, fmt.Errorf("%w: source and destination must be addresses of one family", api.ErrInvalidArgument)
	}
	flags := p.TCPFlags
	if p.Proto == api.ProtoTCP && flags == 0 {
		flags = packet.SYN
	}
	f := packet.Flow{Src: p.Src.Addr(), Dst: p.Dst.Addr(), SrcPort: p.Src.Port(), DstPort: p.Dst.Port(),
		Proto: uint8(p.Proto), TCPFlags: flags}
	var ex api.Explanation
	err := c0.call(ctx, func() error {
		r, err := c0.dp.Explain(f)
		if err != nil {
			return err
		}
		ex = c0.explanation(p, r)
		return nil
	})
	return ex, err
}

// explainCT maps the program's answer to the API's.
var explainCT = map[datapath.ProbeCT]api.CTResult{
	datapath.ProbeCTHit: api.CTHit, datapath.ProbeCTRemoteHit: api.CTRemoteHit,
	datapath.ProbeCTMiss: api.CTMiss, datapath.ProbeCTReselect: api.CTReselect,
}

// explanation describes what the program did with the explained packet p.
func (c *Controller) explanation(p api.ExplainPacket, r datapath.Explained) api.Explanation {
	ex := api.Explanation{Action: r.Verdict, Frame: r.Frame, Conntrack: api.CTNotLookedUp, Reason: r.Reason}
	if ct, ok := explainCT[r.CT]; ok && r.Answered {
		ex.Conntrack = ct
	}
	switch {
	case !r.Answered && r.Verdict == datapath.XDPPass:
		ex.Reason = "pass_not_vip"
	case r.Answered && r.Reason == "" && r.Verdict == datapath.XDPDrop:
		// the answer is written at selection; the rest is not in it
		ex.Reason = "dropped after selection, at encapsulation or next hop (drop_too_big, drop_no_nexthop, drop_no_source or drop_encap)"
	}
	var svcID uint32
	for _, s := range c.desired.Services {
		if s.VIP == p.Dst.Addr() && uint8(s.Proto) == uint8(p.Proto) && (s.Port == p.Dst.Port() || s.Port == 0) {
			if svc := c.state.Services[state.VIPKey{Addr: s.VIP, Port: s.Port, Proto: uint8(s.Proto)}]; svc != nil {
				ex.Service, svcID = s.Name, svc.SvcID
				if s.Port != 0 {
					break
				}
			}
		}
	}
	if tun, err := packet.ParseTunnel(r.Frame); err == nil && (r.Verdict == datapath.XDPTX || r.Verdict == datapath.XDPRedirect) {
		ex.Backend, ex.Encap = tun.Backend, tun.Kind
		for id, real := range c.state.Reals.All() {
			if real.SvcID == svcID && real.Addr == tun.Backend {
				ex.RealID = id
			}
		}
		ex.Reason = "forwarded to a backend of " + ex.Service +
			" (read only: no conntrack entry written, counted in selfcheck_probe only)"
	}
	return ex
}

// NodeDrain starts a BGP graceful shutdown; it returns once the VIPs are
// withdrawn.
func (a *API) NodeDrain(ctx context.Context) (bool, error) {
	c0, err0 := a.bgpCtlr()
	if err0 != nil {
		return false, err0
	}
	changed := false
	var saveErr error
	err := c0.call(ctx, func() error {
		changed = !c0.drained
		c0.drained = true
		saveErr = c0.saveOperator()
		return nil
	})
	if err != nil {
		return false, err
	}
	// The wait happens off the loop (health and reloads go on); a client's
	// cancel must not cut the drain short.
	if err := c0.bgp.GracefulShutdown(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, bgp.ErrDrainAborted) {
		return changed, err
	}
	return changed, saveErr
}

// NodeUndrain announces again.
func (a *API) NodeUndrain(ctx context.Context) (bool, error) {
	c0, err0 := a.bgpCtlr()
	if err0 != nil {
		return false, err0
	}
	changed := false
	err := c0.call(ctx, func() error {
		changed = c0.drained
		c0.drained = false
		saveErr := c0.saveOperator()
		if err := c0.bgp.Undrain(); err != nil {
			return err
		}
		c0.announce()
		return saveErr
	})
	return changed, err
}
