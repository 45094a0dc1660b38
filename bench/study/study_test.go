package study

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/internal/testenv/traces"
)

var fullOut = flag.String("study.out", "",
	"run the full studies (paper settings: N=1000, M=65537 and 655373, 200 repetitions) and write Markdown, JSON and PNG figures to this directory")

func TestHashStudyRealTraces(t *testing.T) {
	dir := testenv.TracesDir(t)
	r, err := HashStudy(dir, nil, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.Source != traces.Source || len(r.Datasets) < 2 || r.Datasets[0].Dataset.Name != ReflectionDataset {
		t.Fatalf("source %q, %d datasets, first %q", r.Source, len(r.Datasets), r.Datasets[0].Dataset.Name)
	}
	main := r.Datasets[0]
	if main.Dataset.Flows < 10000 {
		t.Errorf("reflection dataset: %d flows, want the ~20k of the four reflection captures", main.Dataset.Flows)
	}
	if got, want := len(main.Balance), len(FlowHashers())*len(DefaultWorkers); got != want {
		t.Fatalf("%d balance rows, want %d", got, want)
	}
	cv := map[string]map[int]float64{}
	for _, b := range main.Balance {
		if b.Flows != main.Dataset.Flows {
			t.Errorf("%s N=%d: %d flows, want %d", b.Hash, b.N, b.Flows, main.Dataset.Flows)
		}
		if cv[b.Hash] == nil {
			cv[b.Hash] = map[int]float64{}
		}
		cv[b.Hash][b.N] = b.CV
	}
	// The conclusion the study supports: the forwarder's hash balances the
	// real source mix as well as Toeplitz and CRC16 do, and much better
	// than the source address mod N.
	for _, n := range []int{8, 16, 32, 64} {
		v1 := cv[HashFlowV1][n]
		if v1 > 1.5*cv[HashToeplitz][n] || v1 > 1.5*cv[HashCRC16][n] {
			t.Errorf("N=%d: flow hash v1 CV %.4f vs Toeplitz %.4f, CRC16 %.4f", n, v1, cv[HashToeplitz][n], cv[HashCRC16][n])
		}
		if cv[HashSrcModN][n] < 2*v1 {
			t.Errorf("N=%d: source mod N CV %.4f not much worse than flow hash v1 %.4f", n, cv[HashSrcModN][n], v1)
		}
	}
	q := r.QualityReport()
	if q[HashSrcModN] < 4 || q[HashFlowV1] > 2 {
		t.Errorf("variance ratios: source mod N %.2f, flow hash v1 %.2f", q[HashSrcModN], q[HashFlowV1])
	}
	if len(r.Timing) != len(FlowHashers()) {
		t.Errorf("%d timings", len(r.Timing))
	}
	for _, tm := range r.Timing {
		if !(tm.NsPerHash > 0) || !(tm.NsMin > 0) || tm.NsMin > tm.NsPerHash {
			t.Errorf("%s: %v ns median, %v fastest", tm.Hash, tm.NsPerHash, tm.NsMin)
		}
	}
	var md bytes.Buffer
	if err := WriteHashStudyMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"StopDDoS/packet-captures", "| flowhash_v1 |", "random (ideal)", "ns/hash", "| reflection | 24."} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("Markdown lacks %q", s)
		}
	}
	rep := r.BalanceReport()
	if _, ok := rep[HashFlowV1]["n64"]; !ok {
		t.Errorf("BalanceReport lacks flowhash_v1/n64: %v", rep)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Errorf("result does not marshal: %v", err)
	}
	png := filepath.Join(t.TempDir(), "hash.png")
	if err := PlotHashBalance(png, main); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, png)
}

func TestHashStudyNoTraces(t *testing.T) {
	if _, err := HashStudy(t.TempDir(), nil, time.Millisecond); err == nil {
		t.Error("no error for a directory without captures")
	}
}

