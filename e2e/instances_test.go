package e2e

import (
	"context"
	"encoding/json"
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

// instance is one of several xlbd of a lab node.
type instance struct {
	name, config string
	d            *lab.Daemon
}

// startInstance writes the config of opts (services of vip only) and
// starts xlbd with --config and nothing else.
func startInstance(ctx context.Context, t *testing.T, l *lab.Lab, opts lab.XLBDOptions, vip netip.Addr) *instance {
	t.Helper()
	for _, s := range l.DefaultServices(lab.Ports{}, "", "") {
		if s.VIP == vip {
			opts.Services = append(opts.Services, s)
		}
	}
	in := &instance{name: l.NodeName(0)}
	if opts.Instance != "" {
		in.name += "-" + opts.Instance
	}
	in.config = filepath.Join(l.Dir, in.name+".yaml")
	if err := os.WriteFile(in.config, l.XLBDConfig(0, opts), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := l.StartXLBDInstance(ctx, 0, in.name, in.config)
	if err != nil {
		t.Fatal(err)
	}
	in.d = d
	return in
}

// instanceStatus is xlbctl --node NAME -o json status.
func instanceStatus(t *testing.T, l *lab.Lab, name string) map[string]any {
	t.Helper()
	bin, err := l.Binary("xlbctl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := l.Nodes[0].Run(context.Background(), bin, "--node", name, "-o", "json", "status")
	var st map[string]any
	if err != nil || json.Unmarshal(out, &st) != nil {
		t.Fatalf("xlbctl --node %s status: %v\n%s", name, err, out)
	}
	return st
}

// TestTwoInstancesOneHost: two xlbd on two interfaces of one host, each
// with its own VIP, started with --config alone, both forward (each VIP's
// packets counted by its own instance); the second finds the default
// metrics address taken, starts anyway and says so; xlbctl --node reaches
// each; a third whose VIPs overlap the first's is refused before it
// touches the data plane.
func TestTwoInstancesOneHost(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vipA, vipB := netip.MustParseAddr("10.200.0.1"), netip.MustParseAddr("10.200.0.2")
	l := newLab(ctx, t, lab.Config{VIPs: []netip.Addr{vipA, vipB}, Routing: lab.RouteNone, SecondIface: true})
	n := l.Nodes[0]
	if err := l.SetVIPRoutesVia([]netip.Prefix{netip.PrefixFrom(vipA, 32)}, n.Addr4); err != nil {
		t.Fatal(err)
	}
	if err := l.SetVIPRoutesVia([]netip.Prefix{netip.PrefixFrom(vipB, 32)}, n.Second.Addr4); err != nil {
		t.Fatal(err)
	}
	a := startInstance(ctx, t, l, lab.XLBDOptions{}, vipA)
	if err := l.WaitForwarding(ctx, netip.AddrPortFrom(vipA, lab.DefaultPorts.HTTP), 20*time.Second, a.d); err != nil {
		t.Fatal(err)
	}
	b := startInstance(ctx, t, l, lab.XLBDOptions{Instance: "b"}, vipB)
	if err := l.WaitForwarding(ctx, netip.AddrPortFrom(vipB, lab.DefaultPorts.HTTP), 20*time.Second, b.d); err != nil {
		t.Fatal(err)
	}
	for _, in := range []struct {
		inst *instance
		vip  netip.Addr
	}{{a, vipA}, {b, vipB}} {
		r := lab.HTTPLoad(ctx, l.Client.NS, netip.AddrPortFrom(in.vip, lab.DefaultPorts.HTTP), 60, 4)
		if r.OK() != 60 || len(r.Counts) != 3 {
			t.Fatalf("%s: %d of 60 answered, by %v (%v)", in.vip, r.OK(), r.Counts, r.FirstErrors)
		}
		pinned, err := datapath.OpenPinned(filepath.Join(datapath.BPFFSRoot, in.inst.name))
		if err != nil {
			t.Fatal(err)
		}
		svcs, err := pinned.Services()
		pinned.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range svcs {
			if s.Key.Addr != in.vip {
				t.Fatalf("instance %s holds VIP %v", in.inst.name, s.Key)
			}
			if s.Key.Port == lab.DefaultPorts.HTTP && s.Counters.NewFlows < 60 {
				t.Fatalf("instance %s counted %d new flows for %v, want >= 60", in.inst.name, s.Counters.NewFlows, s.Key)
			}
		}
		t.Logf("%s: 60 requests answered by %v through instance %s (%s)", in.vip, r.Counts, in.inst.name, in.inst.d.Node.Short)
	}
	checkMetricsNote(t, l, a, b)
	checkOverlapRefused(ctx, t, l, vipA)
}

// checkMetricsNote: the first instance serves the default metrics
// address, the second says it needs node.metrics_addr (log and status).
func checkMetricsNote(t *testing.T, l *lab.Lab, a, b *instance) {
	t.Helper()
	if st := instanceStatus(t, l, a.name); st["metrics_addr"] != "127.0.0.1:9469" {
		t.Fatalf("first instance: metrics %v", st)
	}
	st := instanceStatus(t, l, b.name)
	note, _ := st["metrics_note"].(string)
	if st["metrics_addr"] != "" || !strings.Contains(note, "set node.metrics_addr") || st["node"] != b.name {
		t.Fatalf("second instance's status: %v", st)
	}
	if !strings.Contains(b.d.Output(), "level=WARN msg=\"metrics not served: the default address 127.0.0.1:9469 is in use") {
		t.Fatalf("second instance's log does not say its metrics need node.metrics_addr:\n%s", b.d.Output())
	}
	t.Logf("second instance: %s", note)
}

// checkOverlapRefused starts a third instance whose services take vip, the
// first instance's, and checks it stops with a clear message, attaching
// nothing.
func checkOverlapRefused(ctx context.Context, t *testing.T, l *lab.Lab, vip netip.Addr) {
	t.Helper()
	c := startInstance(ctx, t, l, lab.XLBDOptions{Instance: "c"}, vip)
	select {
	case <-c.d.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("an instance with an overlapping VIP did not stop:\n%s", c.d.Output())
	}
	c.d.Kill()
	out := c.d.Output()
	want := "VIPs overlap with another xlb instance on this host: " + vip.String() + ":80/tcp is instance " + l.NodeName(0) + "'s " + vip.String() + ":80/tcp (on eth0)"
	if !strings.Contains(out, want) || strings.Contains(out, "attached forwarder") {
		t.Fatalf("third instance's output does not say %q (or it attached):\n%s", want, out)
	}
	if _, err := os.Stat(filepath.Join(datapath.BPFFSRoot, c.name)); err == nil {
		t.Fatalf("the refused instance made its pin directory")
	}
	t.Logf("refused: %s", lastLine(out, "overlap"))
}
