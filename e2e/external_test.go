package e2e

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// externalTable and externalDummy are where the test's xlbd keeps the VIP
// routes.
const (
	externalTable = 100
	externalDummy = "xlbvips"
)

// TestExternalBGP runs xlbd with bgp.mode external on two nodes, each with
// its own BIRD exporting what xlbd keeps in kernel table 100 (or, in the
// second run, as addresses of a dummy interface) to the router's BIRD: the
// router gets 2-way ECMP routes for both VIPs; a node drain withdraws that
// node and undrain brings it back; an xlbd restart keeps the routes
// throughout (the forwarder keeps running, the routes stay in the
// kernel); with every backend failing its check (withdraw_when_down) both
// nodes withdraw and come back with the backends; a failed self-check
// (forwarder detached behind xlbd's back) withdraws the node.
func TestExternalBGP(t *testing.T) {
	testenv.RequireNetns(t)
	t.Run("table", func(t *testing.T) {
		testExternalBGP(t, lab.XLBDOptions{RouteTable: externalTable}, lab.NodeBIRDOptions{KernelTable: externalTable})
	})
	t.Run("dummy", func(t *testing.T) {
		if !kernelHasDummy(t) {
			t.Skip("this kernel has no dummy interface driver (CONFIG_DUMMY); the table variant ran")
		}
		testExternalBGP(t, lab.XLBDOptions{DummyInterface: externalDummy}, lab.NodeBIRDOptions{Dummy: externalDummy})
	})
}

// externalEnv is a lab of two nodes, each with xlbd in bgp.mode external
// and a BIRD exporting what it keeps, and the router's BIRD.
type externalEnv struct {
	l          *lab.Lab
	opts       lab.XLBDOptions
	daemons    []*lab.Daemon
	configs    []string
	vip4, vip6 netip.Prefix
}

func testExternalBGP(t *testing.T, opts lab.XLBDOptions, bopts lab.NodeBIRDOptions) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip", "bird", "birdc", "bpftool")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := startExternal(ctx, t, opts, bopts)
	e.drain(ctx, t)
	e.restart(ctx, t)
	e.noUsablePool(ctx, t)
	e.selfCheck(ctx, t)
}

// startExternal builds the lab and waits for 2-way ECMP routes of both VIPs
// at the router. The services withdraw their VIP when no backend is
// usable; every backend has an HTTP health check.
func startExternal(ctx context.Context, t *testing.T, opts lab.XLBDOptions, bopts lab.NodeBIRDOptions) *externalEnv {
	l := newLab(ctx, t, lab.Config{Nodes: 2, Backends: 2, Routing: lab.RouteNone})
	if _, err := l.StartBIRD(ctx, lab.BIRDOptions{}); err != nil {
		t.Fatal(err)
	}
	e := &externalEnv{l: l, opts: opts, daemons: make([]*lab.Daemon, 2), configs: make([]string, 2),
		vip4: netip.PrefixFrom(l.VIP4(), 32), vip6: netip.PrefixFrom(l.VIP6(), 128)}
	for i := range e.daemons {
		if _, err := l.StartNodeBIRD(ctx, i, bopts); err != nil {
			t.Fatal(err)
		}
		cfg := withHTTPCheck(withWithdrawWhenDown(string(l.XLBDConfig(i, opts))))
		e.configs[i] = filepath.Join(l.Dir, "xlbd-external-"+l.Nodes[i].Short+".yaml")
		if err := os.WriteFile(e.configs[i], []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := l.StartXLBD(ctx, i, e.configs[i])
		if err != nil {
			t.Fatal(err)
		}
		e.daemons[i] = d
	}
	for _, p := range []netip.Prefix{e.vip4, e.vip6} {
		took := e.waitNodes(ctx, t, p, "2-way ECMP", 30*time.Second, 0, 1)
		t.Logf("%s: 2-way ECMP route at the router after %v", p, took)
	}
	if got := kept(t, l, 0, opts); !strings.Contains(got, l.VIP4().String()) {
		t.Fatalf("n1's VIP routes:\n%s", got)
	}
	if err := l.WaitForwarding(ctx, netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.HTTP), 20*time.Second, e.daemons...); err != nil {
		t.Fatal(err)
	}
	return e
}

// withWithdrawWhenDown sets withdraw_when_down on every service of a
// generated config.
func withWithdrawWhenDown(cfg string) string {
	lines := strings.Split(cfg, "\n")
	for i, ln := range lines {
		if strings.HasPrefix(ln, "  - {name: ") {
			lines[i] = strings.TrimSuffix(ln, "}") + ", withdraw_when_down: true}"
		}
	}
	return strings.Join(lines, "\n")
}

// waitNodes waits until the router's route to p goes to exactly nodes
// (none: until it has no route).
func (e *externalEnv) waitNodes(ctx context.Context, t *testing.T, p netip.Prefix, what string, timeout time.Duration, nodes ...int) time.Duration {
	t.Helper()
	var want []netip.Addr
	if len(nodes) > 0 {
		want = e.l.NodeNextHops(p.Addr(), nodes...)
	}
	took, err := e.l.WaitRoute(ctx, p, want, timeout)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return took.Round(time.Millisecond)
}

// keeps fails t unless node i's kept routes have (or, with !want, lack)
// the IPv4 VIP.
func (e *externalEnv) keeps(t *testing.T, i int, want bool, when string) {
	t.Helper()
	if got := kept(t, e.l, i, e.opts); strings.Contains(got, e.l.VIP4().String()) != want {
		t.Fatalf("%s: n%d keeps the VIP: %v, want %v:\n%s", when, i+1, !want, want, got)
	}
}

