package bgp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	bgppkt "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// The tests in this file run a second GoBGP, in process, as the router: TCP
// on loopback, no privileges needed.

// testLogger logs to t until the test ends (GoBGP's goroutines may log a
// little after Stop returns, when t.Log would panic).
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done atomic.Bool
}

func (w *testWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done.Load() {
		w.t.Log(strings.TrimSuffix(string(b), "\n"))
	}
	return len(b), nil
}

// freePort returns a TCP port free on loopback now.
func freePort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// router is the in-process GoBGP standing in for a router.
type router struct {
	srv      *server.BgpServer
	neighbor netip.Addr
}

// startRouter runs a GoBGP with AS 65000 listening on port, with one passive
// neighbour (the speaker) at neighbor, AS 65001, carrying IPv4 and IPv6
// unicast with graceful restart (helper) enabled.
func startRouter(t *testing.T, port uint16, neighbor netip.Addr, password string) *router {
	t.Helper()
	srv := server.NewBgpServer(server.LoggerOption(slog.New(slog.NewTextHandler(io.Discard, nil)), nil))
	go srv.Serve()
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: 65000, RouterId: "10.255.0.1", ListenPort: int32(port),
		ListenAddresses: []string{neighbor.String()},
	}})
	if err != nil {
		t.Fatalf("start router: %v", err)
	}
	var afis []*api.AfiSafi
	for _, afi := range []api.Family_Afi{api.Family_AFI_IP, api.Family_AFI_IP6} {
		afis = append(afis, &api.AfiSafi{
			Config:            &api.AfiSafiConfig{Family: &api.Family{Afi: afi, Safi: api.Family_SAFI_UNICAST}, Enabled: true},
			MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}},
		})
	}
	err = srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:            &api.PeerConf{NeighborAddress: neighbor.String(), PeerAsn: 65001, AuthPassword: password},
		Transport:       &api.Transport{PassiveMode: true},
		Timers:          &api.Timers{Config: &api.TimersConfig{HoldTime: 9, KeepaliveInterval: 3}},
		GracefulRestart: &api.GracefulRestart{Enabled: true, RestartTime: 30},
		AfiSafis:        afis,
	}})
	if err != nil {
		t.Fatalf("router add peer: %v", err)
	}
	return &router{srv: srv, neighbor: neighbor}
}

// route is what the router holds for one prefix.
type route struct {
	NextHop netip.Addr
	Origin  uint8
	GShut   bool
	Stale   bool
}

func (r route) String() string {
	return fmt.Sprintf("nh=%v origin=%d gshut=%v stale=%v", r.NextHop, r.Origin, r.GShut, r.Stale)
}

// rib returns the router's routes learned from the speaker, both families.
func (r *router) rib(t *testing.T) map[netip.Prefix]route {
	t.Helper()
	out := map[netip.Prefix]route{}
	for _, f := range []bgppkt.Family{bgppkt.RF_IPv4_UC, bgppkt.RF_IPv6_UC} {
		err := r.srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: f},
			func(nlri bgppkt.NLRI, paths []*apiutil.Path) {
				pfx, err := netip.ParsePrefix(nlri.String())
				if err != nil {
					t.Errorf("router rib: prefix %q: %v", nlri, err)
					return
				}
				for _, p := range paths {
					if p.PeerAddress != r.neighbor {
						continue
					}
					rt := route{Origin: 255, Stale: p.Stale}
					for _, a := range p.Attrs {
						switch a := a.(type) {
						case *bgppkt.PathAttributeOrigin:
							rt.Origin = a.Value
						case *bgppkt.PathAttributeNextHop:
							rt.NextHop = a.Value
						case *bgppkt.PathAttributeMpReachNLRI:
							rt.NextHop = a.Nexthop
						case *bgppkt.PathAttributeCommunities:
							rt.GShut = slices.Contains(a.Value, gracefulShutdownCommunity)
						}
					}
					out[pfx] = rt
				}
			})
		if err != nil {
			t.Fatalf("router rib: %v", err)
		}
	}
	return out
}

