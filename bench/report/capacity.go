package report

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/plan"
	"github.com/xlbproject/xlb/internal/testenv/genconfig"
)

// The capacity the default node.max_services and node.max_backends must
// hold: 20,000 services of 15 backends each, small tables.
const (
	capServices = 20000
	capBackends = 15
	capTable    = 251
)

// Capacity is the capacity run: one cold commit of 20,000 services into a
// forwarder sized by the default capacities, one backend's weight change,
// and the memory both sides hold.
type Capacity struct {
	Services    int           `json:"services"`
	Backends    int           `json:"backends_per_service"`
	TableSize   uint32        `json:"table_size"`
	MaxServices uint32        `json:"max_services"`
	MaxBackends uint32        `json:"max_backends"`
	Cold        ColdCommit    `json:"cold_commit"`
	Change      ChangeResult  `json:"change"`
	MapsBytes   uint64        `json:"maps_bytes"`   // memlock of the pinned maps
	TablesBytes uint64        `json:"tables_bytes"` // the services' inner maps
	RSS         procMemory    `json:"rss"`
	RSSBefore   procMemory    `json:"rss_before"`
	LoadTime    time.Duration `json:"load_ns"`
}

// procMemory is this process's resident memory (/proc/self/status).
type procMemory struct {
	RSS, Anon, File, Shmem uint64 // bytes
}