func (e *externalEnv) ctl(ctx context.Context, t *testing.T, i int, args ...string) string {
	t.Helper()
	xlbctl := mustBinary(t, e.l, "xlbctl")
	out, err := e.l.Nodes[i].Run(ctx, append([]string{xlbctl, "--socket", e.l.APISocket(i)}, args...)...)
	if err != nil {
		t.Fatalf("xlbctl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// where is how xlbctl status names where the routes are.
func (e *externalEnv) where() string {
	if e.opts.DummyInterface != "" {
		return "dummy interface " + e.opts.DummyInterface
	}
	return "table " + strconv.Itoa(int(e.opts.RouteTable))
}

// drain drains n1 (its routes go, the router's route is n2's alone) and
// undrains it.
func (e *externalEnv) drain(ctx context.Context, t *testing.T) {
	want := "2 VIP routes in " + e.where() + " for the routing daemon: " + e.vip4.String() + " " + e.vip6.String()
	if st := e.ctl(ctx, t, 0, "status"); !strings.Contains(st, want) {
		t.Fatalf("xlbctl status lacks %q:\n%s", want, st)
	}
	e.ctl(ctx, t, 0, "node", "drain")
	t.Logf("drain: n1 left the route after %v", e.waitNodes(ctx, t, e.vip4, "drain", 10*time.Second, 1))
	e.keeps(t, 0, false, "drained")
	if st := e.ctl(ctx, t, 0, "status"); !strings.Contains(st, "no VIP route in "+e.where()) {
		t.Fatalf("xlbctl status of the drained node:\n%s", st)
	}
	e.ctl(ctx, t, 0, "node", "undrain")
	t.Logf("undrain: n1 back after %v", e.waitNodes(ctx, t, e.vip4, "undrain", 10*time.Second, 0, 1))
}

// restart stops and starts n1's xlbd: the routes stay in the kernel and at
// the router throughout.
func (e *externalEnv) restart(ctx context.Context, t *testing.T) {
	keep := make(chan error, 1)
	go func() { keep <- e.l.KeepsRoute(ctx, e.vip4, e.l.NodeNextHops(e.vip4.Addr(), 0, 1), 8*time.Second) }()
	if err := e.daemons[0].Stop(); err != nil {
		t.Fatal(err)
	}
	e.keeps(t, 0, true, "xlbd stopped")
	time.Sleep(time.Second)
	d, err := e.l.StartXLBD(ctx, 0, e.configs[0])
	if err != nil {
		t.Fatal(err)
	}
	e.daemons[0] = d
	if err := <-keep; err != nil {
		t.Fatalf("restart of n1's xlbd moved the route: %v", err)
	}
	if strings.Contains(d.Output(), "VIP route removed") {
		t.Fatalf("the restarted xlbd removed a route:\n%s", d.Output())
	}
	t.Log("restart: n1 stayed in the ECMP route throughout")
}

// noUsablePool fails every backend's health check: both nodes withdraw
// the VIP (withdraw_when_down); the backends' recovery brings it back.
func (e *externalEnv) noUsablePool(ctx context.Context, t *testing.T) {
	for _, s := range e.l.Servers() {
		s.SetHTTPStatus(503)
	}
	t.Logf("no usable backend: both nodes withdrew after %v", e.waitNodes(ctx, t, e.vip4, "no usable pool", 10*time.Second))
	e.keeps(t, 0, false, "no usable backend")
	for _, s := range e.l.Servers() {
		s.SetHTTPStatus(200)
	}
	t.Logf("backends back: 2-way ECMP after %v", e.waitNodes(ctx, t, e.vip4, "backends back", 10*time.Second, 0, 1))
}

// selfCheck detaches n2's forwarder behind xlbd's back: n2 withdraws.
func (e *externalEnv) selfCheck(ctx context.Context, t *testing.T) {
	link := filepath.Join(datapath.BPFFSRoot, e.l.NodeName(1), "link")
	if out, err := e.l.Nodes[1].Run(ctx, "bpftool", "link", "detach", "pinned", link); err != nil {
		t.Fatalf("bpftool link detach: %v\n%s", err, out)
	}
	for _, p := range []netip.Prefix{e.vip4, e.vip6} {
		t.Logf("self-check: n2's forwarder detached, %s withdrawn after %v", p, e.waitNodes(ctx, t, p, "self-check failure", 10*time.Second, 0))
	}
	e.keeps(t, 1, false, "self-check failing")
}

// kernelHasDummy reports whether a dummy interface can be made here (in a
// namespace of its own, removed with it).
func kernelHasDummy(t *testing.T) bool {
	t.Helper()
	ns := "xlbdummyprobe" + strconv.Itoa(os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	out, err := exec.Command("nsenter", "--net=/run/netns/"+ns, "ip", "link", "add", "d0", "type", "dummy").CombinedOutput()
	if err != nil {
		t.Logf("no dummy interface: %v: %s", err, out)
	}
	return err == nil
}

// kept lists what node i's xlbd keeps for its BIRD: xlb's routes (proto
// 250) of the test's table, or the dummy interface's addresses.
func kept(t *testing.T, l *lab.Lab, i int, opts lab.XLBDOptions) string {
	t.Helper()
	var all string
	for _, fam := range []string{"-4", "-6"} {
		args := []string{"ip", fam, "route", "show", "table", strconv.Itoa(externalTable), "proto", "250"}
		if opts.DummyInterface != "" {
			args = []string{"ip", fam, "addr", "show", "dev", opts.DummyInterface}
		}
		out, err := l.Nodes[i].Run(context.Background(), args...)
		if err != nil {
			t.Fatalf("ip route show table: %v\n%s", err, out)
		}
		all += string(out)
	}
	return all
}
