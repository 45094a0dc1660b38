package report

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/xlbproject/xlb/bench/stats"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/plan"
	"github.com/xlbproject/xlb/internal/state"
	"github.com/xlbproject/xlb/internal/testenv/genconfig"
)

// The control-plane scale of the performance targets (docs/DESIGN.md):
// 3,000 services of 30 backends each.
const (
	ctlServices = 3000
	ctlBackends = 30
	ctlTable    = 16381
	// ctlMaxReals: the 90,000 (service, backend) pairs fit.
	ctlMaxReals = 1 << 18
)

// ColdCommit is one file -> data plane commit of the whole config into an
// empty, freshly loaded forwarder.
type ColdCommit struct {
	Workers int     `json:"workers"`  // goroutines building tables (plan.Planner.SetWorkers)
	ParseMs float64 `json:"parse_ms"` // config.Parse (decode + validate)
	PlanMs  float64 `json:"plan_ms"`  // Config.Desired + Planner.Plan (3,000 Maglev tables)
	ApplyMs float64 `json:"apply_ms"` // datapath.Commit
	TotalS  float64 `json:"total_s"`
	datapath.ApplyStats
	plan.PlanStats
	ConfigBytes int `json:"config_bytes"`
}

// ChangeResult is one kind of single-backend change, planned with the
// Planner that made the previous state and applied to the loaded
// forwarder holding it: medians over runs that alternate the change and
// its reverse.
type ChangeResult struct {
	Kind    string  `json:"kind"`
	Runs    int     `json:"runs"`
	ParseMs float64 `json:"parse_ms,omitempty"` // only for the reload of the whole file
	PlanMs  float64 `json:"plan_ms"`
	ApplyMs float64 `json:"apply_ms"`
	TotalMs float64 `json:"total_ms"`
	MaxMs   float64 `json:"max_ms"`
	// What the last run did.
	TablesBuilt    int `json:"tables_built"`
	TablesPatched  int `json:"tables_patched"`
	TablesReplaced int `json:"tables_replaced"`
	EntriesWritten int `json:"entries_written"`
	RealsWritten   int `json:"reals_written"`
}

