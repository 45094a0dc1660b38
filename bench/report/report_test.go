package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/bench/study"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/plan"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/internal/testenv/genconfig"
)

// TestBenchSmoke runs `xlb-bench -smoke all` end to end into a temporary
// directory and checks what CI can check of a benchmark: every part ran,
// report.json has every key of RequiredKeys with a positive number,
// report.md and the plots are written. Figures are not judged.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("the smoke benchmark (about a minute) does not run with -short")
	}
	testenv.RequireRoot(t)
	if err := datapath.EnsureBPFFS(); err != nil {
		testenv.Unavailable(t, "bpffs: %v", err)
	}
	tracesDir := testenv.TracesDir(t)
	out := t.TempDir()
	before, _ := filepath.Glob("/sys/fs/bpf/xlb-bench-*")
	var log bytes.Buffer
	// A guard against a hang, not a speed check: the run takes about a
	// minute on a quiet machine (the kube part starts an API server, about
	// 15 s, and creates its Services) and three under a loaded one's
	// neighbours.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	r, err := Run(ctx, []string{"all"}, Options{Out: out, Smoke: true, TracesDir: tracesDir, Stdout: &log})
	t.Logf("smoke run %s:\n%s", time.Since(start).Round(time.Second), log.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Parts {
		if p.Status != StatusOK {
			t.Errorf("part %s: %s: %s", p.Name, p.Status, p.Error)
		}
	}
	if len(r.Parts) != len(Parts) {
		t.Errorf("%d parts ran, want %d", len(r.Parts), len(Parts))
	}

	// The file, not the struct: what a reader of report.json gets.
	raw, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	for _, key := range RequiredKeys {
		g, k, _ := strings.Cut(key, ".")
		group, _ := doc[g].(map[string]any)
		if v, ok := group[k].(float64); !ok || !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("report.json %s = %v, want a positive number", key, group[k])
		}
	}
	hb, _ := doc["hash_balance"].(map[string]any)
	for _, h := range []string{study.HashFlowV1, study.HashToeplitz, study.HashCRC16, study.HashSrcModN} {
		byN, _ := hb[h].(map[string]any)
		for _, n := range study.DefaultWorkers {
			f, _ := byN["n"+strconv.Itoa(n)].(map[string]any)
			if v, ok := f["cv"].(float64); !ok || !(v > 0) {
				t.Errorf("report.json hash_balance.%s.n%d.cv = %v", h, n, f["cv"])
			}
		}
	}
	if m := r.Missing(); len(m) > 0 {
		t.Errorf("Report.Missing: %v", m)
	}
	targets, _ := doc["targets"].([]any)
	if len(targets) != len(r.Targets) || len(targets) == 0 {
		t.Errorf("report.json has %d targets", len(targets))
	}
	machine, _ := doc["machine"].(map[string]any)
	for _, k := range []string{"cpu_model", "kernel", "go_version", "date"} {
		if s, _ := machine[k].(string); s == "" {
			t.Errorf("report.json machine.%s is empty", k)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## Targets", "`ns_per_pkt.est_hit_v4`", "`control.one_backend_change_ms`",
		"## Per packet", "## Control plane", "StopDDoS/packet-captures", "Smoke run"} {
		if !bytes.Contains(md, []byte(s)) {
			t.Errorf("report.md lacks %q", s)
		}
	}
	for _, p := range []string{"balance.png", "disruption.png", "hash_balance.png", "targets.png"} {
		b, err := os.ReadFile(filepath.Join(out, p))
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s: not a PNG (%v)", p, err)
		}
	}
	// Nothing left behind in bpffs.
	after, _ := filepath.Glob("/sys/fs/bpf/xlb-bench-*")
	for _, d := range after {
		if !slices.Contains(before, d) {
			t.Errorf("pin directory left behind: %s", d)
		}
	}
}

func TestSelectParts(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
		err  bool
	}{
		{[]string{"all"}, strings.Join(Parts, " "), false},
		{[]string{"control", "pkt"}, "pkt control", false},
		{[]string{"pkt", "pkt"}, "pkt", false},
		{[]string{"nope"}, "", true},
		{nil, "", true},
	} {
		got, err := selectParts(c.in)
		if (err != nil) != c.err || strings.Join(got, " ") != c.want {
			t.Errorf("selectParts(%v) = %v, %v; want %q (error %v)", c.in, got, err, c.want, c.err)
		}
	}
	if _, err := selectParts([]string{"x"}); !errors.Is(err, ErrUnknownPart) {
		t.Errorf("unknown part: %v", err)
	}
}

