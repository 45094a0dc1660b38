package report

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/xlbproject/xlb/bench/stats"
	"github.com/xlbproject/xlb/bench/study"
	"github.com/xlbproject/xlb/internal/maglev"
	"golang.org/x/sys/unix"
)

// GenResult is the time maglev.Build takes for one table.
type GenResult struct {
	Key      string    `json:"key"` // table_gen_ms key
	N        int       `json:"n"`
	M        uint32    `json:"m"`
	Weighted bool      `json:"weighted"`
	MedianMs float64   `json:"median_ms"`
	MinMs    float64   `json:"min_ms"`
	RunsMs   []float64 `json:"runs_ms"`
}

// IncrementalResult is one backend's weight change in a table of N
// backends: the time to compute the new table (maglev.Build computes
// tables whole), and how many entries differ from the old one, which is
// what the datapath writes when it patches the table in place.
type IncrementalResult struct {
	N      int     `json:"n"`
	M      uint32  `json:"m"`
	Change string  `json:"change"` // e.g. "weight 100 -> 50"
	Ms     float64 `json:"median_ms"`
	// Changed is the number of entries whose backend differs; MustChange
	// the least any table could change: the changed backend's entry count
	// difference.
	Changed    int `json:"entries_changed"`
	MustChange int `json:"entries_must_change"`
}

// Weighted tables: weights 1..100 from a fixed seed.
const weightSeed = 0x786c622d77656967

// tablegen times maglev.Build on one pinned core (GOMAXPROCS 1, so the
// garbage collector shares the core), the median over repeated runs.
func (b *runner) tablegen(ctx context.Context) error {
	runs := 21
	if b.o.Smoke {
		runs = 3
	}
	type gcase struct {
		n        int
		m        uint32
		weighted bool
	}
	var cases []gcase
	for _, m := range []uint32{study.SmallM, study.LargeM} {
		for _, n := range []int{100, 1000, 10000} {
			cases = append(cases, gcase{n, m, false})
		}
		cases = append(cases, gcase{1000, m, true})
	}
	b.printf("  maglev.Build on CPU %d, GOMAXPROCS 1, %d runs per table (median), backends named like addresses (study.BackendNames)\n",
		b.o.CPU, runs)
	return b.profile("tablegen", func() error {
		return onOneCore(b.o.CPU, func() error {
			for _, c := range cases {
				if err := ctx.Err(); err != nil {
					return err
				}
				bs := backends(c.n, c.weighted)
				times, err := timeBuild(bs, c.m, runs)
				if err != nil {
					return err
				}
				g := GenResult{Key: fmt.Sprintf("m%d_n%d", c.m, c.n), N: c.n, M: c.m, Weighted: c.weighted,
					MedianMs: stats.Median(times), MinMs: slices.Min(times), RunsMs: times}
				if c.weighted {
					g.Key += "_weighted"
				}
				b.r.Details.TableGen = append(b.r.Details.TableGen, g)
				b.r.set("table_gen_min_ms."+g.Key, g.MinMs)
				b.put("table_gen_ms."+g.Key, g.MedianMs, "ms", fmt.Sprintf("fastest %s", fmtNum(g.MinMs)))
				b.targetNote("table_gen_ms."+g.Key, "fastest run %s ms", fmtNum(g.MinMs))
			}
			if err := b.versusReference(ctx, runs); err != nil {
				return err
			}
			for _, m := range []uint32{study.SmallM, study.LargeM} {
				for _, ch := range []struct {
					name string
					w    uint32
				}{{"weight 100 -> 50", 50}, {"weight 100 -> 200", 200}, {"weight 100 -> 0 (removed)", 0}} {
					if err := ctx.Err(); err != nil {
						return err
					}
					ir, err := incremental(1000, m, ch.w, runs)
					if err != nil {
						return err
					}
					ir.Change = ch.name
					b.r.Details.Incremental = append(b.r.Details.Incremental, ir)
					key := fmt.Sprintf("m%d_n1000_w%d", m, ch.w)
					b.put("table_incremental."+key+"_ms", ir.Ms, "ms", ch.name+": time to the new table")
					b.put("table_incremental."+key+"_entries", float64(ir.Changed), "",
						fmt.Sprintf("entries that differ (%.3f%% of M; at least %d must)", 100*float64(ir.Changed)/float64(m), ir.MustChange))
				}
			}
			b.r.md["tablegen"] = tablegenMarkdown(b.r.Details.TableGen, b.r.Details.TableGenReference, b.r.Details.Incremental, runs)
			return nil
		})
	})
}

