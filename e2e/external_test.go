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
// kernel); a failed self-check (forwarder detached behind xlbd's back)
// withdraws the node.
func TestExternalBGP(t *testing.T) {
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

func testExternalBGP(t *testing.T, opts lab.XLBDOptions, bopts lab.NodeBIRDOptions) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "nsenter", "ip", "bird", "birdc", "bpftool")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{Nodes: 2, Backends: 2, Routing: lab.RouteNone})
	if _, err := l.StartBIRD(ctx, lab.BIRDOptions{}); err != nil {
		t.Fatal(err)
	}
	daemons := make([]*lab.Daemon, 2)
	configs := make([]string, 2)
	for i := range daemons {
		var err error
		if _, err = l.StartNodeBIRD(ctx, i, bopts); err != nil {
			t.Fatal(err)
		}
		if configs[i], err = l.WriteXLBDConfig(i, opts); err != nil {
			t.Fatal(err)
		}
		if daemons[i], err = l.StartXLBD(ctx, i, configs[i]); err != nil {
			t.Fatal(err)
		}
	}
	vip4 := netip.PrefixFrom(l.VIP4(), 32)
	vip6 := netip.PrefixFrom(l.VIP6(), 128)
	for _, p := range []netip.Prefix{vip4, vip6} {
		took, err := l.WaitRoute(ctx, p, l.NodeNextHops(p.Addr(), 0, 1), 30*time.Second)
		if err != nil {
			t.Fatalf("2-way ECMP for %s: %v", p, err)
		}
		t.Logf("%s: 2-way ECMP route at the router after %v", p, took.Round(time.Millisecond))
	}
	if got := kept(t, l, 0, opts); !strings.Contains(got, l.VIP4().String()) {
		t.Fatalf("n1's VIP routes:\n%s", got)
	}
	if err := l.WaitForwarding(ctx, netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.HTTP), 20*time.Second, daemons...); err != nil {
		t.Fatal(err)
	}

	// Drain n1 and undrain it.
	xlbctl := mustBinary(t, l, "xlbctl")
	if out, err := l.Nodes[0].Run(ctx, xlbctl, "--socket", l.APISocket(0), "node", "drain"); err != nil {
		t.Fatalf("xlbctl node drain: %v\n%s", err, out)
	}
	took, err := l.WaitRoute(ctx, vip4, l.NodeNextHops(vip4.Addr(), 1), 10*time.Second)
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	t.Logf("drain: n1 left the route after %v", took.Round(time.Millisecond))
	if got := kept(t, l, 0, opts); strings.Contains(got, l.VIP4().String()) {
		t.Fatalf("n1 drained, it still keeps the VIP:\n%s", got)
	}
	if out, err := l.Nodes[0].Run(ctx, xlbctl, "--socket", l.APISocket(0), "node", "undrain"); err != nil {
		t.Fatalf("xlbctl node undrain: %v\n%s", err, out)
	}
	if took, err = l.WaitRoute(ctx, vip4, l.NodeNextHops(vip4.Addr(), 0, 1), 10*time.Second); err != nil {
		t.Fatalf("undrain: %v", err)
	}
	t.Logf("undrain: n1 back after %v", took.Round(time.Millisecond))

	// Restart n1's xlbd: the routes stay in the kernel and at the router.
	keep := make(chan error, 1)
	go func() { keep <- l.KeepsRoute(ctx, vip4, l.NodeNextHops(vip4.Addr(), 0, 1), 8*time.Second) }()
	if err := daemons[0].Stop(); err != nil {
		t.Fatal(err)
	}
	if got := kept(t, l, 0, opts); !strings.Contains(got, l.VIP4().String()) {
		t.Fatalf("xlbd stopped, n1 lost the VIP route:\n%s", got)
	}
	time.Sleep(time.Second)
	if daemons[0], err = l.StartXLBD(ctx, 0, configs[0]); err != nil {
		t.Fatal(err)
	}
	if err := <-keep; err != nil {
		t.Fatalf("restart of n1's xlbd moved the route: %v", err)
	}
	if strings.Contains(daemons[0].Output(), "VIP route removed") {
		t.Fatalf("the restarted xlbd removed a route:\n%s", daemons[0].Output())
	}
	t.Log("restart: n1 stayed in the ECMP route throughout")

	// Self-check: detach n2's forwarder behind xlbd's back.
	link := filepath.Join(datapath.BPFFSRoot, l.NodeName(1), "link")
	if out, err := l.Nodes[1].Run(ctx, "bpftool", "link", "detach", "pinned", link); err != nil {
		t.Fatalf("bpftool link detach: %v\n%s", err, out)
	}
	for _, p := range []netip.Prefix{vip4, vip6} {
		if took, err = l.WaitRoute(ctx, p, l.NodeNextHops(p.Addr(), 0), 10*time.Second); err != nil {
			t.Fatalf("self-check failure did not withdraw n2's %s: %v", p, err)
		}
		t.Logf("self-check: n2's forwarder detached, %s withdrawn after %v", p, took.Round(time.Millisecond))
	}
	if got := kept(t, l, 1, opts); strings.Contains(got, l.VIP4().String()) {
		t.Fatalf("n2's self-check fails, it still keeps the VIP:\n%s", got)
	}
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
