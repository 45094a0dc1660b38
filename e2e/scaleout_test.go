package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// TestScaleOutECMP runs three xlb nodes announcing the VIPs over BGP to
// BIRD, which installs N-way ECMP routes (paper section 3; docs/BGP.md). With
// 100 long-lived connections going: a node drain removes that node's next
// hop within the configured wait and breaks nothing (flows move to other
// nodes, which pick the same backends); an xlbd restart keeps the next hop
// and breaks nothing; a node killed outright (link down, daemon killed)
// leaves the ECMP set after the hold time and its flows continue on other
// nodes (the router also rehashes flows between survivors); undrain and
// restoring the failed node bring them back, again with 0 breaks.
func TestScaleOutECMP(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip", "bird", "birdc")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{Nodes: 3, Backends: 4, Routing: lab.RouteNone})
	bird, err := l.StartBIRD(ctx, lab.BIRDOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = bird
	opts := lab.XLBDOptions{Weights: []int{1, 1, 1, 1}, BGP: true, ShutdownWait: time.Second}
	daemons := make([]*lab.Daemon, 3)
	configs := make([]string, 3)
	for i := range daemons {
		if configs[i], err = l.WriteXLBDConfig(i, opts); err != nil {
			t.Fatal(err)
		}
		if daemons[i], err = l.StartXLBD(ctx, i, configs[i]); err != nil {
			t.Fatal(err)
		}
	}
	vip4 := netip.PrefixFrom(l.VIP4(), 32)
	vip6 := netip.PrefixFrom(l.VIP6(), 128)
	all := []int{0, 1, 2}
	for _, p := range []netip.Prefix{vip4, vip6} {
		took, err := l.WaitRoute(ctx, p, l.NodeNextHops(p.Addr(), all...), 30*time.Second)
		if err != nil {
			t.Fatalf("3-way ECMP for %s: %v", p, err)
		}
		t.Logf("%s: 3-way ECMP route after %v", p, took.Round(time.Millisecond))
	}
	echo := netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.TCP)
	old := lab.TCPTimeout
	lab.TCPTimeout = 10 * time.Second
	defer func() { lab.TCPTimeout = old }()
	sess, err := lab.StartTCPSessions(ctx, l.Client.NS, echo, 200, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	perNode := func() string {
		s := ""
		for i := range l.Nodes {
			st, _ := l.NodeStats(i)
			s += fmt.Sprintf(" n%d:rx=%d", i+1, st.RxPackets)
		}
		return s
	}
	t.Logf("node counters after start:%s", perNode())

	// Drain n1 with xlbctl (over the API socket).
	xlbctl, err := l.Binary("xlbctl")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if out, err := l.Nodes[0].Run(ctx, xlbctl, "--socket", l.APISocket(0), "node", "drain"); err != nil {
			t.Errorf("xlbctl node drain: %v\n%s", err, out)
		}
	}()
	start := time.Now()
	took, err := l.WaitRoute(ctx, vip4, l.NodeNextHops(vip4.Addr(), 1, 2), 10*time.Second)
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	t.Logf("drain: n1 left the ECMP route after %v (shutdown_wait 1s)", took.Round(time.Millisecond))
	if time.Since(start) > 2*time.Second+opts.ShutdownWait {
		t.Errorf("drain took %v, want within 1 s of the configured wait", time.Since(start))
	}
	time.Sleep(time.Second)

	// Restart n2's xlbd: the route keeps n2 (graceful restart), nothing breaks.
	if err := daemons[1].Stop(); err != nil {
		t.Fatal(err)
	}
	keep := make(chan error, 1)
	go func() { keep <- l.KeepsRoute(ctx, vip4, l.NodeNextHops(vip4.Addr(), 1, 2), 6*time.Second) }()
	time.Sleep(500 * time.Millisecond)
	if daemons[1], err = l.StartXLBD(ctx, 1, configs[1]); err != nil {
		t.Fatal(err)
	}
	if err := <-keep; err != nil {
		t.Fatalf("restart of n2 moved the route: %v", err)
	}
	t.Log("restart: n2 stayed in the ECMP route throughout")

	// Undrain n1.
	if out, err := l.Nodes[0].Run(ctx, xlbctl, "--socket", l.APISocket(0), "node", "undrain"); err != nil {
		t.Fatalf("xlbctl node undrain: %v\n%s", err, out)
	}
	if _, err := l.WaitRoute(ctx, vip4, l.NodeNextHops(vip4.Addr(), all...), 15*time.Second); err != nil {
		t.Fatalf("undrain: %v", err)
	}
	t.Log("undrain: n1 back in the ECMP route")
	time.Sleep(time.Second)

	// Kill n3: link down first (so no TCP close reaches BIRD), then the daemon.
	if err := l.SetLinkUp(l.Nodes[2], false); err != nil {
		t.Fatal(err)
	}
	daemons[2].Kill()
	took, err = l.WaitRoute(ctx, vip4, l.NodeNextHops(vip4.Addr(), 0, 1), 15*time.Second)
	if err != nil {
		t.Fatalf("node failure: %v", err)
	}
	t.Logf("node failure: n3 left the ECMP route after %v (hold time 3 s)", took.Round(time.Millisecond))
	time.Sleep(3 * time.Second)

	// Restore n3: link up, a new xlbd (it adopts the pinned forwarder).
	if err := l.SetLinkUp(l.Nodes[2], true); err != nil {
		t.Fatal(err)
	}
	if daemons[2], err = l.StartXLBD(ctx, 2, configs[2]); err != nil {
		t.Fatal(err)
	}
	if took, err = l.WaitRoute(ctx, vip4, l.NodeNextHops(vip4.Addr(), all...), 30*time.Second); err != nil {
		t.Fatalf("restore: %v", err)
	}
	t.Logf("restore: n3 back in the ECMP route after %v", took.Round(time.Millisecond))
	time.Sleep(3 * time.Second)
	res := sess.Stop()
	t.Logf("%d sessions, %d messages; per backend %v;%s", len(res.Sessions), res.Messages(), res.Counts(), perNode())
	if len(res.Breaks) > 0 {
		for _, b := range res.Breaks[:min(5, len(res.Breaks))] {
			t.Errorf("break: %v", b)
		}
		t.Fatalf("%d breaks", len(res.Breaks))
	}

	// Self-check: detach n2's forwarder behind xlbd's back; the
	// self-check fails, xlbd withdraws every VIP and /healthz says so.
	if out, err := l.Nodes[1].Run(ctx, "bpftool", "link", "detach", "pinned", filepath.Join(datapath.BPFFSRoot, l.NodeName(1), "link")); err != nil {
		t.Fatalf("bpftool link detach: %v\n%s", err, out)
	}
	if took, err = l.WaitRoute(ctx, vip4, l.NodeNextHops(vip4.Addr(), 0, 2), 10*time.Second); err != nil {
		t.Fatalf("self-check failure did not withdraw n2: %v", err)
	}
	t.Logf("self-check: n2's forwarder detached, its VIPs withdrawn after %v", took.Round(time.Millisecond))
	hz, err := lab.HTTPClient(l.Nodes[1].NS, 2*time.Second).Get("http://127.0.0.1:9469/healthz")
	if err != nil {
		t.Fatal(err)
	}
	hz.Body.Close()
	if hz.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("healthz of n2 after its self-check failed: %d, want 503", hz.StatusCode)
	}
	if !strings.Contains(daemons[1].Output(), "self-check failed") {
		t.Fatalf("no self-check failure logged:\n%s", daemons[1].Output())
	}
}