func TestTargets(t *testing.T) {
	var r Report
	r.set("ns_per_pkt.est_hit_v4", 60)
	r.set("mpps_one_core.established", 10)
	r.set("control.one_backend_change_ms", 1.5)
	r.computeTargets()
	if len(r.Targets) != len(targets) {
		t.Fatalf("%d targets", len(r.Targets))
	}
	byKey := map[string]Target{}
	for _, tg := range r.Targets {
		byKey[tg.Key] = tg
	}
	for key, want := range map[string]struct {
		ratio float64
		met   bool
	}{
		"ns_per_pkt.est_hit_v4":         {1.2, false},
		"mpps_one_core.established":     {1.25, true},
		"control.one_backend_change_ms": {0.5, true},
	} {
		tg := byKey[key]
		if tg.Ratio == nil || math.Abs(*tg.Ratio-want.ratio) > 1e-9 || *tg.Met != want.met {
			t.Errorf("%s: %+v, want ratio %v met %v", key, tg, want.ratio, want.met)
		}
	}
	if tg := byKey["ns_per_pkt.udp_hit"]; tg.Measured != nil || tg.Ratio != nil {
		t.Errorf("unmeasured target has figures: %+v", tg)
	}
	for _, tg := range targets {
		if _, ok := r.Figure(tg.Key); !ok {
			r.set(tg.Key, 1) // every target names a known group
		}
	}
	missing := r.Missing()
	// Required keys without a target, and hash_balance.
	if strings.Join(missing, " ") != "ns_per_pkt.syn_same_flow mpps_generic_xdp.established hash_balance" {
		t.Errorf("missing %v", missing)
	}
	md := r.Markdown(time.Second)
	if !strings.Contains(md, "| `ns_per_pkt.est_hit_v4` | TCP ACK, established flow, IPv4 | ≤ 50 ns | 60 ns | 1.20 | **no** |") {
		t.Errorf("targets table:\n%s", md)
	}
}

// overflowShare against a direct sum, and its known limits.
func TestOverflowShare(t *testing.T) {
	for _, lambda := range []float64{0.5, 4, 4.77, 8, 20} {
		p, sum := math.Exp(-lambda), 0.0
		for k := 0; k < 200; k++ {
			if k > ctWays {
				sum += float64(k-ctWays) * p
			}
			p *= lambda / float64(k+1)
		}
		if got, want := overflowShare(lambda, ctWays), sum/lambda; math.Abs(got-want) > 1e-9 {
			t.Errorf("lambda %v: %v, want %v", lambda, got, want)
		}
	}
	// Poisson, mean 8 (100% load): about 14% of flows do not fit 8 ways.
	if got := overflowShare(8, 8); math.Abs(got-0.14) > 0.005 {
		t.Errorf("8 ways at 100%% load: %v, want ~0.14", got)
	}
	if overflowShare(0, 8) != 0 {
		t.Error("empty table overflows")
	}
}

// The control part's config is valid, as large as it says, and plans to
// one table per service with every backend a real of its own.
func TestControlConfig(t *testing.T) {
	const services, backends = 300, 30
	y := genconfig.Control(services, backends, 3001, 7, 50)
	cfg, err := config.Parse(y, "bench.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Services) != services || len(cfg.Pools) != services {
		t.Fatalf("%d services, %d pools", len(cfg.Services), len(cfg.Pools))
	}
	d := cfg.Desired()
	if w := d.Services[0].Pools[0].Backends[7].Weight; w != 50 {
		t.Errorf("changed backend has weight %d", w)
	}
	if b := d.Services[299].Pools[0].Backends[29]; b.Addr != genconfig.BackendAddr(299, 29) || b.HealthCheck == "" {
		t.Errorf("last backend %+v", b)
	}
	pl, err := plan.Plan(nil, plan.Input{Desired: d}, plan.Limits{MaxServices: 4096, MaxReals: ctlMaxReals})
	if err != nil {
		t.Fatal(err)
	}
	st, ps := pl.State, pl.Stats
	if ps.TablesBuilt != services || st.Reals.Len() != services*backends {
		t.Errorf("%d tables built, %d reals", ps.TablesBuilt, st.Reals.Len())
	}
	// 3,000 services fit the address plan without overlap.
	seen := map[string]bool{}
	for s := range ctlServices {
		for _, a := range []string{genconfig.VIPAddr(s).String(), genconfig.BackendAddr(s, 0).String(), genconfig.BackendAddr(s, ctlBackends-1).String()} {
			if seen[a] {
				t.Fatalf("address %s used twice", a)
			}
			seen[a] = true
		}
	}
}

func TestFmtNum(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 8: "8", 0.5: "0.5", 2.0814: "2.081", 22.3: "22.3", 1024: "1024",
		268435456: "268435456", 0.0197: "0.0197", 59.04: "59.04", 123.45: "123.5"} {
		if got := fmtNum(v); got != want {
			t.Errorf("fmtNum(%v) = %q, want %q", v, got, want)
		}
	}
}
