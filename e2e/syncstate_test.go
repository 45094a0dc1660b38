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

// syncPair starts xlbd (with connection sync, or not) on both nodes of a two-node
// lab, each with the config edit makes of the generated one, the route
// to the VIPs via n1, and waits until both forward and n2 syncs.
func syncPair(ctx context.Context, t *testing.T, l *lab.Lab, sync bool, edit func(string) string) []*lab.Daemon {
	t.Helper()
	if err := l.SetVIPRoutes(l.VIPPrefixes(), l.Nodes[0]); err != nil {
		t.Fatal(err)
	}
	daemons := make([]*lab.Daemon, 2)
	for i := range daemons {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("xlbd-%d.yaml", i))
		if err := os.WriteFile(path, []byte(edit(string(l.XLBDConfig(i, lab.XLBDOptions{Sync: sync})))), 0o644); err != nil {
			t.Fatal(err)
		}
		var err error
		if daemons[i], err = l.StartXLBD(ctx, i, path); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.WaitForwarding(ctx, netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.HTTP), 20*time.Second, daemons...); err != nil {
		t.Fatal(err)
	}
	if sync {
		waitLog(t, daemons[1], "connection sync running", 10*time.Second)
	}
	return daemons
}

// nodeStats reads node i's forwarder counters from its pins.
func nodeStats(t *testing.T, l *lab.Lab, i int) map[string]uint64 {
	t.Helper()
	p, err := datapath.OpenPinned(filepath.Join(datapath.BPFFSRoot, l.NodeName(i)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// natEchoPort is the VIP port of TestSyncNATFlowMoves' NAT echo service.
const natEchoPort = 7007

// TestSyncNATFlowMoves: two nodes with connection sync and a NAT TCP echo
// service (VIP port 7007 to the backends' 8007). 40 long-lived sessions
// go through n1, and the backends route the clients through n1. Then the
// backends' replies move to n2 (their route to the client), while the
// clients still send through n1: n2 never saw a packet of these flows,
// and rewrites their replies to the VIP from the NAT entries n1's records
// gave it. Then the clients' route moves to n2 as well. No session breaks,
// and n2 rewrote replies. Without sync (a new lab) the sessions break
// when their replies move.
func TestSyncNATFlowMoves(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip")
	with := natMoveScenario(t, true)
	without := natMoveScenario(t, false)
	t.Logf("NAT sessions broken when their replies, then their packets, moved to n2: %d of 40 with sync, %d without; "+
		"replies n2 rewrote in the 3 s after the replies moved: %d with sync", with.breaks, without.breaks, with.replies)
	if with.breaks > 0 {
		t.Fatalf("%d NAT sessions broke with sync", with.breaks)
	}
	if with.replies < 40*10 {
		t.Fatalf("n2 rewrote %d replies in 3 s of 40 sessions' replies through it: it did not serve them", with.replies)
	}
	if without.breaks == 0 {
		t.Fatal("without sync no NAT session broke: the test shows nothing")
	}
}

type natMoveResult struct {
	breaks  int
	replies uint64
}

// natMoveScenario runs the steps of TestSyncNATFlowMoves on a new lab.
func natMoveScenario(t *testing.T, sync bool) natMoveResult {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{Nodes: 2, Backends: 3, Routing: lab.RouteNone})
	defer l.Destroy()
	var pool []string
	for _, b := range l.Backends {
		if _, err := lab.StartServers(b, nil, natPorts); err != nil {
			t.Fatal(err)
		}
		pool = append(pool, fmt.Sprintf("{address: %q, port: %d}", b.Addr4, natPorts.TCP))
	}
	backendsVia := func(n int) {
		for _, b := range l.Backends {
			r := []string{"ip", "route", "replace", l.Client.Addr4.String() + "/32", "via", l.Nodes[n].Addr4.String()}
			if out, err := b.Run(ctx, r...); err != nil {
				t.Fatalf("%s: %v: %s", strings.Join(r, " "), err, out)
			}
		}
	}
	backendsVia(0)
	syncPair(ctx, t, l, sync, func(cfg string) string {
		cfg = strings.Replace(cfg, "pools:\n", "pools:\n  natecho: {backends: ["+strings.Join(pool, ", ")+"]}\n", 1)
		return cfg + fmt.Sprintf("  - {name: natecho, vip: %q, port: %d, protocol: tcp, pools: [natecho], method: nat}\n", l.VIP4(), natEchoPort)
	})
	old := lab.TCPTimeout
	lab.TCPTimeout = 2 * time.Second
	defer func() { lab.TCPTimeout = old }()
	sess, err := lab.StartTCPSessions(ctx, l.Client.NS, netip.AddrPortFrom(l.VIP4(), natEchoPort), 40, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Stop()
	time.Sleep(time.Second) // n1's records reach n2 within milliseconds
	rewritten := func() uint64 { st := nodeStats(t, l, 1); return st["nat_reply"] + st["nat_reply_pass"] }
	before := rewritten()
	backendsVia(1)
	time.Sleep(3 * time.Second)
	r := natMoveResult{replies: rewritten() - before}
	if err := l.SetVIPRoutes(l.VIPPrefixes(), l.Nodes[1]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	res := sess.Stop()
	broken := map[int]bool{}
	for _, b := range res.Breaks {
		broken[b.Session] = true
		if sync && len(broken) <= 3 {
			t.Logf("with sync: break %v", b)
		}
	}
	r.breaks = len(broken)
	t.Logf("sync %v: %d sessions, %d messages, per backend %v", sync, len(res.Sessions), res.Messages(), res.Counts())
	return r
}

// TestSyncLBLCDestinationMoves: two nodes with connection sync, the echo
// service lblc over three backends of weight 1. Through n1, three
// long-lived connections: the first two go to the destination's first
// backend, the third finds it overloaded and moves the destination to
// another one (n1's entry changes). The route moves to n2, which never
// scheduled the service: its new connections go to n1's backend for the
// destination (n2's own wlc would take the least loaded, which is
// neither), while that backend is not overloaded.
func TestSyncLBLCDestinationMoves(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{Nodes: 2, Backends: 3, Routing: lab.RouteNone})
	defer l.Destroy()
	echo := netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.TCP)
	syncPair(ctx, t, l, true, func(cfg string) string { return schedEcho(t, cfg, echo, "scheduler: lblc") })
	var got []string
	for range 3 {
		e := openEcho(t, l.Client.NS, echo)
		defer e.c.Close()
		got = append(got, e.backend)
	}
	if got[0] != got[1] || got[2] == got[0] {
		t.Fatalf("through n1: backends %v, want two on one, the third moved to another", got)
	}
	time.Sleep(time.Second)
	if err := l.SetVIPRoutes(l.VIPPrefixes(), l.Nodes[1]); err != nil {
		t.Fatal(err)
	}
	rx := func() uint64 { s, _ := l.NodeStats(1); return s.RxPackets }
	seen := rx()
	e := openEcho(t, l.Client.NS, echo)
	defer e.c.Close()
	if rx() == seen {
		t.Fatal("n2 received nothing after the route moved: the test shows nothing")
	}
	if e.backend != got[2] {
		t.Fatalf("through n2 the destination went to %s, want n1's %s (n1 sent %v)", e.backend, got[2], got)
	}
	t.Logf("through n1: %v; through n2, which never scheduled it: %s, n1's choice", got, e.backend)
}

// schedEcho adds a scheduler setting (say "scheduler: lblc") to the echo
// service of an xlbd config.
func schedEcho(t *testing.T, cfg string, echo netip.AddrPort, set string) string {
	t.Helper()
	var out []string
	found := false
	for _, line := range strings.Split(cfg, "\n") {
		if strings.Contains(line, fmt.Sprintf("vip: %q, port: %d, protocol: tcp", echo.Addr(), echo.Port())) {
			line = strings.TrimSuffix(line, "}") + ", " + set + "}"
			found = true
		}
		out = append(out, line)
	}
	if !found {
		t.Fatalf("no echo service in the config:\n%s", cfg)
	}
	return strings.Join(out, "\n")
}
