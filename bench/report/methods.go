package report

import (
	"fmt"
	"strings"

	"github.com/xlbproject/xlb/bench/harness"
	"github.com/xlbproject/xlb/bench/stats"
	"github.com/xlbproject/xlb/internal/state"
)

// benchMethods are the forwarding methods measured beside GRE; nat also
// with its replies (harness.NATReply4/6).
var benchMethods = []struct {
	name string
	m    state.Encap
}{{"gre", state.EncapGRE}, {"gue", state.EncapGUE}, {"dr", state.EncapDR}, {"nat", state.EncapNAT}}

// methodKeys names the report key of each scenario of the methods.
var methodKeys = map[harness.Scenario]string{
	harness.TCPHit4: "est_hit_v4", harness.TCPHit6: "est_hit_v6", harness.NewFlow: "new_flow",
	harness.NATReply4: "nat_reply_v4", harness.NATReply6: "nat_reply_v6",
	harness.NATReplyCycled4: "nat_reply_cycled_v4", harness.NATReplyCycled6: "nat_reply_cycled_v6",
}

// methodPasses: every method is measured this many times, in turn and in
// alternating order (gre ... nat, then nat ... gre), and the figure is
// the median of its passes' medians, so that drift and neighbours over
// the part's minutes weigh on all methods alike.
const methodPasses = 4

// methodRatios are the methods' targets relative to GRE in the same run:
// key in method_vs_gre, the figure and the GRE figure it is divided by.
var methodRatios = []struct{ key, fig, gre string }{
	{"dr_hit_v4", "dr.est_hit_v4", "gre.est_hit_v4"},
	{"dr_hit_v6", "dr.est_hit_v6", "gre.est_hit_v6"},
	{"nat_hit_v4", "nat.est_hit_v4", "gre.est_hit_v4"},
	{"nat_hit_v6", "nat.est_hit_v6", "gre.est_hit_v6"},
	{"nat_new_flow", "nat.new_flow", "gre.new_flow"},
	{"nat_reply_v4", "nat.nat_reply_v4", "gre.est_hit_v4"},
	{"nat_reply_v6", "nat.nat_reply_v6", "gre.est_hit_v6"},
}

// pktMethods measures the forwarder per packet with every service on
// each forwarding method in turn, in this run: an established flow's ACK
// (IPv4, IPv6) and a new flow; for NAT also a tracked flow's reply
// (IPv4, IPv6). Then the methods' one-core rates and their ratios to GRE.
func (b *runner) pktMethods(o harness.Options) error {
	passes, bests := map[string][]float64{}, map[string]float64{}
	for pass := range methodPasses {
		for i := range benchMethods {
			bm := benchMethods[i]
			if pass%2 == 1 {
				bm = benchMethods[len(benchMethods)-1-i]
			}
			o.Method = bm.m
			o.Scenarios = []harness.Scenario{harness.TCPHit4, harness.TCPHit6, harness.NewFlow}
			if bm.m == state.EncapNAT {
				o.Scenarios = append(o.Scenarios, harness.NATReply4, harness.NATReply6, harness.NATReplyCycled4, harness.NATReplyCycled6)
			}
			r, err := harness.Measure(harness.TableXLB, o)
			if err != nil {
				return fmt.Errorf("method %s: %w", bm.name, err)
			}
			for _, f := range r.Figures {
				k := bm.name + "." + methodKeys[f.Scenario]
				passes[k] = append(passes[k], f.Ns)
				if v, ok := bests[k]; !ok || f.Best < v {
					bests[k] = f.Best
				}
			}
		}
	}
	for _, bm := range benchMethods {
		for _, s := range []harness.Scenario{harness.TCPHit4, harness.TCPHit6, harness.NewFlow, harness.NATReply4, harness.NATReply6,
			harness.NATReplyCycled4, harness.NATReplyCycled6} {
			k := bm.name + "." + methodKeys[s]
			if v, ok := passes[k]; ok {
				b.put("ns_per_pkt_method."+k, stats.Median(v), "ns", fmt.Sprintf("best %.0f; passes %.0f", bests[k], v))
			}
		}
	}
	b.putMethodRates()
	b.r.md["pkt"] += b.methodsMarkdown(o.CycleFlows)
	return nil
}

