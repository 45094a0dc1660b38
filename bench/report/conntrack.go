package report

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/bench/harness"
	"github.com/xlbproject/xlb/internal/datapath"
)

// MapMemory is the kernel's own accounting of the forwarder's connection
// table (xlb_ct) for one requested size.
type MapMemory struct {
	// Requested is datapath.Options.ConntrackEntries (per CPU); Slots the
	// flows each CPU's slice can hold (8 ways per bucket, a power of two of
	// buckets), CPUs the possible CPUs (one slice each).
	Requested uint32 `json:"requested_per_cpu"`
	Slots     uint64 `json:"slots_per_cpu"`
	CPUs      int    `json:"cpus"`
	// Memlock is xlb_ct's "memlock:" in /proc/self/fdinfo (bytes), the
	// kernel's map memory accounting; OtherMaps the same summed over the
	// forwarder's other maps (no service applied).
	Memlock   uint64 `json:"memlock_bytes"`
	OtherMaps uint64 `json:"other_maps_memlock_bytes"`
}

// BytesPerFlow is Memlock divided by the flows the table can hold.
func (m MapMemory) BytesPerFlow() float64 {
	return float64(m.Memlock) / float64(m.Slots*uint64(m.CPUs))
}

// flows20M is the concurrent flow count of the memory target.
const flows20M = 20_000_000

// ctWays is the number of ways of a conntrack bucket (bpf/select.h).
const ctWays = 8

// conntrack measures what a tracked flow costs in memory (kernel
// accounting), the memory of a table for 20 M flows, and the per-packet
// cost of a full table at the largest size the harness supports.
func (b *runner) conntrack() error {
	mm, err := ctMemory(1 << 20)
	if err != nil {
		return err
	}
	b.r.Details.Memory = append(b.r.Details.Memory, mm)
	b.printf("  xlb_ct with %d entries per CPU requested: %d slots per CPU x %d CPUs, memlock %d bytes (fdinfo)\n",
		mm.Requested, mm.Slots, mm.CPUs, mm.Memlock)
	b.put("conntrack.bytes_per_flow", mm.BytesPerFlow(), "B", "memlock / (slots per CPU x CPUs)")
	b.r.set("conntrack.memlock_bytes_1m_per_cpu", float64(mm.Memlock))
	b.targetNote("conntrack.bytes_per_flow", "xlb_ct memlock %d B for %d × %d slots (8-byte ways, 64-byte buckets)", mm.Memlock, mm.CPUs, mm.Slots)
	b.r.set("conntrack.other_maps_kib", float64(mm.OtherMaps)/(1<<10))

	// 20 M flows: RSS spreads flows over the CPUs, each CPU tracks its own
	// in its slice, so each slice is sized for 20M / CPUs.
	per := uint32((flows20M + mm.CPUs - 1) / mm.CPUs)
	big, err := ctMemory(per)
	if err != nil {
		return fmt.Errorf("table for 20M flows: %w", err)
	}
	b.r.Details.Memory = append(b.r.Details.Memory, big)
	capacity := big.Slots * uint64(big.CPUs)
	load := float64(flows20M) / float64(capacity)
	lost := overflowShare(load*ctWays, ctWays)
	b.printf("  20M flows over %d CPUs: %d requested per CPU -> %d slots per CPU (power of two of 8-way buckets), %d in all, load %.2f\n",
		big.CPUs, per, big.Slots, capacity, load)
	b.put("conntrack.mib_for_20m_flows", float64(big.Memlock)/(1<<20), "MiB", fmt.Sprintf("memlock of xlb_ct sized for 20M flows (%.1f B per flow held)", float64(big.Memlock)/flows20M))
	b.r.set("conntrack.capacity_for_20m_flows", float64(capacity))
	b.targetNote("conntrack.mib_for_20m_flows", "%d CPUs × %d slots (20M/CPUs rounded up to a power of two of buckets), load %.2f; %.1f%% of flows would find their bucket full",
		big.CPUs, big.Slots, load, 100*lost)
	b.r.set("conntrack.load_at_20m_flows", load)
	b.put("conntrack.share_not_fitting_at_20m", lost, "", "expected share of flows whose bucket is full at that load (Poisson, 8 ways): tracked by evicting the idlest way")

	// Per-packet cost with a full table, at the largest size the harness
	// takes (harness.Options caps Entries at 1<<21 per CPU).
	o := b.pktOptions()
	o.Entries = 1 << 21
	o.Scenarios = []harness.Scenario{harness.TCPHit4, harness.NewFlowFull, harness.Cycled}
	b.printf("  per-packet cost at %d entries per CPU (the harness's largest; the 20M sizing is %d per CPU), %d runs of %d packets\n",
		o.Entries, big.Slots, o.Runs, o.Repeat)
	res, err := harness.MeasureForwarder(o)
	if err != nil {
		return fmt.Errorf("lookup cost: %w", err)
	}
	b.r.Details.Conntrack = []harness.Results{res}
	b.r.set("conntrack.lookup_entries_per_cpu", float64(o.Entries))
	b.r.set("conntrack.lookup_table_fill", res.Fill)
	for _, f := range res.Figures {
		key := map[harness.Scenario]string{harness.TCPHit4: "hit_ns_2m_per_cpu", harness.NewFlowFull: "new_flow_full_ns_2m_per_cpu",
			harness.Cycled: "cycled_100k_ns_2m_per_cpu"}[f.Scenario]
		b.put("conntrack."+key, f.Ns, "ns", fmt.Sprintf("best %.0f; table %.4f full", f.Best, res.Fill))
	}
	b.note("the per-packet cost once full is measured at %d entries per CPU (16 MiB per slice), the harness's limit, not at the %d per CPU of the 20M sizing (128 MiB per slice): "+
		"a random bucket line is a cache miss at both sizes; the larger slice adds TLB misses (4 KiB pages), not measured here", o.Entries, big.Slots)
	b.r.md["conntrack"] = conntrackMarkdown(b.r.Details.Memory, res)
	return nil
}

