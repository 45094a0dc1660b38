package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/internal/tracer"
	"github.com/xlbproject/xlb/lab"
)

// metricFamilies scrapes node i's /metrics and parses it.
func metricFamilies(t *testing.T, l *lab.Lab, i int) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := lab.HTTPClient(l.Nodes[i].NS, 5*time.Second).Get("http://" + lab.StatusPageAddr + "/metrics")
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
	return families
}

// scrape reads node i's metrics and returns every sample of the families
// named, keyed by family and then by the label values joined with "|" in
// the order given.
func scrape(t *testing.T, l *lab.Lab, i int, want map[string][]string) map[string]map[string]float64 {
	t.Helper()
	families := metricFamilies(t, l, i)
	out := map[string]map[string]float64{}
	for name, labels := range want {
		f := families[name]
		if f == nil {
			t.Fatalf("no metric family %s", name)
		}
		out[name] = map[string]float64{}
		for _, m := range f.GetMetric() {
			var key []string
			for _, ln := range labels {
				key = append(key, label(m.GetLabel(), ln))
			}
			v := m.GetCounter().GetValue()
			if m.GetCounter() == nil {
				v = m.GetGauge().GetValue()
			}
			out[name][strings.Join(key, "|")] = v
		}
	}
	return out
}

// TestMetricsExactCounts sends a known number of UDP datagrams on known
// flows to the IPv4 and IPv6 UDP VIPs, each answered by its backend, and
// checks that the Prometheus per-VIP and per-backend packet, byte and
// new-flow counters grew by exactly what was sent (the self-check probes
// xlbd runs every second are not counted there).
func TestMetricsExactCounts(t *testing.T) {
	e := setup(t, []int{1, 1, 1})
	l := e.lab
	fams := map[string][]string{
		"xlb_service_packets_total":   {"service"},
		"xlb_service_bytes_total":     {"service"},
		"xlb_service_new_flows_total": {"service"},
		"xlb_backend_packets_total":   {"service", "backend"},
		"xlb_backend_bytes_total":     {"service", "backend"},
	}
	// Let a few self-checks run first, so the comparison spans them.
	time.Sleep(2 * time.Second)
	before := scrape(t, l, 0, fams)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type expect struct {
		packets, bytes, flows float64
		perBackend            map[string]float64 // backend address -> packets
	}
	want := map[string]*expect{}
	addrOf := map[string]*lab.Host{}
	for _, s := range l.Servers() {
		addrOf[s.Name] = s.Host
	}
	for _, c := range []struct {
		svc            string
		vip            netip.Addr
		flows, packets int
		iphdr          int
	}{{"udp4", l.VIP4(), 24, 7, 20}, {"udp6", l.VIP6(), 12, 5, 40}} {
		res, err := lab.UDPFlows(ctx, l.Client.NS, netip.AddrPortFrom(c.vip, lab.DefaultPorts.UDP), c.flows, c.packets)
		if err != nil {
			t.Fatal(err)
		}
		w := &expect{perBackend: map[string]float64{}}
		want[c.svc] = w
		for i, f := range res.Flows {
			if f.Sent != c.packets || f.Received != c.packets || len(f.Backends) != 1 {
				t.Fatalf("%s flow %d: sent %d, answered %d by %v (%s): the test needs every datagram answered by one backend",
					c.svc, i, f.Sent, f.Received, f.Backends, f.Err)
			}
			w.flows++
			for j := range c.packets {
				w.packets++
				w.bytes += float64(c.iphdr + 8 + len(fmt.Sprintf("flow%d-%d", i, j)))
			}
			for name, n := range f.Backends {
				h := addrOf[name]
				a := h.Addr4
				if c.vip.Is6() {
					a = h.Addr6
				}
				w.perBackend[a.String()] += float64(n)
			}
		}
	}
	after := scrape(t, l, 0, fams)
	delta := func(fam, key string) float64 { return after[fam][key] - before[fam][key] }
	for svc, w := range want {
		got := []float64{delta("xlb_service_packets_total", svc), delta("xlb_service_bytes_total", svc), delta("xlb_service_new_flows_total", svc)}
		t.Logf("%s: sent %v packets, %v bytes (IP), %v flows; counters +%v packets, +%v bytes, +%v new flows; per backend %v",
			svc, w.packets, w.bytes, w.flows, got[0], got[1], got[2], w.perBackend)
		if got[0] != w.packets || got[1] != w.bytes || got[2] != w.flows {
			t.Errorf("%s: counters +%v packets, +%v bytes, +%v new flows; want %v, %v, %v", svc, got[0], got[1], got[2], w.packets, w.bytes, w.flows)
		}
		for _, s := range l.Servers() {
			a := s.Host.Addr4.String()
			if strings.HasSuffix(svc, "6") {
				a = s.Host.Addr6.String()
			}
			if g := delta("xlb_backend_packets_total", svc+"|"+a); g != w.perBackend[a] {
				t.Errorf("%s backend %s: +%v packets, want %v", svc, a, g, w.perBackend[a])
			}
		}
	}
	// The other services saw no traffic: the self-checks left them alone.
	for key, v := range after["xlb_service_packets_total"] {
		if want[key] == nil && v != before["xlb_service_packets_total"][key] {
			t.Errorf("service %s: packets %v -> %v without traffic", key, before["xlb_service_packets_total"][key], v)
		}
	}
}