// putMethodRates records the one-core rates (mpps_method: 1000 / ns per
// packet, the forwarder's own work on an established flow's ACK or a NAT
// reply) and the ratios to GRE (method_vs_gre, with their targets).
func (b *runner) putMethodRates() {
	rates := []struct{ key, fig string }{
		{"gre", "gre.est_hit"}, {"gue", "gue.est_hit"}, {"dr", "dr.est_hit"},
		{"nat_forward", "nat.est_hit"}, {"nat_reply", "nat.nat_reply"},
	}
	for _, r := range rates {
		for _, fam := range []string{"_v4", "_v6"} {
			if ns, ok := b.r.Figure("ns_per_pkt_method." + r.fig + fam); ok && ns > 0 {
				b.put("mpps_method."+r.key+fam, 1e3/ns, "Mpps", "one core, the forwarder alone")
			}
		}
	}
	for _, m := range methodRatios {
		v, ok1 := b.r.Figure("ns_per_pkt_method." + m.fig)
		gre, ok2 := b.r.Figure("ns_per_pkt_method." + m.gre)
		if !ok1 || !ok2 || gre <= 0 {
			continue
		}
		b.put("method_vs_gre."+m.key, v/gre, "×", fmt.Sprintf("%.0f ns / GRE %.0f ns", v, gre))
		b.targetNote("method_vs_gre."+m.key, "%s %.0f ns, %s %.0f ns (same run)", m.fig, v, m.gre, gre)
	}
}

// methodsMarkdown is the pkt section's table of the methods: ns per
// packet, the one-core rate, and the targets relative to GRE met or not;
// cycled: the clients of the cycled NAT replies.
func (b *runner) methodsMarkdown(cycled uint32) string {
	var s strings.Builder
	fmt.Fprintf(&s, "\nForwarding methods (`ns_per_pkt_method`, `mpps_method`): every service on one method, the methods "+
		"measured in turn in this run, %d passes in alternating order, median of the passes' medians (ns/packet, the forwarder "+
		"alone). Mpps: one core doing only the forwarder's work, 1000 / ns (BPF_PROG_TEST_RUN: no driver, no wire). "+
		"NAT reply: a tracked flow's ACK from its backend, rewritten to the VIP and sent by the FIB's answer (cached per CPU); "+
		"its new-flow column: replies to %d clients round robin, more than the next-hop cache holds, so each asks the FIB "+
		"as a flow's first reply does (`nat_reply_cycled_*`).\n\n", methodPasses, cycled)
	s.WriteString("| method | ACK hit v4 | ACK hit v6 | new flow v4 (v6) | Mpps v4 | Mpps v6 |\n|---|---:|---:|---:|---:|---:|\n")
	cell := func(key string) string {
		if v, ok := b.r.Figure(key); ok {
			return fmtNum(v)
		}
		return "—"
	}
	row := func(name, fig, fresh, mpps string) {
		fmt.Fprintf(&s, "| %s | %s | %s | %s | %s | %s |\n", name, cell("ns_per_pkt_method."+fig+"_v4"), cell("ns_per_pkt_method."+fig+"_v6"),
			fresh, cell("mpps_method."+mpps+"_v4"), cell("mpps_method."+mpps+"_v6"))
	}
	row("gre", "gre.est_hit", cell("ns_per_pkt_method.gre.new_flow"), "gre")
	row("gue", "gue.est_hit", cell("ns_per_pkt_method.gue.new_flow"), "gue")
	row("dr", "dr.est_hit", cell("ns_per_pkt_method.dr.new_flow"), "dr")
	row("nat forward", "nat.est_hit", cell("ns_per_pkt_method.nat.new_flow"), "nat_forward")
	row("nat reply", "nat.nat_reply", cell("ns_per_pkt_method.nat.nat_reply_cycled_v4")+" ("+cell("ns_per_pkt_method.nat.nat_reply_cycled_v6")+")", "nat_reply")
	s.WriteString("\n| target (same run) | measured | met |\n|---|---:|---|\n")
	for _, m := range methodRatios {
		t, ok := targetFor("method_vs_gre." + m.key)
		v, measured := b.r.Figure("method_vs_gre." + m.key)
		if !ok || !measured {
			continue
		}
		met := "yes"
		if !*t.evaluate(v).Met {
			met = "**no**"
		}
		fmt.Fprintf(&s, "| %s: %s ≤ %s × %s | %.2f × | %s |\n", t.What, m.fig, fmtNum(t.Target), m.gre, v, met)
	}
	return s.String()
}
