package plan

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/state"
)

const baseConfig = `
node: {name: t, interface: eth0, address: 10.0.0.11, address6: "fd00::11"}
pools:
  web:
    backends:
      - {address: 10.0.1.1, weight: 1}
      - {address: 10.0.1.2, weight: 1}
      - {address: 10.0.1.3, weight: 2}
  spare:
    backends: [{address: 10.0.2.1}]
services:
  - {name: web, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [web, spare], table_size: 7919}
  - {name: dns, vip: 10.200.0.1, port: 53, protocol: udp, pools: [web], table_size: 251, encap: ipip}
`

func mustPlan(t *testing.T, yaml string, prev *state.State) *state.State {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := Plan(prev, Input{Desired: cfg.Desired()}, Limits{MaxServices: 64, MaxReals: 1024})
	if err != nil {
		t.Fatal(err)
	}
	return pl.State
}

func key(addr string, port uint16, proto uint8) state.VIPKey {
	return state.VIPKey{Addr: netip.MustParseAddr(addr), Port: port, Proto: proto}
}

func realsOf(st *state.State, svc uint32) map[netip.Addr]uint32 {
	m := map[netip.Addr]uint32{}
	for id, r := range st.Reals.All() {
		if r.SvcID == svc {
			m[r.Addr] = id
		}
	}
	return m
}

func TestPlanBasics(t *testing.T) {
	st := mustPlan(t, baseConfig, nil)
	web := st.Services[key("10.200.0.1", 80, 6)]
	dns := st.Services[key("10.200.0.1", 53, 17)]
	if web == nil || dns == nil || web.SvcID == dns.SvcID {
		t.Fatalf("services: %+v", st.Services)
	}
	if len(web.Table) != 7919 || len(dns.Table) != 251 || dns.Encap != state.EncapIPIP {
		t.Fatalf("tables %d %d encap %d", len(web.Table), len(dns.Table), dns.Encap)
	}
	// web's reals: the three active-pool backends and the spare (tracked
	// flows may continue there), but the spare gets no table entries.
	reals := realsOf(st, web.SvcID)
	if len(reals) != 4 {
		t.Fatalf("web reals: %v", reals)
	}
	counts := map[uint32]int{}
	for _, rid := range web.Table {
		counts[rid]++
	}
	if counts[reals[netip.MustParseAddr("10.0.2.1")]] != 0 {
		t.Fatal("spare pool backend got table entries while the first pool is usable")
	}
	heavy := counts[reals[netip.MustParseAddr("10.0.1.3")]]
	light := counts[reals[netip.MustParseAddr("10.0.1.1")]]
	if heavy < 2*light-2 || heavy > 2*light+2 {
		t.Fatalf("weights 1:2 gave %d:%d entries", light, heavy)
	}
}

func TestPlanKeepsIDs(t *testing.T) {
	st1 := mustPlan(t, baseConfig, nil)
	st2 := mustPlan(t, baseConfig, st1)
	for k, s := range st1.Services {
		if st2.Services[k].SvcID != s.SvcID {
			t.Fatalf("%s changed id", k)
		}
	}
	for id, r := range st1.Reals.All() {
		if st2.Reals.At(id) != r {
			t.Fatalf("real %d changed: %+v -> %+v", id, r, st2.Reals.At(id))
		}
	}
	// Remove a backend: the others keep their ids; the removed id is gone;
	// then add it back: it gets a fresh id, not one in use.
	removed := `
node: {name: t, interface: eth0, address: 10.0.0.11}
pools:
  web:
    backends:
      - {address: 10.0.1.1, weight: 1}
      - {address: 10.0.1.3, weight: 2}
  spare:
    backends: [{address: 10.0.2.1}]
services:
  - {name: web, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [web, spare], table_size: 7919}
  - {name: dns, vip: 10.200.0.1, port: 53, protocol: udp, pools: [web], table_size: 251, encap: ipip}
`
	st3 := mustPlan(t, removed, st2)
	web := st1.Services[key("10.200.0.1", 80, 6)].SvcID
	before, after := realsOf(st1, web), realsOf(st3, web)
	for a, id := range after {
		if before[a] != id {
			t.Fatalf("backend %s moved from real %d to %d", a, before[a], id)
		}
	}
	gone := before[netip.MustParseAddr("10.0.1.2")]
	if _, ok := st3.Reals.Get(gone); ok {
		t.Fatal("removed backend still has a real")
	}
	st4 := mustPlan(t, baseConfig, st3)
	back := realsOf(st4, web)[netip.MustParseAddr("10.0.1.2")]
	if back == 0 || back == gone {
		t.Fatalf("re-added backend got id %d (old %d): ids must not be reused at once", back, gone)
	}
}