// count returns how many prefixes the router's RIB holds, both families.
// Unlike rib it reads under GoBGP's lock, so it may run while the router
// marks paths stale (ListPath reads the paths after dropping the lock).
func (r *router) count(t *testing.T) uint64 {
	t.Helper()
	var n uint64
	for _, afi := range []api.Family_Afi{api.Family_AFI_IP, api.Family_AFI_IP6} {
		rsp, err := r.srv.GetTable(context.Background(), &api.GetTableRequest{
			TableType: api.TableType_TABLE_TYPE_GLOBAL,
			Family:    &api.Family{Afi: afi, Safi: api.Family_SAFI_UNICAST},
		})
		if err != nil {
			t.Errorf("router table: %v", err)
			return 0
		}
		n += rsp.NumDestination
	}
	return n
}

// restarting reports whether the router holds the speaker's routes for a
// graceful restart (RFC 4724 receiving speaker).
func (r *router) restarting(t *testing.T) bool {
	t.Helper()
	var on bool
	err := r.srv.ListPeer(context.Background(), &api.ListPeerRequest{Address: r.neighbor.String()}, func(p *api.Peer) {
		on = p.GetGracefulRestart().GetPeerRestarting()
	})
	if err != nil {
		t.Errorf("router peers: %v", err)
	}
	return on
}

// waitFor polls cond every 20 ms until it is true or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s; have %s", timeout, what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRIB waits until the router's RIB is exactly want.
func (r *router) waitRIB(t *testing.T, timeout time.Duration, what string, want map[netip.Prefix]route) {
	t.Helper()
	waitFor(t, timeout, what, func() (bool, string) {
		got := r.rib(t)
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprint(got)
	})
}

func waitEstablished(t *testing.T, s *Speaker, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "session established", func() (bool, string) {
		st := s.Status()
		return st[0].State == "established", fmt.Sprintf("%+v", st)
	})
}

func mustPrefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

