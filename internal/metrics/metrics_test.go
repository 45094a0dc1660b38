package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/api/apitest"
)

var quiet = slog.New(slog.DiscardHandler)

// scrape fetches /metrics and parses it with the Prometheus text parser.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/metrics: %s\n%s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value returns the value of the sample of family name whose labels are
// exactly labels ("k=v" pairs), failing the test when there is none.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, typ dto.MetricType, labels ...string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	if f.GetType() != typ {
		t.Fatalf("%s is a %v, want %v", name, f.GetType(), typ)
	}
	want := strings.Join(labels, ",")
	var seen []string
	for _, m := range f.Metric {
		var ls []string
		for _, l := range m.Label {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		sort.Strings(ls)
		got := strings.Join(ls, ",")
		if got == want {
			switch typ {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue()
			}
			t.Fatalf("unexpected type %v", typ)
		}
		seen = append(seen, got)
	}
	t.Fatalf("%s{%s}: no such sample (have %v)", name, want, seen)
	return 0
}

const (
	C = dto.MetricType_COUNTER
	G = dto.MetricType_GAUGE
)

func TestScrapeEqualsSource(t *testing.T) {
	fake := apitest.New()
	m := New(fake, Options{Log: quiet})
	fams := scrape(t, m.Handler())

	svcs, _ := fake.Services(context.Background())
	for _, s := range svcs {
		l := []string{"port=" + portLabel(s.Port), "proto=" + s.Proto.String(), "service=" + s.Name, "vip=" + s.VIP.String()}
		if got := value(t, fams, "xlb_service_packets_total", C, l...); got != float64(s.Counters.Packets) {
			t.Errorf("%s packets %v, want %d", s.Name, got, s.Counters.Packets)
		}
		if got := value(t, fams, "xlb_service_bytes_total", C, l...); got != float64(s.Counters.Bytes) {
			t.Errorf("%s bytes %v, want %d", s.Name, got, s.Counters.Bytes)
		}
		if got := value(t, fams, "xlb_service_new_flows_total", C, l...); got != float64(s.Counters.NewFlows) {
			t.Errorf("%s new flows %v, want %d", s.Name, got, s.Counters.NewFlows)
		}
		for _, b := range s.Backends {
			bl := []string{"backend=" + b.Address.String(), "service=" + s.Name}
			for name, want := range map[string]uint64{
				"xlb_backend_packets_total": b.Counters.Packets, "xlb_backend_bytes_total": b.Counters.Bytes,
				"xlb_backend_new_flows_total": b.Counters.NewFlows,
			} {
				if got := value(t, fams, name, C, bl...); got != float64(want) {
					t.Errorf("%s{%v} = %v, want %d", name, bl, got, want)
				}
			}
			if got := value(t, fams, "xlb_backend_weight", G, bl...); got != float64(b.Weight) {
				t.Errorf("weight %v, want %d", got, b.Weight)
			}
			if got := value(t, fams, "xlb_backend_table_entries", G, bl...); got != float64(b.TableEntries) {
				t.Errorf("table entries %v, want %d", got, b.TableEntries)
			}
			if value(t, fams, "xlb_backend_healthy", G, bl...) != 1 || value(t, fams, "xlb_backend_in_data_plane", G, bl...) != 1 ||
				value(t, fams, "xlb_backend_draining", G, bl...) != 0 {
				t.Errorf("%v: state gauges wrong", bl)
			}
		}
	}
	// Sanity against the fake's literal values too.
	if v := value(t, fams, "xlb_backend_packets_total", C, "backend=10.0.1.1", "service=web"); v != 600 {
		t.Fatalf("web/10.0.1.1 packets %v", v)
	}

	for _, tc := range []struct {
		name  string
		label string
		want  float64
	}{
		{"xlb_passed_packets_total", "reason=not_ip", 10},
		{"xlb_passed_packets_total", "reason=not_vip", 20},
		{"xlb_forwarded_packets_total", "action=tx", 1000},
		{"xlb_conntrack_lookups_total", "result=hit", 900},
		{"xlb_conntrack_lookups_total", "result=miss", 100},
		{"xlb_dropped_packets_total", "reason=no_backend", 5},
		{"xlb_datapath_events_total", "event=nexthop_fallback", 1},
	} {
		if got := value(t, fams, tc.name, C, tc.label); got != tc.want {
			t.Errorf("%s{%s} = %v, want %v", tc.name, tc.label, got, tc.want)
		}
	}

	checkGauges(t, fams, []gaugeWant{
		{"xlb_selfcheck_ok", nil, 1},
		{"xlb_node_drained", nil, 0},
		{"xlb_conntrack_capacity_entries", nil, 1 << 20},
		{"xlb_conntrack_entries", nil, 3},
		{"xlb_persistence_templates", nil, 2},
		{"xlb_conntrack_fill_ratio", nil, 0.625},
		{"xlb_defence_active", []string{"mode=secure_tcp"}, 1},
		{"xlb_defence_active", []string{"mode=drop_entry"}, 0},
		{"xlb_defence_active", []string{"mode=drop_packet"}, 0},
		{"xlb_config_generation", nil, 1},
		{"xlb_config_last_commit_timestamp_seconds", nil, 1700000050},
		{"xlb_config_services", nil, 2},
		{"xlb_config_backends", nil, 5},
		{"xlb_bgp_session_up", []string{"peer=10.0.0.254"}, 1},
		{"xlb_bgp_session_state", []string{"peer=10.0.0.254", "state=established"}, 1},
		{"xlb_bgp_session_state", []string{"peer=10.0.0.254", "state=idle"}, 0},
		{"xlb_bgp_session_uptime_seconds", []string{"peer=10.0.0.254"}, 90},
		{"xlb_service_up", []string{"service=web"}, 1},
		{"xlb_service_table_size", []string{"service=dns"}, 251},
		{"xlb_info", []string{"interface=eth0", "node=fake", "version=test", "xdp_mode=native"}, 1},
	})
	for name := range fams {
		if !strings.HasPrefix(name, "xlb_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("metric %s lacks the xlb_ prefix", name)
		}
	}
}

