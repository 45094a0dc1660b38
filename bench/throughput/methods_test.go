package throughput

import (
	"context"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/testenv"
)

// TestThroughputMethods measures every traffic kind with the reals on
// each forwarding method (GRE, GUE, DR, NAT), smoke size, and NAT
// replies of established flows (from one backend to the clients, which
// the forwarder must send from the VIP). Measure fails a
// run whose receiver saw a frame other than what that method sends to a
// backend (GUE: UDP from the node to a backend's GUE port around the
// client's packet; DR: the client's packet unchanged to a backend's MAC;
// NAT: the client's packet with its destination rewritten to a backend's
// address and port), or whose forwarder's XDP_TX count disagrees with the
// receiver's count.
func TestThroughputMethods(t *testing.T) {
	testenv.RequireNetns(t)
	if err := datapath.EnsureBPFFS(); err != nil {
		testenv.Unavailable(t, "bpffs: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	o := SmokeOptions()
	o.Baseline, o.LatencyProbes, o.Methods = false, 0, AllMethods()
	o.Logf = t.Logf
	r, err := Measure(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, r, o)
	want := map[Method]int{}
	for _, m := range o.Methods {
		for _, tr := range o.Traffic {
			if m.measures(tr) {
				want[m]++
			}
		}
	}
	if want[NATReply] != 1 {
		t.Fatalf("NAT replies measured with %d traffic kinds, want 1 (established)", want[NATReply])
	}
	seen := map[Method]int{}
	for _, f := range r.Methods {
		seen[f.Method]++
		if f.Mpps <= 0 || f.CPUNs <= 0 || len(f.Runs) != o.Runs {
			t.Errorf("%s %s: %.3f Mpps, %.1f ns/packet of CPU, %d runs", f.Method, f.Traffic, f.Mpps, f.CPUNs, len(f.Runs))
		}
		for _, run := range f.Runs {
			if run.Received == 0 || run.RxBad != 0 || run.Forwarder[txStat(f.Method)] == 0 {
				t.Errorf("%s %s: received %d, %d bad, forwarder %v", f.Method, f.Traffic, run.Received, run.RxBad, run.Forwarder)
			}
			used := 0
			for _, n := range run.Backends {
				if n > 0 {
					used++
				}
			}
			if wantUsed := o.Backends; f.Method == NATReply && used != 1 || f.Method != NATReply &&
				(f.Traffic == Constant && used != 1 || f.Traffic != Constant && used != wantUsed) {
				t.Errorf("%s %s: %d backends received frames: %v", f.Method, f.Traffic, used, run.Backends)
			}
		}
	}
	for _, m := range o.Methods {
		if seen[m] != want[m] {
			t.Errorf("method %s: %d figures, want %d", m, seen[m], want[m])
		}
	}
	t.Logf("\n%s", r.Summary())
}
