package datapath

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
)

// The maps' sizes come from the config (node.max_services,
// node.max_backends, node.conntrack_entries, node.fragment_table_entries):
// LoadSpec sets each map's max_entries before the maps are created, so one
// object serves every size. Before creating them Load estimates the memory
// they take and refuses, naming the key to lower, when the machine cannot
// hold it.

// MaxServicesLimit bounds Options.MaxServices (node.max_services): the VIP
// index and the per-service arrays stay under 100 MiB.
const MaxServicesLimit = 1 << 20

// sizeByCapacity sets the max_entries of the maps sized by services and
// reals. Arrays indexed by id hold id 0 (unused) too; xlb_tables has two
// slots per service id, the live table and its replacement (prepare.go).
func sizeByCapacity(spec *ebpf.CollectionSpec, o Options) {
	svcIDs, realIDs := o.MaxServices+1, o.MaxReals+1
	for name, n := range map[string]uint32{
		"xlb_vips":         o.MaxServices,
		"xlb_vip_addrs":    o.MaxServices,
		"xlb_vip_index":    vipBuckets(o.MaxServices),
		"xlb_vip_ents":     2*o.MaxServices + 1,
		"xlb_svc_stats":    svcIDs,
		"xlb_svc_sched":    svcIDs,
		"xlb_sched_cursor": svcIDs,
		"xlb_tables":       2 * svcIDs,
		"xlb_reals":        realIDs,
		"xlb_real_stats":   realIDs,
		"xlb_real_conns":   realIDs,
		"xlb_frags":        o.FragEntries,
	} {
		spec.Maps[name].MaxEntries = n
	}
}

// sizedBy names the config key that sizes each map whose size is not
// fixed; the memory check names it when the machine is short.
var sizedBy = map[string]string{
	"xlb_ct":   "node.conntrack_entries",
	"xlb_vips": "node.max_services", "xlb_vip_addrs": "node.max_services", "xlb_vip_index": "node.max_services",
	"xlb_vip_ents": "node.max_services", "xlb_svc_stats": "node.max_services", "xlb_svc_sched": "node.max_services",
	"xlb_sched_cursor": "node.max_services", "xlb_tables": "node.max_services",
	"xlb_reals": "node.max_backends", "xlb_real_stats": "node.max_backends", "xlb_real_conns": "node.max_backends",
	"xlb_frags": "node.fragment_table_entries",
}

// tablesKey is what sizes the Maglev tables' own memory.
const tablesKey = "services[].table_size"

const pageSize = 4096

// MapBytes estimates the kernel memory of a map of spec ms on ncpu
// possible CPUs, as the kernel accounts it (the memlock line of the map's
// fdinfo), within a few percent: the elements, rounded as the kernel rounds
// them, a preallocated hash's per-element header and buckets, per-CPU
// copies, mmapable arrays' page rounding.
func MapBytes(ms *ebpf.MapSpec, ncpu int) uint64 {
	n := uint64(ms.MaxEntries)
	val := roundUp(uint64(ms.ValueSize), 8)
	switch ms.Type {
	case ebpf.Array:
		b := n * val
		if ms.Flags&flagMmapable != 0 {
			b = roundUp(b, pageSize)
		}
		return b
	case ebpf.PerCPUArray:
		return n*val*uint64(ncpu) + n*8
	case ebpf.Hash, ebpf.LRUHash:
		const elemHeader, bucket = 48, 16
		return n*(elemHeader+roundUp(uint64(ms.KeySize), 8)+val) + roundPow2(n)*bucket
	case ebpf.RingBuf:
		return n
	case ebpf.ArrayOfMaps, ebpf.ProgramArray:
		return n * 8
	}
	return n * (uint64(ms.KeySize) + val)
}

// TableBytes is the memory of one Maglev table of m slots: an mmapable
// array of m/2 8-byte elements (table.go), in whole pages, and the page of
// the array's own header.
func TableBytes(m uint32) uint64 {
	return roundUp(uint64(m+1)/2*8, pageSize) + pageSize
}

const flagMmapable = 1 << 10 // BPF_F_MMAPABLE

func roundUp(x, to uint64) uint64 { return (x + to - 1) / to * to }

func roundPow2(x uint64) uint64 {
	p := uint64(1)
	for p < x {
		p <<= 1
	}
	return p
}

// MemoryUse is the memory a load creates, by the config key that sizes it
// ("" for the maps of fixed size).
type MemoryUse struct {
	Key   string
	Bytes uint64
}

