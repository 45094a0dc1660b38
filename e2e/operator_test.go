package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// newFlows makes new HTTP connections to target until stop is closed and
// returns how many each backend answered.
func newFlows(ctx context.Context, l *lab.Lab, target netip.AddrPort, stop <-chan struct{}) func() (map[string]int, int) {
	var (
		mu     sync.Mutex
		counts = map[string]int{}
		errs   int
		wg     sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			r := lab.HTTPLoad(ctx, l.Client.NS, target, 20, 4)
			mu.Lock()
			for b, n := range r.Counts {
				counts[b] += n
			}
			errs += r.Errors
			mu.Unlock()
		}
	}()
	return func() (map[string]int, int) { wg.Wait(); return maps.Clone(counts), errs }
}

// TestOperatorStateSurvivesRestarts: a backend drained with xlbctl stays
// drained through a restart into the variant build and one back: new
// connections, made all along, never reach it, while the connections it
// had go on unbroken; a node drain survives a restart too (the VIP route
// stays withdrawn until undrain).
func TestOperatorStateSurvivesRestarts(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip", "bird", "birdc")
	variant := buildVariantXLBD(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{Routing: lab.RouteNone})
	_, err := l.StartBIRD(ctx, lab.BIRDOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{lab: l, opts: lab.XLBDOptions{Weights: []int{1, 1, 1}, BGP: true, ShutdownWait: time.Second}}
	if e.config, err = l.WriteXLBDConfig(0, e.opts); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	vip4 := netip.PrefixFrom(l.VIP4(), 32)
	if _, err := l.WaitRoute(ctx, vip4, l.NodeNextHops(vip4.Addr()), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	sess, err := lab.StartTCPSessions(ctx, l.Client.NS, e.echo4(), 30, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	drained := l.Backends[0]
	if out, err := e.ctl(t, "drain", drained.Addr4.String()); err != nil {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	stop := make(chan struct{})
	wait := newFlows(ctx, l, e.http4(), stop)
	normal, err := l.Binary(lab.XLBDBinary)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct{ what, bin string }{{"restart into the variant", variant}, {"restart back", normal}} {
		e.restart(t, s.what, s.bin)
		if !strings.Contains(e.xlbd.Output(), "runtime override restored") {
			t.Fatalf("%s: the drain was not restored:\n%s", s.what, e.xlbd.Output())
		}
		// The next restart follows a second later, whatever the BGP
		// sessions' state: xlbd's stop waits for a half-restarted session
		// to carry its table, so the router keeps the routes.
		time.Sleep(time.Second)
	}
	close(stop)
	counts, errs := wait()
	res := sess.Stop()
	onDrained := 0
	for _, s := range res.Sessions {
		if s.Backend == drained.Short {
			onDrained += s.Messages
		}
	}
	t.Logf("new flows per backend across the restarts %v (%d errors); TCP sessions %v, %d messages on %s, %d breaks",
		counts, errs, res.Counts(), onDrained, drained.Short, len(res.Breaks))
	if counts[drained.Short] != 0 || len(counts) != 2 || errs != 0 {
		t.Errorf("new flows reached the drained backend %s or failed: %v, %d errors", drained.Short, counts, errs)
	}
	if res.Counts()[drained.Short] == 0 || onDrained < 10*res.Counts()[drained.Short] {
		t.Errorf("the drained backend's existing sessions did not go on: %d sessions, %d messages", res.Counts()[drained.Short], onDrained)
	}
	if len(res.Breaks) > 0 {
		t.Errorf("%d TCP breaks, first: %v", len(res.Breaks), res.Breaks[0])
	}
	e.nodeDrainSurvives(ctx, t, vip4, normal)
}

// restart stops xlbd and starts bin on the same config, waiting for its
// first commit.
func (e *env) restart(t *testing.T, what, bin string) {
	t.Helper()
	if err := e.xlbd.Stop(); err != nil {
		t.Fatal(err)
	}
	d, err := e.lab.StartXLBDBinary(context.Background(), 0, e.config, bin)
	if err != nil {
		t.Fatal(err)
	}
	e.xlbd = d
	if err := d.WaitOutput(context.Background(), "config committed", 1, 20*time.Second); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, d.Output())
	}
}

// nodeDrainSurvives drains the node, restarts xlbd and checks that the
// VIP route stays withdrawn and status says drained, then undrains.
func (e *env) nodeDrainSurvives(ctx context.Context, t *testing.T, vip4 netip.Prefix, bin string) {
	t.Helper()
	if out, err := e.ctl(t, "node", "drain"); err != nil {
		t.Fatalf("node drain: %v\n%s", err, out)
	}
	if _, err := e.lab.WaitRoute(ctx, vip4, nil, 10*time.Second); err != nil {
		t.Fatalf("node drain: %v", err)
	}
	e.restart(t, "restart of a drained node", bin)
	if err := e.lab.KeepsRoute(ctx, vip4, nil, 8*time.Second); err != nil {
		t.Fatalf("the drained node announced again after its restart: %v\n%s", err, e.xlbd.Output())
	}
	out, err := e.ctl(t, "-o", "json", "status")
	var st struct{ Drained bool }
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || !st.Drained {
		t.Fatalf("status after the restart does not say drained: %v\n%s", err, out)
	}
	if out, err := e.ctl(t, "node", "undrain"); err != nil {
		t.Fatalf("node undrain: %v\n%s", err, out)
	}
	took, err := e.lab.WaitRoute(ctx, vip4, e.lab.NodeNextHops(vip4.Addr()), 15*time.Second)
	if err != nil {
		t.Fatalf("undrain after the restart: %v", err)
	}
	t.Logf("node drain kept through a restart (route absent 8 s after it); undrain announced again after %v", took.Round(time.Millisecond))
}
