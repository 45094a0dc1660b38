// Package plan computes, without I/O, the data plane state that a desired
// config and the backends' health ask for, and how it differs from the
// state before: service and real ids kept across commits, a Maglev table
// per service (built on every CPU, reused while its inputs are unchanged),
// each scheduler's backend list and persistence. The controller's loop
// feeds it and commits what it returns.
package plan

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/state"
)

// Limits are the data plane capacities the planner allocates ids within.
type Limits struct {
	MaxServices uint32 // service ids are 1 .. MaxServices-1
	MaxReals    uint32 // real ids are 1 .. MaxReals-1
}

// PlanStats summarise a plan.
type PlanStats struct {
	Services, Reals, TablesBuilt int
	// Incremental: the plan started from its memory of prev (only what
	// changed was planned).
	Incremental bool
}

// Input is what a plan is computed from.
type Input struct {
	// Desired is not changed by Plan, nor by its caller once given: the
	// Planner keeps references to its services' pools for the next plan,
	// and takes a pool whose backends are the very slice it last planned
	// (the same array and length) as unchanged without comparing them. To
	// change a Desired, give a copy that shares what did not change.
	Desired *config.Desired
	// Healthy is the health checks' verdict on a backend (nil: every
	// backend healthy). A backend without a health check is healthy.
	Healthy func(config.Backend) bool
	// NextHops are the resolved next hops of the backends and of the
	// fragment pool's nodes (an address without one: none).
	NextHops NextHops
}

// NextHops maps addresses to their resolved next hops. Gen names the
// content: whoever changes the map gives the new one another Gen (the map
// itself is not changed once given to a plan).
type NextHops struct {
	Gen    uint64
	ByAddr map[netip.Addr]state.NextHop
}

// Planned is the result of a plan: the new state and how it differs from
// the previous one.
type Planned struct {
	State *state.State
	Diff  state.Diff
	Stats PlanStats
}

// Plan computes, without I/O, the complete data plane state for in, and
// its diff from prev (nil: the empty state). Ids are kept from prev: a VIP
// keeps its service id and a (service, backend) pair its real id for as
// long as both exist, so tracked connections stay valid across commits and
// restarts. New ids are taken round-robin after the highest in use.
//
// Every backend of every pool of a service gets a real, active while the
// backend is healthy: tracked flows continue on any healthy backend still
// configured (draining ones included) and reselect away from a failed one.
// The Maglev table is built from the usable backends of the active pool
// (healthy, weight > 0, not draining; config.DesiredService.UsableBackends),
// named by their canonical address string (maglev.Backend.Name).
func Plan(prev *state.State, in Input, lim Limits) (Planned, error) {
	return NewPlanner(lim).Plan(prev, in)
}

// Planner is Plan with memory, so that a change costs work for what
// changed only:
//   - it reuses the table of a service whose table size, usable backends,
//     weights and real ids are unchanged since its last plan (the same
//     slice, which lets the datapath skip comparing it);
//   - when prev is the state its last plan returned (same generation), a
//     service whose desired settings, service id and health verdicts are
//     those of the last plan keeps its reals and table without being
//     looked at again, and the new state is a clone of prev (sharing what
//     did not change) changed where the inputs did.
//
// Either way the result is the same state: a plan without memory is the
// plan from the empty state, with prev's ids.
type Planner struct {
	lim     Limits
	workers int                    // table builders at once (0: GOMAXPROCS)
	tables  map[string]*tableEntry // by tableKey: the last plan's and this one's
	gen     uint64                 // counts plans
	mem     *memory
}

// memory is what a plan leaves for the next one.
type memory struct {
	gen   uint64 // the generation of the state planned
	nh    NextHops
	svcs  map[state.VIPKey]*svcMemo
	order []*svcMemo // by index in the desired services
}

// svcMemo is one service as last planned.
type svcMemo struct {
	key    state.VIPKey
	in     config.DesiredService // as given (see Input.Desired)
	health []bool                // healthy(b) of each checked backend, in pool order
	allUp  bool                  // no false in health
	svcID  uint32
	rids   []uint32 // the service's reals, in the order first listed
	nat    bool     // some backend is reached by NAT
	entry  *tableEntry
	seen   uint64 // the plan that last saw it
}