// memoryNeed sums the memory of the maps of spec that a load creates (the
// names in create) and of tableSlots slots of Maglev tables, by key, the
// largest first.
func memoryNeed(spec *ebpf.CollectionSpec, create []string, tables uint64, ncpu int) []MemoryUse {
	by := map[string]uint64{}
	for _, name := range create {
		by[sizedBy[name]] += MapBytes(spec.Maps[name], ncpu)
	}
	if tables > 0 {
		by[tablesKey] += tables
	}
	out := make([]MemoryUse, 0, len(by))
	for k, b := range by {
		out = append(out, MemoryUse{k, b})
	}
	slices.SortFunc(out, func(a, b MemoryUse) int {
		if a.Bytes != b.Bytes {
			return cmpDesc(a.Bytes, b.Bytes)
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out
}

func cmpDesc(a, b uint64) int {
	if a > b {
		return -1
	}
	return 1
}

// checkLoadMemory refuses a load whose new maps (those not adopted from a
// pin under o.PinDir, and the recreated ones) and, on a cold start (no
// pinned tables), first tables (o.TableBytes) do not fit the memory
// available (ErrNoMemory).
func checkLoadMemory(spec *ebpf.CollectionSpec, o Options, recreate []string) error {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	var create []string
	for name, ms := range spec.Maps {
		_, err := os.Stat(filepath.Join(o.PinDir, name))
		if ms.Pinning != ebpf.PinByName || err != nil || slices.Contains(recreate, name) {
			create = append(create, name)
		}
	}
	var tables uint64
	if slices.Contains(create, "xlb_tables") {
		tables = o.TableBytes
	}
	avail := o.available
	if avail == nil {
		avail = availableMemory
	}
	have, where, err := avail()
	if err != nil {
		o.Logger.Warn("cannot tell the memory available: the maps' sizes are not checked", "error", err)
		return nil
	}
	return checkMemory(memoryNeed(spec, create, tables, ncpu), have, where)
}

// checkMapCount refuses a maxServices whose tables could need more memory
// mappings than vm.max_map_count allows a process: xlbd keeps each
// service's Maglev table mapped (table.go), two while a table is replaced,
// besides its other mappings.
func checkMapCount(maxServices uint32) error {
	need := 2*uint64(maxServices) + 4096
	have, err := readUint("/proc/sys/vm/max_map_count")
	if err != nil || have >= need {
		return nil // unreadable: the kernel's own limit applies
	}
	return fmt.Errorf("node.max_services %d needs up to %d memory mappings (a Maglev table each, two while one is "+
		"replaced), and vm.max_map_count is %d: raise it (sysctl vm.max_map_count=%d) or lower node.max_services",
		maxServices, need, have, need)
}

// ErrNoMemory: the maps asked for do not fit the memory the machine has.
var ErrNoMemory = errors.New("not enough memory for the maps")

// checkMemory refuses a need larger than avail (from where), naming the
// key to lower: the one that sizes the most memory.
func checkMemory(need []MemoryUse, avail uint64, where string) error {
	var total uint64
	for _, u := range need {
		total += u.Bytes
	}
	if total <= avail {
		return nil
	}
	parts := make([]string, 0, len(need))
	lower := ""
	for _, u := range need {
		k := u.Key
		if k == "" {
			k = "fixed maps"
		} else if lower == "" {
			lower = k
		}
		parts = append(parts, fmt.Sprintf("%s %s", k, MiB(u.Bytes)))
	}
	return fmt.Errorf("%w: they need %s (%s), %s has %s: lower %s",
		ErrNoMemory, MiB(total), strings.Join(parts, ", "), where, MiB(avail), lower)
}

// MiB formats b in MiB.
func MiB(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// availableMemory is what the maps may take: MemAvailable, or less when
// this process's memory cgroup (to which the kernel charges the maps) has
// less room. where names the figure's source.
func availableMemory() (avail uint64, where string, err error) {
	avail, err = memAvailable()
	if err != nil {
		return 0, "", err
	}
	where = "MemAvailable of /proc/meminfo"
	if room, path, ok := cgroupRoom(); ok && room < avail {
		avail, where = room, "the memory cgroup "+path
	}
	return avail, where, nil
}

func memAvailable() (uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("/proc/meminfo has no MemAvailable")
}

// cgroupRoom is the limit less the usage of this process's memory cgroup
// (v2: memory.max, memory.current; v1: memory.limit_in_bytes,
// memory.usage_in_bytes); false when unlimited or unreadable.
func cgroupRoom() (uint64, string, bool) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, "", false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		var dir, lim, cur string
		switch {
		case f[0] == "0" && f[1] == "":
			dir, lim, cur = filepath.Join("/sys/fs/cgroup", f[2]), "memory.max", "memory.current"
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			dir, lim, cur = filepath.Join("/sys/fs/cgroup/memory", f[2]), "memory.limit_in_bytes", "memory.usage_in_bytes"
		default:
			continue
		}
		l, err1 := readUint(filepath.Join(dir, lim))
		u, err2 := readUint(filepath.Join(dir, cur))
		if err1 != nil || err2 != nil || l >= 1<<60 || u > l {
			continue
		}
		return l - u, dir, true
	}
	return 0, "", false
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}
