package plan

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/state"
)

// TestPlannerIncrementalMatchesFull: a Planner fed back its own states
// plans only what changed, and each of its plans equals a full plan of the
// same desired state against the same previous state (ids, tables, reals);
// its Diff names every real and service that differs from the previous
// state, and the previous state is left as it was. Random changes: weights, drains, health, backends and services
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
	pl, err := p.Plan(nil, Input{Desired: d, Healthy: healthy})
	if err != nil {
		t.Fatal(err)
	}
	prev := pl.State
	incremental := 0
	var lastH func(config.Backend) bool
	for step := range 400 {
		if step%2 == 0 {
			d = clone(d)
		} else {
			d = shallowClone(d)
		}
		for range 1 + r.IntN(2) {
			mutate(r, d, down, &nextSvc, newService)
		}
		h := healthy
		if r.IntN(3) == 0 {
			h = nil // every backend healthy
		}
		full, err := Plan(prev, Input{Desired: d, Healthy: h}, lim)
		if err != nil {
			t.Fatalf("step %d: full plan: %v", step, err)
		}
		base := deepClone(prev)
		pl, err := p.Plan(prev, Input{Desired: d, Healthy: h})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		st := pl.State
		compareStates(t, step, st, full.State)
		compareStates(t, step, prev, base) // prev untouched
		if pl.Diff.From != prev.Generation || pl.Diff.To != st.Generation || st.Generation == prev.Generation {
			t.Fatalf("step %d: diff from %d to %d, states %d and %d", step, pl.Diff.From, pl.Diff.To, prev.Generation, st.Generation)
		}
		checkDiff(t, step, base, st, pl.Diff)
		if want := state.Compare(prev, st); !slices.Equal(pl.Diff.Services, want.Services) ||
			!slices.Equal(pl.Diff.Reals, want.Reals) || pl.Diff.Node != want.Node {
			t.Fatalf("step %d: diff %+v, state.Compare's %+v", step, pl.Diff, want)
		}
		for _, e := range p.tables {
			if e.gen != p.gen {
				t.Fatalf("step %d: the table cache keeps a table this plan did not use", step)
			}
		}
		if pl.Stats.Incremental {
			incremental++
			if pl.Stats.TablesBuilt > len(pl.Diff.Services) {
				t.Fatalf("step %d: %d tables built for %d changed services", step, pl.Stats.TablesBuilt, len(pl.Diff.Services))
			}
		}
		prev, lastH = st, h
	}
	if incremental < 390 {
		t.Fatalf("only %d of 400 plans were incremental", incremental)
	}
	// A state the planner did not make gets a full plan.
	before := deepClone(prev)
	pl, err = p.Plan(before, Input{Desired: d, Healthy: lastH})
	if err != nil || pl.Stats.Incremental {
		t.Fatalf("plan against a foreign state: incremental %v, %v", pl.Stats.Incremental, err)
	}
	compareStates(t, -1, pl.State, prev)
	// A failed incremental plan leaves prev as it was.
	prev, before = pl.State, deepClone(pl.State)
	failing := clone(d)
	for i := range 2000 {
		failing.Services[0].Pools[0].Backends = append(failing.Services[0].Pools[0].Backends,
			config.Backend{Addr: netip.AddrFrom4([4]byte{10, 3, byte(i >> 8), byte(i)}), Weight: 1})
	}
	failing.Services[len(failing.Services)-1].Pools[0].Backends[0].Weight = 7
	if _, err := p.Plan(prev, Input{Desired: failing, Healthy: lastH}); err == nil {
		t.Fatal("a plan needing more reals than the limit succeeded")
	}
	compareStates(t, -2, prev, before)
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

func clone(d *config.Desired) *config.Desired {
	c := &config.Desired{Node: d.Node}
	for i := range d.Services {
		c.Services = append(c.Services, cloneService(&d.Services[i]))
	}
	return c
}

// shallowClone returns a copy of d that shares its pools: mutate copies a
// pool before changing it, so the planner sees the pools that did not
// change as the very slices it planned last time.
func shallowClone(d *config.Desired) *config.Desired {
	return &config.Desired{Node: d.Node, Services: slices.Clone(d.Services)}
}