// traceLab is a lab of three xlbd nodes behind BIRD (ECMP) with the
// tracer at rate per CPU.
func traceLab(t *testing.T, ctx context.Context, rate int) *lab.Lab {
	t.Helper()
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip", "bird", "birdc")
	l := newLab(ctx, t, lab.Config{Nodes: 3, Backends: 3, Routing: lab.RouteNone})
	if _, err := l.StartBIRD(ctx, lab.BIRDOptions{}); err != nil {
		t.Fatal(err)
	}
	opts := lab.XLBDOptions{BGP: true}
	for i := range l.Nodes {
		path, err := l.WriteXLBDConfig(i, opts)
		if err != nil {
			t.Fatal(err)
		}
		cfg := strings.Replace(string(l.XLBDConfig(i, opts)), "node:\n", fmt.Sprintf("node:\n  trace_rate: %d\n", rate), 1)
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := l.StartXLBD(ctx, i, path); err != nil {
			t.Fatal(err)
		}
	}
	vip := netip.PrefixFrom(l.VIP4(), 32)
	if _, err := l.WaitRoute(ctx, vip, l.NodeNextHops(vip.Addr(), 0, 1, 2), 30*time.Second); err != nil {
		t.Fatalf("3-way ECMP for %s: %v", vip, err)
	}
	return l
}

