package harness

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/state"
	"github.com/xlbproject/xlb/internal/testenv"
)

// TestSchedulerCost measures a new flow (SYN every packet) and an
// established hit per scheduler, beside maglev, one forwarder per
// scheduler measured in turn. Smoke by default (checks verdicts and
// counters); XLB_BENCH_FULL=1 for figures:
//
//	XLB_BENCH_FULL=1 go test -run TestSchedulerCost -v -timeout 60m ./bench/harness
func TestSchedulerCost(t *testing.T) {
	testenv.RequireRoot(t)
	if err := datapath.EnsureBPFFS(); err != nil {
		testenv.Unavailable(t, "bpffs: %v", err)
	}
	o := SmokeOptions()
	if fullMode() {
		o = DefaultOptions()
		o.Runs = 11
	}
	o.Scenarios = []Scenario{NewFlow, TCPHit4, NewFlowUDP}
	kinds := []struct {
		name    string
		kind    state.SchedKind
		persist time.Duration
	}{
		{"maglev", state.SchedMaglev, 0}, {"maglev-source", state.SchedMaglevSource, 0}, {"rr", state.SchedRR, 0},
		{"wrr", state.SchedWRR, 0}, {"lc", state.SchedLC, 0}, {"wlc", state.SchedWLC, 0},
		{"rr, persistence 300s", state.SchedRR, 300 * time.Second},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| ns/packet, median (best) | %s | %s | %s |\n|---|---|---|---|\n", NewFlow, TCPHit4, NewFlowUDP)
	var maglevNew float64
	for _, k := range kinds {
		o.Sched, o.Persist = k.kind, k.persist
		r, err := MeasureForwarder(o)
		if err != nil {
			t.Fatalf("%s: %v", k.name, err)
		}
		checkResults(t, r, o)
		nf, _ := r.Figure(NewFlow)
		hit, _ := r.Figure(TCPHit4)
		udp, _ := r.Figure(NewFlowUDP)
		fmt.Fprintf(&b, "| %s (%d backends) | %.0f (%.0f) | %.0f (%.0f) | %.0f (%.0f) |\n", k.name, o.Backends,
			nf.Ns, nf.Best, hit.Ns, hit.Best, udp.Ns, udp.Best)
		if k.kind == state.SchedMaglev {
			maglevNew = nf.Ns
		} else if maglevNew > 0 {
			t.Logf("%s: new flow %.2f x maglev's", k.name, nf.Ns/maglevNew)
		}
	}
	t.Logf("\n%s", b.String())
}
