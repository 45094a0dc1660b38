package controller

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

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

// Planner is Plan with memory: it reuses the table of a service whose
// table size, usable backends, weights and real ids are unchanged since
// its last plan (the same slice, which lets the datapath skip comparing
// it), so a change to one service costs one Maglev population.
type Planner struct {
	lim    Limits
	tables map[string][]uint32
}

// NewPlanner returns a Planner with an empty table cache.
func NewPlanner(lim Limits) *Planner { return &Planner{lim: lim, tables: map[string][]uint32{}} }

// Plan is the package-level Plan, reusing cached tables.
func (p *Planner) Plan(desired *config.Desired, prev *datapath.State, healthy func(config.Backend) bool) (*datapath.State, PlanStats, error) {
	lim := p.lim
	used := map[string][]uint32{}
	defer func() { p.tables = used }()
	if healthy == nil {
		healthy = func(config.Backend) bool { return true }
	}
	var stats PlanStats
	st := &datapath.State{
		Node: datapath.Node{
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
		},
		Services: map[datapath.VIPKey]*datapath.Service{},
		Reals:    map[uint32]datapath.Real{},
	}
	if prev == nil {
		prev = &datapath.State{}
	}

	svcIDs := newAllocator(lim.MaxServices)
	for _, s := range prev.Services {
		svcIDs.keep(s.SvcID)
	}
	realIDs := newAllocator(lim.MaxReals)
	prevReal := map[realKey]uint32{}
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
	liveReals := map[uint32]bool{}
	var (
		jobs []buildJob
		same []sameTable
	)
	for i, s := range desired.Services {
		if ids[i] == 0 {
			id, err := svcIDs.next()
			if err != nil {
				return nil, stats, fmt.Errorf("service %s: %w", s.Name, err)
			}
			ids[i] = id
		}
		svc := &datapath.Service{SvcID: ids[i], Encap: encapOf(s.Encap), Fragments: s.Fragments}
		byAddr := map[netip.Addr]uint32{}
		for _, p := range s.Pools {
			for _, b := range p.Backends {
				if _, dup := byAddr[b.Addr]; dup {
					continue
				}
				rk := realKey{svc.SvcID, b.Addr}
				rid, ok := prevReal[rk]
				if !ok || liveReals[rid] {
					var err error
					if rid, err = realIDs.next(); err != nil {
						return nil, stats, fmt.Errorf("service %s, backend %s: %w", s.Name, b.Addr, err)
					}
				}
				liveReals[rid] = true
				byAddr[b.Addr] = rid
				st.Reals[rid] = datapath.Real{Addr: b.Addr, SvcID: svc.SvcID, Active: b.HealthCheck == "" || healthy(b), Encap: encapOf(b.Encap)}
			}
		}
		usable := s.UsableBackends(healthy)
		tk := tableKey(s.TableSize, usable, byAddr)
		if table, ok := p.tables[tk]; ok {
			svc.Table = table
			used[tk] = table
		} else if _, ok := used[tk]; ok {
			same = append(same, sameTable{svc, tk}) // built by another service's job
		} else {
			used[tk] = nil // built below
			jobs = append(jobs, buildJob{svc: svc, name: s.Name, key: tk, usable: usable, m: s.TableSize, ids: byAddr})
		}
		st.Services[keys[i]] = svc
	}
	if err := buildTables(jobs); err != nil {
		return nil, stats, err
	}
	for _, j := range jobs {
		used[j.key] = j.svc.Table
	}
	for _, x := range same {
		x.svc.Table = used[x.key]
	}
	stats.TablesBuilt = len(jobs)
	stats.Services = len(st.Services)
	stats.Reals = len(st.Reals)
	return st, stats, nil
}

// sameTable is a service whose table another service's job builds.
type sameTable struct {
	svc *datapath.Service
	key string
}

// buildJob is one Maglev population the plan needs.
type buildJob struct {
	svc    *datapath.Service
	name   string
	key    string
	usable []config.Backend
	m      uint32
	ids    map[netip.Addr]uint32
}

// buildTables populates the jobs' tables on every CPU (Maglev population is
// the bulk of a cold plan).
func buildTables(jobs []buildJob) error {
	workers := min(runtime.GOMAXPROCS(0), len(jobs))
	errs := make([]error, len(jobs))
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				j := &jobs[i]
				t, err := buildTable(j.usable, j.m, j.ids)
				if err != nil {
					errs[i] = fmt.Errorf("service %s: %w", j.name, err)
					continue
				}
				j.svc.Table = t
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// tableKey identifies a table by everything it is computed from.
func tableKey(m uint32, usable []config.Backend, ids map[netip.Addr]uint32) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d", m)
	for _, u := range usable {
		fmt.Fprintf(&b, "|%s/%d/%d", u.Addr, u.Weight, ids[u.Addr])
	}
	return b.String()
}

// buildTable returns the Maglev table over usable as real ids; all zero
// (drop) when there is no usable backend.
func buildTable(usable []config.Backend, m uint32, ids map[netip.Addr]uint32) ([]uint32, error) {
	out := make([]uint32, m)
	if len(usable) == 0 {
		return out, nil
	}
	bs := make([]maglev.Backend, len(usable))
	for i, b := range usable {
		bs[i] = maglev.Backend{Name: b.Addr.String(), Weight: b.Weight}
	}
	t, err := maglev.Build(bs, m)
	if err != nil {
		return nil, err
	}
	rids := make([]uint32, len(t.Backends))
	for i, b := range t.Backends {
		rids[i] = ids[netip.MustParseAddr(b.Name)]
	}
	for i, e := range t.Entries {
		out[i] = rids[e]
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
	used   map[uint32]bool
	cursor uint32
}

func newAllocator(max uint32) *allocator {
	return &allocator{max: max, used: map[uint32]bool{}, cursor: 1}
}

func (a *allocator) keep(id uint32) {
	a.used[id] = true
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
		if !a.used[id] {
			a.used[id] = true
			return id, nil
		}
	}
	return 0, ErrExhausted
}