// A small ConsistentStudy through every writer and plot.
func TestConsistentOutputs(t *testing.T) {
	r, err := ConsistentStudy(ConsistentOptions{N: 50, Ms: []int{5003, 10007}, Percents: []float64{0, 2, 10}, Reps: 3, Sets: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Balance) != 6 || len(r.Spread) != 6 || len(r.Disruption) != 18 {
		t.Fatalf("%d balance, %d spread, %d disruption results", len(r.Balance), len(r.Spread), len(r.Disruption))
	}
	var md bytes.Buffer
	if err := WriteBalanceMarkdown(&md, r.Balance, r.Spread); err != nil {
		t.Fatal(err)
	}
	if err := WriteDisruptionMarkdown(&md, r.Disruption); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| karger | 50 | 5003 |", "maglev M=10007: changed", "| 10 | 5 |"} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("Markdown lacks %q:\n%s", s, md.String())
		}
	}
	if got := DisruptionReport(r.Disruption)["maglev"]["m5003"]["p10"]; got <= 0 {
		t.Errorf("DisruptionReport maglev/m5003/p10 = %v", got)
	}
	if got := BalanceReport(r.Balance)["rendezvous"]["m10007"]; got.MaxShare < 1 || got.PaperOverProvision != nil {
		t.Errorf("BalanceReport rendezvous/m10007 = %+v", got)
	}
	dir := t.TempDir()
	for name, plot := range map[string]func(string) error{
		"balance.png":    func(p string) error { return PlotBalance(p, r.Balance) },
		"disruption.png": func(p string) error { return PlotDisruption(p, r.Disruption) },
	} {
		p := filepath.Join(dir, name)
		if err := plot(p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkPNG(t, p)
	}
	if err := PlotBalance(filepath.Join(dir, "x.png"), nil); err != ErrNothingToPlot {
		t.Errorf("empty plot: %v", err)
	}
}

func checkPNG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 1000 {
		t.Errorf("%s: not a PNG image (%d bytes)", path, len(b))
	}
}

// TestFullStudies runs both studies at the paper's settings when
// -study.out is given (about a minute on two cores):
//
//	go test ./bench/study -run TestFullStudies -study.out /tmp/study -v
func TestFullStudies(t *testing.T) {
	if *fullOut == "" {
		t.Skip("the full studies run only with -study.out DIR")
	}
	out := *fullOut
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	cr, err := ConsistentStudy(PaperConsistentOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("consistent-hashing study: %.1f s", cr.Seconds)
	start := time.Now()
	hr, err := HashStudy(testenv.TracesDir(t), nil, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("flow-hash study: %.1f s", time.Since(start).Seconds())
	var md bytes.Buffer
	md.WriteString("# Consistent hashing (Maglev paper 5.3)\n\n## Balance (Fig. 11)\n\n")
	if err := WriteBalanceMarkdown(&md, cr.Balance, cr.Spread); err != nil {
		t.Fatal(err)
	}
	md.WriteString("\n## Disruption (Fig. 12)\n\n")
	if err := WriteDisruptionMarkdown(&md, cr.Disruption); err != nil {
		t.Fatal(err)
	}
	md.WriteString("\n# Flow hash (session-persistence study, 4.2)\n\n")
	if err := WriteHashStudyMarkdown(&md, hr); err != nil {
		t.Fatal(err)
	}
	report := map[string]any{
		"consistent_balance":    BalanceReport(cr.Balance),
		"consistent_disruption": DisruptionReport(cr.Disruption),
		"hash_balance":          hr.BalanceReport(),
		"hash_ns":               hr.NsReport(),
		"hash_variance_ratio":   hr.QualityReport(),
		"consistent_study":      cr,
		"hash_study":            hr,
	}
	js, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"study.md": md.Bytes(), "study.json": js} {
		if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := PlotBalance(filepath.Join(out, "balance.png"), cr.Balance); err != nil {
		t.Fatal(err)
	}
	if err := PlotDisruption(filepath.Join(out, "disruption.png"), cr.Disruption); err != nil {
		t.Fatal(err)
	}
	if err := PlotHashBalance(filepath.Join(out, "hash_balance.png"), hr.Datasets[0]); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", out)
}
