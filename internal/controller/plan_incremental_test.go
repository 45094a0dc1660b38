package controller

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/datapath"
)

// TestPlannerIncrementalMatchesFull: a Planner fed back its own states
// plans only what changed, and each of its plans equals a full plan of the
// same desired state against the same previous state (ids, tables, reals);
// its Delta names every real and service that differs from the previous
// state. Random changes: weights, drains, health, backends and services
// added and removed, table sizes.
func TestPlannerIncrementalMatchesFull(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	lim := Limits{MaxServices: 64, MaxReals: 1024}
	addr := func(s, b int) netip.Addr { return netip.AddrFrom4([4]byte{10, 1, byte(s), byte(b)}) }
	newService := func(s int) config.DesiredService {
		ds := config.DesiredService{Name: "s", VIP: netip.AddrFrom4([4]byte{172, 16, 0, byte(s)}), Port: 80,
			Proto: config.Proto(6), TableSize: 251, MinHealthy: 0.5}
		for p := range 2 {
			var bs []config.Backend
			for b := range 3 + r.IntN(4) {
				bs = append(bs, config.Backend{Addr: addr(s, p*16+b), Weight: 100, HealthCheck: "tcp"})
			}
			ds.Pools = append(ds.Pools, config.DesiredPool{Name: "p", Backends: bs})
		}
		return ds
	}
	d := &config.Desired{}
	nextSvc := 0
	for range 8 {
		d.Services = append(d.Services, newService(nextSvc))
		nextSvc++
	}
	down := map[netip.Addr]bool{}
	healthy := func(b config.Backend) bool { return !down[b.Addr] }
	p := NewPlanner(lim)
	prev, _, err := p.Plan(d, nil, healthy)
	if err != nil {
		t.Fatal(err)
	}
	incremental := 0
	var lastH func(config.Backend) bool
	for step := range 400 {
		d = clone(d)
		for range 1 + r.IntN(2) {
			mutate(r, d, down, &nextSvc, newService)
		}
		h := healthy
		if r.IntN(3) == 0 {
			h = nil // every backend healthy
		}
		// The full plan first: an incremental plan takes prev's reals over.
		want, _, err := Plan(d, prev, lim, h)
		if err != nil {
			t.Fatalf("step %d: full plan: %v", step, err)
		}
		base := datapathClone(prev)
		st, ps, err := p.Plan(d, prev, h)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		compareStates(t, step, st, want)
		if st.Delta != nil {
			incremental++
			if st.Delta.Base != prev {
				t.Fatalf("step %d: delta base is not the previous state", step)
			}
			checkDelta(t, step, base, st)
			if ps.TablesBuilt > len(st.Delta.Services) {
				t.Fatalf("step %d: %d tables built for %d changed services", step, ps.TablesBuilt, len(st.Delta.Services))
			}
		}
		prev, lastH = st, h
	}
	if incremental < 390 {
		t.Fatalf("only %d of 400 plans were incremental", incremental)
	}
	// A state the planner did not make gets a full plan.
	before := datapathClone(prev)
	st, _, err := p.Plan(d, before, lastH)
	if err != nil || st.Delta != nil {
		t.Fatalf("plan against a foreign state: delta %v, %v", st.Delta, err)
	}
	compareStates(t, -1, st, prev)
	// A failed incremental plan leaves prev as it was.
	prev, before = st, datapathClone(st)
	failing := clone(d)
	for i := range 2000 {
		failing.Services[0].Pools[0].Backends = append(failing.Services[0].Pools[0].Backends,
			config.Backend{Addr: netip.AddrFrom4([4]byte{10, 3, byte(i >> 8), byte(i)}), Weight: 1})
	}
	failing.Services[len(failing.Services)-1].Pools[0].Backends[0].Weight = 7
	if _, _, err := p.Plan(failing, prev, lastH); err == nil {
		t.Fatal("a plan needing more reals than the limit succeeded")
	}
	compareStates(t, -2, prev, before)
}

func clone(d *config.Desired) *config.Desired {
	c := &config.Desired{Node: d.Node}
	for i := range d.Services {
		c.Services = append(c.Services, cloneService(&d.Services[i]))
	}
	return c
}

func datapathClone(s *datapath.State) *datapath.State {
	c := &datapath.State{Node: s.Node, Services: map[datapath.VIPKey]*datapath.Service{}, Reals: map[uint32]datapath.Real{}}
	for k, v := range s.Services {
		c.Services[k] = &datapath.Service{SvcID: v.SvcID, Encap: v.Encap, Fragments: v.Fragments, Table: slices.Clone(v.Table)}
	}
	for k, v := range s.Reals {
		c.Reals[k] = v
	}
	return c
}