// NewPlanner returns a Planner with an empty table cache.
func NewPlanner(lim Limits) *Planner { return &Planner{lim: lim, tables: map[string]*tableEntry{}} }

// SetWorkers sets how many goroutines build a plan's tables at once
// (n <= 0: GOMAXPROCS, the default). The tables are the same whatever n.
func (p *Planner) SetWorkers(n int) { p.workers = n }

// planning is one plan in progress.
type planning struct {
	p          *Planner
	in         Input
	healthy    func(config.Backend) bool
	allHealthy bool
	prev, next *state.State
	last       *memory // nil: no memory of prev, plan every service
	svcIDs     *allocator
	realIDs    *allocator
	prevReals  map[realKey]uint32 // prev's reals by (service, address), made when needed
	bl         builds
	same       []sameTable
	// In an incremental plan: the memos made by this plan, and the tables
	// of the last plan's memos it replaced or dropped (which may now be
	// unused).
	fresh []*svcMemo
	gone  []state.VIPKey
	stale []*tableEntry
}

type realKey struct {
	svc  uint32
	addr netip.Addr
}

// Plan plans in against prev (nil: the empty state). It never changes
// prev. On an error the Planner forgets its memory: the next plan is
// planned without it.
func (p *Planner) Plan(prev *state.State, in Input) (Planned, error) {
	if prev == nil {
		prev = state.Empty()
	}
	last := p.mem
	p.mem = nil
	if last != nil && (prev.Generation == 0 || prev.Generation != last.gen) {
		last = nil
	}
	p.gen++
	pl := &planning{p: p, in: in, healthy: in.Healthy, allHealthy: in.Healthy == nil, prev: prev, last: last}
	pl.bl.workers = p.workers
	if pl.healthy == nil {
		pl.healthy = func(config.Backend) bool { return true }
	}
	defer pl.bl.wait() // on an early return, the workers end
	mem, err := pl.run()
	if err != nil {
		return Planned{}, err
	}
	st := pl.next
	st.Generation = state.NewGeneration()
	mem.gen = st.Generation
	p.mem = mem
	var diff state.Diff
	if pl.last != nil {
		diff = state.CompareAt(prev, st, pl.touched())
	} else {
		diff = state.Compare(prev, st)
	}
	return Planned{
		State: st,
		Diff:  diff,
		Stats: PlanStats{Services: len(st.Services), Reals: st.Reals.Len(), TablesBuilt: len(pl.bl.jobs), Incremental: pl.last != nil},
	}, nil
}

// run makes pl.next and the memory it leaves.
func (pl *planning) run() (*memory, error) {
	d := pl.in.Desired
	if pl.last != nil {
		pl.next = pl.prev.Clone()
	} else {
		pl.next = &state.State{Services: make(map[state.VIPKey]*state.Service, len(d.Services))}
	}
	pl.realIDs = &allocator{max: pl.p.lim.MaxReals, used: newBitset(pl.p.lim.MaxReals), cursor: 1,
		taken: func(id uint32) bool { _, ok := pl.prev.Reals.Get(id); return ok }}
	if top, ok := pl.prev.Reals.Max(); ok {
		pl.realIDs.cursor = top + 1
	}
	mem := &memory{nh: pl.in.NextHops, order: make([]*svcMemo, len(d.Services))}
	nat := false
	for i := range d.Services {
		m, err := pl.service(i)
		if err != nil {
			return nil, err
		}
		mem.order[i] = m
		nat = nat || m.nat
	}
	pl.next.Node = nodeState(d, pl.in.NextHops, nat)
	if pl.last == nil {
		if err := pl.p.finishTables(&pl.bl, pl.same, nil, true); err != nil {
			return nil, err
		}
		mem.svcs = make(map[state.VIPKey]*svcMemo, len(mem.order))
		for _, m := range mem.order {
			mem.svcs[m.key] = m
		}
		return mem, nil
	}
	// The last plan's memory is not used again (Plan dropped it), so its
	// index becomes this one's, changed where this plan changed it.
	pl.dropGone()
	if err := pl.p.finishTables(&pl.bl, pl.same, pl.stale, false); err != nil {
		return nil, err
	}
	mem.svcs = pl.last.svcs
	for _, m := range pl.fresh {
		mem.svcs[m.key] = m
	}
	pl.refreshNextHops(mem.svcs)
	return mem, nil
}

