package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// TestSyncMovedFlowKeepsBackend: two xlb nodes with connection sync; 200
// long-lived TCP connections go through n1 (the router's route). Then n2
// gets a fourth backend (its Maglev table moves about a quarter of the
// slots to b4) and the route moves to n2, which never saw those
// connections: each keeps its backend, because n1's decisions reached n2's
// connection table. The same steps without sync (a new lab) break the
// sessions whose slot moved.
func TestSyncMovedFlowKeepsBackend(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip")
	with := moveScenario(t, true)
	without := moveScenario(t, false)
	t.Logf("connections broken when the route and the backend set change together: %d of 200 with sync, %d without (%d slots moved)",
		with.breaks, without.breaks, without.moved)
	if with.breaks > 0 {
		t.Fatalf("%d of 200 connections broke with sync", with.breaks)
	}
	if with.moved == 0 || without.breaks == 0 {
		t.Fatalf("without sync nothing broke (%d slots moved): the test shows nothing", without.moved)
	}
	if with.applied < 200 {
		t.Fatalf("n2 applied %.0f decisions, want at least one per session", with.applied)
	}
}

type moveResult struct {
	breaks, moved int
	applied       float64
}

// moveScenario runs the steps of TestSyncMovedFlowKeepsBackend on a new
// two-node lab, with or without node.sync.
func moveScenario(t *testing.T, sync bool) moveResult {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{Nodes: 2, Backends: 4, Routing: lab.RouteNone})
	defer l.Destroy()
	if err := l.SetVIPRoutes(l.VIPPrefixes(), l.Nodes[0]); err != nil {
		t.Fatal(err)
	}
	opts := lab.XLBDOptions{Sync: sync, Exclude: []int{3}}
	daemons := make([]*lab.Daemon, 2)
	configs := make([]string, 2)
	var err error
	for i := range daemons {
		if configs[i], err = l.WriteXLBDConfig(i, opts); err != nil {
			t.Fatal(err)
		}
		if daemons[i], err = l.StartXLBD(ctx, i, configs[i]); err != nil {
			t.Fatal(err)
		}
	}
	echo := netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.TCP)
	if err := l.WaitForwarding(ctx, netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.HTTP), 20*time.Second, daemons...); err != nil {
		t.Fatal(err)
	}
	if sync {
		waitLog(t, daemons[1], "connection sync running", 10*time.Second)
	}
	sess, err := lab.StartTCPSessions(ctx, l.Client.NS, echo, 200, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Stop()
	time.Sleep(time.Second) // the decisions reach n2 within milliseconds

	// n2 gets b4, then the route moves to n2.
	opts.Exclude = nil
	if err := os.WriteFile(configs[1], l.XLBDConfig(1, opts), 0o644); err != nil {
		t.Fatal(err)
	}
	commits := strings.Count(daemons[1].Output(), "config committed")
	if err := daemons[1].Reload(); err != nil {
		t.Fatal(err)
	}
	waitLogCount(t, daemons[1], "config committed", commits+1, 10*time.Second)
	pick, err := l.MaglevPick()
	if err != nil {
		t.Fatal(err)
	}
	locals := sess.Locals()
	if err := l.SetVIPRoutes(l.VIPPrefixes(), l.Nodes[1]); err != nil {
		t.Fatal(err)
	}
	rx := func() string {
		a, _ := l.NodeStats(0)
		b, _ := l.NodeStats(1)
		return fmt.Sprintf("n1 rx %d, n2 rx %d", a.RxPackets, b.RxPackets)
	}
	before := rx()
	time.Sleep(3 * time.Second)
	t.Logf("node counters: at the route change %s; 3 s later %s", before, rx())
	res := sess.Stop()
	broken := map[int]bool{}
	for _, b := range res.Breaks {
		broken[b.Session] = true
	}
	r := moveResult{breaks: len(broken)} // sessions broken (a session may break again after reconnecting)
	for i, s := range res.Sessions {
		if locals[i].IsValid() && pick(locals[i]) != s.Backend {
			r.moved++
		}
	}
	if sync {
		r.applied = metric(t, l, 1, "xlb_sync_flows_applied_total")
		for _, b := range res.Breaks[:min(5, len(res.Breaks))] {
			t.Logf("break with sync: %v", b)
		}
	}
	t.Logf("sync %v: %d sessions, %d messages; %d slots moved on n2; %d sessions broke (%d breaks); n2 applied %.0f decisions",
		sync, len(res.Sessions), res.Messages(), r.moved, r.breaks, len(res.Breaks), r.applied)
	return r
}

