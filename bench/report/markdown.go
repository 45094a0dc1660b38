package report

import (
	"fmt"
	"strings"
	"time"
)

// sections are the parts' Markdown sections in report order, with titles.
var sections = []struct{ part, title, intro string }{
	{"pkt", "Per packet (BPF_PROG_TEST_RUN, one pinned CPU)",
		"`bench/harness`: the forwarder (`datapath.Load`, next hop cached per real) in a private network namespace, " +
			"each packet through the restore-and-tail-call wrapper, whose cost (calibrated before every run) is subtracted. " +
			"Cells: median over the runs (fastest run minus fastest calibration). `none` is the same job without a " +
			"connection table (Maglev for every packet): the stateless floor."},
	{"sched", "Schedulers, per packet (BPF_PROG_TEST_RUN, one pinned CPU)",
		"`harness.MeasureSchedulers`: the forwarder with every VIP on each scheduler in turn, run by run " +
			"(each run writes its scheduler's settings first), 10 backends at weight 1; cells as above."},
	{"tput", "Throughput (live frames)", ""},
	{"tablegen", "Maglev table generation", ""},
	{"balance", "Consistent hashing: balance and disruption (Maglev paper, Fig. 11 and 12)", ""},
	{"flowhash", "Flow hash study on real captures", ""},
	{"conntrack", "Connection tracking: memory and cost once full", ""},
	{"control", "Control plane: 3,000 services, file to data plane", ""},
	{"scale", "One core and two", ""},
}

// Markdown renders the report: machine, targets (measured / target),
// parts, then each part's section.
func (r *Report) Markdown(elapsed time.Duration) string {
	var s strings.Builder
	m := r.Machine
	s.WriteString("# xlb benchmark report\n\n")
	if r.Smoke {
		s.WriteString("**Smoke run**: every part shortened to prove it works; the figures are not for quoting.\n\n")
	}
	fmt.Fprintf(&s, "- Date: %s; wall time %s; command `%s`\n", m.Date, elapsed.Round(time.Second), m.Command)
	hv := ""
	if m.Hypervisor {
		hv = ", virtual machine"
	}
	fmt.Fprintf(&s, "- CPU: %s (family %s, model %s, cpuinfo cache size %s), %d CPUs%s; memory %d MiB; load average %.2f at the start\n",
		m.CPUModel, m.CPUFamily, m.CPUModelID, m.CacheSize, m.CPUs, hv, m.MemTotalMiB, m.LoadAvg)
	fmt.Fprintf(&s, "- Kernel %s (%s); %s; cilium/ebpf %s\n\n", m.Kernel, m.KernelVersion, m.GoVersion, m.EBPFModule)

	s.WriteString("## Targets\n\nratio = measured / target: at most 1 meets a \"≤\" target, at least 1 a \"≥\" one.\n\n")
	s.WriteString("| figure | what | target | measured | ratio | met | also measured | reference |\n|---|---|---:|---:|---:|---|---|---|\n")
	for _, t := range r.Targets {
		meas, ratio, met := "not measured", "—", "—"
		if t.Measured != nil {
			meas = fmtNum(*t.Measured) + " " + t.Unit
			ratio = fmt.Sprintf("%.2f", *t.Ratio)
			met = "yes"
			if !*t.Met {
				met = "**no**"
			}
		}
		fmt.Fprintf(&s, "| `%s` | %s | %s %s %s | %s | %s | %s | %s | %s |\n", t.Key, t.What, t.bound(), fmtNum(t.Target), t.Unit,
			meas, ratio, met, t.Note, t.Reference)
	}

	s.WriteString("\n## Parts\n\n| part | status | seconds | load average after | notes |\n|---|---|---:|---:|---|\n")
	for _, p := range r.Parts {
		notes := strings.Join(p.Notes, "; ")
		if p.Error != "" {
			notes = strings.TrimPrefix(notes+"; "+p.Error, "; ")
		}
		fmt.Fprintf(&s, "| %s | %s | %.1f | %.2f | %s |\n", p.Name, p.Status, p.Seconds, p.LoadAvg, strings.ReplaceAll(notes, "|", "\\|"))
	}
	if len(r.Plots) > 0 {
		s.WriteString("\nPlots: ")
		for i, p := range r.Plots {
			if i > 0 {
				s.WriteString(", ")
			}
			fmt.Fprintf(&s, "[%s](%s)", p, p)
		}
		s.WriteString("\n")
	}
	if len(r.Details.Profiles) > 0 {
		s.WriteString("\nGo CPU profiles of the Go parts: ")
		var ps []string
		for _, name := range []string{"tablegen", "control_commit", "control_change"} {
			if p, ok := r.Details.Profiles[name]; ok {
				ps = append(ps, "`"+p+"`")
			}
		}
		s.WriteString(strings.Join(ps, ", ") + " (`go tool pprof -top <file>`).\n")
	}
	for _, sec := range sections {
		body, ok := r.md[sec.part]
		if !ok {
			continue
		}
		fmt.Fprintf(&s, "\n## %s\n\n", sec.title)
		if sec.intro != "" {
			s.WriteString(sec.intro + "\n\n")
		}
		s.WriteString(strings.TrimSpace(body) + "\n")
		if sec.part == "flowhash" && r.HashConclusion != "" {
			fmt.Fprintf(&s, "\n**Flow hash of the forwarder**: %s.\n", r.HashConclusion)
		}
	}
	s.WriteString("\n## Reference figures\n\n| what | value | source |\n|---|---:|---|\n")
	for _, ref := range r.Reference {
		fmt.Fprintf(&s, "| %s | %s %s | %s |\n", ref.What, fmtNum(ref.Value), ref.Unit, ref.Source)
	}
	return s.String()
}