// TestSpeakerAnnouncesToGoBGP: announce v4 and v6 VIPs over an IPv4 session
// with TCP MD5, change the set, drain, undrain, withdraw.
func TestSpeakerAnnouncesToGoBGP(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	port := freePort(t)
	r := startRouter(t, port, lo, "s3cret")
	nh6 := netip.MustParseAddr("2001:db8::11")
	sp, err := New(Config{
		ASN: 65001, RouterID: netip.MustParseAddr("10.255.0.2"),
		GracefulRestartTime: 30 * time.Second, ShutdownWait: time.Second, NextHop6: nh6,
		Peers: []Peer{{Addr: lo, ASN: 65000, Port: port, HoldTime: 3 * time.Second, Keepalive: time.Second, Password: "s3cret"}},
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Stop(false) })

	// Prefixes given before Start are in the first UPDATE.
	if err := sp.SetAnnounced(mustPrefixes("192.0.2.10/32", "2001:db8:1::10/128")); err != nil {
		t.Fatal(err)
	}
	if err := sp.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := sp.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Errorf("second Start = %v, want ErrStarted", err)
	}
	waitEstablished(t, sp, 10*time.Second)
	igp := bgppkt.BGP_ORIGIN_ATTR_TYPE_IGP
	v4a := route{NextHop: lo, Origin: igp}
	v6 := route{NextHop: nh6, Origin: igp}
	r.waitRIB(t, 3*time.Second, "initial VIPs at the router", map[netip.Prefix]route{
		netip.MustParsePrefix("192.0.2.10/32"):      v4a,
		netip.MustParsePrefix("2001:db8:1::10/128"): v6,
	})
	st := sp.Status()[0]
	if st.Advertised != 2 || !st.GracefulRestart || st.LocalAddr != lo || st.ASN != 65000 {
		t.Errorf("status = %+v, want 2 advertised, graceful restart, local address %v", st, lo)
	}

	// Changes: one added, one withdrawn, one v6 replaced.
	if err := sp.SetAnnounced(mustPrefixes("192.0.2.10/32", "192.0.2.11/32", "2001:db8:1::11/128")); err != nil {
		t.Fatal(err)
	}
	all := map[netip.Prefix]route{
		netip.MustParsePrefix("192.0.2.10/32"):      v4a,
		netip.MustParsePrefix("192.0.2.11/32"):      v4a,
		netip.MustParsePrefix("2001:db8:1::11/128"): v6,
	}
	r.waitRIB(t, 3*time.Second, "changed VIPs at the router", all)
	if err := sp.SetAnnounced(mustPrefixes("192.0.2.0/24")); !errors.Is(err, ErrNotHostPrefix) {
		t.Errorf("SetAnnounced(/24) = %v, want ErrNotHostPrefix", err)
	}
	if got := sp.Announced(); len(got) != 3 {
		t.Errorf("a rejected SetAnnounced changed the announced set: %v", got)
	}

	// Graceful shutdown: the community first, the withdrawal after the wait.
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- sp.GracefulShutdown(context.Background()) }()
	gshut := map[netip.Prefix]route{}
	for p, rt := range all {
		rt.GShut = true
		gshut[p] = rt
	}
	r.waitRIB(t, 900*time.Millisecond, "GRACEFUL_SHUTDOWN community on every VIP", gshut)
	if !sp.Draining() {
		t.Error("Draining() = false during GracefulShutdown")
	}
	r.waitRIB(t, 3*time.Second, "all VIPs withdrawn after the wait", map[netip.Prefix]route{})
	if err := <-done; err != nil {
		t.Fatalf("GracefulShutdown: %v", err)
	}
	if el := time.Since(start); el < time.Second {
		t.Errorf("withdrawn after %v, before ShutdownWait (1s)", el)
	}
	// Idempotent, and a drained node announces nothing new.
	if err := sp.GracefulShutdown(context.Background()); err != nil {
		t.Errorf("second GracefulShutdown: %v", err)
	}
	if err := sp.SetAnnounced(mustPrefixes("192.0.2.10/32", "192.0.2.11/32", "192.0.2.12/32", "2001:db8:1::11/128")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if got := r.rib(t); len(got) != 0 {
		t.Errorf("drained node announced %v", got)
	}

	// Undrain announces the current set, without the community.
	if err := sp.Undrain(); err != nil {
		t.Fatal(err)
	}
	all[netip.MustParsePrefix("192.0.2.12/32")] = v4a
	r.waitRIB(t, 3*time.Second, "VIPs announced again after Undrain", all)
	if sp.Draining() {
		t.Error("Draining() = true after Undrain")
	}

	// Undrain during the wait aborts the drain.
	go func() { done <- sp.GracefulShutdown(context.Background()) }()
	waitFor(t, time.Second, "draining", func() (bool, string) { return sp.Draining(), "in service" })
	if err := sp.Undrain(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrDrainAborted) {
		t.Errorf("GracefulShutdown interrupted by Undrain = %v, want ErrDrainAborted", err)
	}
	r.waitRIB(t, 3*time.Second, "VIPs without the community after an aborted drain", all)

	if err := sp.WithdrawAll(); err != nil {
		t.Fatal(err)
	}
	r.waitRIB(t, 3*time.Second, "everything withdrawn by WithdrawAll", map[netip.Prefix]route{})
}

// TestSpeakerIPv6Session: over an IPv6 session the next hop is the session's
// local address; IPv4 VIPs need NextHop4 there.
func TestSpeakerIPv6Session(t *testing.T) {
	lo6 := netip.MustParseAddr("::1")
	port := freePort(t)
	r := startRouter(t, port, lo6, "")
	sp, err := New(Config{
		ASN: 65001, RouterID: netip.MustParseAddr("10.255.0.2"), GracefulRestartTime: 30 * time.Second,
		Peers: []Peer{{Addr: lo6, ASN: 65000, Port: port, HoldTime: 3 * time.Second}},
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Stop(false) })
	if err := sp.SetAnnounced(mustPrefixes("192.0.2.10/32")); !errors.Is(err, ErrNoSession) {
		t.Errorf("IPv4 VIP over an IPv6 session without NextHop4: %v, want ErrNoSession", err)
	}
	if err := sp.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := sp.SetAnnounced(mustPrefixes("2001:db8:1::10/128")); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, sp, 10*time.Second)
	r.waitRIB(t, 3*time.Second, "v6 VIP with next hop self", map[netip.Prefix]route{
		netip.MustParsePrefix("2001:db8:1::10/128"): {NextHop: lo6, Origin: bgppkt.BGP_ORIGIN_ATTR_TYPE_IGP},
	})
}

