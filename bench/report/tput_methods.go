package report

import (
	"fmt"
	"strings"

	"github.com/xlbproject/xlb/bench/throughput"
)

// tputMethodKey names a live-frame method figure as mpps_method names
// the derived one: "nat_forward" for NAT's client packets.
func tputMethodKey(m throughput.Method) string {
	if m == throughput.NAT {
		return "nat_forward"
	}
	return string(m)
}

// putTputMethods records the per-method figures of one measurement
// (tput_method.<method>_v4_<traffic>: Mpps on one core, the whole chain
// as the mpps_one_core figures).
func (b *runner) putTputMethods(res throughput.Results) {
	for _, f := range res.Methods {
		key := "tput_method." + tputMethodKey(f.Method) + "_v4_" + string(f.Traffic)
		detail := fmt.Sprintf("live frames, one CPU running generator + forwarder + receiver (%.0f ns CPU per packet, best %.0f, busy %.0f%%); received %.2f Mpps",
			f.CPUNs, f.BestCPUNs, 100*f.Busy, f.Mpps)
		b.put(key, f.CapacityMpps, "Mpps", detail)
	}
}

// tputMethodsMarkdown is the tput section's table of the methods: Mpps on
// one core live per traffic kind, beside the pkt part's derived one-core
// rate (mpps_method, 1000 / ns of the forwarder alone) when that part ran.
func (b *runner) tputMethodsMarkdown(all []throughput.Results) string {
	var s strings.Builder
	for _, r := range all {
		if len(r.Methods) == 0 {
			continue
		}
		fmt.Fprintf(&s, "\nForwarding methods, live frames (`tput_method`): %s XDP, %s placement, the VIP's reals on each method in turn, "+
			"passes in alternating order, GRE measured again in the same passes; IPv4. Mpps on one core of the whole chain "+
			"(generator + forwarder + receiver), as `mpps_one_core`; each run checked: the receiver counts only what that "+
			"method sends to a backend (GUE: UDP to the GUE port; DR: the client's frame to the backend's MAC; NAT: the "+
			"destination rewritten to the backend; NAT reply: from the VIP to the client) and it matches the forwarder's count of "+
			"what it sent. NAT reply: established flows only, the backends' replies to the %d clients (their `xlb_nat` "+
			"entries written first as the forward path would), sent by the FIB's answer cached per CPU. `mpps_method` is the pkt part's derived one-core rate of the forwarder alone, for "+
			"comparison (established ACK; NAT reply: a tracked flow's reply).\n\n", r.Mode, r.Placement, r.Flows)
		s.WriteString("| method | syn | established | constant | CPU ns/packet, established | mpps_method (derived) |\n|---|---:|---:|---:|---:|---:|\n")
		for _, m := range throughput.AllMethods() {
			cells := map[throughput.Traffic]string{}
			ns := "—"
			for _, f := range r.Methods {
				if f.Method == m {
					cells[f.Traffic] = fmt.Sprintf("%.2f", f.CapacityMpps)
					if f.Traffic == throughput.Established {
						ns = fmt.Sprintf("%.0f", f.CPUNs)
					}
				}
			}
			derived := "—"
			if v, ok := b.r.Figure("mpps_method." + tputMethodKey(m) + "_v4"); ok {
				derived = fmtNum(v)
			}
			cell := func(t throughput.Traffic) string {
				if c, ok := cells[t]; ok {
					return c
				}
				return "—"
			}
			fmt.Fprintf(&s, "| %s | %s | %s | %s | %s | %s |\n", tputMethodKey(m), cell(throughput.SYN), cell(throughput.Established),
				cell(throughput.Constant), ns, derived)
		}
	}
	return s.String()
}
