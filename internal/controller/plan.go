package controller

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"runtime"
	"slices"
	"sync"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/maglev"
)

// Limits are the data plane capacities the planner allocates ids within.
type Limits struct {
	MaxServices uint32 // service ids are 1 .. MaxServices-1
	MaxReals    uint32 // real ids are 1 .. MaxReals-1
}

// PlanStats summarise a plan.
type PlanStats struct {
	Services, Reals, TablesBuilt int
}

type realKey struct {
	svc  uint32
	addr netip.Addr
}

// Plan computes, without I/O, the complete data plane state for desired.
// Ids are kept from prev (the state in the maps): a VIP keeps its service
// id and a (service, backend) pair its real id for as long as both exist,
// so tracked connections stay valid across commits and restarts. New ids
// are taken round-robin after the highest in use, so an id freed by one
// commit is not handed to another backend straight away (a tracked flow of
// the old backend must not land on the new one).
//
// Every backend of every pool of a service gets a real, active while the
// backend is healthy: tracked flows continue on any healthy backend still
// configured (draining ones included) and reselect away from a failed one.
// The Maglev table is built from the usable backends of the active pool
// (healthy, weight > 0, not draining; config.DesiredService.UsableBackends),
// named by their canonical address string (maglev.Backend.Name). A backend
// without a health check is always healthy; a nil healthy counts every
// backend healthy.
func Plan(desired *config.Desired, prev *datapath.State, lim Limits, healthy func(config.Backend) bool) (*datapath.State, PlanStats, error) {
	p := NewPlanner(lim)
	return p.Plan(desired, prev, healthy)
}

// Planner is Plan with memory. It reuses the table of a service whose
// table size, usable backends, weights and real ids are unchanged since
// its last plan (the same slice, which lets the datapath skip comparing
// it), so a change to one service costs one Maglev population.
//
// When prev is the state its last plan returned (the caller applied it),
// the Planner also plans incrementally: a service whose desired settings,
// service id and health verdicts are those of the last plan keeps its
// reals and table without being looked at again, so a change to one
// service costs work for that service only, not for every real. The
// result is the one a full plan gives (same ids, same tables), except
// that the reals of unchanged services keep the values they have in
// prev (a NextHop the caller filled in included). The returned State
// then carries a datapath.Delta naming what differs from prev, and takes
// over prev's Reals map: prev.Reals is changed in place (on an error it
// is restored), so prev no longer describes the maps on its own.
type Planner struct {
	lim    Limits
	tables map[string]*tableEntry // by tableKey: the last plan's and this one's
	gen    uint64                 // counts plans
	last   *memory
}

// tableEntry is a table in the Planner's cache.
type tableEntry struct {
	table []uint32 // nil while being built
	gen   uint64   // the last plan that used it
}

// useTable gives svc the table of key tk: the cached one if the last
// plan or this one used it, else one built by a new job (j) or by
// another service's job (same).
func (p *Planner) useTable(svc *datapath.Service, tk string, j buildJob, bl *builds, same *[]sameTable) *tableEntry {
	e := p.tables[tk]
	switch {
	case e != nil && e.table != nil && e.gen+1 >= p.gen:
		e.gen = p.gen
		svc.Table = e.table
	case e != nil && e.gen == p.gen:
		*same = append(*same, sameTable{svc, e}) // built by another service's job
	default:
		e = &tableEntry{gen: p.gen}
		p.tables[tk] = e
		j.entry = e
		bl.add(&j)
	}
	return e
}

// finishTables waits for the jobs' tables, hands them to the services
// that share them and drops the tables this plan did not use from the
// cache.
func (p *Planner) finishTables(bl *builds, same []sameTable) error {
	if err := bl.wait(); err != nil {
		return err
	}
	for _, j := range bl.jobs {
		j.entry.table = j.svc.Table
	}
	for _, x := range same {
		x.svc.Table = x.entry.table
	}
	for k, e := range p.tables {
		if e.gen != p.gen {
			delete(p.tables, k)
		}
	}
	return nil
}

// memory is what a plan leaves for the next one to plan incrementally.
type memory struct {
	out   *datapath.State // the state returned
	svcs  map[datapath.VIPKey]*svcMemo
	order []*svcMemo // by index in the desired services
	used  bitset     // the ids of out.Reals
	gen   uint64     // counts incremental plans
}