func TestScrapeFollowsChanges(t *testing.T) {
	fake := apitest.New()
	m := New(fake, Options{Log: quiet})
	fake.Lock()
	fake.AddCounters("web", "10.0.1.2", api.Counters{Packets: 5, Bytes: 500, NewFlows: 1})
	fake.Info.SelfCheck.OK = false
	fake.Unlock()
	if _, err := fake.SetBackend(context.Background(), api.BackendUpdate{Address: mustAddr("10.0.1.2"), Drain: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, m.Handler())
	bl := []string{"backend=10.0.1.2", "service=web"}
	if v := value(t, fams, "xlb_backend_packets_total", C, bl...); v != 405 {
		t.Errorf("packets %v, want 405", v)
	}
	if v := value(t, fams, "xlb_backend_draining", G, bl...); v != 1 {
		t.Errorf("draining %v", v)
	}
	if v := value(t, fams, "xlb_runtime_overrides", G); v != 1 {
		t.Errorf("overrides %v", v)
	}
	if v := value(t, fams, "xlb_selfcheck_ok", G); v != 0 {
		t.Errorf("selfcheck %v", v)
	}
}

// TestDeliveryMetrics: the transmit check and the prober's probes.
func TestDeliveryMetrics(t *testing.T) {
	fake := apitest.New()
	m := New(fake, Options{Log: quiet})
	if v := value(t, scrape(t, m.Handler()), "xlb_tx_check_ok", G); v != 1 {
		t.Errorf("tx check ok %v, want 1", v)
	}
	fake.Lock()
	fake.Info.TX = api.TXCheck{OK: false, Detail: "peer has no XDP program"}
	fake.Info.Prober = api.ProberStatus{Enabled: true, Probes: []api.Probe{
		{VIP: "10.0.0.100:80/6", Up: true, Latency: 1500 * time.Microsecond},
		{VIP: "10.0.0.101:53/17", Error: "no answer"},
	}}
	fake.Unlock()
	checkGauges(t, scrape(t, m.Handler()), []gaugeWant{
		{"xlb_tx_check_ok", nil, 0},
		{"xlb_probe_up", []string{"vip=10.0.0.100:80/6"}, 1},
		{"xlb_probe_up", []string{"vip=10.0.0.101:53/17"}, 0},
		{"xlb_probe_latency_seconds", []string{"vip=10.0.0.100:80/6"}, 0.0015},
	})
}

// gaugeWant is a gauge's expected value.
type gaugeWant struct {
	name   string
	labels []string
	want   float64
}

func checkGauges(t *testing.T, fams map[string]*dto.MetricFamily, wants []gaugeWant) {
	t.Helper()
	for _, tc := range wants {
		if got := value(t, fams, tc.name, G, tc.labels...); got != tc.want {
			t.Errorf("%s{%v} = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}

func TestObserve(t *testing.T) {
	m := New(apitest.New(), Options{Log: quiet})
	m.ObserveCommit(Commit{Trigger: "api", Plan: 2 * time.Millisecond, Apply: 30 * time.Millisecond})
	m.ObserveCommit(Commit{Trigger: "api", Plan: time.Millisecond, Err: errors.New("x")})
	m.ObserveTableBuild(1800 * time.Microsecond)
	var nilM *Metrics
	nilM.ObserveCommit(Commit{}) // must not panic
	fams := scrape(t, m.Handler())
	if v := value(t, fams, "xlb_config_commits_total", C, "result=ok", "trigger=api"); v != 1 {
		t.Errorf("ok commits %v", v)
	}
	if v := value(t, fams, "xlb_config_commits_total", C, "result=error", "trigger=api"); v != 1 {
		t.Errorf("failed commits %v", v)
	}
	h := fams["xlb_config_plan_duration_seconds"].Metric[0].GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() < 0.0029 || h.GetSampleSum() > 0.0031 {
		t.Errorf("plan histogram count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
	if c := fams["xlb_config_apply_duration_seconds"].Metric[0].GetHistogram().GetSampleCount(); c != 1 {
		t.Errorf("apply histogram count %d", c)
	}
	if c := fams["xlb_maglev_table_build_duration_seconds"].Metric[0].GetHistogram().GetSampleCount(); c != 1 {
		t.Errorf("table build count %d", c)
	}
}

func TestLint(t *testing.T) {
	m := New(apitest.New(), Options{Log: quiet})
	m.ObserveCommit(Commit{Trigger: "startup", Plan: time.Millisecond, Apply: time.Millisecond})
	problems, err := testutil.GatherAndLint(m.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "xlb_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}

func TestSourceError(t *testing.T) {
	fake := apitest.New()
	fake.Err = errors.New("controller busy")
	m := New(fake, Options{Log: quiet})
	fams := scrape(t, m.Handler()) // the rest is still served
	if _, ok := fams["xlb_service_packets_total"]; ok {
		t.Fatal("service counters served without a source")
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Fatal("runtime metrics missing")
	}
}

func TestHealthz(t *testing.T) {
	fake := apitest.New()
	m := New(fake, Options{Log: quiet})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	get := func() (int, string) {
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != 200 || body != "ok\n" {
		t.Fatalf("healthy: %d %q", code, body)
	}
	fake.Lock()
	fake.Info.SelfCheck = api.SelfCheck{OK: false, LastError: "the xdp link is no longer attached to eth0"}
	fake.Unlock()
	if code, body := get(); code != 503 || body != "forwarder self-check failing: the xdp link is no longer attached to eth0\n" {
		t.Fatalf("failing: %d %q", code, body)
	}
	fake.Lock()
	fake.Err = errors.New("boom")
	fake.Unlock()
	if code, body := get(); code != 503 || !strings.Contains(body, "boom") {
		t.Fatalf("no status: %d %q", code, body)
	}
}

func TestListenServe(t *testing.T) {
	m := New(apitest.New(), Options{Addr: "127.0.0.1:0", Log: quiet})
	if err := m.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx) }()
	resp, err := http.Get("http://" + m.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz %s", resp.Status)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	first := New(apitest.New(), Options{Addr: "127.0.0.1:0", Log: quiet})
	if err := first.Listen(); err != nil {
		t.Fatal(err)
	}
	defer first.l.Close()
	busy := New(apitest.New(), Options{Addr: first.Addr().String(), Log: quiet})
	if err := busy.Listen(); err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Fatalf("listen on a busy port: %v", err)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func ptr[T any](v T) *T { return &v }

// TestMethodMetrics: the backends' counters summed by forwarding method,
// every method reported (0 when unused).
func TestMethodMetrics(t *testing.T) {
	fake := apitest.New()
	fams := scrape(t, New(fake, Options{Log: quiet}).Handler())
	svcs, _ := fake.Services(context.Background())
	want := map[string]uint64{}
	for _, s := range svcs {
		for _, b := range s.Backends {
			want[methodOf(&b)] += b.Counters.Packets
		}
	}
	if want["gre"] == 0 {
		t.Fatalf("the fake's backends carry no GRE packets: %v", want)
	}
	for _, m := range methodNames {
		if got := value(t, fams, "xlb_method_packets_total", C, "method="+m); got != float64(want[m]) {
			t.Errorf("method %s: %v packets, want %d", m, got, want[m])
		}
	}
}
