// Package controller owns every change to the data plane: one reconcile
// loop turns a validated config, the backends' health and the forwarder's
// self-check into a planned state (package plan, pure), commits it
// through the datapath and tells the BGP speaker what to announce.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/health"
	"github.com/xlbproject/xlb/internal/kernelnet"
	"github.com/xlbproject/xlb/internal/plan"
	"github.com/xlbproject/xlb/internal/prober"
	"github.com/xlbproject/xlb/internal/state"
)

// Intervals of the loop's periodic work.
const (
	NeighbourInterval = 10 * time.Second
	NextHopInterval   = time.Second
	SelfCheckInterval = time.Second
)

// ErrRestartRequired is wrapped when a reload changes a setting that only a
// restart can apply.
var ErrRestartRequired = errors.New("setting cannot change without a restart")

// Announcer is the BGP speaker as the controller sees it.
type Announcer interface {
	// SetAnnounced makes exactly these prefixes announced.
	SetAnnounced(prefixes []netip.Prefix) error
	// GracefulShutdown announces with GRACEFUL_SHUTDOWN, waits, withdraws.
	GracefulShutdown(ctx context.Context) error
	// Undrain ends a graceful shutdown: announcements resume.
	Undrain() error
	// RestoreDrain, before the speaker starts, keeps a drain that
	// outlived a restart: nothing is announced until Undrain.
	RestoreDrain() error
}

// Controller commits configs to one datapath. Its methods are called from
// one goroutine (Run's); Commit before Run is fine.
type Controller struct {
	log     *slog.Logger
	dp      *datapath.Datapath
	limits  plan.Limits
	path    string
	mon     *health.Monitor
	planner *plan.Planner
	bgp     Announcer
	cfg     *config.Config
	desired *config.Desired
	state   *state.State // the state the data plane holds

	forwarderOK bool // last self-check passed
	drained     bool // node drain requested
	// nexthops are the backends' resolved next hops, planned into the
	// reals so the forwarder needs no FIB lookup per packet.
	nexthops plan.NextHops

	calls     chan func()     // work from API goroutines, run by Run's loop
	base      *config.Desired // the config's desired state, before overrides
	overrides map[overrideKey]*override
	info      runInfo
	nhGen     uint64 // the last NextHops generation given
	onCommit  func(CommitEvent)
	version   string // ClusterVersion of the committed config
	load      func() (*config.Config, error)
	prober    *prober.Prober // nil: no blackbox prober
	// digest is the ConfigDigest of c.cfg (of the config being committed
	// during Commit); recorded and recordedPhase the commit record before
	// the commit in progress (record.go).
	digest, recorded, recordedPhase string
	// saveYAML, set during an API apply, is written to the config file
	// once the maps hold it, before the record says done.
	saveYAML []byte
	ext      *external // services from Kubernetes (kubernetes.go)
}

// runInfo is what the API reports about the running state.
type runInfo struct {
	startedAt     time.Time
	source        string
	committedAt   time.Time
	generation    uint64
	checkedAt     time.Time
	lastCheckErr  string
	lastFailureAt time.Time
	kubernetes    string // the Kubernetes source's state ("" without one)
}

// CommitEvent describes a commit, for metrics.
type CommitEvent struct {
	Trigger     string // startup | reload | api | health | override
	Plan, Apply time.Duration
	TablesBuilt int
	Err         error
	// State is what the data plane holds after the commit (the previous
	// state when it failed); Version the config version it came from
	// (config.Config.ClusterVersion).
	State   *state.State
	Version string
}

// Options configure New.
type Options struct {
	Path   string // config file, reread by Reload
	Limits plan.Limits
	Log    *slog.Logger
	BGP    Announcer // nil: no BGP
	// HealthInitial is how targets of the first config start (default:
	// healthy, so a restart does not empty the tables).
	HealthInitial health.Initial
	// OnCommit, when set, is told about every commit (metrics).
	OnCommit func(CommitEvent)
	// Prober, when set, is run by Run, given the VIPs to probe at every
	// commit, and part of the self-check's verdict.
	Prober *prober.Prober
	// Load, when set, is what Reload (SIGHUP) reads instead of the file
	// at Path (a config from the cluster's store).
	Load func() (*config.Config, error)
}

// New returns a controller for dp.
func New(dp *datapath.Datapath, o Options) *Controller {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	c := &Controller{
		log: o.Log, dp: dp, limits: o.Limits, path: o.Path, bgp: o.BGP,
		mon:         health.New(health.Options{Logger: o.Log, Initial: o.HealthInitial}),
		planner:     plan.NewPlanner(o.Limits),
		state:       dp.Snapshot(),
		forwarderOK: true,
		calls:       make(chan func()),
		overrides:   map[overrideKey]*override{},
		info:        runInfo{startedAt: time.Now(), source: o.Path},
		onCommit:    o.OnCommit,
		prober:      o.Prober,
		load:        o.Load,
	}
	c.restoreOperator()
	c.restoreRecord()
	return c
}

