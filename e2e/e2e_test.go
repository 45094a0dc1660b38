// Package e2e runs xlb end to end in network namespaces: real kernel, real
// XDP on veth, real TCP and UDP clients and servers, the xlbd and
// xlb-decap binaries from bin/ (make build). Needs root.
package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

type env struct {
	lab    *lab.Lab
	xlbd   *lab.Daemon
	config string
	opts   lab.XLBDOptions
	ports  lab.Ports
	edit   func(string) string
}

// setup builds the single-node lab (3 backends with the given weights),
// starts the backend servers, xlb-decap on the backends, and xlbd.
func setup(t *testing.T, weights []int) *env {
	t.Helper()
	return setupMode(t, weights, "native")
}

func setupMode(t *testing.T, weights []int, mode string) *env {
	t.Helper()
	return setupWith(t, weights, mode, nil)
}

// newLab builds a lab of cfg, destroyed when t ends, with its servers
// started and xlb-decap attached on the backends.
func newLab(ctx context.Context, t *testing.T, cfg lab.Config) *lab.Lab {
	t.Helper()
	l, err := lab.New(ctx, cfg)
	if err != nil {
		t.Fatalf("build lab: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Destroy(); err != nil {
			t.Errorf("destroy lab: %v", err)
		}
	})
	if _, err := l.StartServers(lab.Ports{}); err != nil {
		t.Fatal(err)
	}
	if err := l.AttachDecap(ctx); err != nil {
		t.Fatal(err)
	}
	return l
}