// TestSpeakerGracefulRestartWithGoBGP: Stop(true) leaves the routes at the
// router (stale), a restarting speaker refreshes them, and they are never
// missing in between; Stop(false) removes them at once.
func TestSpeakerGracefulRestartWithGoBGP(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	port := freePort(t)
	r := startRouter(t, port, lo, "")
	var gobgpGlobals sync.Mutex
	cfg := Config{
		ASN: 65001, RouterID: netip.MustParseAddr("10.255.0.2"), GracefulRestartTime: 10 * time.Second,
		Peers: []Peer{{Addr: lo, ASN: 65000, Port: port, HoldTime: 3 * time.Second, Keepalive: time.Second}},
	}
	vip := mustPrefixes("192.0.2.10/32")
	start := func(cfg Config) *Speaker {
		t.Helper()
		sp, err := New(cfg, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sp.Stop(false) })
		if err := sp.SetAnnounced(vip); err != nil {
			t.Fatal(err)
		}
		// GoBGP's StartBgp writes package globals (table.SelectionOptions,
		// table.UseMultiplePaths) that another BgpServer in the process
		// reads, here the router in the watcher below: keep them apart
		// (the values written are the defaults either way).
		gobgpGlobals.Lock()
		defer gobgpGlobals.Unlock()
		if err := sp.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return sp
	}
	fresh := map[netip.Prefix]route{vip[0]: {NextHop: lo, Origin: bgppkt.BGP_ORIGIN_ATTR_TYPE_IGP}}
	stale := map[netip.Prefix]route{vip[0]: {NextHop: lo, Origin: bgppkt.BGP_ORIGIN_ATTR_TYPE_IGP, Stale: true}}

	first := start(cfg)
	r.waitRIB(t, 10*time.Second, "VIP at the router", fresh)

	// Watch the route from here on: it must never be missing.
	var missing, samples atomic.Int32
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			gobgpGlobals.Lock()
			n := r.count(t)
			gobgpGlobals.Unlock()
			samples.Add(1)
			if n != 1 {
				missing.Add(1)
			}
		}
	}()

	first.Stop(true)
	waitFor(t, 5*time.Second, "router in graceful restart for the speaker", func() (bool, string) {
		return r.restarting(t), "not restarting"
	})
	// Stale marking happened under the router's lock, before restarting()
	// saw the flag: from here ListPath reads the paths safely.
	r.waitRIB(t, time.Second, "VIP kept as stale after Stop(true)", stale)
	cfg.Restarting = true
	second := start(cfg)
	waitEstablished(t, second, 10*time.Second)
	r.waitRIB(t, 5*time.Second, "VIP refreshed by the restarted speaker", fresh)
	close(stop)
	<-watched
	if n := missing.Load(); n > 0 {
		t.Errorf("the VIP was missing from the router's RIB in %d of %d samples during the restart", n, samples.Load())
	}

	second.Stop(false)
	r.waitRIB(t, time.Second, "VIP removed at once after Stop(false) (Cease NOTIFICATION)", map[netip.Prefix]route{})
	if err := second.SetAnnounced(vip); !errors.Is(err, ErrStopped) {
		t.Errorf("SetAnnounced after Stop = %v, want ErrStopped", err)
	}
	if st := second.Status(); st[0].State != "stopped" {
		t.Errorf("status after Stop = %+v", st)
	}
}

// TestSpeakerListenPortInUse: Start fails with a hint, and the speaker can
// be stopped afterwards.
func TestSpeakerListenPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	cfg := validConfig()
	cfg.ListenPort = int32(port)
	sp, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	err = sp.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "listen_port: 0") {
		t.Fatalf("Start with port %d in use = %v, want an error with a hint", port, err)
	}
	t.Log(err)
	if st := sp.Status(); st[0].State != "stopped" {
		t.Errorf("status after a failed Start = %+v", st)
	}
	sp.Stop(false)
}
