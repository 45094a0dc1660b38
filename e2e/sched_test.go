package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// schedConfig is one node and one HTTP service over the lab's three
// backends with the given weights and service keys.
func schedConfig(l *lab.Lab, weights [3]int, keys string) string {
	var bs []string
	for i, w := range weights {
		bs = append(bs, fmt.Sprintf("{address: %s, weight: %d}", l.Backends[i].Addr4, w))
	}
	return nodeHeader(l) + "pools:\n  web: {backends: [" + strings.Join(bs, ", ") + "]}\n" +
		"services:\n  - {name: web, vip: " + l.VIP4().String() + ", port: 80, protocol: tcp, pools: [web], " + keys + "}\n"
}

// startSched starts a one-node lab with three backends and xlbd on the
// config cfg gives.
func startSched(ctx context.Context, t *testing.T, cfg func(l *lab.Lab) string) *env {
	t.Helper()
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip")
	l := newLab(ctx, t, lab.Config{Backends: 3})
	e := &env{lab: l, config: l.Dir + "/xlbd-sched.yaml"}
	if err := os.WriteFile(e.config, []byte(cfg(l)), 0o644); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	return e
}

// reloadConfig writes cfg and waits for xlbd to commit it.
func (e *env) reloadConfig(t *testing.T, cfg string) {
	t.Helper()
	before := strings.Count(e.xlbd.Output(), "config committed")
	if err := os.WriteFile(e.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.xlbd.Reload(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(e.xlbd.Output(), "config committed") == before {
		if time.Now().After(deadline) {
			t.Fatalf("reload not committed; log:\n%s", e.xlbd.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// getFrom makes n GETs to target, each on a new connection from src (an
// address of the client), and counts the backends that answered.
func getFrom(t *testing.T, ns *lab.NS, src netip.Addr, target netip.AddrPort, n int) map[string]int {
	t.Helper()
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		return dialFrom(ctx, ns, src, address)
	}
	hc := &http.Client{Timeout: lab.HTTPTimeout, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	counts := map[string]int{}
	for i := range n {
		resp, err := hc.Get("http://" + target.String() + "/")
		if err != nil {
			t.Fatalf("GET %d from %s: %v", i, src, err)
		}
		var buf [64]byte
		k, _ := resp.Body.Read(buf[:])
		resp.Body.Close()
		counts[strings.TrimSpace(string(buf[:k]))]++
	}
	return counts
}

// TestSchedulers: one node, real TCP connections from the client, the
// service's scheduler changed by reloads. rr over 3 equal backends: 300
// new connections -> 100 ± 5 each; wrr 1:2:3 -> shares within 3%;
// maglev-source: one client's 50 connections on one backend; sh with
// source_netmask 24: 10 clients of one /24, 5 connections each, all on
// one backend.
func TestSchedulers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := startSched(ctx, t, func(l *lab.Lab) string { return schedConfig(l, [3]int{1, 1, 1}, "scheduler: rr") })
	l := e.lab

	res := lab.HTTPLoad(ctx, l.Client.NS, e.http4(), 300, 8)
	if res.Errors > 0 {
		t.Fatalf("rr: %d errors: %v", res.Errors, res.FirstErrors)
	}
	t.Logf("rr, 300 connections: %v", res.Counts)
	for _, b := range []string{"b1", "b2", "b3"} {
		if c := res.Counts[b]; c < 95 || c > 105 {
			t.Errorf("rr: %s got %d of 300 connections, want 100 ± 5", b, c)
		}
	}

	e.reloadConfig(t, schedConfig(l, [3]int{1, 2, 3}, "scheduler: wrr"))
	res = lab.HTTPLoad(ctx, l.Client.NS, e.http4(), 600, 8)
	if res.Errors > 0 {
		t.Fatalf("wrr: %d errors: %v", res.Errors, res.FirstErrors)
	}
	checkShares(t, "wrr 1:2:3", res.Counts, []int{1, 2, 3})

	e.reloadConfig(t, schedConfig(l, [3]int{1, 1, 1}, "scheduler: maglev-source"))
	if c := getFrom(t, l.Client.NS, lab.ClientAddr4, e.http4(), 50); len(c) != 1 {
		t.Errorf("maglev-source: one client's 50 connections reached %v, want one backend", c)
	}

	var srcs []netip.Addr
	for i := range 10 {
		a := netip.AddrFrom4([4]byte{10, 99, 0, byte(20 + 17*i)})
		if out, err := l.Client.Run(ctx, "ip", "addr", "add", a.String()+"/24", "dev", "eth0"); err != nil {
			t.Fatalf("add %s: %v %s", a, err, out)
		}
		srcs = append(srcs, a)
	}
	// Before: the /32 hashes spread these clients (else the /24 check
	// below would prove nothing).
	seen := map[string]bool{}
	for _, a := range srcs {
		for b := range getFrom(t, l.Client.NS, a, e.http4(), 1) {
			seen[b] = true
		}
	}
	if len(seen) < 2 {
		t.Fatalf("maglev-source /32: 10 clients all on %v", seen)
	}
	e.reloadConfig(t, schedConfig(l, [3]int{1, 1, 1}, "scheduler: sh, source_netmask: 24"))
	all := map[string]int{}
	for _, a := range srcs {
		for b, n := range getFrom(t, l.Client.NS, a, e.http4(), 5) {
			all[b] += n
		}
	}
	t.Logf("sh /24: 10 clients x 5 connections: %v", all)
	if len(all) != 1 {
		t.Errorf("sh with source_netmask 24: clients of one /24 reached %v, want one backend", all)
	}
}

// echoConn is one open connection to the TCP line-echo service and the
// backend that answers it.
type echoConn struct {
	c       net.Conn
	backend string
}

// openEcho opens a connection to target from ns and learns its backend
// from one echoed line.
func openEcho(t *testing.T, ns *lab.NS, target netip.AddrPort) echoConn {
	t.Helper()
	return openEchoFrom(t, ns, netip.Addr{}, target)
}

// TestLeastConnections: with 30 long-lived connections open, those on one
// backend (b3) are closed; of 10 new connections at least 8 land on that
// backend (lc), and the same with weights 1:2:3 (wlc: b3, weight 3, had
// 15). The connection
// counts come from the data plane (conns.h); closed connections count as
// inactive, which weighs 1/256 of an active one.
func TestLeastConnections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := func(l *lab.Lab, w [3]int, sched string) string {
		return strings.Replace(schedConfig(l, w, "scheduler: "+sched), "port: 80,", fmt.Sprintf("port: %d,", lab.DefaultPorts.TCP), 1) +
			"  - {name: web80, vip: " + l.VIP4().String() + ", port: 80, protocol: tcp, pools: [web]}\n"
	}
	e := startSched(ctx, t, func(l *lab.Lab) string { return cfg(l, [3]int{1, 1, 1}, "lc") })
	l := e.lab
	echo := netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.TCP)
	for _, tc := range []struct {
		sched   string
		weights [3]int
	}{{"lc", [3]int{1, 1, 1}}, {"wlc", [3]int{1, 2, 3}}} {
		t.Run(tc.sched, func(t *testing.T) {
			e.reloadConfig(t, cfg(l, tc.weights, tc.sched))
			var open []echoConn
			per := map[string]int{}
			for range 30 {
				c := openEcho(t, l.Client.NS, echo)
				open = append(open, c)
				per[c.backend]++
			}
			t.Logf("%s: 30 connections: %v", tc.sched, per)
			for i, w := range tc.weights { // the counts steer them by weight
				want := 30 * w / (tc.weights[0] + tc.weights[1] + tc.weights[2])
				if b := fmt.Sprintf("b%d", i+1); per[b] < want-2 || per[b] > want+2 {
					t.Errorf("%s: %s has %d of 30 connections, want %d ± 2", tc.sched, b, per[b], want)
				}
			}
			for _, c := range open {
				if c.backend == "b3" {
					c.c.Close()
				}
			}
			time.Sleep(300 * time.Millisecond) // the FINs pass the forwarder
			landed := map[string]int{}
			for range 10 {
				c := openEcho(t, l.Client.NS, echo)
				landed[c.backend]++
				open = append(open, c)
			}
			t.Logf("%s: 10 new connections after closing b3's: %v", tc.sched, landed)
			if landed["b3"] < 8 {
				t.Errorf("%s: %d of 10 new connections on b3, want at least 8", tc.sched, landed["b3"])
			}
			for _, c := range open {
				c.c.Close()
			}
		})
	}
}

// TestMaglevSourceECMP: three xlb nodes behind the router's ECMP route,
// every service maglev-source. One client's 50 connections (the router
// spreads them over the nodes by their ports) all reach one backend,
// whichever node each went through: the nodes compute the same hash of
// the client address and the same table.
func TestMaglevSourceECMP(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip", "bird", "birdc")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{Nodes: 3, Backends: 4, Routing: lab.RouteNone})
	if _, err := l.StartBIRD(ctx, lab.BIRDOptions{}); err != nil {
		t.Fatal(err)
	}
	opts := lab.XLBDOptions{Weights: []int{1, 1, 1, 1}, BGP: true, ShutdownWait: time.Second}
	for i := range l.Nodes {
		lines := strings.Split(string(l.XLBDConfig(i, opts)), "\n")
		for j, line := range lines {
			if strings.HasPrefix(line, "  - {name: ") { // a service
				lines[j] = strings.TrimSuffix(line, "}") + ", scheduler: maglev-source}"
			}
		}
		cfg := strings.Join(lines, "\n")
		path := filepath.Join(l.Dir, fmt.Sprintf("xlbd-src-%d.yaml", i))
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := l.StartXLBD(ctx, i, path); err != nil {
			t.Fatal(err)
		}
	}
	vip := netip.PrefixFrom(l.VIP4(), 32)
	if _, err := l.WaitRoute(ctx, vip, l.NodeNextHops(vip.Addr(), 0, 1, 2), 30*time.Second); err != nil {
		t.Fatalf("3-way ECMP for %s: %v", vip, err)
	}
	web := netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.HTTP)
	got := getFrom(t, l.Client.NS, lab.ClientAddr4, web, 50)
	nodes := 0
	for i := range l.Nodes {
		p, err := datapath.OpenPinned(filepath.Join(datapath.BPFFSRoot, l.NodeName(i)))
		if err != nil {
			t.Fatal(err)
		}
		svcs, err := p.Services()
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, s := range svcs {
			if s.Key.Addr == web.Addr() && s.Key.Port == web.Port() {
				n += s.Counters.NewFlows
			}
		}
		t.Logf("node %d: %d new flows", i+1, n)
		if n > 0 {
			nodes++
		}
	}
	t.Logf("50 connections of one client: %v", got)
	if nodes < 2 {
		t.Fatalf("the connections went through %d node(s); the test needs ECMP over several", nodes)
	}
	if len(got) != 1 {
		t.Errorf("maglev-source over 3 ECMP nodes: one client's connections reached %v, want one backend", got)
	}
}

// persistNode is nodeHeader with tracked TCP flows idle at most tcp (a
// SYN's or a closing flow's 1 s): a template lives while a connection of
// it does, so the tests keep those under or around their 2 s templates.
func persistNode(l *lab.Lab, tcp string) string {
	return strings.Replace(nodeHeader(l), "conntrack_entries: 65536}",
		"conntrack_entries: 65536, timeouts: {tcp: "+tcp+", tcp_syn: 1s, tcp_fin: 1s}}", 1)
}

// TestPersistentService: services on ports 80 and the echo port, rr, in
// one persistence group with a 2 s timeout (tracked flows idle 1 s at
// most, so closed connections hold no template past it). One client's connections
// (other source ports) reach one backend through both ports while rr's
// cursor turns underneath; after 2 s without a packet the client's next
// connection is rr's choice again: the one after that of a fresh client
// connecting just before it.
func TestPersistentService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keys := "scheduler: rr, persistence: {timeout: 2s, group: shop}"
	e := startSched(ctx, t, func(l *lab.Lab) string {
		return persistNode(l, "1s") + strings.TrimPrefix(schedConfig(l, [3]int{1, 1, 1}, keys), nodeHeader(l)) +
			fmt.Sprintf("  - {name: echo, vip: %s, port: %d, protocol: tcp, pools: [web], %s}\n", l.VIP4(), lab.DefaultPorts.TCP, keys)
	})
	l := e.lab
	echo := netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.TCP)
	a, x := netip.MustParseAddr("10.99.0.30"), netip.MustParseAddr("10.99.0.31")
	for _, src := range []netip.Addr{a, x} {
		if out, err := l.Client.Run(ctx, "ip", "addr", "add", src.String()+"/24", "dev", "eth0"); err != nil {
			t.Fatalf("add %s: %v %s", src, err, out)
		}
	}
	web := getFrom(t, l.Client.NS, a, e.http4(), 20)
	if len(web) != 1 {
		t.Fatalf("one client's 20 connections to port 80 reached %v, want one backend", web)
	}
	var first string
	for b := range web {
		first = b
	}
	for i := range 5 { // the group: the echo port too
		c := openEchoFrom(t, l.Client.NS, a, echo)
		c.c.Close()
		if c.backend != first {
			t.Fatalf("echo connection %d of the client on %s, want %s (the group's template)", i, c.backend, first)
		}
	}
	time.Sleep(2600 * time.Millisecond)
	var bx string
	for b := range getFrom(t, l.Client.NS, x, e.http4(), 1) {
		bx = b
	}
	order := map[string]string{"b1": "b2", "b2": "b3", "b3": "b1"} // rr over the backends by address
	got := getFrom(t, l.Client.NS, a, e.http4(), 3)
	if len(got) != 1 || got[order[bx]] != 3 {
		t.Fatalf("after the timeout the client reached %v, want rr's next choice %s (the fresh client got %s)", got, order[bx], bx)
	}
	t.Logf("template on %s for 25 connections; after the timeout rr chose %s", first, order[bx])
}

