package metrics

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/xlbproject/xlb/internal/api"
)

// Per forwarding method: the backends' counters summed by the method
// packets reach them with (gre, ipip, gue, dr, nat; local for backends at
// the node's own addresses), and the NAT reply path's counters.
var (
	dMethodPackets  = desc("xlb_method_packets_total", "Packets forwarded to backends, by forwarding method (gre, ipip, gue, dr, nat, local).", "method")
	dMethodBytes    = desc("xlb_method_bytes_total", "Bytes (IP datagrams as received) forwarded to backends, by forwarding method.", "method")
	dMethodNewFlows = desc("xlb_method_new_flows_total", "New flows given to backends, by forwarding method.", "method")
	dNAT            = desc("xlb_nat_packets_total", "NAT reply path events (reply: rewritten and sent from XDP; reply_pass: rewritten, to the kernel to route; track_fail: a flow not recorded; icmp: an ICMP error to a VIP about a NAT flow rewritten for its backend; icmp_reply: a NAT backend's ICMP error rewritten to the VIP and sent to the client).", "event")

	methodDescs = []*prometheus.Desc{dMethodPackets, dMethodBytes, dMethodNewFlows, dNAT}
	// methodNames are always reported, so rates per method exist from
	// the first scrape.
	methodNames = []string{"gre", "ipip", "gue", "dr", "nat", "local"}
)

// methodOf is the method label of backend b.
func methodOf(b *api.BackendInfo) string {
	if b.Local {
		return "local"
	}
	return b.Encap
}

// collectMethods sums the backends' counters of svcs by method.
func collectMethods(ch chan<- prometheus.Metric, svcs []api.ServiceInfo) {
	sums := map[string]*api.Counters{}
	for _, m := range methodNames {
		sums[m] = &api.Counters{}
	}
	for i := range svcs {
		for j := range svcs[i].Backends {
			b := &svcs[i].Backends[j]
			s, ok := sums[methodOf(b)]
			if !ok {
				continue
			}
			s.Packets += b.Counters.Packets
			s.Bytes += b.Counters.Bytes
			s.NewFlows += b.Counters.NewFlows
		}
	}
	for _, m := range slices.Sorted(maps.Keys(sums)) {
		ch <- counter(dMethodPackets, sums[m].Packets, m)
		ch <- counter(dMethodBytes, sums[m].Bytes, m)
		ch <- counter(dMethodNewFlows, sums[m].NewFlows, m)
	}
}