// Commit validates that cfg can be applied to the running node, updates
// the health targets, plans and applies it. On error the running state is
// unchanged, except for a failure inside the kernel (reported), where each
// service is still on a complete table, old or new.
func (c *Controller) Commit(cfg *config.Config) error {
	if c.cfg != nil {
		if err := immutable(c.cfg.Node, cfg.Node); err != nil {
			return err
		}
		if err := immutableBGP(c.cfg.BGP, cfg.BGP); err != nil {
			return err
		}
		if !reflect.DeepEqual(c.cfg.Kubernetes, cfg.Kubernetes) {
			return fmt.Errorf("kubernetes: %w (the source is set up at start)", ErrRestartRequired)
		}
	}
	d := cfg.Desired()
	if err := CheckInstances(c.dp.PinDir(), d); err != nil {
		return err
	}
	merged, _ := c.merged(d) // kubernetes.go: the services from Kubernetes
	if err := c.mon.Update(merged.HealthTargets()); err != nil {
		return fmt.Errorf("health checks: %w", err)
	}
	c.pruneOverrides(merged)
	prev, prevDigest := c.version, c.digest
	c.version, c.digest = cfg.ClusterVersion(), ConfigDigest(cfg)
	if err := c.apply(c.withOverrides(merged), "config committed", "reload"); err != nil {
		c.version, c.digest = prev, prevDigest
		return err
	}
	c.base = d
	c.cfg = cfg
	c.info.generation++
	c.info.committedAt = time.Now()
	c.keepNeighbours()
	c.saveOperator() // logged; the config itself is committed
	return nil
}

// nextHopAddrs are the addresses the forwarder sends to: d's backends
// and the other nodes of its fragment pool.
func nextHopAddrs(d *config.Desired) []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	add := func(a netip.Addr) {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for i := range d.Services {
		for _, p := range d.Services[i].Pools {
			for _, b := range p.Backends {
				add(b.Addr)
			}
		}
	}
	for _, a := range d.Node.FragmentPool {
		if a != d.Node.Address && a != d.Node.Address6 {
			add(a)
		}
	}
	return out
}

// resolveNextHops looks up the next hops of d's addresses, every one
// (all: the periodic refresh, which also drops addresses d no longer has)
// or only those never looked up (a commit: usually none, and then nothing
// is built), and makes c.nexthops the result when it differs. A backend
// whose neighbour is unresolved gets none: the forwarder falls back to the
// kernel's FIB.
func (c *Controller) resolveNextHops(d *config.Desired, all bool) (changed bool) {
	lookup := func(a netip.Addr) state.NextHop {
		nh, err := kernelnet.LookupNextHop(a)
		if err != nil {
			c.log.Debug("next hop not resolved", "address", a, "error", err)
		}
		return nh
	}
	var next map[netip.Addr]state.NextHop
	if all {
		addrs := nextHopAddrs(d)
		next = make(map[netip.Addr]state.NextHop, len(addrs))
		for _, a := range addrs {
			next[a] = lookup(a)
		}
		changed = !maps.Equal(next, c.nexthops.ByAddr)
	} else {
		for _, a := range nextHopAddrs(d) {
			if _, known := c.nexthops.ByAddr[a]; known {
				continue
			}
			if next == nil {
				next = maps.Clone(c.nexthops.ByAddr)
				if next == nil {
					next = map[netip.Addr]state.NextHop{}
				}
			}
			next[a], changed = lookup(a), true
		}
	}
	if changed {
		c.nhGen++
		c.nexthops = plan.NextHops{Gen: c.nhGen, ByAddr: next}
	}
	return changed
}

// refreshNextHops resolves every next hop again and commits the reals
// whose next hop changed (a neighbour resolved, a MAC or route changed).
func (c *Controller) refreshNextHops() {
	if c.desired == nil || !c.resolveNextHops(c.desired, true) {
		return
	}
	if err := c.apply(c.desired, "", "nexthop"); err != nil {
		c.log.Error("next hops not written", "error", err)
	}
}

