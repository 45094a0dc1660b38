package harness

import (
	"testing"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/state"
	"github.com/xlbproject/xlb/internal/testenv"
)

// TestMethods measures the forwarder with every service on each
// forwarding method, and for NAT its replies too: every run's verdicts,
// counters and output frame are checked for the method (checkOutput).
func TestMethods(t *testing.T) {
	testenv.RequireNetns(t)
	if err := datapath.EnsureBPFFS(); err != nil {
		testenv.Unavailable(t, "bpffs: %v", err)
	}
	for _, m := range []state.Encap{state.EncapGRE, state.EncapGUE, state.EncapDR, state.EncapNAT} {
		o := SmokeOptions()
		o.Method = m
		o.Scenarios = []Scenario{TCPHit4, TCPHit6, NewFlow}
		if m == state.EncapNAT {
			o.Scenarios = append(o.Scenarios, NATReply4, NATReply6, NATReplyCycled4, NATReplyCycled6)
		}
		r, err := Measure(TableXLB, o)
		if err != nil {
			t.Fatalf("%s: %v", methodName(m), err)
		}
		checkResults(t, r, o)
		for _, f := range r.Figures {
			t.Logf("%s %s: %.0f ns/packet", methodName(m), f.Scenario, f.Ns)
		}
	}
}
