package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The figures of docs/PERFORMANCE.md are generated (make performance)
// from a committed report, bench/report.json, between two marker lines;
// the account of them around the markers is written by hand. CI checks
// that the page matches the snapshot.
const (
	DocsBegin = "<!-- generated from bench/report.json by make performance: edit the text outside these markers only -->"
	DocsEnd   = "<!-- end of the generated figures -->"
)

// ErrNoMarkers is returned by SpliceDocs for a page without both marker
// lines, in order.
var ErrNoMarkers = errors.New("no generated-figures markers")

// docGroups are the figure groups the page shows, in its order, with
// their titles; groups a report lacks are left out.
var docGroups = []struct{ name, title string }{
	{"ns_per_pkt", "Per packet, ns (median of the runs)"},
	{"ns_per_pkt_best", "Per packet, ns (fastest run)"},
	{"ns_per_pkt_stateless", "Per packet without a connection table, ns"},
	{"vs_stateless", "Per packet over the same job without a connection table"},
	{"ns_per_pkt_reference", "Per packet, the reference build (bench/reference) side by side, ns"},
	{"vs_reference", "Per packet over the reference build, same run"},
	{"ns_per_pkt_cached_table", "Per packet with a cache-resident connection table, ns"},
	{"pkt_breakdown", "Where a packet's time goes, ns"},
	{"load_latency_ns", "Dependent load over random lines, ns"},
	{"ns_per_pkt_method", "Per packet by forwarding method, ns"},
	{"method_vs_gre", "Forwarding methods over GRE"},
	{"mpps_method", "Forwarding methods, Mpps on one core (from ns per packet)"},
	{"ns_per_pkt_sched", "Per packet by scheduler, ns"},
	{"sched_vs_maglev", "Schedulers' new flow over maglev's"},
	{"mpps_one_core", "Live frames, Mpps on one core (native XDP)"},
	{"mpps_one_core_split", "Live frames, Mpps, forwarder alone on its core"},
	{"mpps_generic_xdp", "Live frames, Mpps, generic XDP"},
	{"vs_reflector", "Live frames, forwarder over an XDP_TX-only program in its place"},
	{"tput_method", "Live frames by forwarding method, Mpps"},
	{"table_gen_ms", "Maglev table generation, ms (median)"},
	{"table_gen_min_ms", "Maglev table generation, ms (fastest)"},
	{"table_gen_reference_ms", "Maglev table generation, the paper's pseudocode written plainly, ms (median)"},
	{"table_gen_vs_reference", "Maglev table generation over the plain pseudocode, alternate runs"},
	{"table_incremental", "One backend's weight change"},
	{"conntrack", "Connection tracking"},
	{"control", "Control plane, 3,000 services"},
	{"sync", "Connection sync"},
	{"kube", "Kubernetes source, 1,000 Services"},
	{"scale", "One core and two"},
	{"hash_ns", "Flow hash, ns per hash"},
	{"hash_variance_ratio", "Flow hash balance, variance over uniform"},
}

// Load reads a report.json that Run wrote.
func Load(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	return &r, nil
}

// Figures renders the report for the docs: when, where and how it was
// measured, the targets (measured / target) and every figure group as a
// table of its keys. The output depends on the report only.
func (r *Report) Figures() string {
	var s strings.Builder
	m := r.Machine
	if r.Smoke {
		s.WriteString("**Smoke run**: every part shortened to prove it works; these figures are not for quoting.\n\n")
	}
	fmt.Fprintf(&s, "Measured %s with `%s`: %s (family %s, model %s), %d CPUs", m.Date, commandName(m.Command), m.CPUModel, m.CPUFamily, m.CPUModelID, m.CPUs)
	if m.Hypervisor {
		s.WriteString(", virtual machine")
	}
	fmt.Fprintf(&s, "; kernel %s; %s; load average %.2f at the start.\n\n", m.Kernel, m.GoVersion, m.LoadAvg)

	s.WriteString("### Targets\n\nratio = measured / target: at most 1 meets a \"≤\" target, at least 1 a \"≥\" one.\n\n")
	s.WriteString("| figure | what | target | measured | ratio | met |\n|---|---|---:|---:|---:|---|\n")
	for _, t := range r.Targets {
		meas, ratio, met := "not measured", "—", "—"
		if t.Measured != nil && t.Ratio != nil && t.Met != nil {
			meas = fmtNum(*t.Measured) + " " + t.Unit
			ratio = fmt.Sprintf("%.2f", *t.Ratio)
			met = "yes"
			if !*t.Met {
				met = "**no**"
			}
		}
		fmt.Fprintf(&s, "| `%s` | %s | %s %s %s | %s | %s | %s |\n", t.Key, t.What, t.bound(), fmtNum(t.Target), t.Unit, meas, ratio, met)
	}
	for _, g := range docGroups {
		p := r.groupPtr(g.name)
		if p == nil || len(*p) == 0 {
			continue
		}
		fmt.Fprintf(&s, "\n### %s (`%s`)\n\n| key | value |\n|---|---:|\n", g.title, g.name)
		keys := make([]string, 0, len(*p))
		for k := range *p {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&s, "| `%s` | %s |\n", k, fmtNum((*p)[k]))
		}
	}
	return s.String()
}

// commandName is the command line as run, the program named by its base
// name (where it was built does not matter to the figures).
func commandName(cmd string) string {
	prog, args, _ := strings.Cut(cmd, " ")
	return strings.TrimSpace(filepath.Base(prog) + " " + args)
}

// SpliceDocs returns doc with the lines between DocsBegin and DocsEnd
// replaced by figures, or ErrNoMarkers.
func SpliceDocs(doc, figures string) (string, error) {
	begin := strings.Index(doc, DocsBegin+"\n")
	end := strings.Index(doc, "\n"+DocsEnd)
	if begin < 0 || end < begin {
		return "", fmt.Errorf("%w: want a line %q, then a line %q", ErrNoMarkers, DocsBegin, DocsEnd)
	}
	head := doc[:begin+len(DocsBegin)+1]
	return head + "\n" + strings.TrimSpace(figures) + "\n" + doc[end:], nil
}

// WriteDocs rewrites the generated figures of the page at docPath from
// the report at reportPath.
func WriteDocs(docPath, reportPath string) error {
	r, err := Load(reportPath)
	if err != nil {
		return err
	}
	doc, err := os.ReadFile(docPath)
	if err != nil {
		return err
	}
	out, err := SpliceDocs(string(doc), r.Figures())
	if err != nil {
		return fmt.Errorf("%s: %w", docPath, err)
	}
	return os.WriteFile(docPath, []byte(out), 0o644)
}