// svcMemo is one service as last planned.
type svcMemo struct {
	key    datapath.VIPKey
	in     config.DesiredService // a deep copy
	health []bool                // healthy(b) of each checked backend, in pool order
	svcID  uint32
	rids   []uint32 // the service's reals, in the order first listed
	entry  *tableEntry
	table  []uint32
	seen   uint64 // plan generation that last saw it
}

// NewPlanner returns a Planner with an empty table cache.
func NewPlanner(lim Limits) *Planner { return &Planner{lim: lim, tables: map[string]*tableEntry{}} }

// Plan is the package-level Plan, reusing cached tables and, when prev is
// the state of its last plan, planning only the services that changed.
func (p *Planner) Plan(desired *config.Desired, prev *datapath.State, healthy func(config.Backend) bool) (*datapath.State, PlanStats, error) {
	last := p.last
	p.last = nil // a failed plan leaves no memory
	p.gen++
	allHealthy := healthy == nil
	if healthy == nil {
		healthy = func(config.Backend) bool { return true }
	}
	if last != nil && prev != nil && prev == last.out {
		return p.incremental(desired, prev, last, healthy, allHealthy)
	}
	return p.full(desired, prev, healthy)
}

// nodeState is the node part of the data plane state.
func nodeState(desired *config.Desired) datapath.Node {
	return datapath.Node{
		Addr4: desired.Node.Address, Addr6: desired.Node.Address6,
		GatewayMAC:   desired.Node.GatewayMAC,
		FloodSynRate: desired.Node.FloodSynRate,
		ICMPEchoRate: desired.Node.ICMPEchoRate,
		Fragments:    fragPool(desired.Node),
		TraceRate:    desired.Node.TraceRate,
		Timeouts: datapath.Timeouts{
			TCPSyn: desired.Node.Timeouts.TCPSyn, TCP: desired.Node.Timeouts.TCP,
			TCPFin: desired.Node.Timeouts.TCPFin, UDP: desired.Node.Timeouts.UDP,
		},
	}
}

