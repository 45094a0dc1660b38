package e2e

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// nodeStatus reads node i's status over its API socket.
func nodeStatus(l *lab.Lab, i int) (*pb.StatusResponse, error) {
	c, err := api.Dial(api.DialOptions{Socket: l.APISocket(i)})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Status(ctx, &pb.StatusRequest{})
}

// waitStatus polls node i's status until ok holds for it (or fails after
// timeout, showing the last status or error).
func waitStatus(t *testing.T, l *lab.Lab, i int, what string, timeout time.Duration, ok func(*pb.StatusResponse) bool) *pb.StatusResponse {
	t.Helper()
	for end := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		st, err := nodeStatus(l, i)
		if err == nil && ok(st) {
			return st
		}
		if time.Now().After(end) {
			t.Fatalf("n%d: %s not reached in %v; status: %v, error %v", i+1, what, timeout, st, err)
		}
	}
}

func probesUp(st *pb.StatusResponse) bool {
	pr := st.GetProber()
	if !pr.GetEnabled() || !pr.GetOk() || len(pr.GetProbes()) == 0 {
		return false
	}
	for _, p := range pr.GetProbes() {
		if !p.GetUp() {
			return false
		}
	}
	return true
}

// announcingNode builds a one-node lab (2 backends) with BIRD on the
// router, starts xlbd with BGP and waits for the node's route to the IPv4
// VIP (returned with its next hops).
func announcingNode(ctx context.Context, t *testing.T) (*lab.Lab, netip.Prefix, []netip.Addr) {
	t.Helper()
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip", "bird", "birdc")
	l := newLab(ctx, t, lab.Config{Backends: 2, Routing: lab.RouteNone})
	if _, err := l.StartBIRD(ctx, lab.BIRDOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := l.WriteXLBDConfig(0, lab.XLBDOptions{BGP: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.StartXLBD(ctx, 0, cfg); err != nil {
		t.Fatal(err)
	}
	vip4 := netip.PrefixFrom(l.VIP4(), 32)
	via := l.NodeNextHops(vip4.Addr(), 0)
	if _, err := l.WaitRoute(ctx, vip4, via, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return l, vip4, via
}

// TestTXBlackHoleWithdraws breaks a node's transmit path while BGP stays up
// (the XDP program of its switch port removed: the port drops what the
// node's native XDP sends, the stack's packets still pass): the transmit
// check and the prober report it, and the node's VIPs leave the router
// within 3 s; with the program back they return.
func TestTXBlackHoleWithdraws(t *testing.T) {
	proberOn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, vip4, via := announcingNode(ctx, t)
	st := waitStatus(t, l, 0, "all probes answered", 10*time.Second, probesUp)
	if !st.GetTxCheck().GetOk() || st.XdpMode != "native" {
		t.Fatalf("tx check before the break: %v (mode %s)", st.GetTxCheck(), st.XdpMode)
	}
	t.Logf("before: tx check ok, %d VIPs probed, e.g. %s in %v", len(st.Prober.Probes), st.Prober.Probes[0].Vip, st.Prober.Probes[0].Latency.AsDuration())

	echo4 := netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.HTTP)
	if res := lab.HTTPLoad(ctx, l.Client.NS, echo4, 300, 8); res.Errors > 0 {
		t.Fatalf("before the break: %d of %d requests failed: %v", res.Errors, res.Requests, res.FirstErrors)
	}
	assertDeliversAfter(t, l, time.Now())
	if err := l.SetPortXDP(l.Nodes[0], false); err != nil {
		t.Fatal(err)
	}
	took, err := l.WaitRoute(ctx, vip4, nil, 3*time.Second)
	if err != nil {
		t.Fatalf("black-holing node not withdrawn: %v", err)
	}
	t.Logf("broken: VIP withdrawn after %v", took.Round(time.Millisecond))
	st = waitStatus(t, l, 0, "probes failing", 5*time.Second, func(s *pb.StatusResponse) bool { return !s.GetProber().GetOk() })
	if tx := st.GetTxCheck(); tx.GetOk() || !strings.Contains(tx.GetDetail(), "has no XDP program") {
		t.Fatalf("tx check while broken: %v", tx)
	}
	if st.GetSelfCheck().GetOk() {
		t.Fatalf("self-check passes while the node black-holes: %v", st.GetSelfCheck())
	}
	t.Logf("broken: tx check %q; probe %s: %s", st.TxCheck.Detail, st.Prober.Probes[0].Vip, st.Prober.Probes[0].Error)

	if err := l.SetPortXDP(l.Nodes[0], true); err != nil {
		t.Fatal(err)
	}
	if took, err = l.WaitRoute(ctx, vip4, via, 10*time.Second); err != nil {
		t.Fatalf("fixed node not announced again: %v", err)
	}
	t.Logf("fixed: VIP announced again after %v", took.Round(time.Millisecond))
	st = waitStatus(t, l, 0, "all probes answered again", 10*time.Second, probesUp)
	if !st.GetTxCheck().GetOk() || !st.GetSelfCheck().GetOk() {
		t.Fatalf("after the fix: tx %v, self-check %v", st.GetTxCheck(), st.GetSelfCheck())
	}
}

// TestModeOnVethWithoutPeerXDP starts xlbd on a node whose switch port runs
// no XDP program, so native XDP_TX frames would be dropped. xdp_mode auto
// picks generic, whose transmit goes through the stack: the transmit check
// and the prober pass and HTTP through the VIP works. xdp_mode native
// starts but reports the problem (self-check and transmit check failing).
func TestModeOnVethWithoutPeerXDP(t *testing.T) {
	proberOn(t)
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{Backends: 2})
	if err := l.SetPortXDP(l.Nodes[0], false); err != nil {
		t.Fatal(err)
	}
	cfg, err := l.WriteXLBDConfig(0, lab.XLBDOptions{XDPMode: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.StartXLBD(ctx, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	http4 := netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.HTTP)
	if err := l.WaitForwarding(ctx, http4, 20*time.Second, d); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, l, 0, "all probes answered", 10*time.Second, probesUp)
	if st.XdpMode != "generic" || !st.GetTxCheck().GetOk() || !st.GetSelfCheck().GetOk() {
		t.Fatalf("auto: mode %s, tx check %v, self-check %v; want generic, both ok", st.XdpMode, st.GetTxCheck(), st.GetSelfCheck())
	}
	res := lab.HTTPLoad(ctx, l.Client.NS, http4, 200, 8)
	if res.Errors > 0 {
		t.Fatalf("auto (generic): %d of %d requests failed: %v", res.Errors, res.Requests, res.FirstErrors)
	}
	t.Logf("auto: picked generic; %d requests served %v; probe %s in %v", res.Requests, res.Counts, st.Prober.Probes[0].Vip, st.Prober.Probes[0].Latency.AsDuration())
	assertDeliversAfter(t, l, time.Now())
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if out, err := l.Nodes[0].Run(ctx, mustBinary(t, l, "xlbd"), "--config", cfg, "--cleanup"); err != nil {
		t.Fatalf("cleanup: %v\n%s", err, out)
	}

	if cfg, err = l.WriteXLBDConfig(0, lab.XLBDOptions{XDPMode: "native"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.StartXLBD(ctx, 0, cfg); err != nil {
		t.Fatal(err)
	}
	st = waitStatus(t, l, 0, "self-check failing", 10*time.Second, func(s *pb.StatusResponse) bool {
		return s.GetSelfCheck().GetCheckedAt() != nil && !s.GetSelfCheck().GetOk()
	})
	if tx := st.GetTxCheck(); st.XdpMode != "native" || tx.GetOk() || !strings.Contains(tx.GetDetail(), "attach an XDP program to the peer veth") {
		t.Fatalf("native: mode %s, tx check %v; want native with the problem named", st.XdpMode, tx)
	}
	t.Logf("native: starts, self-check %q", st.SelfCheck.LastError)
}

// TestProberWithdrawsWhenNothingAnswers breaks delivery where the
// transmit check cannot see it: the backends stop decapsulating (their
// health checks, to their own addresses, still pass). The prober's
// probes go unanswered, the node withdraws within 3 s, and announces
// again once the backends decapsulate again.
func TestProberWithdrawsWhenNothingAnswers(t *testing.T) {
	proberOn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, vip4, via := announcingNode(ctx, t)
	waitStatus(t, l, 0, "all probes answered", 10*time.Second, probesUp)
	if err := l.DetachDecap(ctx); err != nil {
		t.Fatal(err)
	}
	took, err := l.WaitRoute(ctx, vip4, nil, 3*time.Second)
	if err != nil {
		t.Fatalf("node whose probes go unanswered not withdrawn: %v", err)
	}
	st := nodeStatusOrFail(t, l, 0)
	if st.GetProber().GetOk() || !st.GetTxCheck().GetOk() || !strings.Contains(st.GetSelfCheck().GetLastError(), "no VIP answered") {
		t.Fatalf("while unanswered: prober %v, tx %v, self-check %v", st.GetProber(), st.GetTxCheck(), st.GetSelfCheck())
	}
	t.Logf("unanswered: withdrawn after %v; self-check %q", took.Round(time.Millisecond), st.SelfCheck.LastError)
	// Attached again directly: the lab's own detach at Destroy stays the
	// only one registered.
	for _, h := range l.Backends {
		if out, err := h.Run(ctx, mustBinary(t, l, lab.DecapBinary), "attach", h.Iface); err != nil {
			t.Fatalf("attach decap on %s: %v\n%s", h.Short, err, out)
		}
	}
	if took, err = l.WaitRoute(ctx, vip4, via, 10*time.Second); err != nil {
		t.Fatalf("answering again, not announced: %v", err)
	}
	t.Logf("answered again: announced after %v", took.Round(time.Millisecond))
}

func nodeStatusOrFail(t *testing.T, l *lab.Lab, i int) *pb.StatusResponse {
	t.Helper()
	st, err := nodeStatus(l, i)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// assertDeliversAfter waits for a self-check of node 1 after t0 (so the
// transmit counters include the traffic before t0) and fails unless it
// and the transmit check pass: forwarded traffic is judged delivered.
func assertDeliversAfter(t *testing.T, l *lab.Lab, t0 time.Time) {
	t.Helper()
	st := waitStatus(t, l, 0, "a self-check after the load", 5*time.Second, func(s *pb.StatusResponse) bool {
		return s.GetSelfCheck().GetCheckedAt().AsTime().After(t0.Add(time.Second))
	})
	if !st.GetSelfCheck().GetOk() || !st.GetTxCheck().GetOk() {
		t.Fatalf("after forwarding traffic: self-check %v, tx check %v", st.GetSelfCheck(), st.GetTxCheck())
	}
}

func mustBinary(t *testing.T, l *lab.Lab, name string) string {
	t.Helper()
	b, err := l.Binary(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// proberOn runs the daemons the test starts with the blackbox prober every
// second (lab.ProbeInterval).
func proberOn(t *testing.T) {
	old := lab.ProbeInterval
	lab.ProbeInterval = time.Second
	t.Cleanup(func() { lab.ProbeInterval = old })
}