// apply plans d (overrides applied) with the current health and next hops
// and commits it: one plan, one Apply of its diff. what is logged (empty:
// at debug level).
func (c *Controller) apply(d *config.Desired, what, trigger string) (err error) {
	start := time.Now()
	var (
		planned time.Duration
		as      datapath.ApplyStats
		pl      plan.Planned
	)
	defer func() {
		if c.onCommit != nil {
			c.onCommit(CommitEvent{Trigger: trigger, Plan: planned, Apply: as.Duration, TablesBuilt: pl.Stats.TablesBuilt, Err: err,
				State: c.state, Version: c.version})
		}
	}()
	c.resolveNextHops(d, false)
	pl, err = c.planner.Plan(c.state, plan.Input{Desired: d, Healthy: c.mon.Snapshot().Healthy, NextHops: c.nexthops})
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	planned = time.Since(start)
	err = c.committing(trigger, func() (err error) {
		as, err = c.dp.Commit(pl.State, pl.Diff)
		return err
	})
	if err != nil {
		// The data plane is left on its previous state (datapath.Commit
		// undoes what it wrote), which Snapshot returns.
		c.state = c.dp.Snapshot()
		return fmt.Errorf("apply: %w", err)
	}
	c.desired, c.state = d, pl.State
	c.setProbeTargets()
	ps := pl.Stats
	log := c.log.Info
	if what == "" {
		log, what = c.log.Debug, "committed"
	}
	log(what,
		"services", ps.Services, "reals", ps.Reals, "tables_built", ps.TablesBuilt,
		"tables_replaced", as.TablesReplaced, "tables_patched", as.TablesPatched, "table_entries_changed", as.TableEntries,
		"reals_written", as.RealsWritten, "services_added", as.ServicesAdded, "services_removed", as.ServicesRemoved,
		"plan", planned.Round(time.Microsecond), "apply", as.Duration.Round(time.Microsecond))
	c.announce()
	return nil
}

