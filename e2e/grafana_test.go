package e2e

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	dto "github.com/prometheus/client_model/go"

	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// dashboardPath is the Grafana dashboard shipped in deploy/.
const dashboardPath = "../deploy/grafana/xlb.json"

// targetLabels are added by Prometheus when it scrapes, so they are in no
// scrape's text.
var targetLabels = []string{"instance", "job"}

// TestGrafanaDashboard scrapes a running xlbd (a lab node with BGP
// sessions to the router's BIRD, the blackbox prober, a health check and
// traffic, so that every family xlbd exports is there) and checks that
// every metric the dashboard queries is in the scrape, with every label
// the query matches or groups on.
func TestGrafanaDashboard(t *testing.T) {
	queries := dashboardQueries(t)
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip", "bird", "birdc")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{Routing: lab.RouteNone})
	if _, err := l.StartBIRD(ctx, lab.BIRDOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := withHTTPCheck(string(l.XLBDConfig(0, lab.XLBDOptions{BGP: true})))
	path := l.Dir + "/xlbd-grafana.yaml"
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := l.StartXLBDBinary(ctx, 0, path, mustBinary(t, l, "xlbd"), "--probe-interval", "500ms")
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.PrefixFrom(l.VIP4(), 32)
	if _, err := l.WaitRoute(ctx, vip, l.NodeNextHops(vip.Addr(), 0), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	http4 := netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.HTTP)
	if err := l.WaitForwarding(ctx, http4, 20*time.Second, d); err != nil {
		t.Fatal(err)
	}
	lab.HTTPLoad(ctx, l.Client.NS, http4, 50, 4)
	time.Sleep(time.Second) // a prober round answered
	scraped := scrapeNames(t, l)
	checked := map[string]bool{}
	for _, q := range queries {
		metrics, labels := promqlNames(q)
		if len(metrics) == 0 {
			t.Errorf("query %q names no metric", q)
		}
		have := slices.Clone(targetLabels)
		for _, m := range metrics {
			ls, ok := scraped[m]
			if !ok {
				t.Errorf("query %q: metric %s is not in a scrape of xlbd", q, m)
			}
			have = append(have, ls...)
			checked[m] = true
		}
		for _, lb := range labels {
			if !slices.Contains(have, lb) {
				t.Errorf("query %q: label %q is on none of its metrics %v", q, lb, metrics)
			}
		}
	}
	t.Logf("%d queries over %d metrics checked against a scrape of %d series names", len(queries), len(checked), len(scraped))
}

// dashboardQueries returns every PromQL expression of the dashboard: the
// panels' targets and the variables' queries; it checks the dashboard's
// form on the way.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr       string `json:"expr"`
				RefID      string `json:"refId"`
				Datasource struct {
					UID string `json:"uid"`
				} `json:"datasource"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	var out []string
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" || tg.RefID == "" || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: target %+v (expr, refId and the datasource variable are required)", p.Title, tg)
			}
			out = append(out, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil || q.Query == "" {
			t.Fatalf("variable %s: query %s", v.Name, v.Query)
		}
		out = append(out, q.Query)
	}
	if dash.UID == "" || len(out) < 20 {
		t.Fatalf("dashboard uid %q, %d queries", dash.UID, len(out))
	}
	return out
}

// scrapeNames returns node 0's /metrics as series name -> label names (a
// histogram's _bucket, _sum and _count series, with le on _bucket).
func scrapeNames(t *testing.T, l *lab.Lab) map[string][]string {
	t.Helper()
	families := metricFamilies(t, l, 0)
	out := map[string][]string{}
	add := func(name string, labels ...string) {
		for _, lb := range labels {
			if !slices.Contains(out[name], lb) {
				out[name] = append(out[name], lb)
			}
		}
		if out[name] == nil {
			out[name] = []string{}
		}
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName())
			}
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				add(name+"_bucket", append(ls, "le")...)
				add(name+"_sum", ls...)
				add(name+"_count", ls...)
			case dto.MetricType_SUMMARY:
				add(name, append(ls, "quantile")...)
				add(name+"_sum", ls...)
				add(name+"_count", ls...)
			default:
				add(name, ls...)
			}
		}
	}
	return out
}

// promqlNames returns the metric names and the label names of a PromQL
// expression (or of a Grafana label_values(SELECTOR, LABEL) query): label
// names are those of matchers ({a="b"}) and of by, without, on, ignoring
// and group_left/right lists. It reads enough of PromQL for dashboards:
// strings, durations and numbers are skipped, an identifier before "(" is
// a function, aggregations and keywords are not names.
func promqlNames(expr string) (metrics, labels []string) {
	if inner, ok := strings.CutPrefix(strings.TrimSpace(expr), "label_values("); ok {
		inner = strings.TrimSuffix(strings.TrimSpace(inner), ")")
		if i := strings.LastIndex(inner, ","); i >= 0 {
			metrics, labels = promqlNames(inner[:i])
			return metrics, append(labels, strings.TrimSpace(inner[i+1:]))
		}
	}
	x := &promLexer{r: []rune(expr)}
	for x.i < len(x.r) {
		x.step()
	}
	return x.metrics, x.labels
}

// promLexer walks an expression, collecting names.
type promLexer struct {
	r               []rune
	i               int
	metrics, labels []string
}

var (
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
		// aggregations, which may be followed by by/without before "("
		"sum": true, "min": true, "max": true, "avg": true, "count": true, "group": true, "stddev": true, "stdvar": true,
		"topk": true, "bottomk": true, "quantile": true, "count_values": true, "limitk": true, "limit_ratio": true}
	promGrouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
)

func isIdentRune(c rune, first bool) bool {
	return c == '_' || c == ':' || unicode.IsLetter(c) || (!first && unicode.IsDigit(c))
}

func isQuote(c rune) bool { return c == '"' || c == '\'' || c == '`' }

// step reads one token at x.i.
func (x *promLexer) step() {
	c := x.r[x.i]
	switch {
	case isQuote(c):
		x.skipString()
	case c == '[':
		for x.i < len(x.r) && x.r[x.i] != ']' {
			x.i++
		}
	case c == '{':
		x.matchers()
	case unicode.IsDigit(c) || (c == '.' && x.i+1 < len(x.r) && unicode.IsDigit(x.r[x.i+1])):
		for x.i < len(x.r) && (unicode.IsDigit(x.r[x.i]) || x.r[x.i] == '.' || unicode.IsLetter(x.r[x.i])) {
			x.i++
		}
	case isIdentRune(c, true):
		x.name()
	default:
		x.i++
	}
}

func (x *promLexer) skipString() {
	q := x.r[x.i]
	for x.i++; x.i < len(x.r) && x.r[x.i] != q; x.i++ {
		if x.r[x.i] == '\\' {
			x.i++
		}
	}
	x.i++
}

func (x *promLexer) ident() string {
	j := x.i
	for x.i < len(x.r) && isIdentRune(x.r[x.i], x.i == j) {
		x.i++
	}
	return string(x.r[j:x.i])
}

// matchers reads {name op "value", ...}.
func (x *promLexer) matchers() {
	for x.i++; x.i < len(x.r) && x.r[x.i] != '}'; {
		switch {
		case isQuote(x.r[x.i]):
			x.skipString()
		case isIdentRune(x.r[x.i], true):
			x.labels = append(x.labels, x.ident())
		default:
			x.i++
		}
	}
	x.i++
}

// name reads an identifier: a grouping with its label list, a keyword, a
// function, or a metric.
func (x *promLexer) name() {
	n := x.ident()
	next := x.i
	for next < len(x.r) && unicode.IsSpace(x.r[next]) {
		next++
	}
	paren := next < len(x.r) && x.r[next] == '('
	switch {
	case promGrouping[strings.ToLower(n)]:
		if paren {
			x.i = next
			x.labelList()
		}
	case promKeywords[strings.ToLower(n)], paren:
	default:
		if !slices.Contains(x.metrics, n) {
			x.metrics = append(x.metrics, n)
		}
	}
}

// labelList reads "(a, b)".
func (x *promLexer) labelList() {
	for x.i++; x.i < len(x.r) && x.r[x.i] != ')'; {
		if isIdentRune(x.r[x.i], true) {
			x.labels = append(x.labels, x.ident())
		} else {
			x.i++
		}
	}
	x.i++
}

// TestPromQLNames: the reader of the dashboard's queries finds the names
// it must (no root needed).
func TestPromQLNames(t *testing.T) {
	for _, tc := range []struct {
		expr            string
		metrics, labels []string
	}{
		{`sum by (service) (rate(xlb_service_packets_total{instance=~"$instance", service=~"a|b"}[$__rate_interval]))`,
			[]string{"xlb_service_packets_total"}, []string{"service", "instance", "service"}},
		{`histogram_quantile(0.99, sum by (le) (rate(xlb_config_apply_duration_seconds_bucket[5m])))`,
			[]string{"xlb_config_apply_duration_seconds_bucket"}, []string{"le"}},
		{`a / ignoring (backend) group_left sum by (service) (b) > 0.5 and on (instance) c == 1`,
			[]string{"a", "b", "c"}, []string{"backend", "service", "instance"}},
		{`time() - xlb_selfcheck_last_timestamp_seconds offset 1m`, []string{"xlb_selfcheck_last_timestamp_seconds"}, nil},
		{`label_values(xlb_service_up{instance=~"$instance"}, service)`, []string{"xlb_service_up"}, []string{"instance", "service"}},
		{`8 * x{a="}{by (q)"}`, []string{"x"}, []string{"a"}},
	} {
		m, l := promqlNames(tc.expr)
		if !slices.Equal(m, tc.metrics) || !slices.Equal(l, tc.labels) {
			t.Errorf("%s: metrics %v labels %v, want %v %v", tc.expr, m, l, tc.metrics, tc.labels)
		}
	}
}
