package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"

	"github.com/cilium/ebpf"
)

// What Load does with a pinned map whose layout (type, key and value size,
// entries, flags) does not match this build and its options: a new
// xlbd binary whose maps changed, or a changed node.conntrack_entries (the
// table's size) or number of possible CPUs. Each map has one policy,
// decided by what is lost if it starts empty (docs/OPERATIONS.md, "Upgrades").
type mapPolicy int

const (
	// policyRefuse: forwarding state the running program uses (services,
	// tables, backends, node). An empty map would forward nothing until the
	// first commit, and the backend ids are what tracked connections point
	// at: refused; a cold start ('xlbd --cleanup') is the operator's call.
	policyRefuse mapPolicy = iota
	// policyConntrack: the tracked connections. Refused unless
	// Options.DiscardConntrack: never lost silently.
	policyConntrack
	// policyRecreate: counters and transient rate-limit state. A new empty
	// map replaces the pin once the new program runs; counters restart at
	// zero (a Prometheus counter reset) and a warning says so.
	policyRecreate
	// policyMigrate: a single-entry settings array whose value only grew at
	// its end (new fields append; 0 means off). A new map gets the pinned
	// value's bytes, zero-extended, before the new program runs, and
	// replaces the pin like a recreated map; the commit that follows fills
	// the new fields. Any other change is refused.
	policyMigrate
)

// pinnedMapPolicy is the policy and the content of each pinned map. A map
// missing here is refused (TestEveryPinnedMapHasAPolicy keeps it complete).
var pinnedMapPolicy = map[string]struct {
	policy mapPolicy
	holds  string
}{
	"xlb_ct":           {policyConntrack, "the tracked connections"},
	"xlb_nat":          {policyConntrack, "the tracked NAT flows, which their replies are rewritten by"},
	"xlb_nat_hops":     {policyRecreate, "the NAT replies' next-hop cache (per CPU, refilled from the FIB)"},
	"xlb_vips":         {policyRefuse, "the committed services"},
	"xlb_vip_addrs":    {policyRefuse, "the committed VIP addresses"},
	"xlb_vip_index":    {policyRefuse, "the forwarder's index of the committed services"},
	"xlb_vip_ents":     {policyRefuse, "the forwarder's entries of the committed services"},
	"xlb_tables":       {policyRefuse, "the committed Maglev tables"},
	"xlb_reals":        {policyRefuse, "the committed backends, whose ids the tracked connections hold"},
	"xlb_svc_sched":    {policyRefuse, "the committed schedulers"},
	"xlb_sched_cursor": {policyRecreate, "the list schedulers' cursors"},
	"xlb_persist":      {policyRecreate, "the persistence templates (their clients choose again)"},
	"xlb_lblc":         {policyRecreate, "the lblc and lblcr schedulers' destinations (they choose again)"},
	"xlb_lblc_walk":    {policyRecreate, "per-CPU scratch space of the lblc and lblcr schedulers"},
	"xlb_real_conns":   {policyRecreate, "the connection counts per backend (rebuilt from the connection table)"},
	"xlb_node":         {policyMigrate, "the node settings"},
	"xlb_stats":        {policyRecreate, "the global counters"},
	"xlb_svc_stats":    {policyRecreate, "the per-service counters"},
	"xlb_real_stats":   {policyRecreate, "the per-backend counters"},
	"xlb_flood":        {policyRecreate, "the flood defence state"},
	"xlb_icmp_rl":      {policyRecreate, "the ICMP echo rate-limit state"},
	"xlb_trace_rl":     {policyRecreate, "the packet tracer's rate-limit state"},
	"xlb_too_big_rl":   {policyRecreate, "the ICMP too-big rate-limit state"},
	"xlb_trace_ring":   {policyRecreate, "tracer records on their way to xlbd"},
	"xlb_frag_conf":    {policyRefuse, "the fragment settings"},
	"xlb_frag_peers":   {policyRefuse, "the fragment pool's next hops"},
	// Decisions live 5 s: starting empty costs only the later fragments
	// of datagrams in flight, whose first fragment has gone.
	"xlb_frags":     {policyRecreate, "the fragment table (first-fragment decisions of the last seconds)"},
	"xlb_frag_ring": {policyRecreate, "fragments on their way to xlbd's holder"},
	"xlb_frag_buf":  {policyRecreate, "per-CPU scratch space for held fragments"},
	// xlbd writes it again as soon as its holder runs.
	"xlb_frag_reader": {policyRecreate, "when xlbd last read the fragment ring"},
	// Connection sync: records on their way to xlbd, its counters, and
	// the switch xlbd's syncer sets as it starts.
	"xlb_sync_log":   {policyRecreate, "sync records on their way to xlbd"},
	"xlb_sync_cpus":  {policyRecreate, "each CPU's position in the sync records"},
	"xlb_sync_stats": {policyRecreate, "the connection sync counters"},
	"xlb_sync_conf":  {policyRecreate, "the connection sync switch (written again by xlbd's syncer)"},
}

