package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/testenv"
)

// fullMode is XLB_BENCH_FULL=1: the full-size measurement (minutes)
// instead of the smoke run.
func fullMode() bool { return os.Getenv("XLB_BENCH_FULL") == "1" }

// TestConntrackComparison runs every scenario against the forwarder and
// the LRU tables. By default a smoke run (seconds, full-size tables, few
// packets) that checks the harness and the programs: every run forwarded
// every packet with XDP_TX, hit or missed as intended, figures positive.
// With XLB_BENCH_FULL=1 it is the measurement docs/PERFORMANCE.md quotes;
// run it alone (go test -run TestConntrackComparison -v -timeout 60m).
// XLB_BENCH_NOFIB=1 leaves forwarding off (Options.NoFIB).
func TestConntrackComparison(t *testing.T) {
	testenv.RequireNetns(t)
	if err := datapath.EnsureBPFFS(); err != nil {
		testenv.Unavailable(t, "bpffs: %v", err)
	}
	o := SmokeOptions()
	if fullMode() {
		o = DefaultOptions()
	}
	o.NoFIB = os.Getenv("XLB_BENCH_NOFIB") == "1"
	o.Logf = t.Logf
	all, err := Compare(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(Tables()) {
		t.Fatalf("%d results, want %d", len(all), len(Tables()))
	}
	for i, r := range all {
		if r.Table != Tables()[i] {
			t.Errorf("result %d is %s, want %s", i, r.Table, Tables()[i])
		}
		checkResults(t, r, o)
		if r.Fill < 0.99 {
			t.Errorf("%s: table %.3f full before %s", r.Table, r.Fill, NewFlowFull)
		}
	}
	t.Logf("%v\n%s", all[0].Elapsed.Round(1e6), Markdown(all))
}

// checkResults checks what every measurement must give: a figure per
// scenario, each from o.Runs runs with positive times.
func checkResults(t *testing.T, r Results, o Options) {
	t.Helper()
	if len(r.Figures) != len(o.Scenarios) {
		t.Fatalf("%s: %d figures, want %d", r.label(), len(r.Figures), len(o.Scenarios))
	}
	if r.Harness <= 0 {
		t.Errorf("%s: harness %.1f ns", r.label(), r.Harness)
	}
	for i, f := range r.Figures {
		if f.Scenario != o.Scenarios[i] || f.Raw <= 0 || f.Wrapper <= 0 ||
			len(f.Runs) != o.Runs || len(f.Calib) != o.Runs {
			t.Errorf("%s %s: raw %.1f, wrapper %.1f, %d runs, %d calibrations",
				r.label(), f.Scenario, f.Raw, f.Wrapper, len(f.Runs), len(f.Calib))
		}
		// Every whole job parses, looks up and encapsulates: measurably
		// more than the wrapper even on a noisy machine.
		if r.Stop == StopNone && f.Ns <= 0 {
			t.Errorf("%s %s: %.1f ns/packet after the wrapper", r.label(), f.Scenario, f.Ns)
		}
	}
}

// TestCostBreakdown measures, for the hit scenarios, the forwarder's job
// stage by stage, by elimination (MeasureBreakdown).
func TestCostBreakdown(t *testing.T) {
	testenv.RequireNetns(t)
	if err := datapath.EnsureBPFFS(); err != nil {
		testenv.Unavailable(t, "bpffs: %v", err)
	}
	o := SmokeOptions()
	if fullMode() {
		o = DefaultOptions()
	}
	o.Logf = t.Logf
	o.Scenarios = []Scenario{TCPHit4, TCPHit6, UDPHit4}
	all, err := MeasureBreakdown(o)
	if err != nil {
		t.Fatal(err)
	}
	fibs := 0
	for _, r := range all {
		checkResults(t, r, o)
		if !r.FIB {
			fibs++
		}
	}
	if fibs != 2 {
		t.Errorf("%d results with the FIB lookup off, want 2", fibs)
	}
	t.Logf("%v\n%s", all[0].Elapsed.Round(1e6), Markdown(all))
}

func TestOptionsRejected(t *testing.T) {
	for name, o := range map[string]Options{
		"cpu":       {CPU: 1 << 20},
		"backends":  {Backends: 1000},
		"entries":   {Entries: 10},
		"stage":     {Stop: 99},
		"instances": {Instances: 65},
	} {
		if _, err := Measure(TableXLB, o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Measure("btree", Options{}); err == nil {
		t.Error("unknown table accepted")
	}
	if _, err := MeasureLRU(TableXLB, Options{}); err == nil {
		t.Error("MeasureLRU accepted the forwarder")
	}
	if _, err := Measure(TableXLB, Options{Stop: StopParse}); err == nil {
		t.Error("the forwarder accepted a stop")
	}
	if _, err := Measure(TableNone, Options{Stop: StopParse, Scenarios: []Scenario{NewFlowFull}}); err == nil {
		t.Error("a stop accepted the pre-fill")
	}
}

func TestScenariosDefined(t *testing.T) {
	for _, s := range Scenarios() {
		sc, err := scenarioOf(s)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(sc.flow.Frame()); n < 32 || int(sc.varOff)+4 > n {
			t.Errorf("%s: frame of %d bytes, varied field at %d", s, n, sc.varOff)
		}
	}
	if _, err := scenarioOf("nope"); err == nil {
		t.Error("unknown scenario accepted")
	}
}

// TestMeasureBuilds measures this build's forwarder side by side with the
// forwarder of its own object file loaded as another build (smoke size):
// both forward every packet as each scenario intends, each figure has its
// ratio to this build's, and a missing object
// file is an error that names it.
func TestMeasureBuilds(t *testing.T) {
	testenv.RequireNetns(t)
	if err := datapath.EnsureBPFFS(); err != nil {
		testenv.Unavailable(t, "bpffs: %v", err)
	}
	obj := "../../internal/datapath/xlb_bpfel.o"
	o := SmokeOptions()
	o.Scenarios = []Scenario{TCPHit4, NewFlow, NewFlowFull}
	o.Logf = t.Logf
	rs, err := MeasureBuilds([]string{obj, obj}, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 || rs[0].Build != "" || rs[1].Build != obj || rs[2].Build != obj {
		t.Fatalf("results %v, want this build then %s twice", rs, obj)
	}
	for i, r := range rs {
		checkResults(t, r, o)
		for _, f := range r.Figures {
			if (i == 0 && f.Rel != 1) || f.Rel <= 0 {
				t.Errorf("%s %s: %.3f of this build", r.label(), f.Scenario, f.Rel)
			}
		}
	}
	before, _ := filepath.Glob("/sys/fs/bpf/xlb-bench-*")
	if _, err := MeasureBuilds([]string{"no-such.o"}, o); err == nil || !strings.Contains(err.Error(), "no-such.o") {
		t.Errorf("missing object: error %v, want one naming no-such.o", err)
	}
	if after, _ := filepath.Glob("/sys/fs/bpf/xlb-bench-*"); len(after) > len(before) {
		t.Errorf("the failed measurement left its pins: %v", after)
	}
}

// TestLoadLatency: a region that fits in L1 is reached faster than one of
// 64 MiB, and both take a positive time.
func TestLoadLatency(t *testing.T) {
	testenv.RequireNetns(t) // the pinned thread has a network namespace of its own
	small, err := LoadLatency(0, 16<<10)
	if err != nil {
		t.Fatal(err)
	}
	big, err := LoadLatency(0, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("16 KiB %.1f ns, 64 MiB %.1f ns per load", small, big)
	if small <= 0 || big <= small {
		t.Errorf("16 KiB %.1f ns, 64 MiB %.1f ns per load: want 0 < small < big", small, big)
	}
	if _, err := LoadLatency(0, 100); err == nil {
		t.Error("a 100-byte region: no error")
	}
}