// trace runs xlbctl trace in the client's namespace.
func traceCtl(t *testing.T, ctx context.Context, l *lab.Lab, args ...string) []tracer.Record {
	t.Helper()
	bin, err := l.Binary("xlbctl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := l.Client.NS.Run(ctx, append([]string{bin, "-o", "json", "trace"}, args...)...)
	if err != nil {
		t.Fatalf("xlbctl trace %v: %v", args, err)
	}
	var recs []tracer.Record
	// Warnings go to stderr, which Run mixes in: the JSON is the array.
	s := string(out)
	if i := strings.Index(s, "["); i >= 0 {
		s = s[i:]
	}
	if j := strings.LastIndex(s, "]"); j >= 0 {
		s = s[:j+1]
	}
	if err := json.Unmarshal([]byte(s), &recs); err != nil {
		t.Fatalf("xlbctl trace output: %v\n%s", err, out)
	}
	return recs
}

// holder returns the nodes whose connection table holds flow, with the
// backend of each entry (xlbctl conntrack on every node).
func holder(t *testing.T, ctx context.Context, l *lab.Lab, flow maglev.Tuple) map[string]string {
	t.Helper()
	bin, err := l.Binary("xlbctl")
	if err != nil {
		t.Fatal(err)
	}
	tag := maglev.CTTag(maglev.FlowHash(flow))
	out := map[string]string{}
	for i := range l.Nodes {
		b, err := l.Nodes[i].Run(ctx, bin, "--socket", l.APISocket(i), "-o", "json", "conntrack", "--limit", "100000")
		if err != nil {
			t.Fatalf("conntrack of %s: %v", l.NodeName(i), err)
		}
		var r pb.ConntrackDumpResponse
		if err := protojson.Unmarshal(b, &r); err != nil {
			t.Fatalf("conntrack json of %s: %v\n%s", l.NodeName(i), err, b)
		}
		for _, e := range r.GetEntries() {
			if e.GetTag() == tag && !e.GetExpired() {
				out[l.NodeName(i)] = e.GetBackend()
			}
		}
	}
	return out
}

// TestTraceECMP (the packet tracer, paper 4.4): three nodes behind an ECMP
// router. For UDP flows from known source ports, the test first learns
// independently which backend answers the flow (its UDP echo names the
// backend) and which node tracks it (the connection table entry of the
// flow's hash, on every node); 'xlbctl trace --src' on the same flow must
// name that node and that backend, with a conntrack hit. A TCP trace
// follows an established connection (conntrack hit) and names the node
// holding it. Then a flood of marked datagrams: every one is forwarded,
// and the records stay within the per-CPU rate.
func TestTraceECMP(t *testing.T) {
	const rate = 20
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l := traceLab(t, ctx, rate)
	udpVIP := netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.UDP)
	client := l.Client.Addr(l.VIP4())
	addrOf := map[string]string{}
	for _, s := range l.Servers() {
		addrOf[s.Name] = s.Host.Addr4.String()
	}
	// UDP datagrams each backend's VIP server received.
	received := func() map[string]int64 {
		m := map[string]int64{}
		for _, s := range l.Servers() {
			m[s.Host.Addr4.String()] = s.UDPDatagrams()
		}
		return m
	}
	nodesSeen := map[string]int{}
	for i := range 8 {
		// A fresh flow: xlbctl sends three marked datagrams from one
		// socket. (The lab's router hashes a packet by the sending
		// socket's hash, so only packets of one socket are sure to take
		// the same node; hence the flow is traced, not probed first.)
		src := netip.AddrPortFrom(client, uint16(41000+i))
		before := received()
		recs := traceCtl(t, ctx, l, "--vip", udpVIP.String(), "--src", src.String(), "--count", "3")
		// Independently: which backend's server got the datagrams, and
		// which node's connection table holds the flow.
		var carrier string
		for deadline := time.Now().Add(2 * time.Second); carrier == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			for a, n := range received() {
				if n-before[a] == 3 {
					carrier = a
				}
			}
		}
		after := received()
		flow := maglev.Tuple{Src: src.Addr(), Dst: udpVIP.Addr(), SrcPort: src.Port(), DstPort: udpVIP.Port(), Proto: 17}
		held := holder(t, ctx, l, flow)
		if carrier == "" || len(held) != 1 {
			t.Fatalf("flow %s: backends' datagrams %v -> %v, tracked on %v: want one backend with 3, one node", src, before, after, held)
		}
		if len(recs) != 3 {
			t.Fatalf("flow %s: %d records, want 3: %+v", src, len(recs), recs)
		}
		for j, r := range recs {
			t.Logf("flow %s #%d: received by %s, tracked on %v; trace: node %s cpu %d backend %s conntrack %s verdict %s",
				src, j, carrier, held, r.Node, r.CPU, r.Backend, r.Conntrack, r.Verdict)
			if backend, ok := held[r.Node]; !ok || backend != r.Backend || r.Backend != carrier {
				t.Errorf("flow %s: trace names node %s backend %s; the flow is tracked on %v and was received by %s", src, r.Node, r.Backend, held, carrier)
			}
			ct := "hit"
			if j == 0 {
				ct = "miss"
			}
			if r.Src != src.String() || r.VIP != udpVIP.String() || r.Proto != "udp" || r.Conntrack != ct ||
				(r.Verdict != "tx" && r.Verdict != "redirect") {
				t.Errorf("flow %s: record %d %+v, want conntrack %s", src, j, r, ct)
			}
		}
		nodesSeen[recs[0].Node]++
	}
	t.Logf("flows per node: %v", nodesSeen)
	if len(nodesSeen) < 2 {
		t.Errorf("8 flows all went through %v: ECMP spreads flows over the nodes", nodesSeen)
	}

	// TCP: the marker rides the first data segment of a real connection.
	echo := netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.TCP)
	tsrc := netip.AddrPortFrom(client, 42000)
	recs := traceCtl(t, ctx, l, "--vip", echo.String(), "--proto", "tcp", "--src", tsrc.String())
	if len(recs) != 1 {
		t.Fatalf("tcp: %d records", len(recs))
	}
	r := recs[0]
	held := holder(t, ctx, l, maglev.Tuple{Src: client, Dst: echo.Addr(), SrcPort: tsrc.Port(), DstPort: echo.Port(), Proto: 6})
	t.Logf("tcp %s: trace: node %s backend %s conntrack %s; tracked on %v", tsrc, r.Node, r.Backend, r.Conntrack, held)
	if backend, ok := held[r.Node]; !ok || backend != r.Backend || r.Conntrack != "hit" || r.Proto != "tcp" {
		t.Errorf("tcp: record %+v; the connection is tracked on %v", r, held)
	}

	// Flood: 3000 marked datagrams on one flow in a burst. Every one is
	// forwarded (the node's counters), the records stay within the bucket.
	statsOf := func() map[string]map[string]float64 {
		all := map[string]map[string]float64{}
		for i := range l.Nodes {
			m := scrape(t, l, i, map[string][]string{"xlb_datapath_events_total": {"event"}, "xlb_service_packets_total": {"service"}})
			all[l.NodeName(i)] = map[string]float64{
				"emitted": m["xlb_datapath_events_total"]["trace_emitted"],
				"limited": m["xlb_datapath_events_total"]["trace_limited"],
				"packets": m["xlb_service_packets_total"]["udp4"],
				"probes":  m["xlb_datapath_events_total"]["selfcheck_probe"],
			}
		}
		return all
	}
	const flood = 3000
	before := statsOf()
	start := time.Now()
	recs = traceCtl(t, ctx, l, "--vip", udpVIP.String(), "--src", netip.AddrPortFrom(client, 43000).String(), "--count", fmt.Sprint(flood), "--interval", "300us", "--timeout", "1s")
	took := time.Since(start)
	after := statsOf()
	var emitted, limited, packets float64
	for n := range after {
		t.Logf("flood: %s: %v", n, map[string]float64{"emitted": after[n]["emitted"] - before[n]["emitted"],
			"limited": after[n]["limited"] - before[n]["limited"], "packets": after[n]["packets"] - before[n]["packets"],
			"probes": after[n]["probes"] - before[n]["probes"]})
		emitted += after[n]["emitted"] - before[n]["emitted"]
		limited += after[n]["limited"] - before[n]["limited"]
		packets += after[n]["packets"] - before[n]["packets"]
	}
	cpus := float64(runtime.NumCPU())
	bound := cpus * rate * (1 + took.Seconds())
	t.Logf("flood: %d marked datagrams in %v: %d records received, %v emitted, %v rate-limited, %v forwarded; bucket bound %v (%v CPUs x %d/s)",
		flood, took.Round(time.Millisecond), len(recs), emitted, limited, packets, bound, cpus, rate)
	if emitted+limited != flood || packets != flood {
		t.Errorf("flood: emitted %v + limited %v, forwarded %v; want %d each", emitted, limited, packets, flood)
	}
	if emitted > bound || float64(len(recs)) > emitted || len(recs) < rate {
		t.Errorf("flood: %d records received, %v emitted; want %d..%v", len(recs), emitted, rate, bound)
	}
}