// full plans every service from scratch against prev.
func (p *Planner) full(desired *config.Desired, prev *datapath.State, healthy func(config.Backend) bool) (*datapath.State, PlanStats, error) {
	lim := p.lim
	var stats PlanStats
	nb := 0 // backends listed: at most that many reals
	for i := range desired.Services {
		nb += backendCount(&desired.Services[i])
	}
	st := &datapath.State{
		Node:     nodeState(desired),
		Services: make(map[datapath.VIPKey]*datapath.Service, len(desired.Services)),
		Reals:    make(map[uint32]datapath.Real, nb),
	}
	if prev == nil {
		prev = &datapath.State{}
	}

	svcIDs := newAllocator(lim.MaxServices)
	for _, s := range prev.Services {
		svcIDs.keep(s.SvcID)
	}
	realIDs := newAllocator(lim.MaxReals)
	prevReal := make(map[realKey]uint32, len(prev.Reals))
	for id, r := range prev.Reals {
		prevReal[realKey{r.SvcID, r.Addr}] = id
		realIDs.keep(id)
	}

	// Keep ids of surviving VIPs first, so new VIPs never take them.
	keys := make([]datapath.VIPKey, len(desired.Services))
	ids := make([]uint32, len(desired.Services))
	for i, s := range desired.Services {
		keys[i] = datapath.VIPKey{Addr: s.VIP, Port: s.Port, Proto: uint8(s.Proto)}
		if p, ok := prev.Services[keys[i]]; ok {
			ids[i] = p.SvcID
		}
	}
	liveReals := newBitset(lim.MaxReals) // ids given to a real of this plan
	var (
		bl    builds
		same  []sameTable
		memos = make([]*svcMemo, len(desired.Services))
	)
	defer bl.wait() // on an early return, the workers end
	for i := range desired.Services {
		s := &desired.Services[i]
		if ids[i] == 0 {
			id, err := svcIDs.next()
			if err != nil {
				return nil, stats, fmt.Errorf("service %s: %w", s.Name, err)
			}
			ids[i] = id
		}
		svc := &datapath.Service{SvcID: ids[i], Encap: encapOf(s.Encap), Fragments: s.Fragments}
		m := &svcMemo{key: keys[i], in: cloneService(s), health: healthOf(s, healthy), svcID: svc.SvcID}
		memos[i] = m
		byAddr := make(map[netip.Addr]uint32, backendCount(s))
		for _, p := range s.Pools {
			for _, b := range p.Backends {
				if _, dup := byAddr[b.Addr]; dup {
					continue
				}
				rk := realKey{svc.SvcID, b.Addr}
				rid, ok := prevReal[rk]
				if !ok || liveReals.has(rid) {
					var err error
					if rid, err = realIDs.next(); err != nil {
						return nil, stats, fmt.Errorf("service %s, backend %s: %w", s.Name, b.Addr, err)
					}
				}
				liveReals.set(rid)
				byAddr[b.Addr] = rid
				m.rids = append(m.rids, rid)
				st.Reals[rid] = datapath.Real{Addr: b.Addr, SvcID: svc.SvcID, Active: b.HealthCheck == "" || healthy(b), Encap: encapOf(b.Encap)}
			}
		}
		usable := s.UsableBackends(healthy)
		tk := tableKey(s.TableSize, usable, byAddr)
		m.entry = p.useTable(svc, tk, buildJob{svc: svc, name: s.Name, usable: usable, m: s.TableSize, ids: byAddr}, &bl, &same)
		st.Services[keys[i]] = svc
	}
	if err := p.finishTables(&bl, same); err != nil {
		return nil, stats, err
	}
	stats.TablesBuilt = len(bl.jobs)
	stats.Services = len(st.Services)
	stats.Reals = len(st.Reals)

	mem := &memory{out: st, svcs: make(map[datapath.VIPKey]*svcMemo, len(memos)), order: memos, used: newBitset(lim.MaxReals)}
	for i, m := range memos {
		m.table = st.Services[keys[i]].Table
		mem.svcs[keys[i]] = m
	}
	for id := range st.Reals {
		mem.used.set(id)
	}
	p.last = mem
	return st, stats, nil
}