// waitLog waits until d's output holds s.
func waitLog(t *testing.T, d *lab.Daemon, s string, timeout time.Duration) {
	t.Helper()
	waitLogCount(t, d, s, 1, timeout)
}

// waitLogCount waits until d's output holds s n times.
func waitLogCount(t *testing.T, d *lab.Daemon, s string, n int, timeout time.Duration) {
	t.Helper()
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if strings.Count(d.Output(), s) >= n {
			return
		}
	}
	t.Fatalf("%q not logged %d times within %v:\n%s", s, n, timeout, d.Output())
}

// metric reads an unlabelled metric from node i's exporter.
func metric(t *testing.T, l *lab.Lab, i int, name string) float64 {
	t.Helper()
	return scrapeNode(t, l, i, name, func(line string) bool { return strings.HasPrefix(line, name+" ") })
}

// scrapeNode returns the value of the first line of node i's metrics that
// match says is the one (name is for the error).
func scrapeNode(t *testing.T, l *lab.Lab, i int, name string, match func(string) bool) float64 {
	t.Helper()
	resp, err := lab.HTTPClient(l.Nodes[i].NS, 2*time.Second).Get("http://127.0.0.1:9469/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); match(line) {
			f, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("metric %s not exported by node %d", name, i)
	return 0
}

// TestSyncDriftVisible: three nodes with sync run the same tables (no
// mismatch anywhere); n2's weights are changed by hand (its file, SIGHUP):
// within 5 s `xlbctl status` on every node flags the mismatch (on n2 both
// peers, on n1 and n3 the peer n2), and the metric says so too.
func TestSyncDriftVisible(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{Nodes: 3, Backends: 4})
	opts := lab.XLBDOptions{Sync: true}
	daemons := make([]*lab.Daemon, 3)
	configs := make([]string, 3)
	var err error
	for i := range daemons {
		if configs[i], err = l.WriteXLBDConfig(i, opts); err != nil {
			t.Fatal(err)
		}
		if daemons[i], err = l.StartXLBD(ctx, i, configs[i]); err != nil {
			t.Fatal(err)
		}
	}
	xlbctl, err := l.Binary("xlbctl")
	if err != nil {
		t.Fatal(err)
	}
	status := func(i int) string { // "" while xlbd is starting
		out, err := l.Nodes[i].Run(ctx, xlbctl, "--socket", l.APISocket(i), "status")
		if err != nil {
			return ""
		}
		return string(out)
	}
	// mismatches waits until xlbctl status on each node shows want[i]
	// peers up and flagged peers, within d.
	wait := func(what string, d time.Duration, up int, want []int) time.Duration {
		start := time.Now()
		var last string
		for time.Since(start) < d {
			ok := true
			for i := range daemons {
				last = status(i)
				if last == "" || strings.Count(last, " up ") != up || strings.Count(last, "MISMATCH") != want[i] {
					ok = false
					break
				}
			}
			if ok {
				return time.Since(start)
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("%s: not within %v; last status:\n%s", what, d, last)
		return 0
	}
	wait("all peers up, same tables", 20*time.Second, 2, []int{0, 0, 0})
	t.Logf("n1's status before:\n%s", status(0))

	opts.Weights = []int{3, 1, 1, 1}
	if err := os.WriteFile(configs[1], l.XLBDConfig(1, opts), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := daemons[1].Reload(); err != nil {
		t.Fatal(err)
	}
	took := wait("the mismatch on every node", 5*time.Second, 2, []int{1, 2, 1})
	t.Logf("mismatch shown on all 3 nodes %v after n2's reload was signalled; n3's status:\n%s", took.Round(time.Millisecond), status(2))
	if v := metricLabelled(t, l, 0, "xlb_sync_peer_fingerprint_mismatch", l.NodeName(1)); v != 1 {
		t.Fatalf("n1's metric for n2's mismatch: %v", v)
	}
}

// metricLabelled reads the value of name whose labels mention label, from
// node i's exporter.
func metricLabelled(t *testing.T, l *lab.Lab, i int, name, label string) float64 {
	t.Helper()
	return scrapeNode(t, l, i, name, func(line string) bool {
		return strings.HasPrefix(line, name+"{") && strings.Contains(line, `"`+label+`"`)
	})
}

// TestSyncSimultaneousChange: on the 3-node BIRD/ECMP lab with 200
// long-lived connections, backend b2 and node n1 die at the same moment,
// then both come back at the same moment, then n1 joins afresh (pins
// removed) while b1's weight changes. 200 UDP flows run beside them, and
// each step notes the backend that answers each flow's datagrams. With
// connection sync no connection to a surviving backend breaks and no UDP
// flow on one moves, nor does a UDP flow that b2 answered before it died
// switch back to it when it returns; the same steps without sync are run
// beside it and their counts reported (the join with a weight change must break some
// connections there and move some UDP flows, or the test shows nothing).
func TestSyncSimultaneousChange(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip", "bird", "birdc")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out strings.Builder
	with, err := lab.RunSimultaneous(ctx, &out, lab.SimultaneousOptions{Sync: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	without, err := lab.RunSimultaneous(ctx, &out, lab.SimultaneousOptions{Sync: false})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Logf("%s", out.String())
	t.Logf("broken on surviving backends (of %d): kill b2+n1: %d with sync, %d without; restore both: %d with sync, %d without; "+
		"fresh join + weight change: %d with sync, %d without; on b2 itself: %d / %d",
		with.Sessions, with.Kill, without.Kill, with.Restore, without.Restore, with.Join, without.Join, with.OnB2, without.OnB2)
	for _, name := range []string{"kill", "restore", "join"} {
		a, b := with.UDPStep(name), without.UDPStep(name)
		t.Logf("UDP flows on surviving backends moved, step %s: %d of %d with sync, %d of %d without", name, a.Moved, a.Flows, b.Moved, b.Flows)
	}
	t.Logf("UDP flows by node (the router's hash): %s with sync, %s without", with.UDPNodes, without.UDPNodes)
	for _, b := range with.Examples {
		t.Errorf("with sync: %v", b)
	}
	if n := with.Kill + with.Restore + with.Join; n > 0 {
		t.Fatalf("%d connections to surviving backends broke with sync", n)
	}
	if len(with.UDP) != 3 {
		t.Fatalf("with sync the UDP flows were measured in %d steps, want 3", len(with.UDP))
	}
	for _, st := range with.UDP {
		if st.Moved > 0 || st.Flows == 0 {
			t.Fatalf("with sync, step %s: %d of %d UDP flows on surviving backends moved: %v", st.Name, st.Moved, st.Flows, st.Examples)
		}
		// The flows b2 answered moved to another backend when it died
		// (the kill step); from then on their entries keep them there,
		// on every node, when b2 comes back.
		if st.Name != "kill" && st.GoneMoved > 0 {
			t.Fatalf("with sync, step %s: %d of the %d UDP flows b2 had answered switched backend again (back to b2)", st.Name, st.GoneMoved, st.GoneFlows)
		}
	}
	if without.UDPMoved() == 0 {
		t.Fatalf("without sync no UDP flow moved in any step: the UDP part shows nothing")
	}
	if without.Join == 0 {
		t.Fatalf("without sync nothing broke when a fresh node joined with a weight change: the test shows nothing")
	}
	if with.OnB2 == 0 {
		t.Fatalf("no connection on b2 broke: b2 was not killed")
	}
}
