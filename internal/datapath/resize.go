package datapath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
)

// A restart with other capacities (node.max_services, node.max_backends),
// or an upgrade from a build whose defaults differed, finds the committed
// state pinned in maps of another size (policyResize). Load makes the maps
// of the asked size and copies the pinned content into them before the new
// program runs: the services, their tables (the same inner maps), the
// backends under the same ids, and the VIP index, rebuilt from the
// services by loadApplied. The connection table is not touched, so tracked
// flows keep their backends. A pinned entry that does not fit (a service
// or backend id at or above the new size, more services than the new
// size) refuses the start, naming the key, before anything the running
// forwarder uses is changed.

// onlyEntriesDiffer reports whether the layouts differ in max_entries alone.
func onlyEntriesDiffer(pinned, wanted MapLayout) bool {
	p := pinned
	p.MaxEntries = wanted.MaxEntries
	return p == wanted && pinned.MaxEntries != wanted.MaxEntries
}

// withVIPIndexPair adds to recreate the other map of the VIP index when
// one is recreated: the index holds ids of the entries, so a new index
// with the pinned entries (or the reverse) would mix two states; both new,
// loadApplied fills them from the services.
func withVIPIndexPair(recreate []string, pinDir string) []string {
	pair := []string{"xlb_vip_index", "xlb_vip_ents"}
	a, b := slices.Contains(recreate, pair[0]), slices.Contains(recreate, pair[1])
	if a == b {
		return recreate
	}
	other := pair[0]
	if a {
		other = pair[1]
	}
	if _, err := os.Stat(filepath.Join(pinDir, other)); err != nil {
		return recreate
	}
	return append(recreate, other)
}

// resizeOrder: the services before the tables (whose slots they name).
var resizeOrder = []string{"xlb_vips", "xlb_vip_addrs", "xlb_svc_sched", "xlb_reals", "xlb_tables"}

// resize copies the pinned content of each resized map into its new map.
func (d *Datapath) resize() error {
	resized := map[string]bool{}
	for _, name := range d.recreated {
		if pinnedMapPolicy[name].policy == policyResize {
			resized[name] = true
		}
	}
	for _, name := range resizeOrder {
		if !resized[name] {
			continue
		}
		path := filepath.Join(d.opts.PinDir, name)
		old, err := ebpf.LoadPinnedMap(path, nil)
		if err != nil {
			return err
		}
		err = d.resizeMap(name, old, d.mapByName(name))
		old.Close()
		if err != nil {
			return err
		}
		d.log.Info("pinned map of another size: its content is carried into the new one", "map", name,
			"key", sizedBy[name], "pinned_entries", old.MaxEntries(), "entries", d.mapByName(name).MaxEntries())
	}
	return nil
}

func (d *Datapath) resizeMap(name string, old, m *ebpf.Map) error {
	key := sizedBy[name]
	switch old.Type() {
	case ebpf.Hash:
		return copyHash(old, m, key, name)
	case ebpf.ArrayOfMaps:
		return d.copyTables(old, m)
	}
	switch name {
	case "xlb_reals":
		return copyArray[xlbRealInfo](old, m, key)
	case "xlb_svc_sched":
		return copyArray[xlbSvcSched](old, m, key)
	}
	return fmt.Errorf("resize %s: unexpected map type %s", name, old.Type())
}

// errTooSmall is a pinned entry the new size has no room for.
func errTooSmall(key, what string) error {
	return fmt.Errorf("%w: %s is smaller than the pinned state: %s. Nothing was changed: the running forwarder "+
		"goes on. Choices: raise %s back (at least to the pinned state's size), or run 'xlbd --cleanup' and start "+
		"(the forwarder is detached in between and tracked connections are lost)", ErrIncompatible, key, what, key)
}

func copyHash(old, m *ebpf.Map, key, name string) error {
	k, v := make([]byte, old.KeySize()), make([]byte, old.ValueSize())
	var n uint32
	it := old.Iterate()
	for it.Next(&k, &v) {
		if n++; n > m.MaxEntries() {
			return errTooSmall(key, fmt.Sprintf("its %s holds more than %d entries", name, m.MaxEntries()))
		}
		if err := m.Put(k, v); err != nil {
			return fmt.Errorf("copy %s: %w", old.String(), err)
		}
	}
	return it.Err()
}

// copyArray copies the used entries of an array of V (an unused id is
// all zero).
func copyArray[V comparable](old, m *ebpf.Map, key string) error {
	var zero V
	var cerr error
	err := scanArray(old, func(id uint32, v *V) bool {
		if *v == zero {
			return true
		}
		if id >= m.MaxEntries() {
			cerr = errTooSmall(key, fmt.Sprintf("id %d is in use (the map's size is %d ids)", id, m.MaxEntries()-1))
			return false
		}
		cerr = m.Put(id, v)
		return cerr == nil
	})
	return errors.Join(err, cerr)
}

// copyTables points each slot of the new xlb_tables that a service uses
// at the pinned slot's table (the same inner map).
func (d *Datapath) copyTables(old, m *ebpf.Map) error {
	var (
		k  xlbVipKey
		vi xlbVipInfo
	)
	it := d.objs.XlbVips.Iterate() // already carried over
	for it.Next(&k, &vi) {
		if vi.TableId >= m.MaxEntries() {
			return errTooSmall("node.max_services", fmt.Sprintf("table slot %d of %s is in use", vi.TableId, keyFromVip(k)))
		}
		var id uint32
		if err := old.Lookup(vi.TableId, &id); err != nil {
			return fmt.Errorf("table of %s: %w", keyFromVip(k), err)
		}
		inner, err := ebpf.NewMapFromID(ebpf.MapID(id))
		if err != nil {
			return fmt.Errorf("open table of %s: %w", keyFromVip(k), err)
		}
		err = m.Put(vi.TableId, uint32(inner.FD()))
		inner.Close()
		if err != nil {
			return fmt.Errorf("carry the table of %s: %w", keyFromVip(k), err)
		}
	}
	return it.Err()
}
