package config

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLoadChecks(t *testing.T) {
	got, err := Load("testdata/checks.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	a := netip.MustParseAddr
	wantChecks := []HealthCheck{
		{Name: "web", Type: CheckHTTP, Port: 8000, Path: "/healthz?full=1", ExpectStatus: 204, ExpectBody: "ok",
			Host: "web.example", Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 3, Fall: 4, Jitter: 0.25},
		{Name: "tls", Type: CheckHTTPS, Port: 8443, Path: "/", ExpectStatus: 200, TLSSkipVerify: true,
			Interval: 5 * time.Second, Timeout: 2 * time.Second, Rise: 1, Fall: 1, Jitter: 0},
		{Name: "conn", Type: CheckTCP, Port: 22, Interval: 100 * time.Millisecond, Timeout: 50 * time.Millisecond,
			Rise: 100, Fall: 100, Jitter: 1},
		{Name: "dns", Type: CheckUDP, Port: 53,
			Payload:  []byte("\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01"),
			Expect:   []byte("\x07example\x03com"),
			Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3, Jitter: 0.1},
		{Name: "echo", Type: CheckUDP, Port: 7, Payload: []byte("ping\n"), Expect: []byte("pong"),
			Interval: 2 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3, Jitter: 0.1},
		{Name: "script", Type: CheckExec, Port: 9000,
			Command:  []string{"/usr/local/bin/check-backend", "--addr={{address}}", "--port={{port}}"},
			Interval: 10 * time.Second, Timeout: 3 * time.Second, Rise: 2, Fall: 3, Jitter: 0.1},
	}
	if !reflect.DeepEqual(got.HealthChecks, wantChecks) {
		t.Errorf("HealthChecks:\n got %+v\nwant %+v", got.HealthChecks, wantChecks)
	}
	wantPools := []Pool{
		{Name: "web-a", HealthCheck: "web", Backends: []Backend{
			{Addr: a("198.51.100.1"), Weight: 1},
			{Addr: a("198.51.100.2"), Weight: 1, HealthCheck: "conn"},
		}},
		{Name: "web-b", Backends: []Backend{{Addr: a("198.51.100.3"), Weight: 1}}},
		{Name: "web", HealthCheck: "tls", Include: []string{"web-a", "web-b"}},
		{Name: "dns", HealthCheck: "dns", Backends: []Backend{
			{Addr: a("2001:db8:1::53"), Weight: 1},
			{Addr: a("2001:db8:1::54"), Weight: 1, HealthCheck: "echo"},
		}},
		{Name: "tools", HealthCheck: "script", Backends: []Backend{{Addr: a("198.51.100.9"), Weight: 1}}},
	}
	if !reflect.DeepEqual(got.Pools, wantPools) {
		t.Errorf("Pools:\n got %+v\nwant %+v", got.Pools, wantPools)
	}
	if s := got.Services[0]; s.MinHealthy != 0.5 || !s.WithdrawWhenDown {
		t.Errorf("services[0] min_healthy %v withdraw_when_down %v", s.MinHealthy, s.WithdrawWhenDown)
	}
	if s := got.Services[1]; s.MinHealthy != 1 || s.WithdrawWhenDown {
		t.Errorf("services[1] min_healthy %v withdraw_when_down %v", s.MinHealthy, s.WithdrawWhenDown)
	}
	wantBGP := &BGP{
		ASN: 4200000001, RouterID: a("192.0.2.1"), ListenPort: NoListen,
		GracefulRestartTime: 300 * time.Second, ShutdownWait: 15 * time.Second,
		Peers: []BGPPeer{
			{Addr: a("192.0.2.254"), ASN: 65000, HoldTime: 9 * time.Second, Keepalive: 3 * time.Second, Password: "s3cret", Port: 1179},
			{Addr: a("fe80::1%eth0"), ASN: 4200000001, HoldTime: 0, Keepalive: 0, Port: 179},
		},
	}
	if !reflect.DeepEqual(got.BGP, wantBGP) {
		t.Errorf("BGP:\n got %+v\nwant %+v", got.BGP, wantBGP)
	}
	if got.BGP.Listens() {
		t.Error("Listens() = true with listen_port -1")
	}
	roundTrip(t, got)
}

func TestCheckAndBGPDefaults(t *testing.T) {
	c, err := Parse([]byte(head+`health_checks:
  h: {type: http, port: 80}
  t: {type: tcp, port: 80, interval: 300ms}
  x: {type: exec, command: [/bin/true]}
bgp:
  asn: 65001
  peers: [{address: 10.0.0.1, asn: 65000}, {address: 10.0.0.2, asn: 65000, hold_time: 10s}, {address: 10.0.0.3, asn: 65000, hold_time: 0s}]
`), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h, tc, x := c.HealthChecks[0], c.HealthChecks[1], c.HealthChecks[2]
	b := c.BGP
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"http path", h.Path, "/"},
		{"http expect_status", h.ExpectStatus, uint16(200)},
		{"http tls_skip_verify", h.TLSSkipVerify, false},
		{"interval", h.Interval, 2 * time.Second},
		{"timeout", h.Timeout, time.Second},
		{"rise", h.Rise, 2},
		{"fall", h.Fall, 3},
		{"jitter", h.Jitter, 0.1},
		{"tcp path", tc.Path, ""},
		{"tcp expect_status", tc.ExpectStatus, uint16(0)},
		{"timeout below 1s interval", tc.Timeout, 150 * time.Millisecond},
		{"exec port", x.Port, uint16(0)},
		{"router_id from node.address", b.RouterID, netip.MustParseAddr("10.0.0.11")},
		{"listen_port", b.ListenPort, int32(179)},
		{"graceful_restart_time", b.GracefulRestartTime, 120 * time.Second},
		{"shutdown_wait", b.ShutdownWait, 5 * time.Second},
		{"peer port", b.Peers[0].Port, uint16(179)},
		{"peer hold_time", b.Peers[0].HoldTime, 90 * time.Second},
		{"peer keepalive", b.Peers[0].Keepalive, 30 * time.Second},
		{"peer keepalive from hold_time 10s", b.Peers[1].Keepalive, 3 * time.Second},
		{"peer keepalive from hold_time 0", b.Peers[2].Keepalive, time.Duration(0)},
		{"peer password", b.Peers[0].Password, ""},
		{"service min_healthy", c.Services, []Service(nil)},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if !b.Listens() {
		t.Error("Listens() = false with the default port")
	}
	roundTrip(t, c)

	c, err = Parse([]byte(head+svc+"bgp: {asn: 65001, listen_port: 0, peers: [{address: 10.0.0.1, asn: 65000}]}\n"), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.BGP.ListenPort != NoListen || c.Services[0].MinHealthy != 0 || c.Services[0].WithdrawWhenDown {
		t.Errorf("listen_port 0 -> %d; service %+v", c.BGP.ListenPort, c.Services[0])
	}
	roundTrip(t, c)
}

func TestBinaryPayloadRoundTrip(t *testing.T) {
	c, err := Parse([]byte(head+"health_checks:\n  u: {type: udp, port: 53, payload: !!binary /wABAg==, expect: \"\\t\\0\\x7f\"}\n"), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.HealthChecks[0].Payload; !slices.Equal(got, []byte{0xff, 0, 1, 2}) {
		t.Errorf("payload = %x", got)
	}
	if got := c.HealthChecks[0].Expect; !slices.Equal(got, []byte{'\t', 0, 0x7f}) {
		t.Errorf("expect = %x", got)
	}
	roundTrip(t, c)
}

// checksConfig has one backend in three pools with one check, and in a
// fourth with another check, plus inheritance through includes.
const checksConfig = `node: {interface: eth0, address: 10.0.0.11}
health_checks:
  http: {type: http, port: 80}
  tcp: {type: tcp, port: 80}
pools:
  a: {health_check: http, backends: [{address: 10.0.1.1}, {address: 10.0.1.2}]}
  b: {health_check: http, backends: [{address: 10.0.1.1}]}
  c: {include: [b], backends: [{address: 10.0.1.3, health_check: tcp}]}
  d: {health_check: tcp, backends: [{address: 10.0.1.1}]}
  e: {backends: [{address: 10.0.1.4}]}
  f: {health_check: tcp, include: [e]}
services:
  - {name: s1, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [a, b, c]}
  - {name: s2, vip: 10.200.0.1, port: 81, protocol: tcp, pools: [c, d, e, f]}
`

func TestHealthTargets(t *testing.T) {
	c, err := Parse([]byte(checksConfig), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := c.Desired()
	var got []string
	for _, tg := range d.HealthTargets() {
		if tg.Check.Name != tg.Key().Check || tg.Addr != tg.Key().Addr {
			t.Errorf("Key() = %v for %v", tg.Key(), tg)
		}
		if spec := d.HealthChecks[tg.Check.Name]; !tg.Check.Equal(&spec) {
			t.Errorf("target %v carries a different spec", tg.Key())
		}
		got = append(got, tg.Key().String())
	}
	// 10.0.1.1/http is in pools a, b and c of s1 and c of s2: once.
	want := []string{"http@10.0.1.1", "http@10.0.1.2", "tcp@10.0.1.1", "tcp@10.0.1.3", "tcp@10.0.1.4"}
	if !slices.Equal(got, want) {
		t.Errorf("HealthTargets() = %v, want %v", got, want)
	}
	if len(d.HealthChecks) != 2 {
		t.Errorf("HealthChecks has %d entries, want 2", len(d.HealthChecks))
	}

	checks := func(p DesiredPool) []string {
		var out []string
		for _, b := range p.Backends {
			out = append(out, b.Addr.String()+"/"+b.HealthCheck)
		}
		return out
	}
	s2 := d.Services[1]
	for i, want := range [][]string{
		{"10.0.1.3/tcp", "10.0.1.1/http"}, // c: own override, then b's check
		{"10.0.1.1/tcp"},                  // d
		{"10.0.1.4/"},                     // e on its own: unchecked
		{"10.0.1.4/tcp"},                  // e through f: inherits tcp
	} {
		if got := checks(s2.Pools[i]); !slices.Equal(got, want) {
			t.Errorf("s2 pool %s = %v, want %v", s2.Pools[i].Name, got, want)
		}
	}
}

func TestActivePoolWith(t *testing.T) {
	a := netip.MustParseAddr
	be := func(addr, check string, mods ...func(*Backend)) Backend {
		b := Backend{Addr: a(addr), Weight: 1, HealthCheck: check}
		for _, m := range mods {
			m(&b)
		}
		return b
	}
	drain := func(b *Backend) { b.Drain = true }
	p1 := DesiredPool{"p1", []Backend{be("10.0.0.1", "c"), be("10.0.0.2", "c"), be("10.0.0.3", "c"), be("10.0.0.4", "c", drain)}}
	p2 := DesiredPool{"p2", []Backend{be("10.0.1.1", "c"), be("10.0.1.2", "")}}
	for _, tc := range []struct {
		name       string
		minHealthy float64
		down       []string // unhealthy addresses
		wantPool   string
		wantUsable []string
	}{
		{"all healthy", 0, nil, "p1", []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}},
		{"one down", 0, []string{"10.0.0.1"}, "p1", []string{"10.0.0.2", "10.0.0.3"}},
		{"first pool down", 0, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, "p2", []string{"10.0.1.1", "10.0.1.2"}},
		{"unchecked backend keeps pool up", 0, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.1.1"}, "p2", []string{"10.0.1.2"}},
		{"drained backend's health ignored", 0, []string{"10.0.0.4"}, "p1", []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}},
		// Eligible in p1: 3 (one drains); 2 of 3 >= 0.5.
		{"min_healthy met", 0.5, []string{"10.0.0.1"}, "p1", []string{"10.0.0.2", "10.0.0.3"}},
		{"min_healthy missed", 0.5, []string{"10.0.0.1", "10.0.0.2"}, "p2", []string{"10.0.1.1", "10.0.1.2"}},
		{"min_healthy exact thirds", 2.0 / 3, []string{"10.0.0.1"}, "p1", []string{"10.0.0.2", "10.0.0.3"}},
		{"min_healthy missed everywhere: first with any", 1, []string{"10.0.0.1", "10.0.1.1"}, "p1", []string{"10.0.0.2", "10.0.0.3"}},
		{"nothing usable", 0, []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.1.1", "10.0.1.2"}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &DesiredService{Pools: []DesiredPool{p1, p2}, MinHealthy: tc.minHealthy}
			if tc.wantPool == "" {
				s.Pools = s.Pools[:1]
			}
			healthy := func(b Backend) bool {
				if b.HealthCheck == "" {
					t.Errorf("healthy called for unchecked %s", b.Addr)
				}
				return !slices.Contains(tc.down, b.Addr.String())
			}
			p, ok := s.ActivePoolWith(healthy)
			if ok != (tc.wantPool != "") || p.Name != tc.wantPool {
				t.Fatalf("ActivePoolWith() = %q, %v; want %q", p.Name, ok, tc.wantPool)
			}
			if got := addrs(s.UsableBackends(healthy)); !slices.Equal(got, tc.wantUsable) && len(got)+len(tc.wantUsable) > 0 {
				t.Errorf("UsableBackends() = %v, want %v", got, tc.wantUsable)
			}
			if p, _ := s.ActivePool(); p.Name != "p1" {
				t.Errorf("ActivePool() = %q, want p1 (all healthy)", p.Name)
			}
		})
	}
}

func TestMeetsShare(t *testing.T) {
	for _, tc := range []struct {
		usable, eligible int
		share            float64
		want             bool
	}{
		{3, 10, 0.3, true}, {2, 10, 0.3, false}, {1, 3, 1.0 / 3, true}, {5, 5, 1, true}, {4, 5, 1, false}, {1, 1, 0, true},
	} {
		if got := meetsShare(tc.usable, tc.eligible, tc.share); got != tc.want {
			t.Errorf("meetsShare(%d, %d, %v) = %v, want %v", tc.usable, tc.eligible, tc.share, got, tc.want)
		}
	}
}

func TestAnnouncedVIPs(t *testing.T) {
	c, err := Parse([]byte(`node: {interface: eth0, address: 10.0.0.11}
health_checks:
  h: {type: tcp, port: 80}
pools:
  p: {health_check: h, backends: [{address: 10.0.1.1}]}
  q: {backends: [{address: 10.0.1.2}]}
services:
  - {name: a, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], withdraw_when_down: true}
  - {name: b, vip: 10.200.0.2, port: 80, protocol: tcp, pools: [p], withdraw_when_down: true}
  - {name: c, vip: 10.200.0.2, port: 81, protocol: tcp, pools: [q]}
  - {name: d, vip: 10.200.0.3, port: 80, protocol: tcp, pools: [p]}
  - {name: e, vip: 10.200.0.0, port: 80, protocol: tcp, pools: [p, q], withdraw_when_down: true}
`), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := c.Desired()
	str := func(as []netip.Addr) string {
		var s []string
		for _, a := range as {
			s = append(s, a.String())
		}
		return strings.Join(s, " ")
	}
	if got, want := str(d.AnnouncedVIPs(nil)), "10.200.0.0 10.200.0.1 10.200.0.2 10.200.0.3"; got != want {
		t.Errorf("all healthy: %s, want %s", got, want)
	}
	// With 10.0.1.1 down, a withdraws; b's address stays for c; d does
	// not ask; e fails over to q.
	down := func(Backend) bool { return false }
	if got, want := str(d.AnnouncedVIPs(down)), "10.200.0.0 10.200.0.2 10.200.0.3"; got != want {
		t.Errorf("p down: %s, want %s", got, want)
	}
}

func TestRejectChecksAndBGP(t *testing.T) {
	hc := "health_checks:\n"
	for _, tc := range []struct {
		name string
		in   string
		kind error
		want []string
	}{
		// References.
		{"unknown check on pool", head + "  q:\n    health_check: nope\n    backends: [{address: 10.0.1.5}]\n", ErrUnknownCheck,
			[]string{`c.yaml:6: pools.q.health_check: unknown health check "nope" (no health_checks are defined)`}},
		{"unknown check on backend", head + "  q:\n    backends: [{address: 10.0.1.5, health_check: nope}]\n" + hc + "  web: {type: tcp, port: 80}\n",
			ErrUnknownCheck, []string{`c.yaml:6: pools.q.backends[0].health_check: unknown health check "nope" (defined: web)`}},
		{"check is a list", head + "  q:\n    health_check: [web]\n    backends: [{address: 10.0.1.5}]\n", ErrInvalid,
			[]string{`c.yaml:6: pools.q.health_check: must be a string, not a list`}},
		{"inherited checks conflict", head + "  a:\n    health_check: c1\n    include: [p]\n  b:\n    include: [a, p]\n" + hc + "  c1: {type: tcp, port: 80}\n",
			ErrConflict, []string{`c.yaml:3: pools.p: pool "p" sets no health_check and inherits two from pool "b" through different includes (c1 and none): set health_check on pool "p"`}},
		{"backend check conflict", head + "  a:\n    backends: [{address: 10.0.1.1, health_check: c1}]\n    include: [p]\n" + hc + "  c1: {type: tcp, port: 80}\n",
			ErrConflict, []string{`c.yaml:4: pools.p.backends[0]: backend 10.0.1.1 conflicts with pools.a.backends[0] (line 6), both reached from pool "a": health check none vs c1`}},

		// The section and its fields.
		{"health_checks a list", head + hc + "  - {type: tcp}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks: must be a mapping from check name to check, not a list`}},
		{"duplicate check", head + hc + "  web: {type: tcp, port: 80}\n  web: {type: tcp, port: 81}\n", ErrDuplicate,
			[]string{`c.yaml:7: health_checks.web: duplicate key "web" (first at line 6)`}},
		{"check name invalid", head + hc + "  \"a b\": {type: tcp, port: 80}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks["a b"]: "a b" is not a valid health check name`}},
		{"unknown check field", head + hc + "  web: {type: tcp, port: 80, retries: 3}\n", ErrUnknownField,
			[]string{`c.yaml:6: health_checks.web.retries: unknown field "retries"`}},
		{"type missing", head + hc + "  web: {port: 80}\n", ErrRequired,
			[]string{`c.yaml:6: health_checks.web.type: required: tcp, http, https, udp, exec`}},
		{"bad type", head + hc + "  web: {type: icmp, port: 80}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.type: "icmp" is not one of tcp, http, https, udp, exec`}},
		{"port missing", head + hc + "  web:\n    type: tcp\n", ErrRequired,
			[]string{`c.yaml:6: health_checks.web.port: required: the backend port to probe`}},
		{"port zero", head + hc + "  web: {type: http, port: 0}\n", ErrRequired,
			[]string{`c.yaml:6: health_checks.web.port: required`}},
		{"port too large", head + hc + "  web: {type: udp, port: 65536, payload: x}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.port: 65536 is out of range 0..65535`}},

		// Fields of another type.
		{"path on tcp", head + hc + "  web:\n    type: tcp\n    port: 80\n    path: /\n", ErrInvalid,
			[]string{`c.yaml:9: health_checks.web.path: applies to http and https checks only, not to this tcp check`}},
		{"tls_skip_verify on http", head + hc + "  web: {type: http, port: 80, tls_skip_verify: true}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.tls_skip_verify: applies to https checks only, not to this http check`}},
		{"command on udp", head + hc + "  web: {type: udp, port: 53, payload: x, command: [/bin/true]}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.command: applies to exec checks only, not to this udp check`}},
		{"payload on exec", head + hc + "  web: {type: exec, command: [/bin/true], payload: x}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.payload: applies to udp checks only, not to this exec check`}},

		// HTTP.
		{"path without slash", head + hc + "  web: {type: http, port: 80, path: healthz}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.path: "healthz" must start with /`}},
		{"path with space", head + hc + "  web: {type: https, port: 443, path: \"/a b\"}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.path: "/a b" must not contain spaces`}},
		{"expect_status too large", head + hc + "  web: {type: http, port: 80, expect_status: 600}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.expect_status: 600 is out of range 100..599`}},
		{"expect_status too small", head + hc + "  web: {type: http, port: 80, expect_status: 99}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.expect_status: 99 is out of range 100..599`}},
		{"host with space", head + hc + "  web: {type: http, port: 80, host: \"a b\"}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.host: "a b" is not a host name`}},
		{"expect_body too long", head + hc + "  web: {type: http, port: 80, expect_body: " + strings.Repeat("x", MaxExpectLen+1) + "}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.expect_body: is 4097 bytes long; at most 4096 are allowed`}},
		{"tls_skip_verify not a bool", head + hc + "  web: {type: https, port: 443, tls_skip_verify: yes}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.tls_skip_verify: must be true or false, not "yes"`}},
		{"tls_skip_verify quoted", head + hc + "  web: {type: https, port: 443, tls_skip_verify: \"true\"}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.tls_skip_verify: must be true or false, not "true"`}},

		// UDP.
		{"udp payload missing", head + hc + "  dns: {type: udp, port: 53}\n", ErrRequired,
			[]string{`c.yaml:6: health_checks.dns.payload: required: the datagram to send`}},
		{"udp payload empty", head + hc + "  dns: {type: udp, port: 53, payload: \"\"}\n", ErrRequired,
			[]string{`c.yaml:6: health_checks.dns.payload: required`}},
		{"udp payload not base64", head + hc + "  dns: {type: udp, port: 53, payload: !!binary \"%%%\"}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.dns.payload: !!binary value is not base64`}},
		{"udp payload too long", head + hc + "  dns: {type: udp, port: 53, payload: " + strings.Repeat("x", MaxPayloadLen+1) + "}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.dns.payload: is 65508 bytes long; a datagram holds at most 65507`}},

		// Exec.
		{"exec command missing", head + hc + "  x: {type: exec}\n", ErrRequired,
			[]string{`c.yaml:6: health_checks.x.command: required: the program and its arguments`}},
		{"exec program empty", head + hc + "  x: {type: exec, command: [\"\", a]}\n", ErrRequired,
			[]string{`c.yaml:6: health_checks.x.command: required`}},
		{"exec command not a list", head + hc + "  x: {type: exec, command: /bin/check}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.x.command: must be a list, not "/bin/check"`}},
		{"exec port placeholder without port", head + hc + "  x:\n    type: exec\n    command: [/bin/check, \"{{address}}:{{port}}\"]\n", ErrInvalid,
			[]string{`c.yaml:8: health_checks.x.command[1]: uses {{port}} but the check has no port: set port`}},
		{"exec NUL", head + hc + "  x: {type: exec, command: [\"/bin/check\\0\"]}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.x.command[0]: contains a NUL byte`}},

		// Timing.
		{"timeout equals interval", head + hc + "  web:\n    type: tcp\n    port: 80\n    interval: 1s\n    timeout: 1s\n", ErrInvalid,
			[]string{`c.yaml:10: health_checks.web.timeout: 1s must be shorter than the interval 1s`}},
		{"default timeout with explicit longer", head + hc + "  web: {type: tcp, port: 80, interval: 500ms, timeout: 2s}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.timeout: 2s must be shorter than the interval 500ms`}},
		{"timeout zero", head + hc + "  web: {type: tcp, port: 80, timeout: 0s}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.timeout: 0s is shorter than 1ms`}},
		{"interval too short", head + hc + "  web: {type: tcp, port: 80, interval: 50ms, timeout: 10ms}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.interval: 50ms is out of range 100ms..1h`}},
		{"interval too long", head + hc + "  web: {type: tcp, port: 80, interval: 2h}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.interval: 2h is out of range 100ms..1h`}},
		{"interval not a duration", head + hc + "  web: {type: tcp, port: 80, interval: 2}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.interval: "2" is not a duration`}},
		{"rise zero", head + hc + "  web: {type: tcp, port: 80, rise: 0}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.rise: 0 is out of range 1..100`}},
		{"fall too large", head + hc + "  web: {type: tcp, port: 80, fall: 101}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.fall: 101 is out of range 1..100`}},
		{"jitter too large", head + hc + "  web: {type: tcp, port: 80, jitter: 1.5}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.jitter: 1.5 is out of range 0..1`}},
		{"jitter negative", head + hc + "  web: {type: tcp, port: 80, jitter: -0.1}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.jitter: -0.1 is out of range 0..1`}},
		{"jitter nan", head + hc + "  web: {type: tcp, port: 80, jitter: .nan}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.jitter: must be a decimal number between 0 and 1, such as 0.5, not ".nan"`}},
		{"jitter hex", head + hc + "  web: {type: tcp, port: 80, jitter: 0x1p-2}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.jitter: must be a decimal number`}},
		{"jitter percent", head + hc + "  web: {type: tcp, port: 80, jitter: 10%}\n", ErrInvalid,
			[]string{`c.yaml:6: health_checks.web.jitter: must be a decimal number`}},

		// Services.
		{"min_healthy too large", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], min_healthy: 1.5}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].min_healthy: 1.5 is out of range 0..1`}},
		{"min_healthy quoted", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], min_healthy: \"0.5\"}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].min_healthy: must be a decimal number between 0 and 1`}},
		{"withdraw_when_down not a bool", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], withdraw_when_down: 1}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].withdraw_when_down: must be true or false, not "1"`}},

		// BGP.
		{"bgp not a mapping", head + "bgp: [65001]\n", ErrInvalid,
			[]string{`c.yaml:5: bgp: must be a mapping (mode, asn, router_id, listen_port, graceful_restart_time, shutdown_wait, next_hop4, next_hop6, peers, route_table, dummy_interface), not a list`}},
		{"unknown bgp field", head + "bgp:\n  asn: 65001\n  local_as: 65001\n  peers: [{address: 10.0.0.1, asn: 65000}]\n", ErrUnknownField,
			[]string{`c.yaml:7: bgp.local_as: unknown field "local_as"`}},
		{"asn missing", head + "bgp:\n  peers: [{address: 10.0.0.1, asn: 65000}]\n", ErrRequired,
			[]string{`c.yaml:6: bgp.asn: required: the local AS number`}},
		{"asn zero", head + "bgp:\n  asn: 0\n  peers: [{address: 10.0.0.1, asn: 65000}]\n", ErrInvalid,
			[]string{`c.yaml:6: bgp.asn: 0 is not an AS number: use 1..4294967295`}},
		{"asn too large", head + "bgp:\n  asn: 4294967296\n  peers: [{address: 10.0.0.1, asn: 65000}]\n", ErrInvalid,
			[]string{`c.yaml:6: bgp.asn: 4294967296 is out of range 0..4294967295`}},
		{"asn AS_TRANS", head + "bgp:\n  asn: 23456\n  peers: [{address: 10.0.0.1, asn: 65000}]\n", ErrInvalid,
			[]string{`c.yaml:6: bgp.asn: 23456 is AS_TRANS`}},
		{"router_id IPv6", head + "bgp:\n  asn: 65001\n  router_id: fd00::1\n  peers: [{address: 10.0.0.1, asn: 65000}]\n", ErrInvalid,
			[]string{`c.yaml:7: bgp.router_id: fd00::1 is not an IPv4 address`}},
		{"router_id zero", head + "bgp:\n  asn: 65001\n  router_id: 0.0.0.0\n  peers: [{address: 10.0.0.1, asn: 65000}]\n", ErrInvalid,
			[]string{`c.yaml:7: bgp.router_id: 0.0.0.0 is not a valid BGP identifier`}},
		{"router_id missing without node.address", "node: {interface: eth0}\nbgp:\n  asn: 65001\n  peers: [{address: 10.0.0.1, asn: 65000}]\n", ErrRequired,
			[]string{`c.yaml:2: bgp.router_id: required: an IPv4 address unique to this node`}},
		{"listen_port too large", head + "bgp: {asn: 65001, listen_port: 65536, peers: [{address: 10.0.0.1, asn: 65000}]}\n", ErrInvalid,
			[]string{`c.yaml:5: bgp.listen_port: 65536 is out of range -1..65535`}},
		{"listen_port -2", head + "bgp: {asn: 65001, listen_port: -2, peers: [{address: 10.0.0.1, asn: 65000}]}\n", ErrInvalid,
			[]string{`c.yaml:5: bgp.listen_port: -2 is out of range -1..65535`}},
		{"graceful restart too long", head + "bgp: {asn: 65001, graceful_restart_time: 4096s, peers: [{address: 10.0.0.1, asn: 65000}]}\n", ErrInvalid,
			[]string{`c.yaml:5: bgp.graceful_restart_time: 1h8m16s is not a whole number of seconds in 0s..1h8m15s`}},
		{"graceful restart fraction", head + "bgp: {asn: 65001, graceful_restart_time: 1500ms, peers: [{address: 10.0.0.1, asn: 65000}]}\n", ErrInvalid,
			[]string{`c.yaml:5: bgp.graceful_restart_time: 1.5s is not a whole number of seconds`}},
		{"shutdown_wait negative", head + "bgp: {asn: 65001, shutdown_wait: -1s, peers: [{address: 10.0.0.1, asn: 65000}]}\n", ErrInvalid,
			[]string{`c.yaml:5: bgp.shutdown_wait: -1s is out of range 0s..1h`}},
		{"peers missing", head + "bgp:\n  asn: 65001\n", ErrRequired,
			[]string{`c.yaml:5: bgp.peers: required: at least one router`}},
		{"duplicate peer", head + "bgp:\n  asn: 65001\n  peers:\n    - {address: 10.0.0.1, asn: 65000}\n    - {address: 10.0.0.1, asn: 65002}\n", ErrDuplicate,
			[]string{`c.yaml:9: bgp.peers[1].address: peer 10.0.0.1 is listed twice (first at bgp.peers[0], line 8)`}},
		{"peer address missing", head + "bgp:\n  asn: 65001\n  peers:\n    - {asn: 65000}\n", ErrRequired,
			[]string{`c.yaml:8: bgp.peers[0].address: required`}},
		{"peer asn missing", head + "bgp:\n  asn: 65001\n  peers:\n    - {address: 10.0.0.1}\n", ErrRequired,
			[]string{`c.yaml:8: bgp.peers[0].asn: required: the router's AS number`}},
		{"peer multicast", head + "bgp:\n  asn: 65001\n  peers:\n    - {address: 224.0.0.5, asn: 65000}\n", ErrInvalid,
			[]string{`c.yaml:8: bgp.peers[0].address: 224.0.0.5 is not a unicast address`}},
		{"peer link-local without zone", head + "bgp:\n  asn: 65001\n  peers:\n    - {address: \"fe80::1\", asn: 65000}\n", ErrInvalid,
			[]string{`c.yaml:8: bgp.peers[0].address: fe80::1 is link-local: add the interface as a zone`}},
		{"peer global with zone", head + "bgp:\n  asn: 65001\n  peers:\n    - {address: \"fd00::1%eth0\", asn: 65000}\n", ErrInvalid,
			[]string{`c.yaml:8: bgp.peers[0].address: fd00::1%eth0 has a zone`}},
		{"hold_time too short", head + "bgp:\n  asn: 65001\n  peers:\n    - {address: 10.0.0.1, asn: 65000, hold_time: 2s}\n", ErrInvalid,
			[]string{`c.yaml:8: bgp.peers[0].hold_time: 2s is too short: use 0 (no keepalives) or at least 3s`}},
		{"hold_time fraction", head + "bgp:\n  asn: 65001\n  peers:\n    - {address: 10.0.0.1, asn: 65000, hold_time: 3500ms}\n", ErrInvalid,
			[]string{`c.yaml:8: bgp.peers[0].hold_time: 3.5s is not a whole number of seconds`}},
		{"keepalive above hold_time", head + "bgp:\n  asn: 65001\n  peers:\n    - {address: 10.0.0.1, asn: 65000, hold_time: 3s, keepalive: 5s}\n", ErrInvalid,
			[]string{`c.yaml:8: bgp.peers[0].keepalive: 5s is longer than hold_time 3s`}},
		{"keepalive zero with hold_time", head + "bgp:\n  asn: 65001\n  peers:\n    - {address: 10.0.0.1, asn: 65000, hold_time: 9s, keepalive: 0s}\n", ErrInvalid,
			[]string{`c.yaml:8: bgp.peers[0].keepalive: 0s with hold_time 9s would let the session expire`}},
		{"keepalive without hold_time", head + "bgp:\n  asn: 65001\n  peers:\n    - {address: 10.0.0.1, asn: 65000, hold_time: 0s, keepalive: 1s}\n", ErrInvalid,
			[]string{`c.yaml:8: bgp.peers[0].keepalive: must be 0 when hold_time is 0`}},
		{"password too long", head + "bgp:\n  asn: 65001\n  peers:\n    - {address: 10.0.0.1, asn: 65000, password: " + strings.Repeat("p", 81) + "}\n", ErrInvalid,
			[]string{`c.yaml:8: bgp.peers[0].password: is 81 bytes long; TCP MD5 keys are at most 80`}},
		{"peer port zero", head + "bgp:\n  asn: 65001\n  peers:\n    - {address: 10.0.0.1, asn: 65000, port: 0}\n", ErrInvalid,
			[]string{`c.yaml:8: bgp.peers[0].port: 0 is not a port`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.in), "c.yaml")
			if err == nil {
				t.Fatalf("Parse accepted:\n%s\nas %+v", tc.in, cfg)
			}
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("Parse error %T %v, want a non-empty ErrorList", err, err)
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("errors.Is(err, %v) = false; err:\n%v", tc.kind, err)
			}
			for _, want := range tc.want {
				if !containsError(list, want) {
					t.Errorf("no error contains\n  %s\ngot:\n%v", want, err)
				}
			}
		})
	}
}

func TestAcceptChecksAndBGP(t *testing.T) {
	hc := "health_checks:\n"
	for _, tc := range []struct {
		name string
		in   string
	}{
		{"unused check", head + svc + hc + "  web: {type: tcp, port: 80}\n"},
		{"exec without port", head + hc + "  x: {type: exec, command: [/bin/check, \"{{address}}\"]}\n"},
		{"udp without expect", head + hc + "  u: {type: udp, port: 53, payload: x}\n"},
		{"same backend, two checks, two pools of one service", head + "  q: {health_check: c, backends: [{address: 10.0.1.1}]}\n" +
			hc + "  c: {type: tcp, port: 80}\n" +
			"services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p, q]}\n"},
		{"diamond with one inherited check", head + "  a: {health_check: c, include: [b1, b2]}\n  b1: {include: [p]}\n  b2: {include: [p]}\n" +
			hc + "  c: {type: tcp, port: 80}\n"},
		{"pool check overrides inherited", head + "  a: {health_check: c, include: [p, q]}\n  b: {include: [q]}\n  q: {health_check: d, backends: [{address: 10.0.1.9}]}\n" +
			hc + "  c: {type: tcp, port: 80}\n  d: {type: tcp, port: 81}\n"},
		{"hold_time 0 and keepalive default", head + "bgp: {asn: 65001, peers: [{address: 10.0.0.1, asn: 65000, hold_time: 0s}]}\n"},
		{"ipv6 peer, ibgp, 4-byte asn", head + "bgp: {asn: 4294967295, router_id: 1.1.1.1, peers: [{address: \"fd00::1\", asn: 4294967295}]}\n"},
		{"listen_port -1", head + "bgp: {asn: 65001, listen_port: -1, peers: [{address: 10.0.0.1, asn: 65000}]}\n"},
		{"graceful restart off", head + "bgp: {asn: 65001, graceful_restart_time: 0s, shutdown_wait: 0s, peers: [{address: 10.0.0.1, asn: 65000}]}\n"},
		{"loopback peer", head + "bgp: {asn: 65001, peers: [{address: 127.0.0.1, asn: 65000, port: 1790}]}\n"},
		{"min_healthy bounds", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], min_healthy: 0}\n" +
			"  - {name: t, vip: 10.200.0.1, port: 81, protocol: tcp, pools: [p], min_healthy: 1.0, withdraw_when_down: false}\n" +
			"  - {name: u, vip: 10.200.0.1, port: 82, protocol: tcp, pools: [p], min_healthy: .25}\n" +
			"  - {name: v, vip: 10.200.0.1, port: 83, protocol: tcp, pools: [p], min_healthy: 5e-1}\n"},
		{"fractions", head + hc + "  web: {type: tcp, port: 80, jitter: 1}\n  w2: {type: tcp, port: 80, jitter: 0.000001}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.in), "c.yaml")
			if err != nil {
				t.Fatalf("Parse rejected:\n%s\nwith:\n%v", tc.in, err)
			}
			roundTrip(t, c)
		})
	}
}

func TestValidateChecksHandBuilt(t *testing.T) {
	c, err := Load("testdata/checks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate(checks.yaml) = %v", err)
	}
	c.HealthChecks = append(c.HealthChecks,
		HealthCheck{Name: "zero"},
		HealthCheck{Name: "mixed", Type: CheckTCP, Port: 80, Path: "/", Command: []string{"x"}, Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1, Jitter: 2},
		c.HealthChecks[0])
	c.BGP.Peers = append(c.BGP.Peers, BGPPeer{})
	c.BGP.ListenPort = 0
	c.Services[0].MinHealthy = -1
	err = c.Validate()
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("Validate = %v, want an ErrorList", err)
	}
	for _, want := range []string{
		"health_checks.zero.type: required",
		"health_checks.zero.interval: 0s is out of range",
		"health_checks.zero.timeout: 0s is shorter than 1ms",
		"health_checks.zero.rise: 0 is out of range 1..100",
		"health_checks.mixed.path: applies to http and https checks only",
		"health_checks.mixed.command: applies to exec checks only",
		"health_checks.mixed.timeout: 1s must be shorter than the interval 1s",
		"health_checks.mixed.jitter: 2 is out of range 0..1",
		`health_checks.web: duplicate health check name "web"`,
		"bgp.listen_port: 0 is not a port",
		"bgp.peers[2].address: required",
		"bgp.peers[2].asn: 0 is not an AS number",
		"bgp.peers[2].port: 0 is not a port",
		"services[0].min_healthy: -1 is out of range 0..1",
	} {
		if !containsError(list, want) {
			t.Errorf("Validate lacks %q; got:\n%v", want, err)
		}
	}
}

func TestDesiredCopiesChecksAndBGP(t *testing.T) {
	c, err := Load("testdata/checks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := c.Desired()
	if !reflect.DeepEqual(d.BGP, c.BGP) {
		t.Errorf("Desired().BGP = %+v, want %+v", d.BGP, c.BGP)
	}
	d.BGP.Peers[0].ASN = 1
	h := d.HealthChecks["script"]
	h.Command[0] = "changed"
	if c.BGP.Peers[0].ASN == 1 || c.HealthChecks[5].Command[0] == "changed" {
		t.Error("Desired shares memory with the Config")
	}
	if _, ok := d.HealthChecks["echo"]; !ok || len(d.HealthChecks) != 6 {
		t.Errorf("HealthChecks = %v", d.HealthChecks)
	}
	var got []string
	for _, tg := range d.HealthTargets() {
		got = append(got, tg.Key().String())
	}
	want := []string{"conn@198.51.100.2", "dns@2001:db8:1::53", "echo@2001:db8:1::54", "script@198.51.100.9", "tls@198.51.100.3", "web@198.51.100.1"}
	if !slices.Equal(got, want) {
		t.Errorf("HealthTargets() = %v, want %v", got, want)
	}
}

func TestBGPFamilyNeedsACarrier(t *testing.T) {
	const base = `node: {name: n, interface: eth0, address: 10.0.0.11, address6: "fd00::11"}
pools:
  p: {backends: [{address: 10.0.1.1}, {address: "fd00:1::1"}]}
services:
  - {name: v6, vip: "fd00:200::1", port: 80, protocol: tcp, pools: [p]}
bgp:
  asn: 65001
  peers: [{address: 10.0.0.1, asn: 65000, hold_time: 3s, keepalive: 1s}]
`
	_, err := Parse([]byte(base), "c.yaml")
	if err == nil || !strings.Contains(err.Error(), "c.yaml:5: services[0].vip: IPv6 VIP fd00:200::1 cannot be announced") {
		t.Fatalf("IPv6 VIP with only an IPv4 peer: %v", err)
	}
	if _, err := Parse([]byte(strings.Replace(base, "  asn: 65001\n", "  asn: 65001\n  next_hop6: \"fd00::11\"\n", 1)), "c.yaml"); err != nil {
		t.Fatalf("with next_hop6: %v", err)
	}
}