// service plans desired service i and returns its memo.
func (pl *planning) service(i int) (*svcMemo, error) {
	s := &pl.in.Desired.Services[i]
	key := state.VIPKey{Addr: s.VIP, Port: s.Port, Proto: uint8(s.Proto)}
	old := pl.memoOf(i, key)
	if old != nil && old.seen == pl.p.gen {
		return nil, pl.twoOnKey(i, key)
	}
	if _, planned := pl.next.Services[key]; old == nil && planned {
		return nil, pl.twoOnKey(i, key)
	}
	if old != nil && sameService(&old.in, s) && pl.sameHealth(old, s) {
		old.seen = pl.p.gen
		old.entry.gen = pl.p.gen
		if len(s.Pools) > 0 && &old.in.Pools[0] != &s.Pools[0] {
			old.in = *s // equal, in other memory: the next plan finds these pools by identity
		}
		return old, nil // unchanged: next holds it as prev does
	}
	id, err := pl.serviceID(key, old)
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", s.Name, err)
	}
	prevID := pl.prevRealIDs(old, id)
	if old != nil {
		old.seen = pl.p.gen
		pl.stale = append(pl.stale, old.entry)
		for _, rid := range old.rids {
			pl.next.Reals.Delete(rid) // set again below if the backend stays
		}
	}
	m := &svcMemo{key: key, in: *s, health: healthOf(s, pl.healthy), svcID: id, seen: pl.p.gen,
		nat: serviceUsesNAT(s)}
	m.allUp = !slices.Contains(m.health, false)
	byAddr := make(map[netip.Addr]uint32, backendCount(s))
	for _, pool := range s.Pools {
		for _, b := range pool.Backends {
			if _, dup := byAddr[b.Addr]; dup {
				continue
			}
			rid, ok := prevID(b.Addr)
			if !ok {
				if rid, err = pl.realIDs.next(); err != nil {
					return nil, fmt.Errorf("service %s, backend %s: %w", s.Name, b.Addr, err)
				}
			}
			byAddr[b.Addr] = rid
			m.rids = append(m.rids, rid)
			pl.next.Reals.Set(rid, state.Real{Addr: b.Addr, SvcID: id, Active: b.HealthCheck == "" || pl.healthy(b),
				Encap: encapOf(b.Encap), Port: b.Port, NextHop: pl.in.NextHops.ByAddr[b.Addr]})
		}
	}
	svc := &state.Service{SvcID: id, Encap: encapOf(s.Encap), Fragments: s.Fragments}
	usable := s.UsableBackends(pl.healthy)
	if svc.Sched, err = schedOf(s, usable, byAddr); err != nil { // sched.go
		return nil, fmt.Errorf("service %s: %w", s.Name, err)
	}
	svc.Sched.Proto = uint8(s.Proto)
	if err = persistOf(&svc.Sched, s, id, usable, byAddr); err != nil { // sched.go
		return nil, fmt.Errorf("service %s: %w", s.Name, err)
	}
	tk := tableKey(s.TableSize, usable, byAddr)
	m.entry = pl.p.useTable(svc, tk, buildJob{svc: svc, name: s.Name, usable: usable, m: s.TableSize, ids: byAddr}, &pl.bl, &pl.same)
	pl.next.Services[key] = svc
	if pl.last != nil {
		pl.fresh = append(pl.fresh, m)
	}
	return m, nil
}

// twoOnKey is the error for desired service i, whose key an earlier
// service has.
func (pl *planning) twoOnKey(i int, key state.VIPKey) error {
	d := pl.in.Desired
	for j := range i {
		if k := d.Services[j]; k.VIP == key.Addr && k.Port == key.Port && uint8(k.Proto) == key.Proto {
			return fmt.Errorf("services %s and %s: both on %s", k.Name, d.Services[i].Name, key)
		}
	}
	return fmt.Errorf("service %s: another service on %s", d.Services[i].Name, key)
}

