package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/testenv"
)

// newTestLab builds a lab for t and destroys it (checking nothing is left)
// when t ends.
func newTestLab(t *testing.T, cfg Config) *Lab {
	t.Helper()
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	l, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Destroy(); err != nil {
			t.Errorf("Destroy: %v", err)
		}
		if left, err := Leftovers(l.Prefix); err != nil || len(left) > 0 {
			t.Errorf("after Destroy: namespaces %v left (%v)", left, err)
		}
	})
	return l
}

func TestDirectTopology(t *testing.T) {
	l := newTestLab(t, Config{Routing: RouteToBackend})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srvs, err := l.StartServers(Ports{})
	if err != nil {
		t.Fatal(err)
	}
	want := l.Backends[0].Short
	for _, vip := range l.VIPs {
		t.Run("http-"+vip.String(), func(t *testing.T) {
			res := HTTPLoad(ctx, l.Client.NS, netip.AddrPortFrom(vip, DefaultPorts.HTTP), 50, 8)
			if res.Errors > 0 || res.Counts[want] != 50 {
				t.Fatalf("50 requests to %v: counts %v, %d errors %v", vip, res.Counts, res.Errors, res.FirstErrors)
			}
		})
		t.Run("udp-"+vip.String(), func(t *testing.T) {
			res, err := UDPFlows(ctx, l.Client.NS, netip.AddrPortFrom(vip, DefaultPorts.UDP), 8, 5)
			if err != nil {
				t.Fatal(err)
			}
			if res.Lost() > 0 || res.Counts()[want] != 40 || len(res.Split()) > 0 {
				t.Fatalf("udp to %v: counts %v, lost %d, flows %+v", vip, res.Counts(), res.Lost(), res.Flows)
			}
		})
		t.Run("tcp-"+vip.String(), func(t *testing.T) {
			s, err := StartTCPSessions(ctx, l.Client.NS, netip.AddrPortFrom(vip, DefaultPorts.TCP), 4, 20*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			res := s.Stop()
			if len(res.Breaks) > 0 || res.Messages() < 4*5 || res.Counts()[want] != 4 {
				t.Fatalf("tcp sessions to %v: %d messages, counts %v, breaks %v", vip, res.Messages(), res.Counts(), res.Breaks)
			}
		})
	}
	if got := srvs[0].HTTPRequests(); got != 100 {
		t.Errorf("%s counted %d VIP requests, want 100", want, got)
	}
	for _, s := range srvs[1:] {
		if s.HTTPRequests() != 0 {
			t.Errorf("%s counted %d VIP requests, want 0", s.Name, s.HTTPRequests())
		}
	}
}

func TestLeftoversFound(t *testing.T) {
	testenv.RequireNetns(t)
	prefix := NewPrefix()
	ns, err := createNS(prefix + "x")
	if err != nil {
		t.Fatal(err)
	}
	ns.close()
	t.Cleanup(func() { deleteNS(prefix + "x") })
	if _, err := os.Stat(filepath.Join(NetnsDir, prefix+"x")); err != nil {
		t.Fatal(err)
	}
	got, err := Cleanup(prefix)
	if err != nil || len(got) != 1 || got[0] != prefix+"x" {
		t.Fatalf("Cleanup(%q) = %v, %v", prefix, got, err)
	}
	if left, _ := Leftovers(prefix); len(left) > 0 {
		t.Fatalf("left: %v", left)
	}
}

func TestMultipathRoutes(t *testing.T) {
	l := newTestLab(t, Config{Nodes: 2, Backends: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Default routing: every VIP via both nodes.
	routes, err := l.VIPRoutes(l.VIPPrefixes())
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != len(l.VIPs) {
		t.Fatalf("VIP routes %+v, want one per VIP %v", routes, l.VIPs)
	}
	for _, r := range routes {
		want := []netip.Addr{l.Nodes[0].Addr(r.Prefix.Addr()), l.Nodes[1].Addr(r.Prefix.Addr())}
		if !slices.Equal(r.NextHops, want) {
			t.Errorf("route %v via %v, want via %v", r.Prefix, r.NextHops, want)
		}
	}
	for k, want := range map[string]string{
		"net.ipv4.fib_multipath_hash_policy": "3", "net.ipv6.fib_multipath_hash_policy": "3",
		"net.ipv4.fib_multipath_hash_fields": "55", "net.ipv6.fib_multipath_hash_fields": "55",
		"net.ipv4.ip_forward": "1", "net.ipv6.conf.all.forwarding": "1",
	} {
		if v, err := l.Router.ReadSysctl(k); err != nil || v != want {
			t.Errorf("router %s = %q, %v; want %s", k, v, err, want)
		}
	}

	// Both backends hold the VIPs: an ECMP route over them spreads flows.
	if _, err := l.StartServers(Ports{}); err != nil {
		t.Fatal(err)
	}
	if err := l.SetVIPRoutes(l.VIPPrefixes(), l.Backends...); err != nil {
		t.Fatal(err)
	}
	for _, vip := range l.VIPs {
		res := HTTPLoad(ctx, l.Client.NS, netip.AddrPortFrom(vip, DefaultPorts.HTTP), 100, 16)
		if res.Errors > 0 || res.Counts["b1"] == 0 || res.Counts["b2"] == 0 {
			t.Errorf("100 requests to %v over a 2-way multipath route: %v, %d errors %v", vip, res.Counts, res.Errors, res.FirstErrors)
		}
		udp, err := UDPFlows(ctx, l.Client.NS, netip.AddrPortFrom(vip, DefaultPorts.UDP), 32, 3)
		if err != nil {
			t.Fatal(err)
		}
		if udp.Lost() > 0 || len(udp.Split()) > 0 || len(udp.Counts()) != 2 {
			t.Errorf("32 UDP flows to %v: counts %v, lost %d, split flows %v", vip, udp.Counts(), udp.Lost(), udp.Split())
		}
	}

	// One next hop, then none.
	if err := l.SetVIPRoutes(l.VIPPrefixes(), l.Backends[1]); err != nil {
		t.Fatal(err)
	}
	res := HTTPLoad(ctx, l.Client.NS, netip.AddrPortFrom(l.VIP4(), DefaultPorts.HTTP), 20, 4)
	if res.Counts["b2"] != 20 {
		t.Errorf("route via b2 only: %v, %d errors %v", res.Counts, res.Errors, res.FirstErrors)
	}
	if err := l.SetVIPRoutes(l.VIPPrefixes()); err != nil {
		t.Fatal(err)
	}
	if routes, err := l.VIPRoutes(l.VIPPrefixes()); err != nil || len(routes) > 0 {
		t.Errorf("after removing: routes %+v, %v", routes, err)
	}
	if _, err := HTTPGet(ctx, l.Client.NS, netip.AddrPortFrom(l.VIP4(), DefaultPorts.HTTP), time.Second); err == nil {
		t.Errorf("GET with no VIP route succeeded")
	}
}

func TestDoSwitchesOnlyItsThread(t *testing.T) {
	testenv.RequireNetns(t)
	ns, err := createNS(NewPrefix() + "do")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.close(); deleteNS(ns.Name) })
	self := func() string {
		s, _ := os.Readlink("/proc/thread-self/ns/net")
		return s
	}
	var want unix.Stat_t
	if err := unix.Stat(ns.Path(), &want); err != nil {
		t.Fatal(err)
	}
	outside := self()
	var inside string
	if err := ns.Do(func() error { inside = self(); return nil }); err != nil {
		t.Fatal(err)
	}
	if inside != fmt.Sprintf("net:[%d]", want.Ino) {
		t.Errorf("inside Do: %s, want net:[%d]", inside, want.Ino)
	}
	if got := self(); got != outside {
		t.Errorf("after Do the caller is in %s, was %s", got, outside)
	}
	if err := ns.Do(func() error { panic("boom") }); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("panic in Do: err %v", err)
	}
	// Sockets made inside stay inside: a listener on the namespace's
	// loopback is reachable from the namespace only.
	if err := setUp(ns, "lo"); err != nil {
		t.Fatal(err)
	}
	ln, err := ns.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := ns.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial inside: %v", err)
	}
	c.Close()
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Errorf("listener inside %s reachable from the host namespace", ns.Name)
	}
}

