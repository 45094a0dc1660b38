package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xlbproject/xlb/bench/harness"
)

// Parts lists the parts in the order Run runs them ("all").
var Parts = []string{"pkt", "sched", "tput", "tablegen", "balance", "flowhash", "conntrack", "control", "sync", "kube", "scale"}

// Options configure Run. The zero value runs at full size on the last CPU
// and writes to bench/out.
type Options struct {
	// Out is the directory for report.json, report.md and the plots
	// (created; default bench/out).
	Out string
	// Smoke makes every part short: proof that it works, not figures.
	Smoke bool
	// CPU is the CPU single-core measurements are pinned to; 0 means the
	// last CPU (CPU 0 takes most device interrupts, so it is never the
	// default, and cannot be chosen).
	CPU int
	// ProfileDir, if set, receives Go CPU profiles (pprof) of the Go
	// parts: tablegen.pprof, control_commit.pprof, control_change.pprof.
	ProfileDir string
	// TracesDir holds the captures of the flow-hash study (default:
	// traces.FindDir from the working directory).
	TracesDir string
	// PktTables are the tables the pkt part measures side by side; the
	// forwarder (harness.TableXLB) is always first. Default: the forwarder
	// and the stateless floor (harness.TableNone).
	PktTables []harness.Table
	// PktScenarios restricts the pkt part (and its stage breakdown) to
	// these scenarios, and PktRuns sets its runs per figure: to run one
	// scenario long enough to profile it (perf record -e cpu-clock).
	PktScenarios []harness.Scenario
	PktRuns      int
	// PktBuilds are forwarder object files of other builds (an
	// internal/datapath/xlb_bpfel.o) that the pkt part measures side by
	// side with this build's forwarder, instead of the tables and the stage
	// breakdown: an A/B of a data-plane change (harness.MeasureBuilds);
	// the sched part measures the first one's schedulers beside this
	// build's (sched.go).
	PktBuilds []string
	// Stdout receives the figures as they are measured and progress
	// (default os.Stdout).
	Stdout io.Writer
	// Verbose also prints every run of the per-packet harness.
	Verbose bool
}

// ErrUnknownPart is wrapped when a part name is not one of Parts.
var ErrUnknownPart = errors.New("unknown part")

// runner is one Run.
type runner struct {
	o   Options
	r   *Report
	out io.Writer
	cur *PartRun
}