// capacity measures the default capacities at 20,000 services x 15
// backends (M = 251; 2,000 services with -smoke) with the steps xlbd takes (parse, plan, commit; see
// control): the cold commit, one backend's weight change, the kernel
// memory of the maps and tables, and the resident memory of the process
// that parsed, planned and committed (what xlbd holds: the config, the
// planner's memory, the state, the mapped tables).
func (b *runner) capacity(ctx context.Context) error {
	services := capServices
	if b.o.Smoke {
		services /= 10
	}
	yaml := genconfig.Control(services, capBackends, capTable, -1, 0)
	cfg, err := config.Parse(yaml, "capacity.yaml")
	if err != nil {
		return err
	}
	c := Capacity{Services: services, Backends: capBackends, TableSize: capTable,
		MaxServices: cfg.Node.MaxServices, MaxBackends: cfg.Node.MaxBackends}
	runtime.GC()
	debug.FreeOSMemory()
	c.RSSBefore = readProcMemory()
	dir, err := privatePinDir("cap")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	t0 := time.Now()
	dp, err := datapath.Load(datapath.Options{Interface: "lo", PinDir: dir, ConntrackEntries: cfg.Node.ConntrackEntries,
		MaxServices: c.MaxServices, MaxReals: c.MaxBackends, TableBytes: uint64(services) * datapath.TableBytes(capTable),
		Logger: quietLogger()})
	if err != nil {
		return err
	}
	defer dp.Close()
	c.LoadTime = time.Since(t0)
	lim := plan.Limits{MaxServices: c.MaxServices + 1, MaxReals: c.MaxBackends + 1}
	cold, planner, st, parsed, err := coldCommitN(dp, yaml, lim, services, runtime.GOMAXPROCS(0))
	if err != nil {
		return err
	}
	c.Cold = cold
	runtime.GC()
	c.RSS = readProcMemory()
	if c.MapsBytes, err = pinnedMemlock(dir); err != nil {
		return err
	}
	for _, s := range st.Services {
		c.TablesBytes += datapath.TableBytes(uint32(len(s.Table)))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	svc, be := services/2, capBackends/3
	base, weight := parsed.Desired(), parsed.Desired()
	weight.Services[svc].Pools[0].Backends[be].Weight = 50
	runs := 21
	if b.o.Smoke {
		runs = 3
	}
	c.Change, _, err = changeRunsOf(dp, planner, st, weight, base, nil, runs)
	if err != nil {
		return fmt.Errorf("change: %w", err)
	}
	c.Change.Kind = "weight 100 -> 50"
	b.putCapacity(c)
	return nil
}

func (b *runner) putCapacity(c Capacity) {
	b.printf("  %d services x %d backends, M = %d; node.max_services %d, node.max_backends %d (defaults); load %.0f ms\n",
		c.Services, c.Backends, c.TableSize, c.MaxServices, c.MaxBackends, ms(c.LoadTime))
	b.put("control.capacity_cold_commit_s", c.Cold.TotalS, "s", fmt.Sprintf("parse %.0f + plan %.0f + apply %.0f ms",
		c.Cold.ParseMs, c.Cold.PlanMs, c.Cold.ApplyMs))
	b.put("control.capacity_change_ms", c.Change.TotalMs, "ms", fmt.Sprintf("one weight: plan %.2f + apply %.2f ms (median of %d)",
		c.Change.PlanMs, c.Change.ApplyMs, c.Change.Runs))
	b.put("control.capacity_maps_mib", mib(c.MapsBytes), "MiB", "the pinned maps' memlock (fdinfo), at the default sizes")
	b.put("control.capacity_tables_mib", mib(c.TablesBytes), "MiB", fmt.Sprintf("%d tables of M = %d (a page of entries and one of header each)", c.Services, c.TableSize))
	b.put("control.capacity_rss_mib", mib(c.RSS.RSS), "MiB", fmt.Sprintf("resident, after the commit: anon %.0f, file %.0f, shmem %.0f MiB; %.0f MiB before the parse",
		mib(c.RSS.Anon), mib(c.RSS.File), mib(c.RSS.Shmem), mib(c.RSSBefore.RSS)))
	b.r.Details.Capacity = &c
	b.r.md["control"] += capacityMarkdown(c)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func capacityMarkdown(c Capacity) string {
	var s strings.Builder
	fmt.Fprintf(&s, "\n**Capacity.** %d services × %d backends (M = %d: %d (service, backend) pairs) in a forwarder sized by the "+
		"default `node.max_services` (%d) and `node.max_backends` (%d), with the same steps:\n\n", c.Services, c.Backends,
		c.TableSize, c.Services*c.Backends, c.MaxServices, c.MaxBackends)
	s.WriteString("| what | figure |\n|---|---:|\n")
	fmt.Fprintf(&s, "| cold commit: parse / plan / apply | %.0f / %.0f / %.0f ms (%.2f s) |\n", c.Cold.ParseMs, c.Cold.PlanMs, c.Cold.ApplyMs, c.Cold.TotalS)
	fmt.Fprintf(&s, "| one backend's weight change: plan + apply, median (max) of %d | %.2f + %.2f ms (%.2f) |\n",
		c.Change.Runs, c.Change.PlanMs, c.Change.ApplyMs, c.Change.MaxMs)
	fmt.Fprintf(&s, "| kernel memory of the maps (memlock) | %.1f MiB |\n", mib(c.MapsBytes))
	fmt.Fprintf(&s, "| kernel memory of the tables | %.1f MiB |\n", mib(c.TablesBytes))
	fmt.Fprintf(&s, "| resident memory of the committing process (anon / file / shmem) | %.0f MiB (%.0f / %.0f / %.0f); %.0f MiB before |\n",
		mib(c.RSS.RSS), mib(c.RSS.Anon), mib(c.RSS.File), mib(c.RSS.Shmem), mib(c.RSSBefore.RSS))
	return s.String()
}

// pinnedMemlock sums the memlock of the maps pinned under dir.
func pinnedMemlock(dir string) (uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum uint64
	for _, e := range ents {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, e.Name()), nil)
		if err != nil {
			continue // not a map
		}
		ml, err := fdinfoMemlock(m.FD())
		m.Close()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", e.Name(), err)
		}
		sum += ml
	}
	return sum, nil
}

func readProcMemory() procMemory {
	var p procMemory
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return p
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		var kb uint64
		fmt.Sscan(f[1], &kb)
		switch f[0] {
		case "VmRSS:":
			p.RSS = kb << 10
		case "RssAnon:":
			p.Anon = kb << 10
		case "RssFile:":
			p.File = kb << 10
		case "RssShmem:":
			p.Shmem = kb << 10
		}
	}
	return p
}