// setupWith is setup with the generated config passed through edit.
func setupWith(t *testing.T, weights []int, mode string, edit func(string) string) *env {
	t.Helper()
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{})
	e := &env{lab: l, opts: lab.XLBDOptions{Weights: weights, XDPMode: mode}}
	var err error
	if e.config, err = l.WriteXLBDConfig(0, e.opts); err != nil {
		t.Fatal(err)
	}
	e.edit = edit
	if edit != nil {
		if err := os.WriteFile(e.config, []byte(edit(string(l.XLBDConfig(0, e.opts)))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e.start(t)
	return e
}

func (e *env) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := e.lab.StartXLBD(ctx, 0, e.config)
	if err != nil {
		t.Fatal(err)
	}
	e.xlbd = d
	if err := e.lab.WaitForwarding(ctx, e.http4(), 20*time.Second, d); err != nil {
		t.Fatal(err)
	}
}

func (e *env) http4() netip.AddrPort { return netip.AddrPortFrom(e.lab.VIP4(), lab.DefaultPorts.HTTP) }
func (e *env) http6() netip.AddrPort { return netip.AddrPortFrom(e.lab.VIP6(), lab.DefaultPorts.HTTP) }
func (e *env) echo4() netip.AddrPort { return netip.AddrPortFrom(e.lab.VIP4(), lab.DefaultPorts.TCP) }
func (e *env) udp4() netip.AddrPort  { return netip.AddrPortFrom(e.lab.VIP4(), lab.DefaultPorts.UDP) }

// reload rewrites the config with weights (nil: the backend is left out)
// and sends SIGHUP, then waits until the log shows the commit.
func (e *env) reload(t *testing.T, opts lab.XLBDOptions) {
	t.Helper()
	cfg := string(e.lab.XLBDConfig(0, opts))
	if e.edit != nil {
		cfg = e.edit(cfg)
	}
	e.reloadConfig(t, cfg)
}

// pinned opens the node's pinned maps read-only (what xlbctl shows).
func (e *env) pinned(t *testing.T) *datapath.Pinned {
	t.Helper()
	p, err := datapath.OpenPinned(filepath.Join(datapath.BPFFSRoot, e.lab.NodeName(0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// stats returns the node's global counters.
func (e *env) stats(t *testing.T) map[string]uint64 {
	t.Helper()
	st, err := e.pinned(t).Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// services returns the node's services as the data plane holds them.
func (e *env) services(t *testing.T) []datapath.ServiceView {
	t.Helper()
	svcs, err := e.pinned(t).Services()
	if err != nil {
		t.Fatal(err)
	}
	return svcs
}

func checkShares(t *testing.T, what string, counts map[string]int, weights []int) {
	t.Helper()
	checkSharesWithin(t, what, counts, weights, 3) // methods_test.go
}

func TestHTTPSharesAndDirectReturn(t *testing.T) {
	weights := []int{1, 1, 2}
	e := setup(t, weights)
	ctx := context.Background()
	// Request counts: a share of n new connections has a binomial spread of
	// sqrt(p(1-p)/n); with 6,000 and 4,000 requests the 3-point tolerance
	// is over 3.8 standard deviations for every backend.
	before, err := e.lab.NodeStats(0)
	if err != nil {
		t.Fatal(err)
	}
	r4 := lab.HTTPLoad(ctx, e.lab.Client.NS, e.http4(), 6000, 16)
	if r4.Errors > 0 {
		t.Fatalf("IPv4: %d of %d requests failed: %v", r4.Errors, r4.Requests, r4.FirstErrors)
	}
	checkShares(t, "IPv4 VIP", r4.Counts, weights)
	r6 := lab.HTTPLoad(ctx, e.lab.Client.NS, e.http6(), 4000, 16)
	if r6.Errors > 0 {
		t.Fatalf("IPv6: %d of %d requests failed: %v", r6.Errors, r6.Requests, r6.FirstErrors)
	}
	checkShares(t, "IPv6 VIP", r6.Counts, weights)

	after, err := e.lab.NodeStats(0)
	if err != nil {
		t.Fatal(err)
	}
	stats := e.stats(t)
	forwarded, notVIP := stats["forward_tx"], stats["pass_not_vip"]
	rx := after.RxPackets - before.RxPackets
	t.Logf("node eth0 received %d packets; forwarder sent %d to backends; %d IP packets not for a VIP", rx, forwarded, notVIP)
	// Every client->VIP packet is forwarded; replies (as many packets
	// again) must not reach the node: what it receives beyond the
	// forwarded packets is only neighbour/router chatter.
	if forwarded == 0 || rx > forwarded+forwarded/50+50 {
		t.Fatalf("node received %d packets for %d forwarded: replies pass the node", rx, forwarded)
	}
	if notVIP > 50 {
		t.Fatalf("%d non-VIP IP packets reached the node: replies pass the node", notVIP)
	}
	// xlbd keeps every backend's next hop resolved (managed neighbour
	// entries), so no packet needed the fallback gateway or was dropped.
	for _, k := range []string{"nexthop_fallback", "drop_no_nexthop", "drop_no_backend", "drop_internal"} {
		if v := stats[k]; v != 0 {
			t.Errorf("counter %s = %d, want 0", k, v)
		}
	}
	neigh, err := e.lab.Nodes[0].Run(ctx, "ip", "neigh", "show")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range e.lab.Backends {
		for _, a := range []netip.Addr{b.Addr4, b.Addr6} {
			if !hasManagedNeighbour(string(neigh), a) {
				t.Errorf("no managed neighbour entry for backend %s:\n%s", a, neigh)
			}
		}
	}
}

func hasManagedNeighbour(table string, a netip.Addr) bool {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == a.String() && strings.Contains(line, "managed") {
			return true
		}
	}
	return false
}

func TestPersistenceAcrossReload(t *testing.T) {
	weights := []int{1, 1, 1}
	e := setup(t, weights)
	ctx := context.Background()
	sess, err := lab.StartTCPSessions(ctx, e.lab.Client.NS, e.echo4(), 100, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)

	// Remove b2 from the pools.
	e.reload(t, withoutBackend(e, 1))
	time.Sleep(2 * time.Second)
	r := lab.HTTPLoad(ctx, e.lab.Client.NS, e.http4(), 300, 8)
	if r.Counts["b2"] != 0 || r.Errors > 0 {
		t.Fatalf("after removing b2: %v, %d errors %v", r.Counts, r.Errors, r.FirstErrors)
	}
	// Add it back: from now on no session at all may break.
	addBack := time.Now()
	e.reload(t, e.opts)
	time.Sleep(2 * time.Second)
	res := sess.Stop()
	onB2 := map[int]bool{}
	for i, s := range res.Sessions {
		if s.Backend == "b2" {
			onB2[i] = true
		}
	}
	t.Logf("sessions per backend: %v; %d messages", res.Counts(), res.Messages())
	for _, b := range res.Breaks {
		if !onB2[b.Session] || b.Backend != "b2" {
			t.Errorf("session on a surviving backend broke: %v", b)
		}
		if b.At.After(addBack) {
			t.Errorf("session broke after b2 was added back: %v", b)
		}
	}
	if len(onB2) == 0 || len(onB2) == len(res.Sessions) {
		t.Fatalf("test needs sessions on b2 and on others: %v", res.Counts())
	}
	r = lab.HTTPLoad(ctx, e.lab.Client.NS, e.http4(), 300, 8)
	if r.Counts["b2"] == 0 {
		t.Fatalf("b2 gets no new connections after being added back: %v", r.Counts)
	}
}

// withoutBackend returns the env's options with backend i left out of both
// pools.
func withoutBackend(e *env, i int) lab.XLBDOptions {
	o := e.opts
	o.Exclude = []int{i}
	return o
}

func TestUDPFlowsStick(t *testing.T) {
	for _, mode := range []string{"native", "generic"} {
		t.Run(mode, func(t *testing.T) { testUDPFlowsStick(t, mode) })
	}
}

func testUDPFlowsStick(t *testing.T, mode string) {
	e := setupMode(t, []int{1, 1, 2}, mode)
	if !strings.Contains(e.xlbd.Output(), "mode="+mode) {
		t.Fatalf("xlbd not attached in %s mode:\n%s", mode, e.xlbd.Output())
	}
	res, err := lab.UDPFlows(context.Background(), e.lab.Client.NS, e.udp4(), 100, 50)
	if err != nil {
		t.Fatal(err)
	}
	if split := res.Split(); len(split) > 0 {
		t.Fatalf("%d flows reached more than one backend, e.g. %+v", len(split), split[0])
	}
	if lost := res.Lost(); lost > 0 {
		t.Fatalf("%d datagrams lost", lost)
	}
	t.Logf("100 flows x 50 datagrams: per backend %v", res.Counts())
}

func TestRestartIsHitless(t *testing.T) {
	e := setup(t, []int{1, 1, 1})
	ctx := context.Background()
	sess, err := lab.StartTCPSessions(ctx, e.lab.Client.NS, e.echo4(), 50, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := e.xlbd.Stop(); err != nil {
		t.Fatal(err)
	}
	// No daemon: the pinned forwarder carries on.
	if _, err := lab.HTTPGet(ctx, e.lab.Client.NS, e.http4(), 2*time.Second); err != nil {
		t.Fatalf("forwarding stopped with the daemon: %v", err)
	}
	time.Sleep(time.Second)
	e.start(t)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.xlbd.WaitOutput(wctx, "config committed", 1, 10*time.Second); err != nil {
		t.Fatalf("new xlbd did not commit: %v\n%s", err, e.xlbd.Output())
	}
	if !strings.Contains(e.xlbd.Output(), "adopted pinned forwarder") {
		t.Fatalf("new xlbd did not adopt the pinned forwarder:\n%s", e.xlbd.Output())
	}
	if !strings.Contains(e.xlbd.Output(), "tables_replaced=0") {
		t.Fatalf("restart rewrote tables:\n%s", e.xlbd.Output())
	}
	time.Sleep(time.Second)
	res := sess.Stop()
	if len(res.Breaks) > 0 {
		t.Fatalf("%d breaks across the restart, first: %v", len(res.Breaks), res.Breaks[0])
	}
	t.Logf("%d sessions, %d messages, 0 breaks across stop + 1 s without a daemon + start", len(res.Sessions), res.Messages())

	// --cleanup detaches: the VIP is no longer forwarded.
	if err := e.xlbd.Stop(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel2 := context.WithTimeout(ctx, 30*time.Second)
	defer cancel2()
	if err := e.xlbd.Cleanup(cctx); err != nil {
		t.Fatal(err)
	}
	link, err := e.lab.Nodes[0].Run(ctx, "ip", "link", "show", "eth0")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(link), "xdp") {
		t.Fatalf("xdp still attached after --cleanup:\n%s", link)
	}
	if _, err := lab.HTTPGet(ctx, e.lab.Client.NS, e.http4(), time.Second); err == nil {
		t.Fatal("VIP still answers after --cleanup")
	}
}

func TestBadReloadChangesNothing(t *testing.T) {
	e := setup(t, []int{1, 1, 1})
	before := tablesOf(e.services(t))
	if err := os.WriteFile(e.config, []byte("node: {interface: eth0}\nservices:\n  - {name: x, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [nope], table_size: 65536}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.xlbd.Reload(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(e.xlbd.Output(), "reload rejected") {
		if time.Now().After(deadline) {
			t.Fatalf("no rejection logged:\n%s", e.xlbd.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	log := e.xlbd.Output()
	for _, want := range []string{"services[0].table_size", ".yaml:3:", "not prime"} {
		if !strings.Contains(log, want) {
			t.Errorf("rejection does not mention %q:\n%s", want, log)
		}
	}
	if _, err := lab.HTTPGet(context.Background(), e.lab.Client.NS, e.http4(), 2*time.Second); err != nil {
		t.Fatalf("forwarding broken after a rejected reload: %v", err)
	}
	if after := tablesOf(e.services(t)); after != before {
		t.Fatalf("services changed:\n%s\n---\n%s", before, after)
	}
}

// tablesOf describes services without their counters.
func tablesOf(svcs []datapath.ServiceView) string {
	var b strings.Builder
	for _, s := range svcs {
		fmt.Fprintf(&b, "%s id=%d M=%d encap=%d\n", s.Key, s.SvcID, s.TableSize, s.Encap)
		for _, r := range s.Reals {
			fmt.Fprintf(&b, "  %d %s active=%v\n", r.ID, r.Real.Addr, r.Real.Active)
		}
	}
	return b.String()
}

// waitActive polls the data plane until every real of backend a is (in)active in
// the data plane.
func (e *env) waitActive(t *testing.T, a netip.Addr, active bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, match := 0, 0
		for _, s := range e.services(t) {
			for _, r := range s.Reals {
				if r.Real.Addr == a {
					n++
					if r.Real.Active == active {
						match++
					}
				}
			}
		}
		if n > 0 && n == match {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %s not active=%v in the data plane:\n%s", a, active, e.xlbd.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// withHTTPCheck adds an HTTP health check (the backends' own address, port
// 80) to both pools of a generated config.
func withHTTPCheck(cfg string) string {
	cfg = strings.Replace(cfg, "pools:\n", "health_checks:\n  web: {type: http, port: 80, path: /, expect_status: 200, interval: 500ms, timeout: 200ms, rise: 1, fall: 1}\npools:\n", 1)
	for _, p := range []string{lab.Pool4, lab.Pool6} {
		cfg = strings.Replace(cfg, "  "+p+":\n", "  "+p+":\n    health_check: web\n", 1)
	}
	return cfg
}

// TestHealthCheckFailover: a backend that fails its HTTP check leaves the
// tables within two intervals (its tracked flows reselect; flows of the
// others are untouched), and comes back when it recovers.
func TestHealthCheckFailover(t *testing.T) {
	e := setupWith(t, []int{1, 1, 1}, "native", withHTTPCheck)
	ctx := context.Background()
	sess, err := lab.StartTCPSessions(ctx, e.lab.Client.NS, e.echo4(), 60, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	b2 := e.lab.Servers()[1]
	b2.SetHTTPStatus(503)
	downAt := time.Now()
	e.waitActive(t, e.lab.Backends[1].Addr4, false)
	t.Logf("b2 out of the data plane %v after its check started failing", time.Since(downAt).Round(time.Millisecond))
	// The acceptance: from two intervals after the failure on, no new
	// connection reaches it.
	time.Sleep(time.Until(downAt.Add(2 * 500 * time.Millisecond)))
	fresh, err := lab.StartTCPSessions(ctx, e.lab.Client.NS, e.echo4(), 60, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n := fresh.Stop().Counts()["b2"]; n != 0 {
		t.Fatalf("%d new connections reached the failed backend\n%s\n%s", n, e.xlbd.Output(), tablesOf(e.services(t)))
	}
	time.Sleep(time.Second)
	b2.SetHTTPStatus(200)
	e.waitActive(t, e.lab.Backends[1].Addr4, true)
	time.Sleep(500 * time.Millisecond)
	res := sess.Stop()
	for _, b := range res.Breaks {
		if b.Backend != "b2" {
			t.Errorf("session on a healthy backend broke: %v", b)
		}
	}
	again, err := lab.StartTCPSessions(ctx, e.lab.Client.NS, e.echo4(), 60, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n := again.Stop().Counts()["b2"]; n == 0 {
		t.Fatal("the recovered backend gets no new connections")
	}
}
