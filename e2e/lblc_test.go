package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/lab"
)

// TestSchedLBLC: one node, the echo service lblc over three backends of
// weight 2, real TCP connections kept open. Every flow of a VIP service
// has the VIP as its destination, so the service has one entry: the
// first backend (by address: wlc's first of equals) takes connections
// until it holds 3 active (overloaded: 3 > 2 while the others hold
// fewer than half their weight), then the second is recorded and keeps
// the destination until it holds 3, then the third, which keeps it
// once no backend is under half its weight. A backend set to weight 0
// is never chosen again. Then `xlbctl services
// --ipvsadm` against the running xlbd shows the scheduler and the
// connection counts of the echo service and the persistence of a UDP
// service, line by line.
func TestSchedLBLC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := startSched(ctx, t, func(l *lab.Lab) string {
		return strings.Replace(schedConfig(l, [3]int{2, 2, 2}, "scheduler: lblc"), "{name: web, vip: "+l.VIP4().String()+", port: 80,",
			fmt.Sprintf("{name: echo, vip: %s, port: %d,", l.VIP4(), lab.DefaultPorts.TCP), 1) +
			fmt.Sprintf("  - {name: web80, vip: %s, port: 80, protocol: tcp, pools: [web]}\n", l.VIP4()) +
			fmt.Sprintf("  - {name: dns, vip: %s, port: %d, protocol: udp, pools: [web], scheduler: wlc, persistence: {timeout: 300s, netmask: 24}}\n",
				l.VIP4(), lab.DefaultPorts.UDP)
	})
	l := e.lab
	// The backends by address, and their names (b1..b3).
	idx := []int{0, 1, 2}
	slices.SortFunc(idx, func(a, b int) int { return l.Backends[a].Addr4.Compare(l.Backends[b].Addr4) })
	name := func(i int) string { return fmt.Sprintf("b%d", idx[i]+1) }
	var want, got []string
	for _, i := range []int{0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2} {
		want = append(want, name(i))
	}
	for range want {
		c := openEcho(t, l.Client.NS, e.echo4())
		defer c.c.Close()
		got = append(got, c.backend)
	}
	t.Logf("11 connections kept open: %v", got)
	if !slices.Equal(got, want) {
		t.Fatalf("lblc sent the connections to %v, want %v", got, want)
	}

	// The third backend's weight set to 0 at run time: never chosen
	// again; wlc picks the first of the two others (3 active each), which
	// keeps the destination (none is under half its weight).
	third := l.Backends[idx[2]].Addr4.String()
	if out, err := e.ctl(t, "weight", third, "0", "--service", "echo"); err != nil {
		t.Fatalf("xlbctl weight %s 0: %v\n%s", third, err, out)
	}
	for i := range 2 {
		c := openEcho(t, l.Client.NS, e.echo4())
		defer c.c.Close()
		if c.backend != name(0) {
			t.Fatalf("connection %d after the weight 0: %s, want %s", i, c.backend, name(0))
		}
	}

	be := func(i int, port uint16, active int) string {
		w := 2
		if i == 2 && port == lab.DefaultPorts.TCP {
			w = 0
		}
		return fmt.Sprintf("  -> %-28s %-7s %-6d %-10d %-10d", netip.AddrPortFrom(l.Backends[idx[i]].Addr4, port), "Tunnel", w, active, 0)
	}
	head := []string{
		"xlb services (1, the layout of ipvsadm -Ln)",
		"Prot LocalAddress:Port Scheduler Flags",
		"  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn",
	}
	echo, dns := lab.DefaultPorts.TCP, lab.DefaultPorts.UDP
	for _, c := range []struct {
		service string
		lines   []string
	}{
		{"echo", []string{fmt.Sprintf("TCP  %s lblc", e.echo4()), be(0, echo, 5), be(1, echo, 3), be(2, echo, 5)}},
		{"dns", []string{fmt.Sprintf("UDP  %s wlc persistent 300 mask 255.255.255.0", netip.AddrPortFrom(l.VIP4(), dns)),
			be(0, dns, 0), be(1, dns, 0), be(2, dns, 0)}},
	} {
		out, err := e.ctl(t, "services", "--ipvsadm", "--service", c.service)
		want := strings.Join(append(slices.Clone(head), c.lines...), "\n") + "\n"
		if err != nil || out != want {
			t.Fatalf("xlbctl services --ipvsadm --service %s: %v\n%s\nwant:\n%s", c.service, err, out, want)
		}
	}
}