func mutate(r *rand.Rand, d *config.Desired, down map[netip.Addr]bool, nextSvc *int, newService func(int) config.DesiredService) {
	if len(d.Services) == 0 {
		d.Services = append(d.Services, newService(*nextSvc))
		*nextSvc++
		return
	}
	s := &d.Services[r.IntN(len(d.Services))]
	pool := &s.Pools[r.IntN(len(s.Pools))]
	var b *config.Backend
	if len(pool.Backends) > 0 {
		b = &pool.Backends[r.IntN(len(pool.Backends))]
	}
	switch k := r.IntN(10); {
	case k == 0 && b != nil:
		b.Weight = uint32(r.IntN(3)) * 50
	case k == 1 && b != nil:
		b.Drain = !b.Drain
	case k == 2 && b != nil:
		down[b.Addr] = !down[b.Addr]
	case k == 3 && b != nil:
		i := slices.Index(pool.Backends, *b)
		pool.Backends = slices.Delete(pool.Backends, i, i+1)
	case k == 4:
		a := netip.AddrFrom4([4]byte{10, 2, byte(r.IntN(256)), byte(r.IntN(256))})
		pool.Backends = append(pool.Backends, config.Backend{Addr: a, Weight: 100, HealthCheck: "tcp"})
	case k == 5 && len(d.Services) > 1:
		i := r.IntN(len(d.Services))
		d.Services = slices.Delete(d.Services, i, i+1)
	case k == 6 && *nextSvc < 200:
		d.Services = append(d.Services, newService(*nextSvc))
		*nextSvc++
	case k == 7:
		s.TableSize = []uint32{251, 257}[r.IntN(2)]
	case k == 8:
		s.Pools[0], s.Pools[1] = s.Pools[1], s.Pools[0]
	default:
		// nothing: an unchanged plan
	}
}

func compareStates(t *testing.T, step int, got, want *datapath.State) {
	t.Helper()
	if len(got.Services) != len(want.Services) || len(got.Reals) != len(want.Reals) {
		t.Fatalf("step %d: %d services, %d reals; full plan %d, %d", step, len(got.Services), len(got.Reals),
			len(want.Services), len(want.Reals))
	}
	for k, w := range want.Services {
		g := got.Services[k]
		if g == nil || g.SvcID != w.SvcID || g.Encap != w.Encap || !slices.Equal(g.Table, w.Table) {
			t.Fatalf("step %d: service %s differs from the full plan's", step, k)
		}
	}
	for id, w := range want.Reals {
		if g, ok := got.Reals[id]; !ok || g != w {
			t.Fatalf("step %d: real %d is %+v, full plan %+v", step, id, g, w)
		}
	}
}

func checkDelta(t *testing.T, step int, base, st *datapath.State) {
	t.Helper()
	inReals := map[uint32]bool{}
	for _, id := range st.Delta.Reals {
		inReals[id] = true
	}
	inSvcs := map[datapath.VIPKey]bool{}
	for _, k := range st.Delta.Services {
		inSvcs[k] = true
	}
	for id, r := range st.Reals {
		if b, ok := base.Reals[id]; (!ok || b != r) && !inReals[id] {
			t.Fatalf("step %d: real %d changed but is not in the delta", step, id)
		}
	}
	for id := range base.Reals {
		if _, ok := st.Reals[id]; !ok && !inReals[id] {
			t.Fatalf("step %d: real %d removed but not in the delta", step, id)
		}
	}
	for k, s := range st.Services {
		b := base.Services[k]
		if (b == nil || b.SvcID != s.SvcID || b.Encap != s.Encap || !slices.Equal(b.Table, s.Table)) && !inSvcs[k] {
			t.Fatalf("step %d: service %s changed but is not in the delta", step, k)
		}
	}
	for k := range base.Services {
		if _, ok := st.Services[k]; !ok && !inSvcs[k] {
			t.Fatalf("step %d: service %s removed but not in the delta", step, k)
		}
	}
}

// TestPlannerFallbackToFullKeepsNewTables: an incremental plan that meets
// two services on one key (which Validate rejects) falls back to a full
// plan; a service it had already started a table for before the fallback
// still gets its table, the same as a full plan's.
func TestPlannerFallbackToFullKeepsNewTables(t *testing.T) {
	lim := Limits{MaxServices: 64, MaxReals: 1024}
	svc := func(s byte) config.DesiredService {
		ds := config.DesiredService{Name: "s", VIP: netip.AddrFrom4([4]byte{172, 16, 0, s}), Port: 80,
			Proto: config.Proto(6), TableSize: 251, MinHealthy: 0.5}
		var bs []config.Backend
		for b := range 4 {
			bs = append(bs, config.Backend{Addr: netip.AddrFrom4([4]byte{10, 1, s, byte(b + 1)}), Weight: 100})
		}
		ds.Pools = append(ds.Pools, config.DesiredPool{Name: "p", Backends: bs})
		return ds
	}
	d := &config.Desired{Services: []config.DesiredService{svc(1), svc(2)}}
	p := NewPlanner(lim)
	prev, _, err := p.Plan(d, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A new service, then a second service on service 1's key.
	dup := svc(1)
	dup.Pools[0].Backends = dup.Pools[0].Backends[:2]
	d2 := &config.Desired{Services: []config.DesiredService{svc(1), svc(2), svc(3), dup}}
	want, _, err := Plan(d2, datapathClone(prev), lim, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := p.Plan(d2, prev, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, s := range st.Services {
		if len(s.Table) != 251 {
			t.Errorf("service %v: table of %d entries, want 251", k, len(s.Table))
		}
	}
	compareStates(t, 0, st, want)
}