// incremental plans desired against prev = last.out: the result is the
// one full gives, but services whose inputs are unchanged are reused
// from last, and the state carries the delta from prev.
func (p *Planner) incremental(desired *config.Desired, prev *datapath.State, last *memory, healthy func(config.Backend) bool, allHealthy bool) (*datapath.State, PlanStats, error) {
	lim := p.lim
	var stats PlanStats
	st := &datapath.State{
		Node:     nodeState(desired),
		Services: make(map[datapath.VIPKey]*datapath.Service, len(desired.Services)),
	}
	delta := &datapath.Delta{Base: prev}

	// Service ids as full assigns them: survivors keep theirs (the one in
	// their memo, as in prev), new VIPs take ids round-robin after the
	// highest in use (the allocator is made when one is needed).
	var svcIDs *allocator
	// Real ids: every id of prev is kept; the allocator works on a copy of
	// the set, the memory's own set is updated below.
	realIDs := &allocator{max: lim.MaxReals, used: last.used.clone(), cursor: 1}
	if top, ok := last.used.highest(); ok {
		realIDs.cursor = top + 1
	}
	gen := last.gen + 1

	// prev.Reals becomes the new state's reals, changed in place; journal
	// holds what each change replaced, undone if the plan fails.
	reals := prev.Reals
	type undo struct {
		id  uint32
		r   datapath.Real
		had bool
	}
	var journal []undo
	setReal := func(id uint32, r datapath.Real) {
		o, had := reals[id]
		journal = append(journal, undo{id, o, had})
		reals[id] = r
	}
	delReal := func(id uint32) {
		if o, had := reals[id]; had {
			journal = append(journal, undo{id, o, true})
			delete(reals, id)
		}
	}
	rollback := func() {
		for i := len(journal) - 1; i >= 0; i-- {
			if u := journal[i]; u.had {
				reals[u.id] = u.r
			} else {
				delete(reals, u.id)
			}
		}
	}
	var (
		bl      builds
		same    []sameTable
		memos   = make([]*svcMemo, len(desired.Services))
		keys    = make([]datapath.VIPKey, len(desired.Services))
		freed   []uint32 // ids of reals that left, for the memory's set
		added   []uint32
		changed []int // indexes of the services planned again
	)
	defer bl.wait()
	for i := range desired.Services {
		s := &desired.Services[i]
		key := datapath.VIPKey{Addr: s.VIP, Port: s.Port, Proto: uint8(s.Proto)}
		keys[i] = key
		// The memo of key: usually the service at the same place last time.
		var old *svcMemo
		if i < len(last.order) && last.order[i].key == key {
			old = last.order[i]
		} else {
			old = last.svcs[key]
		}
		var id uint32
		if old != nil {
			id = old.svcID
		} else {
			if svcIDs == nil {
				svcIDs = newAllocator(lim.MaxServices)
				for _, s := range prev.Services {
					svcIDs.keep(s.SvcID)
				}
			}
			var err error
			if id, err = svcIDs.next(); err != nil {
				rollback()
				return nil, stats, fmt.Errorf("service %s: %w", s.Name, err)
			}
		}
		svc := &datapath.Service{SvcID: id, Encap: encapOf(s.Encap), Fragments: s.Fragments}
		n := len(st.Services)
		st.Services[key] = svc
		if len(st.Services) == n {
			// Two services on one key (Validate rejects it): full plans
			// what that means.
			// The tables this plan started are not finished in the
			// cache (finishTables did not run): full plans as a new
			// generation, so that it builds them again.
			rollback()
			bl.wait()
			p.gen++
			return p.full(desired, prev, healthy)
		}
		if old != nil && sameService(&old.in, s) &&
			(allHealthy && !slices.Contains(old.health, false) || !allHealthy && sameHealth(old.health, s, healthy)) {
			old.seen = gen
			memos[i] = old
			svc.Table = old.table
			old.entry.gen = p.gen
			continue
		}
		// A changed service: its reals as full makes them. The only reals
		// of prev with this service id are the ones old lists.
		prevIDs := map[netip.Addr]uint32{}
		if old != nil {
			old.seen = gen
			for _, rid := range old.rids {
				prevIDs[reals[rid].Addr] = rid
			}
			for _, rid := range old.rids {
				delta.Reals = append(delta.Reals, rid)
				delReal(rid)
				freed = append(freed, rid)
			}
		}
		delta.Services = append(delta.Services, key)
		changed = append(changed, i)
		m := &svcMemo{key: key, in: cloneService(s), health: healthOf(s, healthy), svcID: id, seen: gen}
		memos[i] = m
		byAddr := make(map[netip.Addr]uint32, backendCount(s))
		for _, pl := range s.Pools {
			for _, b := range pl.Backends {
				if _, dup := byAddr[b.Addr]; dup {
					continue
				}
				rid, ok := prevIDs[b.Addr]
				if !ok {
					var err error
					if rid, err = realIDs.next(); err != nil {
						rollback()
						return nil, stats, fmt.Errorf("service %s, backend %s: %w", s.Name, b.Addr, err)
					}
					added = append(added, rid)
				}
				byAddr[b.Addr] = rid
				m.rids = append(m.rids, rid)
				delta.Reals = append(delta.Reals, rid)
				setReal(rid, datapath.Real{Addr: b.Addr, SvcID: id, Active: b.HealthCheck == "" || healthy(b), Encap: encapOf(b.Encap)})
			}
		}
		usable := s.UsableBackends(healthy)
		tk := tableKey(s.TableSize, usable, byAddr)
		m.entry = p.useTable(svc, tk, buildJob{svc: svc, name: s.Name, usable: usable, m: s.TableSize, ids: byAddr}, &bl, &same)
	}
	// Services that left take their reals with them.
	var gone []datapath.VIPKey
	for key, old := range last.svcs {
		if old.seen == gen {
			continue
		}
		gone = append(gone, key)
		delta.Services = append(delta.Services, key)
		for _, rid := range old.rids {
			delta.Reals = append(delta.Reals, rid)
			delReal(rid)
			freed = append(freed, rid)
		}
	}
	if err := p.finishTables(&bl, same); err != nil {
		rollback()
		return nil, stats, err
	}
	stats.TablesBuilt = len(bl.jobs)
	stats.Services = len(st.Services)
	st.Reals = reals
	stats.Reals = len(st.Reals)
	st.Delta = delta

	// The memory is last's, updated: last is not used again.
	mem := &memory{out: st, svcs: last.svcs, order: memos, used: last.used}
	for _, key := range gone {
		delete(mem.svcs, key)
	}
	for _, rid := range freed {
		if _, kept := reals[rid]; !kept {
			mem.used.clear(rid)
		}
	}
	for _, rid := range added {
		mem.used.set(rid)
	}
	for _, i := range changed {
		memos[i].table = st.Services[keys[i]].Table
		mem.svcs[keys[i]] = memos[i]
	}
	mem.gen = gen
	p.last = mem
	return st, stats, nil
}