// control measures the control plane at 3,000 services x 30 backends
// (M = 16381): a config file to a loaded forwarder's maps, and one
// backend's weight, state or health change to the maps.
//
// The controller's own Commit is not used: it also starts health probes
// of every backend and installs kernel neighbour entries for their next
// hops, which a benchmark must not do to this machine. The steps timed are
// the ones Commit makes for the data plane: config.Parse,
// Config.Desired, plan.Planner.Plan (the controller's, which reuses unchanged
// tables) and datapath.Commit.
func (b *runner) control(ctx context.Context) error {
	yaml := genconfig.Control(ctlServices, ctlBackends, ctlTable, -1, 0)
	reps, changeRuns := 4, 21
	if b.o.Smoke {
		reps, changeRuns = 1, 3
	}
	all := runtime.GOMAXPROCS(0)
	b.printf("  %d services x %d backends, M = %d, config of %d KiB; %d cold commits with %d table workers and %d with 1, alternating; %d runs per change\n",
		ctlServices, ctlBackends, ctlTable, len(yaml)>>10, reps, all, reps, changeRuns)
	lim := plan.Limits{MaxServices: 4096, MaxReals: ctlMaxReals}
	var (
		kept    *ctlInstance
		cold    []ColdCommit
		planner *plan.Planner
		state   *state.State
		cfg     *config.Config
	)
	defer func() {
		if kept != nil {
			kept.close()
		}
	}()
	err := b.profile("control_commit", func() error {
		for rep := range 2 * reps {
			if err := ctx.Err(); err != nil {
				return err
			}
			inst, err := newCtlInstance()
			if err != nil {
				return err
			}
			workers := all
			if rep%2 == 1 {
				workers = 1
			}
			c, p, st, parsed, err := coldCommitN(inst.dp, yaml, lim, ctlServices, workers)
			if err != nil {
				inst.close()
				return err
			}
			cold = append(cold, c)
			b.printf("  cold commit %d, %d workers: parse %.0f ms, plan %.0f ms (%d tables built), apply %.0f ms (%d tables, %d reals written): %.3f s\n",
				rep+1, workers, c.ParseMs, c.PlanMs, c.TablesBuilt, c.ApplyMs, c.TablesReplaced, c.RealsWritten, c.TotalS)
			if rep == 2*reps-2 { // the last with every worker
				kept, planner, state, cfg = inst, p, st, parsed
			} else {
				inst.close()
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.r.Details.ControlCold = cold
	b.coldFigures(cold, all)
	b.r.set("control.reals", float64(cold[0].PlanStats.Reals))
	b.r.set("control.config_kib", float64(len(yaml))/1024)

	// One backend of one service in the middle of the file.
	svc, be := ctlServices/2, ctlBackends/3
	down := genconfig.BackendAddr(svc, be)
	var changes []ChangeResult
	err = b.profile("control_change", func() error {
		base := cfg.Desired()
		weight := changeBackend(base, svc, be, func(b *config.Backend) { b.Weight = 50 })
		drain := changeBackend(base, svc, be, func(b *config.Backend) { b.Drain = true })
		unhealthy := func(bk config.Backend) bool { return bk.Addr != down }
		for _, k := range []struct {
			kind     string
			to, back *config.Desired
			hto      func(config.Backend) bool
		}{
			{"weight 100 -> 50", weight, base, nil},
			{"state active -> drain", drain, base, nil},
			{"health up -> down", base, base, unhealthy},
		} {
			if err := ctx.Err(); err != nil {
				return err
			}
			cr, st, err := changeRunsOf(kept.dp, planner, state, k.to, k.back, k.hto, changeRuns)
			if err != nil {
				return fmt.Errorf("%s: %w", k.kind, err)
			}
			state = st
			cr.Kind = k.kind
			changes = append(changes, cr)
		}
		// The same weight change through the whole file (SIGHUP reload):
		// parse of 3,000 services included.
		yamlB := genconfig.Control(ctlServices, ctlBackends, ctlTable, svc*ctlBackends+be, 50)
		cr, st, err := reloadRuns(kept.dp, planner, state, yamlB, yaml, max(changeRuns/4, 1))
		if err != nil {
			return fmt.Errorf("reload: %w", err)
		}
		state = st
		changes = append(changes, cr)
		return nil
	})
	if err != nil {
		return err
	}
	b.r.Details.ControlDelta = changes
	for i, c := range changes {
		detail := fmt.Sprintf("%s: plan %.2f + apply %.2f ms; %d table built, %d patched, %d replaced, %d entries and %d reals written",
			c.Kind, c.PlanMs, c.ApplyMs, c.TablesBuilt, c.TablesPatched, c.TablesReplaced, c.EntriesWritten, c.RealsWritten)
		switch i {
		case 0:
			b.put("control.one_backend_change_ms", c.TotalMs, "ms", detail)
			b.r.set("control.one_backend_change_entries_written", float64(c.EntriesWritten))
			b.targetNote("control.one_backend_change_ms", "plan %.0f ms + apply %.0f ms; %d table rebuilt, patched in place: %d entries written",
				c.PlanMs, c.ApplyMs, c.TablesBuilt, c.EntriesWritten)
			b.r.set("control.one_backend_change_plan_ms", c.PlanMs)
			b.r.set("control.one_backend_change_apply_ms", c.ApplyMs)
			if c.TablesBuilt != 1 || c.TablesPatched != 1 || c.TablesReplaced != 0 {
				b.note("a weight change should build one table and patch it in place; it built %d, patched %d, replaced %d",
					c.TablesBuilt, c.TablesPatched, c.TablesReplaced)
			}
		case 1:
			b.put("control.drain_change_ms", c.TotalMs, "ms", detail)
		case 2:
			b.put("control.health_change_ms", c.TotalMs, "ms", detail)
		case 3:
			b.put("control.reload_one_change_ms", c.TotalMs, "ms", fmt.Sprintf("parse %.0f ms + ", c.ParseMs)+detail)
		}
	}
	b.r.md["control"] = controlMarkdown(cold, changes)
	kept.close()
	kept = nil
	return b.capacity(ctx) // capacity.go
}

// coldFigures records the cold commits' medians, with every worker (all)
// and with one.
func (b *runner) coldFigures(cold []ColdCommit, all int) {
	pick := func(workers int, f func(ColdCommit) float64) float64 {
		var v []float64
		for _, c := range cold {
			if c.Workers == workers {
				v = append(v, f(c))
			}
		}
		return stats.Median(v)
	}
	total := func(c ColdCommit) float64 { return c.TotalS }
	parse := func(c ColdCommit) float64 { return c.ParseMs }
	plan := func(c ColdCommit) float64 { return c.PlanMs }
	apply := func(c ColdCommit) float64 { return c.ApplyMs }
	b.put("control.apply_3000_services_s", pick(all, total), "s",
		fmt.Sprintf("%d table workers: parse %.0f + plan %.0f + apply %.0f ms (medians)", all, pick(all, parse), pick(all, plan), pick(all, apply)))
	b.put("control.apply_3000_services_1worker_s", pick(1, total), "s",
		fmt.Sprintf("1 table worker: parse %.0f + plan %.0f + apply %.0f ms (medians)", pick(1, parse), pick(1, plan), pick(1, apply)))
	b.targetNote("control.apply_3000_services_s", "%d workers, medians: parse %.0f ms, plan %.0f ms (3,000 Maglev tables), apply %.0f ms (3,000 tables, 90,000 reals); 1 worker in the same run: %.3f s (plan %.0f ms)",
		all, pick(all, parse), pick(all, plan), pick(all, apply), pick(1, total), pick(1, plan))
	b.r.set("control.parse_3000_services_ms", pick(all, parse))
	b.r.set("control.plan_3000_services_ms", pick(all, plan))
	b.r.set("control.plan_3000_services_1worker_ms", pick(1, plan))
	b.r.set("control.datapath_apply_3000_services_ms", pick(all, apply))
}

// changeBackend returns a copy of d in which backend be of service svc's
// first pool is changed by f, sharing every other pool with d, as the
// controller's runtime overrides make it (d is not changed).
func changeBackend(d *config.Desired, svc, be int, f func(*config.Backend)) *config.Desired {
	out := *d
	out.Services = slices.Clone(d.Services)
	s := &out.Services[svc]
	s.Pools = slices.Clone(s.Pools)
	s.Pools[0].Backends = slices.Clone(s.Pools[0].Backends)
	f(&s.Pools[0].Backends[be])
	return &out
}

// ctlInstance is a loaded forwarder in a private pin directory.
type ctlInstance struct {
	dp  *datapath.Datapath
	dir string
}

func newCtlInstance() (*ctlInstance, error) {
	if err := datapath.EnsureBPFFS(); err != nil {
		return nil, err
	}
	dir, err := privatePinDir("ctl")
	if err != nil {
		return nil, err
	}
	dp, err := datapath.Load(datapath.Options{Interface: "lo", PinDir: dir, ConntrackEntries: 1 << 14,
		MaxServices: 4096, MaxReals: ctlMaxReals, Logger: quietLogger()})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &ctlInstance{dp: dp, dir: dir}, nil
}

func (c *ctlInstance) close() {
	c.dp.Close()
	os.RemoveAll(c.dir)
}

// coldCommitN parses yaml (of n services), plans it with a new Planner
// (workers building tables) against dp's (empty) state and applies it.
func coldCommitN(dp *datapath.Datapath, yaml []byte, lim plan.Limits, n, workers int) (ColdCommit, *plan.Planner, *state.State, *config.Config, error) {
	c := ColdCommit{ConfigBytes: len(yaml), Workers: workers}
	t0 := time.Now()
	cfg, err := config.Parse(yaml, "bench.yaml")
	if err != nil {
		return c, nil, nil, nil, fmt.Errorf("parse: %w", err)
	}
	t1 := time.Now()
	p := plan.NewPlanner(lim)
	p.SetWorkers(workers)
	pl, err := p.Plan(dp.Snapshot(), plan.Input{Desired: cfg.Desired()})
	if err != nil {
		return c, nil, nil, nil, fmt.Errorf("plan: %w", err)
	}
	st, ps := pl.State, pl.Stats
	t2 := time.Now()
	as, err := dp.Commit(st, pl.Diff)
	if err != nil {
		return c, nil, nil, nil, fmt.Errorf("apply: %w", err)
	}
	t3 := time.Now()
	c.ParseMs, c.PlanMs, c.ApplyMs, c.TotalS = ms(t1.Sub(t0)), ms(t2.Sub(t1)), ms(t3.Sub(t2)), t3.Sub(t0).Seconds()
	c.ApplyStats, c.PlanStats = as, ps
	if ps.Services != n || as.TablesReplaced != n {
		return c, nil, nil, nil, fmt.Errorf("planned %d services, installed %d tables; want %d", ps.Services, as.TablesReplaced, n)
	}
	return c, p, st, cfg, nil
}

// changeRunsOf applies `to` and `back` alternately, runs times in all
// (with healthy hto for `to`, every backend healthy for `back`), timing
// each plan and apply. It returns the medians and the state in the maps.
func changeRunsOf(dp *datapath.Datapath, p *plan.Planner, cur *state.State, to, back *config.Desired,
	hto func(config.Backend) bool, runs int) (ChangeResult, *state.State, error) {
	var plans, apply, total []float64
	cr := ChangeResult{Runs: runs}
	for i := range runs {
		d, h := to, hto
		if i%2 == 1 {
			d, h = back, nil
		}
		t0 := time.Now()
		pl, err := p.Plan(cur, plan.Input{Desired: d, Healthy: h})
		if err != nil {
			return cr, cur, err
		}
		st, ps := pl.State, pl.Stats
		t1 := time.Now()
		as, err := dp.Commit(st, pl.Diff)
		if err != nil {
			return cr, cur, err
		}
		t2 := time.Now()
		cur = st
		plans, apply, total = append(plans, ms(t1.Sub(t0))), append(apply, ms(t2.Sub(t1))), append(total, ms(t2.Sub(t0)))
		cr.TablesBuilt, cr.TablesPatched, cr.TablesReplaced = ps.TablesBuilt, as.TablesPatched, as.TablesReplaced
		cr.EntriesWritten, cr.RealsWritten = as.TableEntries, as.RealsWritten
	}
	cr.PlanMs, cr.ApplyMs, cr.TotalMs, cr.MaxMs = stats.Median(plans), stats.Median(apply), stats.Median(total), maxOf(total)
	return cr, cur, nil
}

// reloadRuns is changeRunsOf for whole files: parse included.
func reloadRuns(dp *datapath.Datapath, p *plan.Planner, cur *state.State, to, back []byte, runs int) (ChangeResult, *state.State, error) {
	var parse, plans, apply, total []float64
	cr := ChangeResult{Kind: "whole file reloaded, one weight 100 -> 50", Runs: runs}
	for i := range runs {
		y := to
		if i%2 == 1 {
			y = back
		}
		t0 := time.Now()
		cfg, err := config.Parse(y, "bench.yaml")
		if err != nil {
			return cr, cur, err
		}
		t1 := time.Now()
		pl, err := p.Plan(cur, plan.Input{Desired: cfg.Desired()})
		if err != nil {
			return cr, cur, err
		}
		st, ps := pl.State, pl.Stats
		t2 := time.Now()
		as, err := dp.Commit(st, pl.Diff)
		if err != nil {
			return cr, cur, err
		}
		t3 := time.Now()
		cur = st
		parse, plans, apply = append(parse, ms(t1.Sub(t0))), append(plans, ms(t2.Sub(t1))), append(apply, ms(t3.Sub(t2)))
		total = append(total, ms(t3.Sub(t0)))
		cr.TablesBuilt, cr.TablesPatched, cr.TablesReplaced = ps.TablesBuilt, as.TablesPatched, as.TablesReplaced
		cr.EntriesWritten, cr.RealsWritten = as.TableEntries, as.RealsWritten
	}
	cr.ParseMs, cr.PlanMs, cr.ApplyMs, cr.TotalMs, cr.MaxMs = stats.Median(parse), stats.Median(plans), stats.Median(apply), stats.Median(total), maxOf(total)
	return cr, cur, nil
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func controlMarkdown(cold []ColdCommit, changes []ChangeResult) string {
	var s strings.Builder
	fmt.Fprintf(&s, "%d services × %d backends (a pool of its own each, TCP health check), M = %d: %d reals, %d table entries. "+
		"Timed: `config.Parse`, `Config.Desired` + `plan.Planner.Plan`, `datapath.Commit` into a forwarder loaded "+
		"(`datapath.Load`, private bpffs pin directory, not attached) for each cold commit.\n\n",
		ctlServices, ctlBackends, ctlTable, ctlServices*ctlBackends, ctlServices*ctlTable)
	s.WriteString("| cold commit | table workers | parse ms | plan ms | apply ms | total s | tables built | tables installed | reals written |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, c := range cold {
		fmt.Fprintf(&s, "| %d | %d | %.0f | %.0f | %.0f | %.3f | %d | %d | %d |\n", i+1, c.Workers, c.ParseMs, c.PlanMs, c.ApplyMs, c.TotalS,
			c.TablesBuilt, c.TablesReplaced, c.RealsWritten)
	}
	s.WriteString("\nOne backend (service 1500, backend 10) changes, then changes back, planned with the same Planner " +
		"against the state in the maps (medians; the whole-file reload includes parsing all 3,000 services):\n\n")
	s.WriteString("| change | runs | parse ms | plan ms | apply ms | total ms, median (max) | tables built / patched / replaced | entries written | reals written |\n|---|---:|---:|---:|---:|---:|---|---:|---:|\n")
	for _, c := range changes {
		parse := "—"
		if c.ParseMs > 0 {
			parse = fmt.Sprintf("%.0f", c.ParseMs)
		}
		fmt.Fprintf(&s, "| %s | %d | %s | %.2f | %.2f | %.2f (%.2f) | %d / %d / %d | %d | %d |\n", c.Kind, c.Runs, parse,
			c.PlanMs, c.ApplyMs, c.TotalMs, c.MaxMs, c.TablesBuilt, c.TablesPatched, c.TablesReplaced, c.EntriesWritten, c.RealsWritten)
	}
	return s.String()
}