// announce tells the speaker which VIPs to announce: none while the
// forwarder fails its self-check (while the node is drained the speaker
// records the set and announces it on undrain).
func (c *Controller) announce() {
	if c.bgp == nil || c.desired == nil {
		return
	}
	var prefixes []netip.Prefix
	if c.forwarderOK {
		for _, a := range c.desired.AnnouncedVIPs(c.mon.Snapshot().Healthy) {
			prefixes = append(prefixes, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	if err := c.bgp.SetAnnounced(prefixes); err != nil {
		c.log.Error("bgp announcements not updated", "error", err)
	}
}

func immutable(old, new config.Node) error {
	switch {
	case old.Name != new.Name:
		return fmt.Errorf("node.name %q -> %q: %w", old.Name, new.Name, ErrRestartRequired)
	case old.Interface != new.Interface:
		return fmt.Errorf("node.interface %q -> %q: %w", old.Interface, new.Interface, ErrRestartRequired)
	case old.APISocket != new.APISocket:
		return fmt.Errorf("node.api_socket %q -> %q: %w", old.APISocket, new.APISocket, ErrRestartRequired)
	case old.MetricsAddr != new.MetricsAddr:
		return fmt.Errorf("node.metrics_addr %q -> %q: %w", old.MetricsAddr, new.MetricsAddr, ErrRestartRequired)
	case old.FragmentTableEntries != new.FragmentTableEntries:
		return fmt.Errorf("node.fragment_table_entries %d -> %d: %w", old.FragmentTableEntries, new.FragmentTableEntries, ErrRestartRequired)
	case old.ConntrackEntries != new.ConntrackEntries:
		return fmt.Errorf("node.conntrack_entries %d -> %d: %w", old.ConntrackEntries, new.ConntrackEntries, ErrRestartRequired)
	case old.MaxServices != new.MaxServices:
		return fmt.Errorf("node.max_services %d -> %d: %w (it sizes the data plane's maps)", old.MaxServices, new.MaxServices, ErrRestartRequired)
	case old.MaxBackends != new.MaxBackends:
		return fmt.Errorf("node.max_backends %d -> %d: %w (it sizes the data plane's maps)", old.MaxBackends, new.MaxBackends, ErrRestartRequired)
	case old.XDPMode != new.XDPMode:
		return fmt.Errorf("node.xdp_mode %s -> %s: %w", old.XDPMode, new.XDPMode, ErrRestartRequired)
	case !reflect.DeepEqual(old.Sync, new.Sync):
		return fmt.Errorf("node.sync: %w (the sync socket and key are set up at start)", ErrRestartRequired)
	}
	return nil
}

func immutableBGP(old, new *config.BGP) error {
	if !reflect.DeepEqual(old, new) {
		return fmt.Errorf("bgp: %w (the speaker's sessions are set up at start)", ErrRestartRequired)
	}
	return nil
}

// Reload reads the config file again and commits it. A file that does not
// parse or validate changes nothing.
func (c *Controller) Reload() error {
	load := c.load
	if load == nil {
		load = func() (*config.Config, error) { return config.Load(c.path) }
	}
	cfg, err := load()
	if err != nil {
		return err
	}
	return c.Commit(cfg)
}

// Request is work for the loop from outside it (signals, later the API).
type Request int

// Requests.
const (
	RequestReload Request = iota
	RequestDrain
	RequestUndrain
)

// Run serves requests, health changes and the periodic checks until ctx
// ends.
func (c *Controller) Run(ctx context.Context, requests <-chan Request) {
	go c.mon.Run(ctx)
	if c.prober != nil {
		go c.prober.Run(ctx)
	}
	neigh := time.NewTicker(NeighbourInterval)
	defer neigh.Stop()
	nexthop := time.NewTicker(NextHopInterval)
	defer nexthop.Stop()
	self := time.NewTicker(SelfCheckInterval)
	defer self.Stop()
	var probed <-chan struct{} // nil without a prober: never ready
	if c.prober != nil {
		probed = c.prober.Changes()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-requests:
			c.handle(ctx, r)
		case fn := <-c.calls:
			fn()
		case _, ok := <-c.mon.Changes():
			if !ok {
				return
			}
			c.healthChanged()
		case <-self.C:
			c.selfCheck()
		case <-probed:
			c.selfCheck()
		case <-neigh.C:
			c.keepNeighbours()
		case <-nexthop.C:
			c.refreshNextHops()
		}
	}
}

func (c *Controller) handle(ctx context.Context, r Request) {
	switch r {
	case RequestReload:
		if err := c.Reload(); err != nil {
			c.log.Error("reload rejected; still running the previous config", "config", c.path, "error", err)
		}
	case RequestDrain:
		if c.bgp == nil || c.drained {
			return
		}
		c.drained = true
		c.saveOperator()
		c.log.Info("node drain: announcing with GRACEFUL_SHUTDOWN, then withdrawing")
		go func() { // the wait must not hold up the loop
			if err := c.bgp.GracefulShutdown(ctx); err != nil {
				c.log.Error("node drain", "error", err)
			}
		}()
	case RequestUndrain:
		if c.bgp == nil || !c.drained {
			return
		}
		c.drained = false
		c.saveOperator()
		if err := c.bgp.Undrain(); err != nil {
			c.log.Error("node undrain", "error", err)
		}
		c.announce()
		c.log.Info("node undrained: announcing again")
	}
}

// healthChanged re-plans after one or more health transitions (all that
// are pending are taken at once).
func (c *Controller) healthChanged() {
	// The monitor logs each transition; take every pending one at once.
	for more := true; more; {
		select {
		case _, ok := <-c.mon.Changes():
			more = ok
		default:
			more = false
		}
	}
	if c.desired == nil {
		return
	}
	if err := c.apply(c.desired, "health change committed", "health"); err != nil {
		c.log.Error("health change not applied", "error", err)
	}
}

func (c *Controller) selfCheck() {
	err := c.dp.SelfCheck()
	if err == nil {
		err = c.proberError()
	}
	ok := err == nil
	c.info.checkedAt = time.Now()
	if err != nil {
		c.info.lastCheckErr, c.info.lastFailureAt = err.Error(), c.info.checkedAt
	}
	if ok == c.forwarderOK {
		return
	}
	c.forwarderOK = ok
	if !ok {
		c.log.Error("forwarder self-check failed: withdrawing every VIP", "error", err)
	} else {
		c.log.Info("forwarder self-check passes again: announcing")
	}
	c.announce()
}

// Drained reports whether the node is drained (BGP graceful shutdown).
func (c *Controller) Drained() bool { return c.drained }

// ForwarderOK reports the last self-check result.
func (c *Controller) ForwarderOK() bool { return c.forwarderOK }

// keepNeighbours keeps the next hop of every backend resolved, so the
// forwarder's FIB lookup has a MAC for the first packet of any flow.
func (c *Controller) keepNeighbours() {
	if c.desired == nil {
		return
	}
	for _, a := range nextHopAddrs(c.desired) {
		nh, err := kernelnet.ResolveNextHop(a)
		if err == nil && !nh.Local {
			err = kernelnet.KeepNeighbour(nh)
		}
		if err != nil {
			c.log.Warn("next hop not kept resolved; first packets may use the fallback gateway", "address", a, "error", err)
		}
	}
	if plan.UsesNAT(c.desired) {
		c.keepGateways() // methods.go
	}
}

// State returns the last committed state (a value nobody changes).
func (c *Controller) State() *state.State { return c.state }

// Health returns the health monitor (for listings).
func (c *Controller) Health() *health.Monitor { return c.mon }