// sameTable is a service whose table another service's job builds.
type sameTable struct {
	svc   *datapath.Service
	entry *tableEntry
}

// buildJob is one Maglev population the plan needs.
type buildJob struct {
	svc    *datapath.Service
	name   string
	entry  *tableEntry
	usable []config.Backend
	m      uint32
	ids    map[netip.Addr]uint32
	err    error
}

// builds runs the Maglev populations a plan needs on every CPU, starting
// with the first one listed while the plan goes on (population is the
// bulk of a cold plan, which lists thousands).
type builds struct {
	jobs []*buildJob
	ch   chan *buildJob // nil until the first job
	wg   sync.WaitGroup
}

// add lists j and hands it to a worker.
func (bl *builds) add(j *buildJob) {
	if bl.ch == nil {
		bl.ch = make(chan *buildJob, 64)
		for range runtime.GOMAXPROCS(0) {
			bl.wg.Go(func() {
				var tb tableBuilder
				for j := range bl.ch {
					t, err := tb.build(j.usable, j.m, j.ids)
					if err != nil {
						j.err = fmt.Errorf("service %s: %w", j.name, err)
						continue
					}
					j.svc.Table = t
				}
			})
		}
	}
	bl.jobs = append(bl.jobs, j)
	bl.ch <- j
}

// wait waits for every job listed and returns their errors, in the order
// listed. It may be called more than once.
func (bl *builds) wait() error {
	if bl.ch != nil {
		close(bl.ch)
		bl.wg.Wait()
		bl.ch = nil
	}
	var errs []error
	for _, j := range bl.jobs {
		if j.err != nil {
			errs = append(errs, j.err)
		}
	}
	return errors.Join(errs...)
}

// tableKey identifies a table by everything it is computed from: m, then
// per usable backend its address (16 bytes, and whether it is IPv4), weight
// and real id, all fixed width.
func tableKey(m uint32, usable []config.Backend, ids map[netip.Addr]uint32) string {
	b := make([]byte, 0, 4+len(usable)*25)
	b = binary.LittleEndian.AppendUint32(b, m)
	for _, u := range usable {
		a := u.Addr.As16()
		b = append(b, a[:]...)
		if u.Addr.Is4() {
			b = append(b, 4)
		} else {
			b = append(b, 6)
		}
		b = binary.LittleEndian.AppendUint32(b, u.Weight)
		b = binary.LittleEndian.AppendUint32(b, ids[u.Addr])
	}
	return string(b)
}

// tableBuilder builds tables, keeping its working memory from one to the
// next (one per goroutine).
type tableBuilder struct {
	mb   maglev.Builder
	bs   []maglev.Backend
	rids []uint32
}

// build returns the Maglev table over usable as real ids; all zero (drop)
// when there is no usable backend. The backends are named by their
// canonical address string (maglev.Backend.Name).
func (tb *tableBuilder) build(usable []config.Backend, m uint32, ids map[netip.Addr]uint32) ([]uint32, error) {
	out := make([]uint32, m)
	if len(usable) == 0 {
		return out, nil
	}
	tb.bs, tb.rids = tb.bs[:0], tb.rids[:0]
	for _, b := range usable {
		tb.bs = append(tb.bs, maglev.Backend{Name: b.Addr.String(), Weight: b.Weight})
		tb.rids = append(tb.rids, ids[b.Addr])
	}
	if err := tb.mb.Fill(out, tb.bs, tb.rids, m); err != nil {
		return nil, err
	}
	return out, nil
}

