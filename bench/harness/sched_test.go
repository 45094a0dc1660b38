package harness

import (
	"fmt"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/state"
	"github.com/xlbproject/xlb/internal/testenv"
)

// TestSchedulerCost measures a new flow (SYN every packet) and an
// established hit per scheduler, side by side with maglev
// (MeasureSchedulers). Smoke by default (checks verdicts and counters);
// XLB_BENCH_FULL=1 for figures (`make bench BENCH_PARTS=sched` reports
// the same):
//
//	XLB_BENCH_FULL=1 go test -run TestSchedulerCost -v -timeout 60m ./bench/harness
func TestSchedulerCost(t *testing.T) {
	testenv.RequireNetns(t)
	if err := datapath.EnsureBPFFS(); err != nil {
		testenv.Unavailable(t, "bpffs: %v", err)
	}
	o := SmokeOptions()
	if fullMode() {
		o = DefaultOptions()
		o.Runs = 11
	}
	o.Scenarios = []Scenario{NewFlow, TCPHit4, NewFlowUDP}
	specs := Schedulers()
	res, err := MeasureSchedulers(specs, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(specs) {
		t.Fatalf("%d results, want %d", len(res), len(specs))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| ns/packet, median (best) | %s | %s | %s |\n|---|---|---|---|\n", NewFlow, TCPHit4, NewFlowUDP)
	maglev, _ := res[0].Figure(NewFlow)
	for i, r := range res {
		if r.Sched != specs[i].Name {
			t.Errorf("result %d is %q, want %q", i, r.Sched, specs[i].Name)
		}
		checkResults(t, r, o)
		nf, _ := r.Figure(NewFlow)
		hit, _ := r.Figure(TCPHit4)
		udp, _ := r.Figure(NewFlowUDP)
		fmt.Fprintf(&b, "| %s | %.0f (%.0f) | %.0f (%.0f) | %.0f (%.0f) |\n", r.Sched,
			nf.Ns, nf.Best, hit.Ns, hit.Best, udp.Ns, udp.Best)
		if i > 0 {
			t.Logf("%s: new flow %.2f x maglev's", r.Sched, nf.Ns/maglev.Ns)
		}
	}
	t.Logf("\n%s", b.String())
}

// TestSchedValues checks what MeasureSchedulers writes for each setting:
// every VIP on the setting's kind, list schedulers and persistence with
// every backend of the VIP at weight 1, persistence's timeout in ticks.
func TestSchedValues(t *testing.T) {
	o := SmokeOptions()
	for _, spec := range Schedulers() {
		w, err := schedValues(o, &spec)
		if err != nil {
			t.Fatalf("%s: %v", spec.Name, err)
		}
		if len(w) != 3 {
			t.Fatalf("%s: %d services, want 3", spec.Name, len(w))
		}
		for id, v := range w {
			wantN := uint32(0)
			if spec.Kind >= state.SchedRR || spec.Persist != 0 {
				wantN = uint32(o.Backends)
			}
			if state.SchedKind(v.Kind) != spec.Kind || v.N != wantN || v.PersistTimeout != datapath.Ticks(spec.Persist) {
				t.Errorf("%s: service %d: kind %d, %d entries, persist %d ticks; want %d, %d, %d",
					spec.Name, id, v.Kind, v.N, v.PersistTimeout, spec.Kind, wantN, datapath.Ticks(spec.Persist))
			}
			for i := range v.N {
				if e := v.Ent[i]; e.Rid == 0 || e.Weight != 1 {
					t.Errorf("%s: service %d entry %d: real %d weight %d", spec.Name, id, i, e.Rid, e.Weight)
				}
			}
		}
	}
}