// deepClone returns a copy of s sharing no memory with it.
func deepClone(s *state.State) *state.State {
	c := &state.State{Node: s.Node, Services: map[state.VIPKey]*state.Service{}}
	for k, v := range s.Services {
		c.Services[k] = &state.Service{SvcID: v.SvcID, Encap: v.Encap, Fragments: v.Fragments, Table: slices.Clone(v.Table)}
	}
	for k, v := range s.Reals.All() {
		c.Reals.Set(k, v)
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
	s.Pools = slices.Clone(s.Pools) // copy on write (shallowClone)
	pool := &s.Pools[r.IntN(len(s.Pools))]
	pool.Backends = slices.Clone(pool.Backends)
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

func compareStates(t *testing.T, step int, got, want *state.State) {
	t.Helper()
	if len(got.Services) != len(want.Services) || got.Reals.Len() != want.Reals.Len() {
		t.Fatalf("step %d: %d services, %d reals; full plan %d, %d", step, len(got.Services), got.Reals.Len(),
			len(want.Services), want.Reals.Len())
	}
	for k, w := range want.Services {
		g := got.Services[k]
		if g == nil || g.SvcID != w.SvcID || g.Encap != w.Encap || !slices.Equal(g.Table, w.Table) {
			t.Fatalf("step %d: service %s differs from the full plan's", step, k)
		}
	}
	for id, w := range want.Reals.All() {
		if g, ok := got.Reals.Get(id); !ok || g != w {
			t.Fatalf("step %d: real %d is %+v, full plan %+v", step, id, g, w)
		}
	}
}

func checkDiff(t *testing.T, step int, base, st *state.State, diff state.Diff) {
	t.Helper()
	inReals := map[uint32]bool{}
	for _, id := range diff.Reals {
		inReals[id] = true
	}
	inSvcs := map[state.VIPKey]bool{}
	for _, k := range diff.Services {
		inSvcs[k] = true
	}
	for id, r := range st.Reals.All() {
		if b, ok := base.Reals.Get(id); (!ok || b != r) && !inReals[id] {
			t.Fatalf("step %d: real %d changed but is not in the diff", step, id)
		}
	}
	for id := range base.Reals.All() {
		if _, ok := st.Reals.Get(id); !ok && !inReals[id] {
			t.Fatalf("step %d: real %d removed but not in the diff", step, id)
		}
	}
	for k, s := range st.Services {
		b := base.Services[k]
		if (b == nil || b.SvcID != s.SvcID || b.Encap != s.Encap || !slices.Equal(b.Table, s.Table)) && !inSvcs[k] {
			t.Fatalf("step %d: service %s changed but is not in the diff", step, k)
		}
	}
	for k := range base.Services {
		if _, ok := st.Services[k]; !ok && !inSvcs[k] {
			t.Fatalf("step %d: service %s removed but not in the diff", step, k)
		}
	}
}

// TestPlannerRefusesTwoServicesOnOneKey: two services on one VIP key
// (which Validate rejects) are refused with both names; the plan after
// that (without memory) equals a plan by a new Planner.
func TestPlannerRefusesTwoServicesOnOneKey(t *testing.T) {
	lim := Limits{MaxServices: 64, MaxReals: 1024}
	svc := func(s byte, name string) config.DesiredService {
		ds := config.DesiredService{Name: name, VIP: netip.AddrFrom4([4]byte{172, 16, 0, s}), Port: 80,
			Proto: config.Proto(6), TableSize: 251, MinHealthy: 0.5}
		var bs []config.Backend
		for b := range 4 {
			bs = append(bs, config.Backend{Addr: netip.AddrFrom4([4]byte{10, 1, s, byte(b + 1)}), Weight: 100})
		}
		ds.Pools = append(ds.Pools, config.DesiredPool{Name: "p", Backends: bs})
		return ds
	}
	d := &config.Desired{Services: []config.DesiredService{svc(1, "a"), svc(2, "b")}}
	p := NewPlanner(lim)
	pl, err := p.Plan(nil, Input{Desired: d})
	if err != nil {
		t.Fatal(err)
	}
	prev := pl.State
	d2 := &config.Desired{Services: []config.DesiredService{svc(1, "a"), svc(2, "b"), svc(3, "c"), svc(1, "dup")}}
	if _, err := p.Plan(prev, Input{Desired: d2}); err == nil || !strings.Contains(err.Error(), "a and dup") {
		t.Fatalf("two services on one key: %v", err)
	}
	d3 := &config.Desired{Services: []config.DesiredService{svc(1, "a"), svc(2, "b"), svc(3, "c")}}
	want, err := Plan(prev, Input{Desired: d3}, lim)
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Plan(prev, Input{Desired: d3})
	if err != nil {
		t.Fatal(err)
	}
	for k, s := range got.State.Services {
		if len(s.Table) != 251 {
			t.Errorf("service %v: table of %d entries, want 251", k, len(s.Table))
		}
	}
	compareStates(t, 0, got.State, want.State)
}