// openEchoFrom is openEcho from source address src (invalid: the
// kernel's choice).
func openEchoFrom(t *testing.T, ns *lab.NS, src netip.Addr, target netip.AddrPort) echoConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), lab.TCPTimeout)
	defer cancel()
	c, err := dialFrom(ctx, ns, src, target.String())
	if err != nil {
		t.Fatalf("dial %s from %s: %v", target, src, err)
	}
	c.SetDeadline(time.Now().Add(lab.TCPTimeout))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("echo from %s: %v", src, err)
	}
	name, _, _ := strings.Cut(reply, " ")
	return echoConn{c: c, backend: name}
}

// dialFrom opens a TCP connection to address from ns, from source address
// src (invalid: the kernel's choice).
func dialFrom(ctx context.Context, ns *lab.NS, src netip.Addr, address string) (c net.Conn, err error) {
	err = ns.Do(func() (err error) {
		var d net.Dialer
		if src.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
		}
		c, err = d.DialContext(ctx, "tcp", address)
		return err
	})
	return c, err
}

// templatesInUse is the live templates xlbctl conntrack --templates counts.
func templatesInUse(t *testing.T, e *env) int {
	t.Helper()
	out, err := e.ctl(t, "conntrack", "--templates")
	if err != nil {
		t.Fatalf("conntrack --templates: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(\d+) in use of`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("conntrack --templates:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestIdleSessionHoldsTemplate: the echo service, rr, persistent for 2 s
// (port 80 without persistence),
// established TCP flows idle up to 8 s. A client's open, idle connection
// holds its template past the 2 s: its next connection, 4 s on, reaches
// the same backend although rr's cursor moved. Once its connections are
// closed, the templates return to 0 (within the flows' 8 s and the sweep's
// second), listed and counted live only.
func TestIdleSessionHoldsTemplate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := startSched(ctx, t, func(l *lab.Lab) string {
		return persistNode(l, "8s") + strings.TrimPrefix(schedConfig(l, [3]int{1, 1, 1}, "scheduler: rr"), nodeHeader(l)) +
			fmt.Sprintf("  - {name: echo, vip: %s, port: %d, protocol: tcp, pools: [web], scheduler: rr, persistence: {timeout: 2s}}\n",
				l.VIP4(), lab.DefaultPorts.TCP)
	})
	l := e.lab
	echo := netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.TCP)
	a, x := netip.MustParseAddr("10.99.0.30"), netip.MustParseAddr("10.99.0.31")
	for _, src := range []string{a.String() + "/24", x.String() + "/24"} {
		if out, err := l.Client.Run(ctx, "ip", "addr", "add", src, "dev", "eth0"); err != nil {
			t.Fatalf("add %s: %v %s", src, err, out)
		}
	}
	idle := openEchoFrom(t, l.Client.NS, a, echo)
	defer idle.c.Close()
	if n := templatesInUse(t, e); n != 1 {
		t.Fatalf("%d templates with one client, want 1", n)
	}
	time.Sleep(4 * time.Second) // past the template's 2 s, no packet
	other := openEchoFrom(t, l.Client.NS, x, echo)
	other.c.Close()
	again := openEchoFrom(t, l.Client.NS, a, echo)
	again.c.Close()
	if again.backend != idle.backend {
		t.Fatalf("4 s on, held by an idle connection on %s, the client reached %s (another client got %s)",
			idle.backend, again.backend, other.backend)
	}
	idle.c.Close()
	start := time.Now()
	for n := templatesInUse(t, e); n != 0; n = templatesInUse(t, e) {
		if time.Since(start) > 15*time.Second {
			t.Fatalf("%d templates 15 s after the last connection closed, want 0", n)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("an idle connection held its template 4 s past the 2 s timeout; templates back to 0 %s after the close",
		time.Since(start).Round(100*time.Millisecond))
}