// Run runs parts (names of Parts, or "all") in Parts order and writes the
// report (report.json, report.md, plots) into o.Out, also when parts
// fail: a failed part is recorded in Report.Parts and its error joined
// into the returned one. The context is checked between parts and
// between the runs of the Go parts.
func Run(ctx context.Context, parts []string, o Options) (*Report, error) {
	want, err := selectParts(parts)
	if err != nil {
		return nil, err
	}
	if o.Out == "" {
		o.Out = filepath.Join("bench", "out")
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.CPU == 0 {
		o.CPU = runtime.NumCPU() - 1
	}
	if o.CPU < 0 || o.CPU >= runtime.NumCPU() {
		return nil, fmt.Errorf("cpu %d: this machine has cpus 0-%d", o.CPU, runtime.NumCPU()-1)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	if o.ProfileDir != "" {
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	b := &runner{o: o, out: o.Stdout, r: &Report{Machine: machine(), Smoke: o.Smoke, md: map[string]string{}, notes: map[string]string{}}}
	m := b.r.Machine
	mode := "full size"
	if o.Smoke {
		mode = "SMOKE (short runs: not figures to quote)"
	}
	b.printf("xlb-bench: %s; %s (family %s model %s), %d CPUs, kernel %s, %s; pinned CPU %d; load average %.2f; %s\n",
		strings.Join(want, " "), m.CPUModel, m.CPUFamily, m.CPUModelID, m.CPUs, m.Kernel, m.GoVersion, o.CPU, m.LoadAvg, mode)
	start := time.Now()
	var errs []error
	for _, name := range want {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		errs = append(errs, b.part(ctx, name))
	}
	b.r.computeTargets()
	if p, err := b.plotTargets(); err != nil && !errors.Is(err, errNoTargets) {
		errs = append(errs, fmt.Errorf("targets plot: %w", err))
	} else if err == nil {
		b.r.Plots = append(b.r.Plots, p)
	}
	b.printf("\nall parts: %s\n", time.Since(start).Round(time.Second))
	b.printTargets()
	if err := b.r.writeJSON(filepath.Join(o.Out, "report.json")); err != nil {
		errs = append(errs, err)
	}
	if err := os.WriteFile(filepath.Join(o.Out, "report.md"), []byte(b.r.Markdown(time.Since(start))), 0o644); err != nil {
		errs = append(errs, err)
	}
	b.printf("wrote %s and %s\n", filepath.Join(o.Out, "report.json"), filepath.Join(o.Out, "report.md"))
	return b.r, errors.Join(errs...)
}

func selectParts(parts []string) ([]string, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("no part given: one or more of %s, or all", strings.Join(Parts, ", "))
	}
	set := map[string]bool{}
	for _, p := range parts {
		if p == "all" {
			return slices.Clone(Parts), nil
		}
		if !slices.Contains(Parts, p) {
			return nil, fmt.Errorf("%w %q: one of %s, or all", ErrUnknownPart, p, strings.Join(Parts, ", "))
		}
		set[p] = true
	}
	var out []string
	for _, p := range Parts {
		if set[p] {
			out = append(out, p)
		}
	}
	return out, nil
}

// errUnavailable is wrapped by a part that cannot run on this build or
// machine (recorded as StatusUnavailable).
var errUnavailable = errors.New("not available")

func (b *runner) part(ctx context.Context, name string) error {
	b.printf("\n== %s\n", name)
	pr := PartRun{Name: name}
	b.cur = &pr
	start := time.Now()
	var err error
	switch name {
	case "pkt":
		err = b.pkt()
	case "sched":
		err = b.sched() // sched.go
	case "tput":
		err = b.tput(ctx)
	case "tablegen":
		err = b.tablegen(ctx)
	case "balance":
		err = b.balance()
	case "flowhash":
		err = b.flowhash()
	case "conntrack":
		err = b.conntrack()
	case "control":
		err = b.control(ctx)
	case "sync":
		err = b.syncPart() // sync.go
	case "kube":
		err = b.kubePart(ctx) // kube.go
	case "scale":
		err = b.scale(ctx) // scale.go
	}
	pr.Seconds = math.Round(time.Since(start).Seconds()*10) / 10
	pr.LoadAvg = loadAvg()
	switch {
	case err == nil:
		pr.Status = StatusOK
	case errors.Is(err, errUnavailable):
		pr.Status, pr.Error = StatusUnavailable, err.Error()
		err = nil
	default:
		pr.Status, pr.Error = StatusFailed, err.Error()
		err = fmt.Errorf("%s: %w", name, err)
	}
	b.r.Parts = append(b.r.Parts, pr)
	b.cur = nil
	switch pr.Status {
	case StatusFailed:
		b.printf("%s: FAILED: %s\n", name, pr.Error)
	case StatusUnavailable:
		b.printf("%s: %s\n", name, pr.Error)
	}
	b.printf("(%s: %.1f s; load average %.2f)\n", name, pr.Seconds, pr.LoadAvg)
	return err
}

// note records a remark on the current part (shown in the report).
func (b *runner) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if b.cur != nil {
		b.cur.Notes = append(b.cur.Notes, s)
	}
	b.printf("  note: %s\n", s)
}

func (b *runner) printf(format string, args ...any) { fmt.Fprintf(b.out, format, args...) }

// put records figure key ("group.key") and prints it, with its target if
// it has one; detail is printed after the value.
func (b *runner) put(key string, v float64, unit, detail string) {
	b.r.set(key, v)
	line := fmt.Sprintf("  %-44s %12s %-4s", key, fmtNum(v), unit)
	if detail != "" {
		line += "  " + detail
	}
	if t, ok := targetFor(key); ok {
		t = t.evaluate(v)
		verdict := "met"
		if !*t.Met {
			verdict = "MISSED"
		}
		line += fmt.Sprintf("  [target %s %s %s: ratio %.2f, %s]", t.bound(), fmtNum(t.Target), t.Unit, *t.Ratio, verdict)
	}
	b.printf("%s\n", line)
}

func (t Target) bound() string {
	if t.AtMost {
		return "≤"
	}
	return "≥"
}

// fmtNum prints v with about four significant digits, without trailing
// zeros.
func fmtNum(v float64) string {
	a := math.Abs(v)
	if a >= 1000 || a == 0 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	dec := 3 - int(math.Floor(math.Log10(a)))
	s := strconv.FormatFloat(v, 'f', dec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

func (b *runner) printTargets() {
	b.printf("\ntargets (ratio = measured / target):\n")
	for _, t := range b.r.Targets {
		if t.Measured == nil {
			b.printf("  %-34s %s %-8s  not measured\n", t.Key, t.bound(), fmtNum(t.Target)+" "+t.Unit)
			continue
		}
		verdict := "met"
		if !*t.Met {
			verdict = "MISSED"
		}
		b.printf("  %-34s %s %-8s  measured %-10s ratio %5.2f  %s\n", t.Key, t.bound(),
			fmtNum(t.Target)+" "+t.Unit, fmtNum(*t.Measured)+" "+t.Unit, *t.Ratio, verdict)
	}
}

// profile runs fn under the Go CPU profiler when o.ProfileDir is set,
// writing ProfileDir/name.pprof.
func (b *runner) profile(name string, fn func() error) error {
	if b.o.ProfileDir == "" {
		return fn()
	}
	path := filepath.Join(b.o.ProfileDir, name+".pprof")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	err = fn()
	pprof.StopCPUProfile()
	if b.r.Details.Profiles == nil {
		b.r.Details.Profiles = map[string]string{}
	}
	b.r.Details.Profiles[name] = path
	b.printf("  profile: %s (go tool pprof -top %s)\n", path, path)
	return err
}

// targetNote records a note for the target of key.
func (b *runner) targetNote(key, format string, args ...any) {
	b.r.notes[key] = fmt.Sprintf(format, args...)
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