func TestPlanNoUsableBackend(t *testing.T) {
	st := mustPlan(t, `
node: {name: t, interface: eth0, address: 10.0.0.11}
pools:
  p: {backends: [{address: 10.0.1.1, state: drain}]}
services:
  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], table_size: 251}
`, nil)
	s := st.Services[key("10.200.0.1", 80, 6)]
	for _, e := range s.Table {
		if e != 0 {
			t.Fatal("draining-only service has table entries")
		}
	}
	if st.Reals.Len() != 1 {
		t.Fatal("draining backend must keep its real for tracked flows")
	}
}

func TestPlanExhausted(t *testing.T) {
	cfg, err := config.Parse([]byte(baseConfig), "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Plan(nil, Input{Desired: cfg.Desired()}, Limits{MaxServices: 64, MaxReals: 4}); err == nil {
		t.Fatal("expected exhaustion with 3 real ids for 8 reals")
	}
}

func TestPlanHealth(t *testing.T) {
	checked := strings.Replace(baseConfig, "pools:\n  web:\n", "health_checks:\n  tcp80: {type: tcp, port: 80}\npools:\n  web:\n    health_check: tcp80\n", 1)
	checked = strings.Replace(checked, "  spare:\n", "  spare:\n    health_check: tcp80\n", 1)
	cfg, err := config.Parse([]byte(checked), "x")
	if err != nil {
		t.Fatal(err)
	}
	down := netip.MustParseAddr("10.0.1.3")
	healthy := func(b config.Backend) bool { return b.Addr != down }
	pl, err := Plan(nil, Input{Desired: cfg.Desired(), Healthy: healthy}, Limits{MaxServices: 64, MaxReals: 1024})
	st := pl.State
	if err != nil {
		t.Fatal(err)
	}
	web := st.Services[key("10.200.0.1", 80, 6)]
	rid := realsOf(st, web.SvcID)[down]
	if st.Reals.At(rid).Active {
		t.Fatal("a failed backend's real must be inactive: its tracked flows reselect")
	}
	for _, e := range web.Table {
		if e == rid {
			t.Fatal("a failed backend holds table entries")
		}
	}
	// Every backend of the first pool down: fail over to the spare pool.
	allDown := func(b config.Backend) bool { return b.Addr == netip.MustParseAddr("10.0.2.1") }
	pl, err = Plan(st, Input{Desired: cfg.Desired(), Healthy: allDown}, Limits{MaxServices: 64, MaxReals: 1024})
	st = pl.State
	if err != nil {
		t.Fatal(err)
	}
	web = st.Services[key("10.200.0.1", 80, 6)]
	spare := realsOf(st, web.SvcID)[netip.MustParseAddr("10.0.2.1")]
	for _, e := range web.Table {
		if e != spare {
			t.Fatalf("failover: entry %d, want the spare's real %d", e, spare)
		}
	}
}

func TestPlannerReusesTables(t *testing.T) {
	cfg, err := config.Parse([]byte(baseConfig), "x")
	if err != nil {
		t.Fatal(err)
	}
	p := NewPlanner(Limits{MaxServices: 64, MaxReals: 1024})
	pl, err := p.Plan(nil, Input{Desired: cfg.Desired()})
	st1, ps := pl.State, pl.Stats
	if err != nil || ps.TablesBuilt != 2 {
		t.Fatalf("first plan built %d tables (%v)", ps.TablesBuilt, err)
	}
	pl, err = p.Plan(st1, Input{Desired: cfg.Desired()})
	st2, ps := pl.State, pl.Stats
	if err != nil || ps.TablesBuilt != 0 {
		t.Fatalf("unchanged plan built %d tables (%v)", ps.TablesBuilt, err)
	}
	k := key("10.200.0.1", 80, 6)
	if &st1.Services[k].Table[0] != &st2.Services[k].Table[0] {
		t.Fatal("an unchanged table must be the same slice")
	}
	down := netip.MustParseAddr("10.0.1.2")
	pl, err = p.Plan(st2, Input{Desired: cfg.Desired(), Healthy: func(b config.Backend) bool { return b.Addr != down }})
	if ps = pl.Stats; err != nil || ps.TablesBuilt != 0 {
		// Unchecked backends are always healthy: nothing changes.
		t.Fatalf("plan with an unchecked backend 'down' built %d tables (%v)", ps.TablesBuilt, err)
	}
	weighted := strings.Replace(baseConfig, "{address: 10.0.1.3, weight: 2}", "{address: 10.0.1.3, weight: 3}", 1)
	cfg2, err := config.Parse([]byte(weighted), "x")
	if err != nil {
		t.Fatal(err)
	}
	if pl, err = p.Plan(st2, Input{Desired: cfg2.Desired()}); err != nil || pl.Stats.TablesBuilt != 2 {
		t.Fatalf("weight change in a pool both services use built %d tables (%v)", pl.Stats.TablesBuilt, err)
	}
}