func TestLabFeatures(t *testing.T) {
	l := newTestLab(t, Config{Backends: 1})
	for _, h := range l.Hosts() {
		if on, err := h.Feature(h.Iface, FeatureTxCsum); err != nil || on {
			t.Errorf("%s %s tx checksum offload = %v, %v; want off", h.Name, h.Iface, on, err)
		}
	}
	for _, port := range []string{"router", "n1", "b1"} {
		lk, err := l.Switch.nl.LinkByName(port)
		if err != nil {
			t.Fatal(err)
		}
		if x := lk.Attrs().Xdp; x == nil || !x.Attached {
			t.Errorf("switch port %s has no XDP program", port)
		}
		if lk.Attrs().MTU != DefaultLANMTU {
			t.Errorf("switch port %s MTU %d", port, lk.Attrs().MTU)
		}
		if on, err := l.Switch.Feature(port, FeatureGRO); err != nil || on {
			t.Errorf("switch port %s GRO = %v, %v; want off", port, on, err)
		}
	}
	lk, err := l.Client.nl.LinkByName("eth0")
	if err != nil || lk.Attrs().MTU != ClientMTU {
		t.Errorf("client eth0: %v, %v", lk, err)
	}
	for _, k := range []string{"net.ipv4.conf.eth0.arp_ignore", "net.ipv4.conf.eth0.arp_announce", "net.ipv4.conf.all.rp_filter"} {
		v, err := l.Backends[0].ReadSysctl(k)
		want := map[string]string{"net.ipv4.conf.eth0.arp_ignore": "1", "net.ipv4.conf.eth0.arp_announce": "2", "net.ipv4.conf.all.rp_filter": "0"}[k]
		if err != nil || v != want {
			t.Errorf("backend %s = %q, %v; want %s", k, v, err, want)
		}
	}
}