// memoOf is the memory of service i at key: usually the service at the
// same place last time.
func (pl *planning) memoOf(i int, key state.VIPKey) *svcMemo {
	if pl.last == nil {
		return nil
	}
	if i < len(pl.last.order) && pl.last.order[i].key == key {
		return pl.last.order[i]
	}
	return pl.last.svcs[key]
}

// sameHealth reports whether the health verdicts of s's checked backends
// are those old was planned with.
func (pl *planning) sameHealth(old *svcMemo, s *config.DesiredService) bool {
	if pl.allHealthy {
		return old.allUp
	}
	return sameHealth(old.health, s, pl.healthy)
}

// serviceID is the id of the service at key: its id in prev, else a new
// one after the highest in use.
func (pl *planning) serviceID(key state.VIPKey, old *svcMemo) (uint32, error) {
	if old != nil {
		return old.svcID, nil
	}
	if s, ok := pl.prev.Services[key]; ok {
		return s.SvcID, nil
	}
	if pl.svcIDs == nil {
		pl.svcIDs = newAllocator(pl.p.lim.MaxServices)
		for _, s := range pl.prev.Services {
			pl.svcIDs.keep(s.SvcID)
		}
	}
	return pl.svcIDs.next()
}

// prevRealIDs returns the real id prev gives a backend of service id,
// by address.
func (pl *planning) prevRealIDs(old *svcMemo, id uint32) func(netip.Addr) (uint32, bool) {
	if old != nil {
		ids := make(map[netip.Addr]uint32, len(old.rids))
		for _, rid := range old.rids {
			ids[pl.prev.Reals.At(rid).Addr] = rid
		}
		return func(a netip.Addr) (uint32, bool) { rid, ok := ids[a]; return rid, ok }
	}
	if pl.last != nil { // a service new since the last plan: prev has no reals of it
		return func(netip.Addr) (uint32, bool) { return 0, false }
	}
	if pl.prevReals == nil {
		pl.prevReals = make(map[realKey]uint32, pl.prev.Reals.Len())
		for rid, r := range pl.prev.Reals.All() {
			pl.prevReals[realKey{r.SvcID, r.Addr}] = rid
		}
	}
	return func(a netip.Addr) (uint32, bool) { rid, ok := pl.prevReals[realKey{id, a}]; return rid, ok }
}

// touched returns the keys of the services an incremental plan planned
// or dropped: every other service of its state is prev's.
func (pl *planning) touched() []state.VIPKey {
	keys := make([]state.VIPKey, 0, len(pl.fresh)+len(pl.gone))
	for _, m := range pl.fresh {
		keys = append(keys, m.key)
	}
	return append(keys, pl.gone...)
}

// dropGone removes the services of the last plan that are not desired any
// more, with their reals, from the state and from the last plan's index.
func (pl *planning) dropGone() {
	for _, old := range pl.last.order {
		if old.seen == pl.p.gen {
			continue
		}
		delete(pl.next.Services, old.key)
		delete(pl.last.svcs, old.key)
		pl.gone = append(pl.gone, old.key)
		pl.stale = append(pl.stale, old.entry)
		for _, rid := range old.rids {
			pl.next.Reals.Delete(rid)
		}
	}
}

// refreshNextHops gives the reals of unchanged services the next hops of
// this plan's input where they differ from the last plan's.
func (pl *planning) refreshNextHops(svcs map[state.VIPKey]*svcMemo) {
	old, cur := pl.last.nh, pl.in.NextHops
	if old.Gen == cur.Gen {
		return
	}
	changed := map[netip.Addr]bool{}
	for a, nh := range cur.ByAddr {
		if o, ok := old.ByAddr[a]; !ok || o != nh {
			changed[a] = true
		}
	}
	for a := range old.ByAddr {
		if _, ok := cur.ByAddr[a]; !ok {
			changed[a] = true
		}
	}
	if len(changed) == 0 {
		return
	}
	for _, m := range svcs {
		for _, rid := range m.rids {
			r, ok := pl.next.Reals.Get(rid)
			if ok && changed[r.Addr] && r.NextHop != cur.ByAddr[r.Addr] {
				r.NextHop = cur.ByAddr[r.Addr]
				pl.next.Reals.Set(rid, r)
			}
		}
	}
}