// fragPool sorts node.fragment_pool (every node then agrees on the order)
// and finds this node in it (validation guarantees it is there).
func fragPool(n config.Node) datapath.FragPool {
	addrs := slices.Clone(n.FragmentPool)
	slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.Compare(b) })
	var p datapath.FragPool
	for i, a := range addrs {
		if a == n.Address || a == n.Address6 {
			p.Self = i
		}
		p.Peers = append(p.Peers, datapath.FragPeer{Addr: a})
	}
	return p
}

func encapOf(e config.Encap) datapath.Encap {
	switch e {
	case config.EncapGRE:
		return datapath.EncapGRE
	case config.EncapIPIP:
		return datapath.EncapIPIP
	}
	return datapath.EncapDefault
}

// ErrExhausted is wrapped when no id is free.
var ErrExhausted = errors.New("no free id (raise the capacity)")

// allocator hands out ids 1..max-1, round-robin after the highest kept.
type allocator struct {
	max    uint32
	used   bitset
	cursor uint32
}

func newAllocator(max uint32) *allocator {
	return &allocator{max: max, used: newBitset(max), cursor: 1}
}

func (a *allocator) keep(id uint32) {
	a.used.set(id)
	if id >= a.cursor {
		a.cursor = id + 1
	}
}

func (a *allocator) next() (uint32, error) {
	for i := uint32(0); i < a.max; i++ {
		id := a.cursor
		if id == 0 || id >= a.max {
			id = 1
		}
		a.cursor = id + 1
		if !a.used.has(id) {
			a.used.set(id)
			return id, nil
		}
	}
	return 0, ErrExhausted
}

// bitset is a set of ids; ids beyond its size grow it.
type bitset []uint64

func newBitset(n uint32) bitset { return make(bitset, (uint64(n)+63)/64) }

func (b *bitset) set(id uint32) {
	w := int(id >> 6)
	if w >= len(*b) {
		*b = append(*b, make(bitset, w+1-len(*b))...)
	}
	(*b)[w] |= 1 << (id & 63)
}

func (b bitset) clear(id uint32) {
	if w := int(id >> 6); w < len(b) {
		b[w] &^= 1 << (id & 63)
	}
}

func (b bitset) has(id uint32) bool {
	w := int(id >> 6)
	return w < len(b) && b[w]&(1<<(id&63)) != 0
}

func (b bitset) clone() bitset { return slices.Clone(b) }

// highest returns the largest id in b.
func (b bitset) highest() (uint32, bool) {
	for w := len(b) - 1; w >= 0; w-- {
		if b[w] != 0 {
			return uint32(w)*64 + uint32(63-bits.LeadingZeros64(b[w])), true
		}
	}
	return 0, false
}

// backendCount returns the number of backends s's pools list.
func backendCount(s *config.DesiredService) int {
	n := 0
	for _, p := range s.Pools {
		n += len(p.Backends)
	}
	return n
}

// cloneService returns a copy of s sharing no memory with it.
func cloneService(s *config.DesiredService) config.DesiredService {
	c := *s
	c.Pools = make([]config.DesiredPool, len(s.Pools))
	for i, p := range s.Pools {
		c.Pools[i] = config.DesiredPool{Name: p.Name, Backends: slices.Clone(p.Backends)}
	}
	return c
}

// sameService reports whether a and b are equal in every field.
func sameService(a, b *config.DesiredService) bool {
	if a.Name != b.Name || a.VIP != b.VIP || a.Port != b.Port || a.Proto != b.Proto ||
		a.Scheduler != b.Scheduler || a.TableSize != b.TableSize || a.Encap != b.Encap ||
		a.MinHealthy != b.MinHealthy || a.WithdrawWhenDown != b.WithdrawWhenDown || a.Fragments != b.Fragments ||
		len(a.Pools) != len(b.Pools) {
		return false
	}
	for i := range a.Pools {
		if a.Pools[i].Name != b.Pools[i].Name || !slices.Equal(a.Pools[i].Backends, b.Pools[i].Backends) {
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
