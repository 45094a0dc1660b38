package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/api/apitest"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/testenv"
)

func TestMain(m *testing.M) {
	time.Local = time.UTC
	os.Exit(m.Run())
}

// env is a fake xlbd on a socket.
type env struct {
	t      *testing.T
	fake   *apitest.Fake
	socket string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	fake := apitest.New()
	socket := filepath.Join(t.TempDir(), "xlbd.sock")
	srv, err := api.Listen(fake, api.Options{Socket: socket, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &env{t: t, fake: fake, socket: socket}
}

// run runs xlbctl with args against the fake.
func (e *env) run(args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	var out, errOut bytes.Buffer
	c := New(&out, &errOut)
	c.Now = func() time.Time { return time.Unix(1700000300, 0) }
	c.Sleep = func(ctx context.Context, d time.Duration) error { time.Sleep(5 * time.Millisecond); return nil }
	code = c.Run(context.Background(), append([]string{"--socket", e.socket}, args...))
	return out.String(), errOut.String(), code
}

// ok runs args and fails unless they succeed; it returns stdout.
func (e *env) ok(args ...string) string {
	e.t.Helper()
	out, errOut, code := e.run(args...)
	if code != 0 {
		e.t.Fatalf("xlbctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func wantLines(t *testing.T, got, want string) {
	t.Helper()
	if strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestStatus(t *testing.T) {
	e := newEnv(t)
	wantLines(t, e.ok("status"), `
node        fake
forwarder   eth0, native XDP, program 42, pinned at /sys/fs/bpf/xlb/fake
xlbd        test, started 2023-11-14 22:13:20 UTC (5m0s ago)
self-check  ok (checked 3m20s ago)
tx check    ok
prober      off (xlbd --probe-interval)
node drain  no
config      /etc/xlb/xlb.yaml, generation 1, committed 2023-11-14 22:14:10 UTC (4m10s ago)
            2 services, 5 backends
overrides   none
conntrack   3 of 1048576 entries in use (0.0%)
defence     secure_tcp on (fullest CPU's slice 62.5% full)
bgp
  Peer        ASN    State        Uptime  Advertised  Received  GracefulRestart
  10.0.0.254  65000  established  1m30s   2           0         yes`)
	e.fake.Lock()
	e.fake.Info.SelfCheck = api.SelfCheck{OK: false, LastError: "probe to 10.0.0.100:80/6: verdict 1", CheckedAt: time.Unix(1700000299, 0)}
	e.fake.Unlock()
	if out := e.ok("status"); !strings.Contains(out, "self-check  FAILING: probe to 10.0.0.100:80/6: verdict 1 (checked 1s ago): VIPs are withdrawn") {
		t.Fatalf("failing self-check not shown:\n%s", out)
	}
	e.fake.Lock()
	e.fake.Info.TX = api.TXCheck{OK: false, Detail: "the peer veth sw0 (ifindex 7) of eth0 has no XDP program"}
	e.fake.Info.Prober = api.ProberStatus{Enabled: true, OK: false, Probes: []api.Probe{
		{VIP: "10.0.0.100:80/6", Up: true, Latency: 1234 * time.Microsecond, CheckedAt: time.Unix(1700000299, 0)},
		{VIP: "10.0.0.101:53/17", Error: "no answer from 10.0.0.101:53/17 within 500ms", CheckedAt: time.Unix(1700000299, 0)},
	}}
	e.fake.Unlock()
	out := e.ok("status")
	for _, want := range []string{
		"tx check    FAILING: the peer veth sw0 (ifindex 7) of eth0 has no XDP program",
		"prober      FAILING: no VIP answers its probes: VIPs are withdrawn",
		"            10.0.0.100:80/6 up, 1.234ms (checked 1s ago)",
		"            10.0.0.101:53/17 DOWN: no answer from 10.0.0.101:53/17 within 500ms (checked 1s ago)",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("status lacks %q:\n%s", want, out)
		}
	}
}

func TestServices(t *testing.T) {
	e := newEnv(t)
	wantLines(t, e.ok("services"), `
Prot  LocalAddress:Port   Service  Method   Sched   Persist  M       ActivePool  Backends  Probe  Packets  Bytes   NewFlows  ActiveConn  InActConn
  ->  RemoteAddress       Pool     Forward  Weight           State   Health      Share            Packets  Bytes   NewFlows  ActiveConn  InActConn
TCP   10.0.0.100:80       web      gre      maglev  -        65537   web         3         -      1000     100000  100       12          3
  ->  10.0.1.1            web      Tunnel   2                active  up          66.7%            600      60000   60        12          3
  ->  10.0.1.2            web      Tunnel   1                active  up          33.3%            400      40000   40        0           0
  ->  10.0.2.1            spare    Tunnel   1                active  -           0.0%             0        0       0         0           0
UDP   [2001:db8::100]:53  dns      gre      maglev  -        251     dns         2         -      0        0       0         0           0
  ->  2001:db8:1::1       dns      Tunnel   1                active  -           49.8%            0        0       0         0           0
  ->  2001:db8:1::2       dns      Tunnel   1                active  -           49.8%            0        0       0         0           0`)
	// The prober's last probe of each VIP: up with its round trip, or DOWN.
	e.fake.Lock()
	e.fake.Info.Prober = api.ProberStatus{Enabled: true, OK: true, Probes: []api.Probe{
		{VIP: "10.0.0.100:80/6", Up: true, Latency: 1234 * time.Microsecond, CheckedAt: time.Unix(1700000299, 0)},
		{VIP: "[2001:db8::100]:53/17", Error: "no answer within 500ms", CheckedAt: time.Unix(1700000299, 0)},
	}}
	e.fake.Unlock()
	wantLines(t, e.ok("services"), `
Prot  LocalAddress:Port   Service  Method   Sched   Persist  M       ActivePool  Backends  Probe       Packets  Bytes   NewFlows  ActiveConn  InActConn
  ->  RemoteAddress       Pool     Forward  Weight           State   Health      Share                 Packets  Bytes   NewFlows  ActiveConn  InActConn
TCP   10.0.0.100:80       web      gre      maglev  -        65537   web         3         up 1.234ms  1000     100000  100       12          3
  ->  10.0.1.1            web      Tunnel   2                active  up          66.7%                 600      60000   60        12          3
  ->  10.0.1.2            web      Tunnel   1                active  up          33.3%                 400      40000   40        0           0
  ->  10.0.2.1            spare    Tunnel   1                active  -           0.0%                  0        0       0         0           0
UDP   [2001:db8::100]:53  dns      gre      maglev  -        251     dns         2         DOWN        0        0       0         0           0
  ->  2001:db8:1::1       dns      Tunnel   1                active  -           49.8%                 0        0       0         0           0
  ->  2001:db8:1::2       dns      Tunnel   1                active  -           49.8%                 0        0       0         0           0`)
	var js struct {
		Services []struct {
			Name  string
			Probe *struct{ Up bool }
		}
	}
	if err := json.Unmarshal([]byte(e.ok("-o", "json", "services")), &js); err != nil || len(js.Services) != 2 ||
		js.Services[0].Probe == nil || !js.Services[0].Probe.Up || js.Services[1].Probe == nil || js.Services[1].Probe.Up {
		t.Fatalf("services -o json: probes %+v (%v)", js.Services, err)
	}
	out := e.ok("services", "--service", "dns", "--rate")
	if !strings.Contains(out, "Pkt/s") || strings.Contains(out, "web") {
		t.Fatalf("dns with rates:\n%s", out)
	}
	if _, errOut, code := e.run("services", "--service", "nope"); code != 1 || errOut != "xlbctl: no service \"nope\" in the running config\n" {
		t.Fatalf("unknown service: %d %q", code, errOut)
	}
}

// The default view shows each service's persistence as --ipvsadm does:
// the timeout, the client prefix when shorter than the whole address of
// the VIP's family, and the group; "-" without persistence.
func TestServicesPersistence(t *testing.T) {
	e := newEnv(t)
	d := e.fake.Desired()
	e.fake.Lock()
	d.Services[0].Persistence = config.Persistence{Timeout: 300 * time.Second, Netmask: 24, Netmask6: 64, Group: "webmail"}
	d.Services[1].Persistence = config.Persistence{Timeout: 30 * time.Second, Netmask: 24, Netmask6: 128}
	e.fake.Unlock()
	wantLines(t, e.ok("services"), `
Prot  LocalAddress:Port   Service  Method   Sched   Persist                 M       ActivePool  Backends  Probe  Packets  Bytes   NewFlows  ActiveConn  InActConn
  ->  RemoteAddress       Pool     Forward  Weight                          State   Health      Share            Packets  Bytes   NewFlows  ActiveConn  InActConn
TCP   10.0.0.100:80       web      gre      maglev  300s /24 group=webmail  65537   web         3         -      1000     100000  100       12          3
  ->  10.0.1.1            web      Tunnel   2                               active  up          66.7%            600      60000   60        12          3
  ->  10.0.1.2            web      Tunnel   1                               active  up          33.3%            400      40000   40        0           0
  ->  10.0.2.1            spare    Tunnel   1                               active  -           0.0%             0        0       0         0           0
UDP   [2001:db8::100]:53  dns      gre      maglev  30s                     251     dns         2         -      0        0       0         0           0
  ->  2001:db8:1::1       dns      Tunnel   1                               active  -           49.8%            0        0       0         0           0
  ->  2001:db8:1::2       dns      Tunnel   1                               active  -           49.8%            0        0       0         0           0`)
	e.fake.Lock()
	d.Services[0].Persistence = config.Persistence{}
	d.Services[1].Persistence = config.Persistence{Timeout: 45 * time.Second, Netmask6: 48}
	e.fake.Unlock()
	out := e.ok("services")
	for _, re := range []string{`(?m)^TCP +10\.0\.0\.100:80 +web +gre +maglev +- +65537 `, `(?m)^UDP +\[2001:db8::100\]:53 +dns +gre +maglev +45s /48 +251 `} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no line matches %s:\n%s", re, out)
		}
	}
}

func TestBackends(t *testing.T) {
	e := newEnv(t)
	wantLines(t, e.ok("backends", "--service", "web"), `
Service  Backend   Pool   Forward  Weight  State   Health  Check  Since     Entries  Packets  Bytes  NewFlows  Tracked  LastError
web      10.0.1.1  web    Tunnel   2       active  up      web    5m0s ago  43691    600      60000  60        -        -
web      10.0.1.2  web    Tunnel   1       active  up      web    5m0s ago  21845    400      40000  40        -        -
web      10.0.2.1  spare  Tunnel   1       active  -       -      5m0s ago  0        0        0      0         -        -`)
}

func TestOverrides(t *testing.T) {
	e := newEnv(t)
	wantLines(t, e.ok("drain", "10.0.1.1"), `
web/10.0.1.1: draining: no new flows, tracked flows continue
(a runtime override on top of the config; 'xlbctl reset 10.0.1.1' returns to the config)`)
	e.ok("weight", "10.0.1.2", "3", "--service", "web") // flags after the arguments
	out := e.ok("backends", "--service", "web")
	if !strings.Contains(out, "web      10.0.1.1  web    Tunnel   2       drain*") || !strings.Contains(out, "web      10.0.1.2  web    Tunnel   3*      active") ||
		!strings.Contains(out, "* runtime override") {
		t.Fatalf("overrides not shown:\n%s", out)
	}
	e.ok("undrain", "10.0.1.1")
	e.ok("reset", "10.0.1.2")
	out = e.ok("backends", "10.0.1.2")
	if strings.Contains(out, "*") {
		t.Fatalf("override still shown after reset:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"drain", "10.9.9.9"}, 1, "xlbctl: backend 10.9.9.9 is not in any service of the running config: not found\n"},
		{[]string{"drain", "nope"}, 2, "xlbctl: drain: \"nope\" is not an IP address ('xlbctl help' lists the commands)\n"},
		{[]string{"weight", "10.0.1.1"}, 2, "xlbctl: weight ADDR N [--service NAME] ('xlbctl help' lists the commands)\n"},
		{[]string{"weight", "10.0.1.1", "70000"}, 2, "xlbctl: weight \"70000\": an integer 0..65535 ('xlbctl help' lists the commands)\n"},
	} {
		if _, errOut, code := e.run(tc.args...); code != tc.code || errOut != tc.msg {
			t.Errorf("%v: exit %d %q, want %d %q", tc.args, code, errOut, tc.code, tc.msg)
		}
	}
}

func TestApply(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(`node: {interface: eth0, address: 10.0.0.1}
pools:
  p: {backends: [{address: 10.0.1.1}]}
services:
  - {name: s, vip: 10.0.0.100, port: 80, protocol: tcp, pools: [p], table_size: 10}
`), 0o644)
	out, errOut, code := e.run("apply", "-f", bad)
	want := "xlbctl: " + bad + " rejected, nothing changed:\n  " + bad + ":5: services[0].table_size: 10 is not prime (nearest primes: 7, 11)\n"
	if code != 1 || out != "" || errOut != want {
		t.Fatalf("bad config: exit %d\nstdout %q\nstderr %q\nwant   %q", code, out, errOut, want)
	}
	out, _, code = e.run("-o", "json", "apply", "-f", bad)
	var ce struct {
		Errors []struct {
			Field string
			Line  int
		}
	}
	if code != 1 || json.Unmarshal([]byte(out), &ce) != nil || len(ce.Errors) != 1 || ce.Errors[0].Field != "services[0].table_size" || ce.Errors[0].Line != 5 {
		t.Fatalf("bad config as json: exit %d %s", code, out)
	}
	if len(e.fake.Applied) != 0 {
		t.Fatal("a rejected config was applied")
	}

	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte(strings.Replace(apitest.Config, "10.0.1.2}", "10.0.1.3}", 1)), 0o644)
	wantLines(t, e.ok("apply", "-f", good, "--dry-run"), `
services +0 -0 ~0, backends +1 -1 ~0
  + backend web/10.0.1.3
  - backend web/10.0.1.2
dry run: nothing committed`)
	wantLines(t, e.ok("apply", "-f", good), `
services +0 -0 ~0, backends +1 -1 ~0
  + backend web/10.0.1.3
  - backend web/10.0.1.2
committed: generation 2`)
	wantLines(t, e.ok("apply", "-f", good), "no change\ncommitted: generation 3")
	if _, errOut, code := e.run("apply"); code != 2 || !strings.Contains(errOut, "apply -f FILE") {
		t.Fatalf("apply without file: %d %q", code, errOut)
	}
	if _, errOut, code := e.run("apply", "-f", filepath.Join(dir, "missing.yaml")); code != 1 || !strings.Contains(errOut, "no such file") {
		t.Fatalf("missing file: %d %q", code, errOut)
	}
}

func TestConntrack(t *testing.T) {
	e := newEnv(t)
	wantLines(t, e.ok("conntrack"), `
CPU  Bucket  Way  Tag        Real  Backend   Service  State        Idle
0    7       0    0xabcdef1  1     10.0.1.1  web      established  2s
1    9       3    0x1234567  2     10.0.1.2  web      syn          1s
2 of 2 matching entries shown; 3 in use of 1048576 (0.0%).
The table is keyed by the flow hash (bucket, 27-bit tag): the 5-tuple is not stored.`)
	out := e.ok("conntrack", "--service", "dns", "--expired")
	if !strings.Contains(out, "2001:db8:1::1  dns      established (expired)  6m40s") {
		t.Fatalf("expired entry:\n%s", out)
	}
	out = e.ok("conntrack", "--limit", "1")
	if !strings.Contains(out, "1 of 2 matching entries shown") || !strings.Contains(out, "raise --limit") {
		t.Fatalf("truncated:\n%s", out)
	}
	if _, _, code := e.run("conntrack", "--state", "weird"); code != 2 {
		t.Fatalf("bad state: exit %d", code)
	}
	// --templates asks for the persistence templates and prints them so
	// (the fake answers with its entries).
	out = e.ok("conntrack", "--templates")
	if !strings.Contains(out, "Slot  Tag         Real  Backend   Service  Expires in\n7     0x0abcdef1  1     10.0.1.1  web      2s") ||
		!strings.Contains(out, "matching templates shown") {
		t.Fatalf("templates:\n%s", out)
	}
}

func TestExplain(t *testing.T) {
	e := newEnv(t)
	wantLines(t, e.ok("explain", "192.0.2.1:4000", "10.0.0.100:80", "tcp", "--flags", "SA"), `
verdict    XDP_TX
service    web
backend    10.0.1.1 (real 1, gre)
conntrack  miss
reason     new flow: Maglev lookup
output
  eth 02:00:00:00:00:01 > 02:00:00:00:00:02 type 0x0800
  ipv4 10.0.0.1 > 10.0.1.1 proto gre ttl 64 len 64
  gre proto 0x0800
  ipv4 192.0.2.1 > 10.0.0.100 proto tcp ttl 64 len 40
  tcp 4000 > 80 [S.] seq 1000
(read only: run through the live program as a self-check probe; no conntrack entry written, no service or backend counter moved)`)
	if out := e.ok("explain", "[2001:db8::9]:1", "[2001:db8::100]:53", "udp", "--hex"); !strings.Contains(out, "udp 1 > 53 len 8") || !strings.Contains(out, "00000000  ") {
		t.Fatalf("v6 with hex:\n%s", out)
	}
	for _, args := range [][]string{
		{"explain", "1.2.3.4:1", "10.0.0.100:80"},
		{"explain", "1.2.3.4:1", "10.0.0.100:80", "icmp"},
		{"explain", "1.2.3.4:1", "10.0.0.100:80", "tcp", "--flags", "Z"},
	} {
		if _, _, code := e.run(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if _, errOut, code := e.run("explain", "1.2.3.4", "10.0.0.100:80", "tcp"); code != 1 || !strings.Contains(errOut, "src \"1.2.3.4\": want address:port") {
		t.Errorf("bad src: %d %q", code, errOut)
	}
}

func TestNode(t *testing.T) {
	e := newEnv(t)
	if out := e.ok("node", "drain"); !strings.HasPrefix(out, "node draining") {
		t.Fatal(out)
	}
	if out := e.ok("node", "drain"); out != "node already drained\n" {
		t.Fatal(out)
	}
	if out := e.ok("status"); !strings.Contains(out, "node drain  DRAINED") {
		t.Fatalf("status while drained:\n%s", out)
	}
	if out := e.ok("node", "undrain"); out != "node undrained: VIPs announced again\n" {
		t.Fatal(out)
	}
	e.fake.Lock()
	e.fake.HasBGP = false
	e.fake.Unlock()
	if _, errOut, code := e.run("node", "drain"); code != 1 || !strings.Contains(errOut, "no bgp section") {
		t.Fatalf("drain without bgp: %d %q", code, errOut)
	}
	if _, _, code := e.run("node", "sideways"); code != 2 {
		t.Fatalf("node sideways: exit %d", code)
	}
}

func TestStatsWatch(t *testing.T) {
	e := newEnv(t)
	out := e.ok("stats")
	if !strings.Contains(out, "drop_no_backend   5") || !strings.Contains(out, "  ->  10.0.1.1                     600") {
		t.Fatalf("stats:\n%s", out)
	}
	e.fake.OnRead = func(f *apitest.Fake) {
		f.AddCounters("web", "10.0.1.1", api.Counters{Packets: 10, Bytes: 1000, NewFlows: 1})
	}
	out = e.ok("-o", "json", "stats", "--watch", "--count", "3", "--interval", "100ms")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d JSON lines, want 3:\n%s", len(lines), out)
	}
	for _, l := range lines {
		var r struct {
			Backends []struct {
				Address string
				Rates   *struct{ Packets float64 }
			}
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if r.Backends[0].Address != "10.0.1.1" || r.Backends[0].Rates == nil || r.Backends[0].Rates.Packets <= 0 {
			t.Fatalf("no rate in %s", l)
		}
	}
	out = e.ok("stats", "--watch", "--count", "2")
	if strings.Count(out, "Rate/s") != 2 {
		t.Fatalf("watch tables:\n%s", out)
	}
}

func TestWithRates(t *testing.T) {
	at := time.Unix(1700000000, 0)
	mk := func(d time.Duration, n uint64) *pb.CountersResponse {
		return &pb.CountersResponse{
			Global:   []*pb.NamedCounter{{Name: "ct_hit", Value: n}},
			Services: []*pb.ServiceCounters{{Name: "web", Vip: "10.0.0.100", Port: 80, Protocol: pb.Protocol_PROTOCOL_TCP, Counters: &pb.Counters{Packets: n, Bytes: 100 * n}}},
			Backends: []*pb.BackendCounters{{Service: "web", Address: "10.0.1.1", Counters: &pb.Counters{Packets: n, NewFlows: n / 10}}},
			Sample:   &pb.Sample{At: timestamppb.New(at.Add(d))},
		}
	}
	prev, cur := mk(0, 1000), mk(2*time.Second, 3000)
	withRates(prev, cur)
	if cur.Global[0].Rate != 1000 || cur.Services[0].Rates.Packets != 1000 || cur.Services[0].Rates.Bytes != 100000 ||
		cur.Backends[0].Rates.NewFlows != 100 || cur.Sample.Interval.AsDuration() != 2*time.Second {
		t.Fatalf("rates %v", cur)
	}
	// A counter that went back (a real id reused) gives 0, not a huge rate.
	prev, cur = mk(0, 3000), mk(time.Second, 10)
	withRates(prev, cur)
	if cur.Global[0].Rate != 0 || cur.Services[0].Rates.Packets != 0 {
		t.Fatalf("reset counter: %v", cur)
	}
}

func TestJSON(t *testing.T) {
	e := newEnv(t)
	for _, args := range [][]string{
		{"status"}, {"services"}, {"backends"}, {"stats"}, {"conntrack"},
		{"explain", "192.0.2.1:1", "10.0.0.100:80", "tcp"}, {"drain", "10.0.1.1"}, {"node", "drain"},
	} {
		out := e.ok(append([]string{"-o", "json"}, args...)...)
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v: not JSON: %v\n%s", args, err, out)
		}
	}
	// -o after the command works too.
	out := e.ok("status", "-o", "json")
	var st struct{ Node string }
	if json.Unmarshal([]byte(out), &st) != nil || st.Node != "fake" {
		t.Fatalf("status -o json: %s", out)
	}
	if _, _, code := e.run("-o", "yaml", "status"); code != 2 {
		t.Fatalf("-o yaml: exit %d", code)
	}
}

func TestUsage(t *testing.T) {
	e := newEnv(t)
	if _, errOut, code := e.run(); code != 2 || !strings.HasPrefix(errOut, "usage: xlbctl") {
		t.Fatalf("no command: %d %q", code, errOut)
	}
	if out, _, code := e.run("help"); code != 0 || !strings.HasPrefix(out, "usage: xlbctl") {
		t.Fatalf("help: %d %q", code, out)
	}
	if _, errOut, code := e.run("bogus"); code != 2 || errOut != "xlbctl: unknown command \"bogus\" ('xlbctl help' lists the commands)\n" {
		t.Fatalf("bogus: %d %q", code, errOut)
	}
	if _, errOut, code := e.run("status", "extra"); code != 2 || !strings.Contains(errOut, "takes no argument") {
		t.Fatalf("extra argument: %d %q", code, errOut)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"trace"}, "--vip ADDR:PORT is required"},
		{[]string{"trace", "--vip", "10.0.0.1"}, "want ADDR:PORT with a port"},
		{[]string{"trace", "--vip", "10.0.0.1:80", "--proto", "sctp"}, "tcp or udp"},
		{[]string{"trace", "--vip", "10.0.0.1:80", "--src", "2001:db8::1"}, "different families"},
		{[]string{"trace", "--vip", "10.0.0.1:80", "--count", "0"}, "--count 0: 1..10000"},
		{[]string{"trace", "--vip", "10.0.0.1:80", "--listen", "224.0.0.1:9"}, "unicast"},
		{[]string{"trace", "--vip", "10.0.0.1:80", "--proto", "tcp", "--src", "10.0.0.2:999", "--count", "2"}, "--count 1"},
	} {
		if _, errOut, code := e.run(c.args...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Fatalf("%q: exit %d %q, want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

func TestNotRunning(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "xlbd.sock")
	var out, errOut bytes.Buffer
	code := New(&out, &errOut).Run(context.Background(), []string{"--socket", sock, "status"})
	want := "xlbctl: cannot reach xlbd at " + sock + ": no such file (is xlbd running? --socket)\n"
	if code != 1 || errOut.String() != want {
		t.Fatalf("exit %d\n got %q\nwant %q", code, errOut.String(), want)
	}
}

// TestPermissionDenied runs xlbctl as an unprivileged user against a 0600
// socket owned by root (the test binary re-executed as nobody).
func TestPermissionDenied(t *testing.T) {
	if sock := os.Getenv("XLBCTL_TEST_DENIED_SOCKET"); sock != "" {
		var out, errOut bytes.Buffer
		code := New(&out, &errOut).Run(context.Background(), []string{"--socket", sock, "status"})
		fmt.Printf("exit=%d stderr=%s", code, errOut.String())
		return
	}
	testenv.RequireRoot(t) // to run a child as another user
	// t.TempDir's parent is 0700: the child could not reach it.
	dir, err := os.MkdirTemp("", "xlbctl-denied-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, fake: apitest.New(), socket: filepath.Join(dir, "xlbd.sock")}
	srv, err := api.Listen(e.fake, api.Options{Socket: e.socket, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	bin := filepath.Join(dir, "ctl.test")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestPermissionDenied$")
	cmd.Env = append(os.Environ(), "XLBCTL_TEST_DENIED_SOCKET="+e.socket)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	want := "exit=1 stderr=xlbctl: cannot reach xlbd at " + e.socket + ": permission denied (the socket is 0600, owned by xlbd's user: run as root)\n"
	if !strings.Contains(string(out), want) {
		t.Fatalf("child output:\n%s\nwant:\n%s", out, want)
	}
}

// TestInstanceChoice: --node names the instance's default socket;
// --node, --socket and --addr are exclusive.
func TestInstanceChoice(t *testing.T) {
	var out, errOut bytes.Buffer
	code := New(&out, &errOut).Run(context.Background(), []string{"--node", "xlbctl-test-none", "status"})
	want := "xlbctl: cannot reach xlbd at /run/xlb/xlbctl-test-none.sock: no such file (is xlbd running? --socket)\n"
	if code != 1 || errOut.String() != want {
		t.Fatalf("--node: exit %d\n got %q\nwant %q", code, errOut.String(), want)
	}
	for _, args := range [][]string{{"--node", "a", "-s", "/tmp/x.sock"}, {"--node", "a", "--addr", "127.0.0.1:1"}} {
		errOut.Reset()
		code := New(&out, &errOut).Run(context.Background(), append(args, "status"))
		if code != 2 || !strings.Contains(errOut.String(), "--node, --socket and --addr are exclusive") {
			t.Fatalf("%q: exit %d %q", args, code, errOut.String())
		}
	}
}
