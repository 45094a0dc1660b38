package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/xlbproject/xlb/lab"
)

// ctl runs xlbctl against node 0's API socket.
func (e *env) ctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin, err := e.lab.Binary("xlbctl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.lab.Nodes[0].Run(context.Background(), append([]string{bin, "--socket", e.lab.APISocket(0)}, args...)...)
	return string(out), err
}

// TestAPIAndMetrics drives xlbd through xlbctl and its metrics endpoint:
// status, services, a bad config through the API (rejected with field and
// line, nothing changed), a runtime drain of a backend, and a Prometheus
// scrape that parses and agrees with the data plane.
func TestAPIAndMetrics(t *testing.T) {
	e := setup(t, []int{1, 1, 1})
	if fi, err := os.Stat(e.lab.APISocket(0)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("api socket: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	out, err := e.ctl(t, "-o", "json", "status")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	var status map[string]any
	if err := json.Unmarshal([]byte(out), &status); err != nil {
		t.Fatalf("status json: %v\n%s", err, out)
	}
	if !strings.Contains(out, e.lab.NodeName(0)) {
		t.Fatalf("status does not name the node:\n%s", out)
	}
	table, err := e.ctl(t, "services")
	if err != nil || !strings.Contains(table, e.lab.VIP4().String()) || !strings.Contains(table, e.lab.Backends[0].Addr4.String()) {
		t.Fatalf("services: %v\n%s", err, table)
	}

	// A bad config through the API: rejected with field and line.
	before := tablesOf(e.services(t))
	bad := filepath.Join(e.lab.Dir, "bad.yaml")
	os.WriteFile(bad, []byte("node: {name: "+e.lab.NodeName(0)+", interface: eth0, address: 10.100.0.11}\npools:\n  p: {backends: [{address: 10.100.0.101}]}\nservices:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], table_size: 65536}\n"), 0o644)
	out, err = e.ctl(t, "apply", "-f", bad)
	if err == nil || !strings.Contains(out, "table_size") || !strings.Contains(out, ":5") {
		t.Fatalf("bad apply: %v\n%s", err, out)
	}
	if after := tablesOf(e.services(t)); after != before {
		t.Fatalf("a rejected apply changed the data plane:\n%s\n---\n%s", before, after)
	}

	// Runtime drain of b2 through the API: no new connections to it.
	if out, err := e.ctl(t, "drain", e.lab.Backends[1].Addr4.String()); err != nil {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	if c := sessionsOn(t, e, 30).Counts(); c["b2"] != 0 {
		t.Fatalf("drained backend got %d new connections", c["b2"])
	}
	if out, err := e.ctl(t, "undrain", e.lab.Backends[1].Addr4.String()); err != nil {
		t.Fatalf("undrain: %v\n%s", err, out)
	}

	// Metrics: the scrape parses; per-VIP packets equal the sum over its
	// backends, and equal the data plane's own counters.
	lab.HTTPLoad(context.Background(), e.lab.Client.NS, e.http4(), 50, 4)
	client := lab.HTTPClient(e.lab.Nodes[0].NS, 5*time.Second)
	resp, err := client.Get("http://127.0.0.1:9469/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("metrics do not parse: %v", err)
	}
	if len(families) < 5 {
		t.Fatalf("only %d metric families", len(families))
	}
	// Per-VIP packets equal the sum over the VIP's backends (self-check
	// probes count in neither; TestMetricsExactCounts checks exact counts
	// against the traffic sent).
	svcPkts := map[string]float64{}
	for _, m := range families["xlb_service_packets_total"].GetMetric() {
		svcPkts[label(m.GetLabel(), "service")] += m.GetCounter().GetValue()
	}
	bePkts := map[string]float64{}
	for _, m := range families["xlb_backend_packets_total"].GetMetric() {
		bePkts[label(m.GetLabel(), "service")] += m.GetCounter().GetValue()
	}
	if svcPkts["web4"] < 50*5 {
		t.Fatalf("web4 packets %v after 50 HTTP requests", svcPkts["web4"])
	}
	for name, v := range svcPkts {
		if bePkts[name] != v {
			t.Errorf("service %s: %v packets, its backends %v", name, v, bePkts[name])
		}
	}
	hz, err := client.Get("http://127.0.0.1:9469/healthz")
	if err != nil || hz.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", err, hz)
	}
	hz.Body.Close()
	t.Logf("%d metric families", len(families))
}

func label(ls []*dto.LabelPair, name string) string {
	for _, l := range ls {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
