package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strings"
	"time"
)

// ScaleDemoOptions shape RunScaleDemo.
type ScaleDemoOptions struct {
	Connections int // long-lived TCP connections (default 200)
	BinDir      string
	Prefix      string
}

// RunScaleDemo is the multi-node demo (SPEC F-OPS3, F-CTL4): three xlb
// nodes announce the VIPs over BGP to BIRD on the router, which spreads
// flows over them by ECMP; four backends are health-checked. With long-lived
// connections running it drains a node, kills a backend, kills a node
// (link down, daemon killed), then restores everything, printing after each
// step the router's next hops and what happened to the connections.
func RunScaleDemo(ctx context.Context, w io.Writer, opts ScaleDemoOptions) (err error) {
	if opts.Connections == 0 {
		opts.Connections = 200
	}
	fmt.Fprintln(w, "building the lab: client -> router (BIRD, ECMP) -> LAN -> 3 xlb nodes, 4 backends ...")
	l, err := New(ctx, Config{Prefix: opts.Prefix, Nodes: 3, Backends: 4, Routing: RouteNone, BinDir: opts.BinDir})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintf(w, "\ntearing down lab %s ...\n", l.Prefix)
		if derr := l.Destroy(); derr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", derr))
		}
	}()
	PrintTopology(w, l)
	servers, err := l.StartServers(Ports{})
	if err != nil {
		return err
	}
	if err := l.AttachDecap(ctx); err != nil {
		return err
	}
	if _, err := l.StartBIRD(ctx, BIRDOptions{}); err != nil {
		return err
	}
	check := "health_checks:\n  web: {type: http, port: 80, path: /, expect_status: 200, interval: 500ms, timeout: 300ms, rise: 1, fall: 1}\npools:\n"
	daemons := make([]*Daemon, len(l.Nodes))
	configs := make([]string, len(l.Nodes))
	for i := range l.Nodes {
		cfg := string(l.XLBDConfig(i, XLBDOptions{BGP: true, ShutdownWait: time.Second}))
		cfg = strings.Replace(cfg, "pools:\n", check, 1)
		for _, p := range []string{Pool4, Pool6} {
			cfg = strings.Replace(cfg, "  "+p+":\n", "  "+p+":\n    health_check: web\n", 1)
		}
		configs[i] = fmt.Sprintf("%s/xlbd-%s.yaml", l.Dir, l.Nodes[i].Short)
		if err := os.WriteFile(configs[i], []byte(cfg), 0o644); err != nil {
			return err
		}
		if daemons[i], err = l.StartXLBD(ctx, i, configs[i]); err != nil {
			return err
		}
	}
	vip := netip.PrefixFrom(l.VIP4(), 32)
	all := []int{0, 1, 2}
	if _, err := l.WaitRoute(ctx, vip, l.NodeNextHops(vip.Addr(), all...), 30*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nBIRD learned %s from every node; the router's kernel route: %v\n", vip, route(l, vip))

	old := TCPTimeout
	TCPTimeout = 10 * time.Second // rerouting after a node failure takes the hold time
	defer func() { TCPTimeout = old }()
	sess, err := StartTCPSessions(ctx, l.Client.NS, netip.AddrPortFrom(l.VIP4(), DefaultPorts.TCP), opts.Connections, 100*time.Millisecond)
	if err != nil {
		return err
	}
	defer sess.Stop()
	fmt.Fprintf(w, "%d long-lived TCP connections, one message each 100 ms; first backends: %v\n", opts.Connections, sortedCounts(sess.res.Sessions))
	seen := 0
	step := func(title, what string) {
		time.Sleep(3 * time.Second)
		br := sess.Breaks()
		fmt.Fprintf(w, "\n== %s\n   %s\n   router next hops for %s: %v\n   connections broken in this step: %d\n", title, what, vip, route(l, vip), len(br)-seen)
		for _, b := range br[seen:min(len(br), seen+3)] {
			fmt.Fprintf(w, "     %s (first backend %s)\n", b, sess.res.Sessions[b.Session].Backend)
		}
		seen = len(br)
	}

	xlbctl, err := l.Binary("xlbctl")
	if err != nil {
		return err
	}
	if out, err := l.Nodes[0].Run(ctx, xlbctl, "--socket", l.APISocket(0), "node", "drain"); err != nil {
		return fmt.Errorf("xlbctl node drain: %w: %s", err, out)
	}
	step("drain node n1 (xlbctl node drain)", "n1 announces with GRACEFUL_SHUTDOWN, then withdraws: its flows move to n2/n3, which pick the same backends (Maglev)")

	servers[1].Close()
	step("kill backend b2 (its servers stop)", "the health check fails: b2 leaves every table; its own connections are lost (that is the backend dying), the others continue")

	if err := l.SetLinkUp(l.Nodes[2], false); err != nil {
		return err
	}
	daemons[2].Kill()
	step("kill node n3 (link down, xlbd killed)", "after the hold time BIRD drops n3; the router rehashes its flows to the remaining node(s): they keep their backends")

	if out, err := l.Nodes[0].Run(ctx, xlbctl, "--socket", l.APISocket(0), "node", "undrain"); err != nil {
		return fmt.Errorf("xlbctl node undrain: %w: %s", err, out)
	}
	if s, err := StartServers(l.Backends[1], l.VIPs, Ports{}); err == nil {
		l.mu.Lock()
		l.servers = append(l.servers, s)
		l.mu.Unlock()
	}
	if err := l.SetLinkUp(l.Nodes[2], true); err != nil {
		return err
	}
	if daemons[2], err = l.StartXLBD(ctx, 2, configs[2]); err != nil {
		return err
	}
	if _, err := l.WaitRoute(ctx, vip, l.NodeNextHops(vip.Addr(), all...), 30*time.Second); err != nil {
		return err
	}
	step("restore: undrain n1, b2 back, n3 back", "3-way ECMP again; b2 passes its check and takes new flows")

	res := sess.Stop()
	onB2 := 0
	for _, b := range res.Breaks {
		if res.Sessions[b.Session].Backend == "b2" {
			onB2++
		}
	}
	fmt.Fprintf(w, "\nIn all: %d connections, %d messages answered, %d breaks (%d of them connections to the backend that was killed).\n",
		len(res.Sessions), res.Messages(), len(res.Breaks), onB2)
	if len(res.Breaks) != onB2 {
		return fmt.Errorf("%d connections to live backends broke", len(res.Breaks)-onB2)
	}
	fmt.Fprintln(w, "scale demo OK: node drain, node failure and restore broke no connection to a live backend")
	return nil
}

func route(l *Lab, p netip.Prefix) []netip.Addr {
	r, err := l.KernelRoute(p)
	if err != nil {
		return nil
	}
	return r
}

func sortedCounts(ss []TCPSession) string {
	m := map[string]int{}
	for _, s := range ss {
		m[s.Backend]++
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