// ctMemory loads the forwarder with perCPU conntrack entries per CPU into
// a private pin directory (removed afterwards) and reads the kernel's
// memory accounting of its maps.
func ctMemory(perCPU uint32) (MapMemory, error) {
	if err := datapath.EnsureBPFFS(); err != nil {
		return MapMemory{}, err
	}
	dir, err := privatePinDir("ct")
	if err != nil {
		return MapMemory{}, err
	}
	defer os.RemoveAll(dir)
	dp, err := datapath.Load(datapath.Options{Interface: "lo", PinDir: dir, ConntrackEntries: perCPU,
		MaxServices: 16, MaxReals: 64, Logger: quietLogger()})
	if err != nil {
		return MapMemory{}, err
	}
	defer dp.Close()
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return MapMemory{}, err
	}
	mm := MapMemory{Requested: perCPU, CPUs: ncpu, Slots: uint64(1) << datapath.CTGeometry(perCPU) * ctWays}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return MapMemory{}, err
	}
	for _, e := range ents {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, e.Name()), nil)
		if err != nil {
			continue // not a map (a link)
		}
		ml, err := fdinfoMemlock(m.FD())
		if err == nil && e.Name() == "xlb_ct" {
			mm.Memlock = ml
			if got := uint64(m.MaxEntries()) * ctWays; got != mm.Slots*uint64(ncpu) {
				err = fmt.Errorf("xlb_ct holds %d ways, want %d", got, mm.Slots*uint64(ncpu))
			}
		} else if err == nil {
			mm.OtherMaps += ml
		}
		m.Close()
		if err != nil {
			return MapMemory{}, fmt.Errorf("%s: %w", e.Name(), err)
		}
	}
	if mm.Memlock == 0 {
		return MapMemory{}, errors.New("xlb_ct not found among the pinned maps")
	}
	return mm, nil
}

// fdinfoMemlock returns the "memlock:" field of /proc/self/fdinfo/fd: the
// kernel's accounting of a BPF map's memory (bpf_map_memory_usage).
func fdinfoMemlock(fd int) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "memlock:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("no memlock field in fdinfo")
}

// overflowShare is the expected share of flows that find their bucket
// full when flows land in buckets of `ways` ways at random, lambda flows
// per bucket on average: E[max(X - ways, 0)] / lambda for X ~ Poisson.
func overflowShare(lambda float64, ways int) float64 {
	if lambda <= 0 {
		return 0
	}
	p := math.Exp(-lambda) // P(X = 0)
	below := 0.0           // E[min(X, ways)]
	cum := 0.0
	for k := 0; k < ways; k++ {
		below += float64(k) * p
		cum += p
		p *= lambda / float64(k+1)
	}
	below += float64(ways) * (1 - cum)
	return (lambda - below) / lambda
}

// privatePinDir returns a fresh directory name under /sys/fs/bpf.
func privatePinDir(what string) (string, error) {
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", err
	}
	return filepath.Join("/sys/fs/bpf", "xlb-bench-"+what+"-"+hex.EncodeToString(rnd[:])), nil
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func conntrackMarkdown(mem []MapMemory, res harness.Results) string {
	var s strings.Builder
	s.WriteString("Memory from the kernel's own accounting: `memlock:` in `/proc/self/fdinfo/<fd>` of the forwarder's `xlb_ct` " +
		"after `datapath.Load` (a plain ARRAY of 64-byte buckets, 8 ways of 8 bytes, one slice per possible CPU).\n\n")
	s.WriteString("| requested per CPU | slots per CPU | CPUs | xlb_ct memlock | bytes per flow slot | the forwarder's other maps (no service) |\n|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range mem {
		fmt.Fprintf(&s, "| %d | %d | %d | %d B (%.1f MiB) | %.3f | %.0f KiB |\n", m.Requested, m.Slots, m.CPUs,
			m.Memlock, float64(m.Memlock)/(1<<20), m.BytesPerFlow(), float64(m.OtherMaps)/(1<<10))
	}
	fmt.Fprintf(&s, "\nPer packet with a full table at %d entries per CPU (%.4f full before new_flow_full), ns/packet, wrapper subtracted:\n\n",
		res.Entries, res.Fill)
	s.WriteString(harness.Markdown([]harness.Results{res}))
	return s.String()
}