// MapLayout is what makes a map compatible with a program.
type MapLayout struct {
	Type       ebpf.MapType
	KeySize    uint32
	ValueSize  uint32
	MaxEntries uint32
	Flags      uint32
}

func (l MapLayout) String() string {
	return fmt.Sprintf("%s key %d B value %d B max_entries %d flags %#x", l.Type, l.KeySize, l.ValueSize, l.MaxEntries, l.Flags)
}

// IncompatibleMapError is a pinned map that Load refuses to replace. It
// wraps ErrIncompatible.
type IncompatibleMapError struct {
	Name, Path     string
	Pinned, Wanted MapLayout
	Holds          string
	Conntrack      bool // the connection table: --discard-conntrack is a choice
}

func (e *IncompatibleMapError) Error() string {
	msg := fmt.Sprintf("pinned map %s (%s) does not fit this build: pinned %s, wanted %s; it holds %s. "+
		"Nothing was changed: the running forwarder goes on with its program and maps. ",
		e.Name, e.Path, e.Pinned, e.Wanted, e.Holds)
	if e.Conntrack {
		return msg + "Choices: run the xlbd build and node.conntrack_entries that made it (the table is sized by " +
			"node.conntrack_entries and the possible CPUs); or start with --discard-conntrack (an empty table, the " +
			"program replaced without a detach window; tracked connections are re-balanced by Maglev); or run " +
			"'xlbd --cleanup' and start (the forwarder is detached in between)"
	}
	return msg + "Choices: run the xlbd build that made it; or run 'xlbd --cleanup' and start afresh " +
		"(the forwarder is detached in between and tracked connections are lost)"
}

func (e *IncompatibleMapError) Unwrap() error { return ErrIncompatible }

func layoutOfSpec(ms *ebpf.MapSpec) MapLayout {
	return MapLayout{Type: ms.Type, KeySize: ms.KeySize, ValueSize: ms.ValueSize, MaxEntries: ms.MaxEntries, Flags: ms.Flags}
}

func layoutOfMap(m *ebpf.Map) MapLayout {
	return MapLayout{Type: m.Type(), KeySize: m.KeySize(), ValueSize: m.ValueSize(), MaxEntries: m.MaxEntries(), Flags: m.Flags()}
}

