package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// poolsEnv is a single-node lab with 4 backends and a hand-written config.
type poolsEnv struct {
	*env
}

func setupPools(t *testing.T, cfg func(l *lab.Lab) string) *poolsEnv {
	t.Helper()
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{Backends: 4})
	e := &env{lab: l, config: l.Dir + "/xlbd-pools.yaml"}
	if err := os.WriteFile(e.config, []byte(cfg(l)), 0o644); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	return &poolsEnv{e}
}

// nodeHeader is the node section of the lab's node 0.
func nodeHeader(l *lab.Lab) string {
	n := l.Nodes[0]
	return fmt.Sprintf("node: {name: %s, interface: eth0, address: %s, address6: %q, xdp_mode: native, conntrack_entries: 65536}\n",
		l.NodeName(0), n.Addr4, n.Addr6)
}

func backendList(l *lab.Lab, idx ...int) string {
	var parts []string
	for _, i := range idx {
		parts = append(parts, fmt.Sprintf("{address: %s}", l.Backends[i].Addr4))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func sessionsOn(t *testing.T, e *env, n int) lab.TCPResult {
	t.Helper()
	s, err := lab.StartTCPSessions(context.Background(), e.lab.Client.NS, e.echo4(), n, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return s.Stop()
}

// TestPoolFailoverAndDedup: with every backend of the first pool failing
// its check, new connections go to the second pool; when the first pool
// recovers they return to it, and connections on the second pool are not
// broken by the failback. A backend in three pools with the same check is
// probed once per interval.
func TestPoolFailoverAndDedup(t *testing.T) {
	const interval = 500 * time.Millisecond
	e := setupPools(t, func(l *lab.Lab) string {
		return nodeHeader(l) + `health_checks:
  web: {type: http, port: 80, path: /, expect_status: 200, interval: 500ms, timeout: 200ms, rise: 1, fall: 1}
pools:
  primary: {health_check: web, backends: ` + backendList(l, 0, 1) + `}
  backup: {health_check: web, backends: ` + backendList(l, 2, 3) + `}
  also: {health_check: web, backends: ` + backendList(l, 0) + `}
  again: {health_check: web, include: [also], backends: ` + backendList(l, 3) + `}
services:
  - {name: echo, vip: ` + l.VIP4().String() + `, port: 5001, protocol: tcp, pools: [primary, backup]}
  - {name: web, vip: ` + l.VIP4().String() + `, port: 80, protocol: tcp, pools: [also, primary]}
  - {name: web81, vip: ` + l.VIP4().String() + `, port: 81, protocol: tcp, pools: [again]}
`
	})
	srv := e.lab.Servers()
	if c := sessionsOn(t, e.env, 40).Counts(); c["b3"]+c["b4"] != 0 || c["b1"] == 0 || c["b2"] == 0 {
		t.Fatalf("first pool usable, yet new connections went %v", c)
	}
	// Dedup: b1 is in primary, also and again (via include) with one check.
	before := srv[0].DirectHTTPRequests()
	time.Sleep(4 * interval)
	probes := srv[0].DirectHTTPRequests() - before
	t.Logf("b1 probed %d times in %v (interval %v)", probes, 4*interval, interval)
	if probes < 3 || probes > 5 {
		t.Fatalf("b1 probed %d times in 4 intervals: want one probe per interval however many pools include it", probes)
	}

	srv[0].SetHTTPStatus(503)
	srv[1].SetHTTPStatus(503)
	e.waitActive(t, e.lab.Backends[0].Addr4, false)
	e.waitActive(t, e.lab.Backends[1].Addr4, false)
	onBackup, err := lab.StartTCPSessions(context.Background(), e.lab.Client.NS, e.echo4(), 40, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	srv[0].SetHTTPStatus(200)
	srv[1].SetHTTPStatus(200)
	e.waitActive(t, e.lab.Backends[0].Addr4, true)
	e.waitActive(t, e.lab.Backends[1].Addr4, true)
	time.Sleep(time.Second)
	res := onBackup.Stop()
	if c := res.Counts(); c["b1"]+c["b2"] != 0 || c["b3"]+c["b4"] != 40 {
		t.Fatalf("with the first pool down, new connections went %v", c)
	}
	if len(res.Breaks) > 0 {
		t.Fatalf("failback broke %d connections on the second pool, first: %v", len(res.Breaks), res.Breaks[0])
	}
	if c := sessionsOn(t, e.env, 40).Counts(); c["b3"]+c["b4"] != 0 {
		t.Fatalf("after failback new connections went %v", c)
	}
}

// TestBackendDrain: a backend set to drain gets no new connections; its
// existing ones run to completion.
func TestBackendDrain(t *testing.T) {
	var cfg string
	e := setupPools(t, func(l *lab.Lab) string {
		cfg = nodeHeader(l) + `pools:
  p: {backends: ` + backendList(l, 0, 1, 2) + `}
services:
  - {name: echo, vip: ` + l.VIP4().String() + `, port: 5001, protocol: tcp, pools: [p]}
  - {name: web, vip: ` + l.VIP4().String() + `, port: 80, protocol: tcp, pools: [p]}
`
		return cfg
	})
	sess, err := lab.StartTCPSessions(context.Background(), e.lab.Client.NS, e.echo4(), 60, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	drained := strings.Replace(cfg, fmt.Sprintf("{address: %s}", e.lab.Backends[1].Addr4),
		fmt.Sprintf("{address: %s, state: drain}", e.lab.Backends[1].Addr4), 1)
	before := strings.Count(e.xlbd.Output(), "config committed")
	os.WriteFile(e.config, []byte(drained), 0o644)
	e.xlbd.Reload()
	if err := e.xlbd.WaitOutput(context.Background(), "config committed", before+1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if c := sessionsOn(t, e.env, 60).Counts(); c["b2"] != 0 {
		t.Fatalf("drained backend got %d new connections", c["b2"])
	}
	time.Sleep(time.Second)
	res := sess.Stop()
	if len(res.Breaks) > 0 {
		t.Fatalf("%d connections broke, first: %v", len(res.Breaks), res.Breaks[0])
	}
	n := 0
	for _, s := range res.Sessions {
		if s.Backend == "b2" {
			n++
		}
	}
	if n == 0 {
		t.Fatal("test needs connections on the drained backend")
	}
	t.Logf("%d connections on the drained backend ran on to the end", n)
}

var _ = netip.Addr{}
