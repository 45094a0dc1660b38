package report

import (
	"fmt"

	"github.com/xlbproject/xlb/bench/harness"
	"github.com/xlbproject/xlb/internal/state"
)

// benchMethods are the forwarding methods measured beside GRE. Not NAT
// yet: it rewrites the datagram in place, and bench_wrap (bench/harness)
// restores only the varied field between packets.
var benchMethods = []struct {
	name string
	m    state.Encap
}{{"gre", state.EncapGRE}, {"gue", state.EncapGUE}, {"dr", state.EncapDR}}

// pktMethods measures the forwarder per packet with every service on
// each forwarding method in turn, in this run: an established flow's ACK
// (IPv4, IPv6) and a new flow.
func (b *runner) pktMethods(o harness.Options) error {
	o.Scenarios = []harness.Scenario{harness.TCPHit4, harness.TCPHit6, harness.NewFlow}
	for _, bm := range benchMethods {
		o.Method = bm.m
		r, err := harness.Measure(harness.TableXLB, o)
		if err != nil {
			return fmt.Errorf("method %s: %w", bm.name, err)
		}
		for _, f := range r.Figures {
			b.put("ns_per_pkt_method."+bm.name+"."+pktKeys[f.Scenario], f.Ns, "ns", fmt.Sprintf("best %.0f", f.Best))
		}
	}
	return nil
}
