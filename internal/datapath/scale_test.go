package datapath

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/plan"
	"github.com/xlbproject/xlb/internal/testenv/genconfig"
)

// TestScale20000Services: 20,000 services of 15 backends each (M = 251)
// fit the default node.max_services and node.max_backends: the file
// parses, plans and commits into a forwarder sized by those defaults, and
// a flow to the first and to the last service is forwarded to one of its
// own backends and tracked, the last under a real id above 2^18 (the 19th
// bit of a conntrack way's real id).
func TestScale20000Services(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 services: not in -short")
	}
	const services, backends, m = 20000, 15, 251
	t0 := time.Now()
	cfg, err := config.Parse(genconfig.Control(services, backends, m, -1, 0), "scale.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node.MaxServices != config.DefaultMaxServices || cfg.Node.MaxBackends != config.DefaultMaxBackends {
		t.Fatalf("node %+v, want the default capacities", cfg.Node)
	}
	cfg.Node.GatewayMAC = testGW // no route to the generated backends here
	o := compatOptions(t)
	o.MaxServices, o.MaxReals = cfg.Node.MaxServices, cfg.Node.MaxBackends
	o.TableBytes = services * TableBytes(m)
	d, err := Load(o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	t1 := time.Now()
	pl, err := plan.NewPlanner(plan.Limits{MaxServices: o.MaxServices + 1, MaxReals: o.MaxReals + 1}).
		Plan(d.Snapshot(), plan.Input{Desired: cfg.Desired()})
	if err != nil {
		t.Fatal(err)
	}
	t2 := time.Now()
	as, err := d.Commit(pl.State, pl.Diff)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("parse and load %v, plan %v, commit %v (%d tables, %d reals)", t1.Sub(t0).Round(time.Millisecond),
		t2.Sub(t1).Round(time.Millisecond), time.Since(t2).Round(time.Millisecond), as.TablesReplaced, as.RealsWritten)
	if as.TablesReplaced != services || as.RealsWritten != services*backends {
		t.Fatalf("committed %d tables and %d reals, want %d and %d", as.TablesReplaced, as.RealsWritten, services, services*backends)
	}
	for _, s := range []int{0, services - 1} {
		f := packet.Flow{Src: client4, Dst: genconfig.VIPAddr(s), SrcPort: 4242, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN}
		ret, out := run(t, d.Program(), f.Frame())
		tun, err := packet.ParseTunnel(out)
		if ret != xdpTX || err != nil {
			t.Fatalf("service %d: verdict %d, %v", s, ret, err)
		}
		if !ownBackend(tun.Backend, s, backends) {
			t.Fatalf("service %d forwarded to %s, not one of its backends", s, tun.Backend)
		}
		ents, err := d.flowEntries(f)
		if err != nil || len(ents) != 1 {
			t.Fatalf("service %d: conntrack %+v, %v; want one entry", s, ents, err)
		}
		r, ok := pl.State.Reals.Get(ents[0].RealID)
		if !ok || r.Addr != tun.Backend {
			t.Fatalf("service %d: the entry's real %d is %+v, the packet went to %s", s, ents[0].RealID, r, tun.Backend)
		}
		if s == services-1 && ents[0].RealID < 1<<18 {
			t.Fatalf("the last service's real id %d is below 2^18: the test does not reach the 19th bit", ents[0].RealID)
		}
		t.Logf("service %d -> %s (real id %d)", s, tun.Backend, ents[0].RealID)
	}
}

func ownBackend(a netip.Addr, s, backends int) bool {
	for j := range backends {
		if genconfig.BackendAddr(s, j) == a {
			return true
		}
	}
	return false
}

// flowEntries is the connection table's entries of f (every CPU's slice).
func (d *Datapath) flowEntries(f packet.Flow) ([]CTEntry, error) {
	h := maglev.FlowHash(maglev.Tuple{Src: f.Src, Dst: f.Dst, SrcPort: f.SrcPort, DstPort: f.DstPort, Proto: uint8(f.Proto)})
	tag := maglev.CTTag(h)
	var out []CTEntry
	err := d.ScanConntrack(func(e CTEntry) bool {
		if e.Tag == tag {
			out = append(out, e)
		}
		return true
	})
	return out, err
}