// TestPlanNodeRates: node.icmp_echo_rate (default and set) and
// node.flood_syn_rate reach the data plane's node settings.
func TestPlanNodeRates(t *testing.T) {
	if st := mustPlan(t, baseConfig, nil); st.Node.ICMPEchoRate != config.DefaultICMPEchoRate {
		t.Fatalf("icmp echo rate %d, want the default %d", st.Node.ICMPEchoRate, config.DefaultICMPEchoRate)
	}
	yaml := strings.Replace(baseConfig, `address6: "fd00::11"}`, `address6: "fd00::11", icmp_echo_rate: 0, flood_syn_rate: 777}`, 1)
	st := mustPlan(t, yaml, nil)
	if st.Node.ICMPEchoRate != 0 || st.Node.FloodSynRate != 777 || st.Node.FloodNewFlowRate != 777 {
		t.Fatalf("node %+v: want icmp_echo_rate 0, flood_syn_rate 777 and the other new flows' rate the same", st.Node)
	}
	yaml = strings.Replace(baseConfig, `address6: "fd00::11"}`, `address6: "fd00::11", flood_syn_rate: 777, flood_new_flow_rate: 5000}`, 1)
	if st := mustPlan(t, yaml, nil); st.Node.FloodSynRate != 777 || st.Node.FloodNewFlowRate != 5000 {
		t.Fatalf("node %+v: want flood_syn_rate 777, flood_new_flow_rate 5000", st.Node)
	}
}

// TestPlanFragments: node.fragment_pool is sorted (the same order on every
// node, whatever the file's) with this node's index, and a service's
// fragments flag reaches its data plane service.
func TestPlanFragments(t *testing.T) {
	yaml := strings.Replace(baseConfig, `address6: "fd00::11"}`,
		`address6: "fd00::11", fragment_pool: [10.0.0.13, "fd00::12", 10.0.0.11, 10.0.0.2]}`, 1)
	yaml = strings.Replace(yaml, `table_size: 251, encap: ipip}`, `table_size: 251, encap: ipip, fragments: true}`, 1)
	st := mustPlan(t, yaml, nil)
	var got []string
	for _, p := range st.Node.Fragments.Peers {
		got = append(got, p.Addr.String())
	}
	if strings.Join(got, " ") != "10.0.0.2 10.0.0.11 10.0.0.13 fd00::12" || st.Node.Fragments.Self != 1 {
		t.Fatalf("pool %v self %d, want sorted with this node (10.0.0.11) at 1", got, st.Node.Fragments.Self)
	}
	for k, s := range st.Services {
		if s.Fragments != (k.Port == 53) {
			t.Fatalf("service %s fragments %v", k, s.Fragments)
		}
	}
	if st := mustPlan(t, baseConfig, nil); len(st.Node.Fragments.Peers) != 0 {
		t.Fatalf("no pool configured, planned %+v", st.Node.Fragments)
	}
}

// sameBackends compares config.Backend field by field: a field added to
// it must be added there (and here).
func TestSameBackendsCoversEveryField(t *testing.T) {
	if n := reflect.TypeFor[config.Backend]().NumField(); n != 6 {
		t.Fatalf("config.Backend has %d fields; sameBackends compares 6", n)
	}
	base := config.Backend{Addr: netip.MustParseAddr("10.0.0.1"), Weight: 1, Encap: config.EncapGRE, Port: 80, HealthCheck: "tcp"}
	for name, change := range map[string]func(*config.Backend){
		"addr":         func(b *config.Backend) { b.Addr = netip.MustParseAddr("10.0.0.2") },
		"weight":       func(b *config.Backend) { b.Weight = 2 },
		"encap":        func(b *config.Backend) { b.Encap = config.EncapNAT },
		"port":         func(b *config.Backend) { b.Port = 81 },
		"drain":        func(b *config.Backend) { b.Drain = true },
		"health check": func(b *config.Backend) { b.HealthCheck = "http" },
	} {
		b := base
		change(&b)
		if sameBackends([]config.Backend{base}, []config.Backend{b}) {
			t.Errorf("a backend whose %s differs compares the same", name)
		}
	}
	if !sameBackends([]config.Backend{base}, []config.Backend{base}) || sameBackends([]config.Backend{base}, nil) {
		t.Error("sameBackends of equal or of different lengths")
	}
}
