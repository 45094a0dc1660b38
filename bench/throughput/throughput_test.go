package throughput

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/testenv"
)

// TestThroughputSmoke is a short measurement (well under 20 s) that checks
// the harness end to end: native XDP with the default (shared) placement,
// every traffic kind, the baseline and latency probes; then generic XDP and
// the split placement with established traffic only. Measure itself
// fails a run whose receiver saw anything but frames encapsulated toward a
// backend, whose forwarder counters disagree with the receiver's (sent vs
// received, hits vs misses for the traffic kind, no drops), or whose
// sampled frame does not parse as GRE from the node to a backend carrying
// the generated packet.
func TestThroughputSmoke(t *testing.T) {
	testenv.RequireNetns(t)
	if err := datapath.EnsureBPFFS(); err != nil {
		testenv.Unavailable(t, "bpffs: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()

	o := SmokeOptions()
	o.Logf = t.Logf
	r, err := Measure(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, r, o)

	gen := SmokeOptions()
	gen.Mode, gen.Traffic, gen.Baseline, gen.LatencyProbes = datapath.ModeGeneric, []Traffic{Established}, false, 0
	gen.Logf = t.Logf
	rg, err := Measure(ctx, gen)
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, rg, gen)

	summary := r.Summary() + rg.Summary()
	if runtime.NumCPU() > 1 {
		sp := SmokeOptions()
		sp.Placement, sp.Traffic, sp.LatencyProbes = PlacementSplit, []Traffic{Established}, 0
		sp.Logf = t.Logf
		rs, err := Measure(ctx, sp)
		if err != nil {
			t.Fatal(err)
		}
		checkResults(t, rs, sp)
		summary += rs.Summary()
	}
	t.Logf("%v\n%s", time.Since(start).Round(time.Millisecond), summary)
}

// checkResults checks what every measurement must give.
func checkResults(t *testing.T, r Results, o Options) {
	t.Helper()
	if r.Mode != o.Mode || r.Placement != o.Placement {
		t.Errorf("measured %s/%s, asked %s/%s", r.Mode, r.Placement, o.Mode, o.Placement)
	}
	if len(r.Figures) != len(o.Traffic) {
		t.Fatalf("%d figures, want %d", len(r.Figures), len(o.Traffic))
	}
	if o.Baseline && len(r.Baseline) != len(o.Traffic) {
		t.Errorf("%d baseline figures, want %d", len(r.Baseline), len(o.Traffic))
	}
	for i, f := range r.Figures {
		if f.Traffic != o.Traffic[i] || f.Program != "xlb" {
			t.Errorf("figure %d is %s/%s", i, f.Traffic, f.Program)
		}
		if f.Mpps <= 0 || f.CPUNs <= 0 || len(f.Runs) != o.Runs {
			t.Errorf("%s: %.3f Mpps, %.1f ns/packet of CPU, %d runs", f.Traffic, f.Mpps, f.CPUNs, len(f.Runs))
		}
		for _, run := range f.Runs {
			// The window's ends copy the receiver's counters while frames
			// flow (the copy of the struct is not atomic against gen_count
			// on the other CPU), so in the window rx and encap may differ
			// by the frames in flight, either way; over the whole run, with
			// the rings drained, check() holds them exact: every frame seen
			// was encapsulated toward a backend (no plain, no bad frame), or
			// Measure fails.
			if run.Received == 0 || run.RxBad != 0 || max(run.RxTotal, run.Received)-min(run.RxTotal, run.Received) > 64 {
				t.Errorf("%s: received %d of %d at the receiver, %d not encapsulated toward a backend",
					f.Traffic, run.Received, run.RxTotal, run.RxBad)
			}
			if run.Forwarder["forward_tx"] == 0 {
				t.Errorf("%s: the forwarder counted no XDP_TX: %v", f.Traffic, run.Forwarder)
			}
			used := 0
			for _, n := range run.Backends {
				if n > 0 {
					used++
				}
			}
			// One 5-tuple goes to one backend; thousands of flows reach
			// every one of 10.
			if want := o.Backends; f.Traffic == Constant && used != 1 || f.Traffic != Constant && used != want {
				t.Errorf("%s: %d backends received frames: %v", f.Traffic, used, run.Backends)
			}
		}
		if o.LatencyProbes > 0 {
			if l := f.Latency; l == nil || l.Median <= 0 || l.BaselineMedian <= 0 || l.Probes != o.LatencyProbes {
				t.Errorf("%s: latency %+v", f.Traffic, l)
			}
		}
	}
	want := map[Traffic]float64{SYN: r.SynMpps, Established: r.EstablishedMpps, Constant: r.ConstantMpps}
	for _, tr := range o.Traffic {
		if f, ok := r.Figure(tr); !ok || f.CapacityMpps != want[tr] {
			t.Errorf("%s: headline %.3f Mpps, figure %+v", tr, want[tr], f)
		}
	}
}

// TestThroughputFull is the full measurement (minutes): native and generic
// XDP, split and shared placements, baseline and latency. Run it alone,
// as root, on a quiet machine:
//
//	XLB_BENCH_FULL=1 go test -run TestThroughputFull -v -timeout 60m ./bench/throughput
func TestThroughputFull(t *testing.T) {
	if os.Getenv("XLB_BENCH_FULL") != "1" {
		t.Skip("the full measurement runs with XLB_BENCH_FULL=1")
	}
	testenv.RequireNetns(t)
	var out string
	for _, mode := range []datapath.Mode{datapath.ModeNative, datapath.ModeGeneric} {
		for _, pl := range []Placement{PlacementSplit, PlacementShared} {
			o := DefaultOptions()
			o.Mode, o.Placement, o.Baseline, o.LatencyProbes = mode, pl, true, 2000
			o.Logf = t.Logf
			r, err := Measure(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			checkResults(t, r, o)
			out += r.Summary()
		}
	}
	t.Logf("\n%s", out)
}