// backends returns n backends named like addresses, weight 100 each or,
// if weighted, 1..100 at random (fixed seed).
func backends(n int, weighted bool) []maglev.Backend {
	r := rand.New(rand.NewPCG(weightSeed, uint64(n)))
	out := make([]maglev.Backend, n)
	for i, name := range study.BackendNames(n) {
		w := uint32(100)
		if weighted {
			w = 1 + r.Uint32N(100)
		}
		out[i] = maglev.Backend{Name: name, Weight: w}
	}
	return out
}

// timeBuild returns the time of runs builds (after one warm-up), in ms.
func timeBuild(bs []maglev.Backend, m uint32, runs int) ([]float64, error) {
	if _, err := maglev.Build(bs, m); err != nil {
		return nil, err
	}
	times := make([]float64, runs)
	for i := range times {
		start := time.Now()
		if _, err := maglev.Build(bs, m); err != nil {
			return nil, err
		}
		times[i] = ms(time.Since(start))
	}
	return times, nil
}

// incremental changes the weight of backend n/2 of n (weight 100 each) to
// w and returns the time to the new table and the entries that differ.
func incremental(n int, m, w uint32, runs int) (IncrementalResult, error) {
	bs := backends(n, false)
	old, err := maglev.Build(bs, m)
	if err != nil {
		return IncrementalResult{}, err
	}
	changed := slices.Clone(bs)
	name := changed[n/2].Name
	changed[n/2].Weight = w
	times, err := timeBuild(changed, m, runs)
	if err != nil {
		return IncrementalResult{}, err
	}
	nt, err := maglev.Build(changed, m)
	if err != nil {
		return IncrementalResult{}, err
	}
	before, after := 0, 0
	for i, c := range old.Counts() {
		if old.Backends[i].Name == name {
			before = c
		}
	}
	for i, c := range nt.Counts() {
		if nt.Backends[i].Name == name {
			after = c
		}
	}
	return IncrementalResult{N: n, M: m, Ms: stats.Median(times), Changed: maglev.Diff(old, nt), MustChange: abs(after - before)}, nil
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// onOneCore runs fn on a fresh OS thread pinned to cpu with GOMAXPROCS 1
// (restored afterwards); the thread is discarded when fn returns, so no
// other goroutine inherits its affinity.
func onOneCore(cpu int, fn func() error) error {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	runtime.GC()
	defer debug.FreeOSMemory()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			errc <- fmt.Errorf("pin to cpu %d: %w", cpu, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func tablegenMarkdown(gen []GenResult, refs []ReferenceResult, inc []IncrementalResult, runs int) string {
	var s strings.Builder
	fmt.Fprintf(&s, "maglev.Build (Pseudocode 1 with weights), one pinned core, GOMAXPROCS 1, median of %d runs after a warm-up (fastest in brackets).\n\n", runs)
	s.WriteString("| N | M | weights | ms, median (fastest) | paper |\n|---:|---:|---|---:|---:|\n")
	for _, g := range gen {
		w := "equal"
		if g.Weighted {
			w = "1–100 random"
		}
		paper := "—"
		if g.N == 1000 && !g.Weighted {
			if g.M == study.SmallM {
				paper = "1.8 ms"
			} else if g.M == study.LargeM {
				paper = "22.9 ms"
			}
		}
		fmt.Fprintf(&s, "| %d | %d | %s | %s (%s) | %s |\n", g.N, g.M, w, fmtNum(g.MedianMs), fmtNum(g.MinMs), paper)
	}
	s.WriteString("\nAgainst the paper's Pseudocode 1 written plainly (permutations computed on the fly, one modulo per probe, " +
		"the same hashes, so the same table), equal weights, the two timed alternately in the same run:\n\n")
	s.WriteString("| N | M | maglev.Build ms | reference ms | ratio |\n|---:|---:|---:|---:|---:|\n")
	for _, r := range refs {
		fmt.Fprintf(&s, "| %d | %d | %s | %s | %.3f |\n", r.N, r.M, fmtNum(r.BuildMs), fmtNum(r.ReferenceMs), r.Ratio)
	}
	s.WriteString("\nOne backend's weight changes (N = 1000, every weight 100): a new table is a whole `maglev.Build`; " +
		"the datapath then writes only the entries that differ (in place, `datapath.Commit`).\n\n")
	s.WriteString("| M | change | ms to the new table | entries that differ | share of M | least possible |\n|---:|---|---:|---:|---:|---:|\n")
	for _, r := range inc {
		fmt.Fprintf(&s, "| %d | %s | %s | %d | %.3f%% | %d |\n", r.M, r.Change, fmtNum(r.Ms), r.Changed,
			100*float64(r.Changed)/float64(r.M), r.MustChange)
	}
	return s.String()
}