// checkPinned compares every map of spec pinned by name with the one
// pinned under pinDir, if any. It returns the maps to recreate
// (policyRecreate, or the connection table when discardCT), or, if any
// pinned map is refused, every refusal (IncompatibleMapError, joined)
// before anything is created, changed or attached.
func checkPinned(spec *ebpf.CollectionSpec, pinDir string, discardCT bool, log *slog.Logger) ([]string, error) {
	names := make([]string, 0, len(spec.Maps))
	for name, ms := range spec.Maps {
		if ms.Pinning == ebpf.PinByName {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var (
		recreate []string
		refused  []error
	)
	for _, name := range names {
		ms := spec.Maps[name]
		path := filepath.Join(pinDir, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue // created and pinned by the load
		}
		if err != nil {
			return nil, fmt.Errorf("open pinned map %s: %w", path, err)
		}
		cerr := ms.Compatible(m)
		pinned := layoutOfMap(m)
		m.Close()
		if cerr == nil {
			continue
		}
		if !errors.Is(cerr, ebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("pinned map %s: %w", path, cerr)
		}
		pol, known := pinnedMapPolicy[name]
		if !known {
			pol.holds = "state this build does not know"
		}
		wanted := layoutOfSpec(ms)
		switch {
		case known && (pol.policy == policyRecreate || pol.policy == policyConntrack && discardCT):
			log.Warn("pinned map does not fit this build: starting it empty", "map", name,
				"holds", pol.holds, "pinned", pinned.String(), "wanted", wanted.String())
			recreate = append(recreate, name)
		case known && pol.policy == policyMigrate && grewAtEnd(pinned, wanted):
			log.Info("pinned map of an older layout: its content is carried into the new one", "map", name,
				"holds", pol.holds, "pinned", pinned.String(), "wanted", wanted.String())
			recreate = append(recreate, name)
		default:
			refused = append(refused, &IncompatibleMapError{Name: name, Path: path, Pinned: pinned, Wanted: wanted,
				Holds: pol.holds, Conntrack: pol.policy == policyConntrack})
		}
	}
	if len(refused) > 0 {
		return nil, errors.Join(refused...)
	}
	return recreate, nil
}

// grewAtEnd reports whether wanted is pinned with a longer value and
// nothing else changed.
func grewAtEnd(pinned, wanted MapLayout) bool {
	p := pinned
	p.ValueSize = wanted.ValueSize
	return p == wanted && pinned.ValueSize < wanted.ValueSize
}

// migrate copies the entries of each migrated map's pin into the new map
// (values zero-extended), before the new program runs.
func (d *Datapath) migrate() error {
	for _, name := range d.recreated {
		if pinnedMapPolicy[name].policy != policyMigrate {
			continue
		}
		if err := migrateMap(filepath.Join(d.opts.PinDir, name), d.mapByName(name)); err != nil {
			return fmt.Errorf("carry %s into its new layout: %w", name, err)
		}
	}
	return nil
}

// migrateMap copies every entry of the array pinned at path into m.
func migrateMap(path string, m *ebpf.Map) error {
	old, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		return err
	}
	defer old.Close()
	val := make([]byte, old.ValueSize())
	for k := range min(old.MaxEntries(), m.MaxEntries()) {
		if err := old.Lookup(k, &val); err != nil {
			return err
		}
		wide := make([]byte, m.ValueSize())
		copy(wide, val)
		if err := m.Put(k, wide); err != nil {
			return err
		}
	}
	return nil
}

// mapByName returns the loaded map of that name (ebpf struct tag).
func (d *Datapath) mapByName(name string) *ebpf.Map {
	v := reflect.ValueOf(&d.objs.xlbMaps).Elem()
	for i := range v.NumField() {
		if v.Type().Field(i).Tag.Get("ebpf") == name {
			m, _ := v.Field(i).Interface().(*ebpf.Map)
			return m
		}
	}
	return nil
}

// pinRecreated replaces the pins of the maps Load recreated with the new
// maps. It runs once the new program is in place, so that until then the
// pins, like the running program, are the old maps.
func (d *Datapath) pinRecreated() error {
	for _, name := range d.recreated {
		m := d.mapByName(name)
		if m == nil {
			return fmt.Errorf("recreated map %s not loaded", name)
		}
		path := filepath.Join(d.opts.PinDir, name)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("unpin the old %s: %w", name, err)
		}
		if err := m.Pin(path); err != nil {
			return fmt.Errorf("pin the new %s: %w", name, err)
		}
		if pinnedMapPolicy[name].policy == policyMigrate {
			d.log.Info("replaced a pinned map of an older layout with its migrated copy", "map", name)
			continue
		}
		d.log.Warn("replaced an incompatible pinned map with an empty one", "map", name, "holds", pinnedMapPolicy[name].holds)
	}
	d.recreated = nil
	return nil
}
