package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// TestSyncPersistentClientMoves: two nodes with connection sync, the echo
// service rr and persistent for 60 s. Six clients each open a connection
// through n1, which gives them templates on rr's turns; the templates
// reach n2 before it has seen a packet of theirs. The route moves to n2,
// and each client's new connections, opened in the reverse order (n2's
// own rr would hand out other backends), reach the client's backend.
func TestSyncPersistentClientMoves(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{Nodes: 2, Backends: 3, Routing: lab.RouteNone})
	defer l.Destroy()
	if err := l.SetVIPRoutes(l.VIPPrefixes(), l.Nodes[0]); err != nil {
		t.Fatal(err)
	}
	echo := netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.TCP)
	daemons := make([]*lab.Daemon, 2)
	for i := range daemons {
		cfg := persistentEcho(t, string(l.XLBDConfig(i, lab.XLBDOptions{Sync: true})), echo)
		path := fmt.Sprintf("%s/xlbd-%d.yaml", t.TempDir(), i)
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
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
	waitLog(t, daemons[1], "connection sync running", 10*time.Second)
	clients := make([]netip.Addr, 6)
	for i := range clients {
		clients[i] = netip.AddrFrom4([4]byte{10, 99, 0, byte(40 + i)})
		if out, err := l.Client.Run(ctx, "ip", "addr", "add", clients[i].String()+"/24", "dev", "eth0"); err != nil {
			t.Fatalf("add %s: %v %s", clients[i], err, out)
		}
	}
	first := make([]string, len(clients))
	for i, c := range clients {
		e := openEchoFrom(t, l.Client.NS, c, echo)
		e.c.Close()
		first[i] = e.backend
	}
	xlbctl, err := l.Binary("xlbctl")
	if err != nil {
		t.Fatal(err)
	}
	templates := func() string { // n2's count: "N in use of M"
		out, _ := l.Nodes[1].Run(ctx, xlbctl, "--socket", l.APISocket(1), "conntrack", "--templates")
		return regexp.MustCompile(`\d+ in use of`).FindString(string(out))
	}
	want := fmt.Sprintf("%d in use of", len(clients))
	deadline := time.Now().Add(5 * time.Second)
	for templates() != want {
		if time.Now().After(deadline) {
			n1, _ := l.Nodes[0].Run(ctx, xlbctl, "--socket", l.APISocket(0), "conntrack", "--templates")
			m, _ := l.Nodes[1].Run(ctx, "curl", "-s", "http://127.0.0.1:9469/metrics")
			var syncLines []string
			for _, line := range strings.Split(string(m), "\n") {
				if strings.HasPrefix(line, "xlb_sync") {
					syncLines = append(syncLines, line)
				}
			}
			t.Fatalf("n2's templates 5 s after n1 made %d: %q\nn1's:\n%s\nn2's sync metrics:\n%s", len(clients), templates(), n1, strings.Join(syncLines, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := l.SetVIPRoutes(l.VIPPrefixes(), l.Nodes[1]); err != nil {
		t.Fatal(err)
	}
	rx := func(i int) uint64 { s, _ := l.NodeStats(i); return s.RxPackets }
	before := rx(1)
	for i := len(clients) - 1; i >= 0; i-- {
		for k := 0; k < 2; k++ {
			e := openEchoFrom(t, l.Client.NS, clients[i], echo)
			e.c.Close()
			if e.backend != first[i] {
				t.Fatalf("client %s: through n1 on %s, through n2 on %s (backends through n1: %v)", clients[i], first[i], e.backend, first)
			}
		}
	}
	if rx(1) == before {
		t.Fatal("n2 received nothing after the route moved: the test shows nothing")
	}
	t.Logf("6 clients kept their backends %v through n2, which held their templates from n1", first)
}

// persistentEcho makes the echo service of an xlbd config rr and
// persistent for 60 s.
func persistentEcho(t *testing.T, cfg string, echo netip.AddrPort) string {
	t.Helper()
	var out []string
	found := false
	for _, line := range strings.Split(cfg, "\n") {
		if strings.Contains(line, fmt.Sprintf("vip: %q, port: %d, protocol: tcp", echo.Addr(), echo.Port())) {
			line = strings.TrimSuffix(line, "}") + ", scheduler: rr, persistence: {timeout: 60s}}"
			found = true
		}
		out = append(out, line)
	}
	if !found {
		t.Fatalf("no echo service in the config:\n%s", cfg)
	}
	return strings.Join(out, "\n")
}
