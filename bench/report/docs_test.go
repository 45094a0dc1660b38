package report

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A report written to JSON and read back renders the same figures, with
// every measured target and figure group, and SpliceDocs replaces only
// what lies between the markers.
func TestDocsFigures(t *testing.T) {
	r := &Report{Machine: Machine{Date: "2026-11-29T04:00:00Z", Command: "xlb-bench all", CPUModel: "cpu", CPUs: 2}}
	r.set("ns_per_pkt.est_hit_v4", 45.25)
	r.set("control.apply_3000_services_s", 0.98)
	r.set("table_gen_ms.m65537_n1000", 1.5)
	r.computeTargets()
	path := filepath.Join(t.TempDir(), "report.json")
	if err := r.writeJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	fig := back.Figures()
	if fig != r.Figures() {
		t.Errorf("figures differ after a JSON round trip:\n%s\n---\n%s", fig, r.Figures())
	}
	for _, want := range []string{
		"| `ns_per_pkt.est_hit_v4` | TCP ACK, established flow, IPv4 | ≤ 50 ns | 45.25 ns | 0.91 | yes |",
		"| `control.apply_3000_services_s` |",
		"### Per packet, ns (median of the runs) (`ns_per_pkt`)",
		"| `est_hit_v4` | 45.25 |",
		"| `m65537_n1000` | 1.5 |",
	} {
		if !strings.Contains(fig, want) {
			t.Errorf("figures lack %q:\n%s", want, fig)
		}
	}
	if strings.Contains(fig, "Smoke run") || strings.Contains(fig, "(`sync`)") {
		t.Errorf("figures show what the report does not hold:\n%s", fig)
	}

	doc := "# Title\n\nhand text\n" + DocsBegin + "\nold figures\n" + DocsEnd + "\nmore hand text\n"
	out, err := SpliceDocs(doc, fig)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Title\n\nhand text\n" + DocsBegin + "\n\n" + strings.TrimSpace(fig) + "\n\n" + DocsEnd + "\nmore hand text\n"
	if out != want {
		t.Errorf("spliced page\n%s\nwant\n%s", out, want)
	}
	if again, _ := SpliceDocs(out, fig); again != out {
		t.Error("splicing the same figures twice changes the page")
	}
	if _, err := SpliceDocs("no markers\n", fig); !errors.Is(err, ErrNoMarkers) {
		t.Errorf("page without markers: %v", err)
	}
}

// docs/PERFORMANCE.md holds exactly the figures of bench/report.json
// (make performance writes them; make check-generated checks them too).
func TestPerformancePageCurrent(t *testing.T) {
	r, err := Load("../report.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/PERFORMANCE.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := SpliceDocs(string(doc), r.Figures())
	if err != nil {
		t.Fatal(err)
	}
	if out != string(doc) {
		t.Error("docs/PERFORMANCE.md's figures are not bench/report.json's: run make performance")
	}
}
