package datapath

import (
	"fmt"
	"math/bits"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/state"
)

// Pinned is a read-only view of a running instance's maps, for tools that
// inspect the data plane without owning it (xlbctl).
type Pinned struct {
	dir  string
	maps map[string]*ebpf.Map
}

// OpenPinned opens the maps pinned under pinDir read-only.
func OpenPinned(pinDir string) (*Pinned, error) {
	p := &Pinned{dir: pinDir, maps: map[string]*ebpf.Map{}}
	for _, name := range []string{"xlb_vips", "xlb_reals", "xlb_svc_stats", "xlb_real_stats", "xlb_stats"} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("open %s under %s: %w (is xlbd running with this node name?)", name, pinDir, err)
		}
		p.maps[name] = m
	}
	return p, nil
}

// Close releases the maps.
func (p *Pinned) Close() {
	for _, m := range p.maps {
		m.Close()
	}
}

// ServiceView is one VIP as the data plane holds it.
type ServiceView struct {
	Key       state.VIPKey
	SvcID     uint32
	TableSize uint32
	Encap     state.Encap
	Counters  Counters
	Reals     []RealView
}

// RealView is one real with its counters.
type RealView struct {
	ID       uint32
	Real     state.Real
	Counters Counters
}

// Services lists the VIPs with their reals and counters, ordered by key.
func (p *Pinned) Services() ([]ServiceView, error) {
	var (
		k  xlbVipKey
		vi xlbVipInfo
	)
	bySvc := map[uint32]*ServiceView{}
	var out []*ServiceView
	it := p.maps["xlb_vips"].Iterate()
	for it.Next(&k, &vi) {
		c, err := sumCounters(p.maps["xlb_svc_stats"], vi.SvcId)
		if err != nil {
			return nil, err
		}
		sv := &ServiceView{Key: keyFromVip(k), SvcID: vi.SvcId, TableSize: vi.TableSize, Encap: encapFromABI(vi.Encap), Counters: c}
		bySvc[vi.SvcId] = sv
		out = append(out, sv)
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	var cerr error
	err := scanArray(p.maps["xlb_reals"], func(id uint32, ri *xlbRealInfo) bool {
		sv, ok := bySvc[ri.SvcId]
		if ri.SvcId == 0 || !ok {
			return true
		}
		var c Counters
		if c, cerr = sumCounters(p.maps["xlb_real_stats"], id); cerr != nil {
			return false
		}
		sv.Reals = append(sv.Reals, RealView{ID: id, Real: realFromInfo(*ri), Counters: c})
		return true
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b *ServiceView) int { return a.Key.Compare(b.Key) })
	res := make([]ServiceView, len(out))
	for i, s := range out {
		slices.SortFunc(s.Reals, func(a, b RealView) int { return a.Real.Addr.Compare(b.Real.Addr) })
		res[i] = *s
	}
	return res, nil
}

// Stats returns the global counters by name.
func (p *Pinned) Stats() (map[string]uint64, error) {
	return readStats(p.maps["xlb_stats"])
}

// FlowEntries returns the connection table's entries for flow t (the
// client's 5-tuple toward the VIP), one per CPU slice that holds it: the
// ways of the flow's bucket whose tag is the flow's (maglev.FlowHash,
// CTBucket, CTTag). Age is left zero. The table is read without stopping
// the forwarder; an empty result means no CPU tracks the flow (or another
// flow with the same bucket and tag occupies none: a tag match is what the
// forwarder itself goes by).
func (p *Pinned) FlowEntries(t maglev.Tuple) ([]CTEntry, error) {
	m, err := p.pinned("xlb_ct")
	if err != nil {
		return nil, err
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	// xlb_ct holds ncpu << ct_shift buckets (Load).
	per := m.MaxEntries() / uint32(ncpu)
	if per == 0 || per&(per-1) != 0 || per*uint32(ncpu) != m.MaxEntries() {
		return nil, fmt.Errorf("xlb_ct: %d buckets for %d CPUs is not a per-CPU power of two", m.MaxEntries(), ncpu)
	}
	shift := uint32(bits.TrailingZeros32(per))
	h := maglev.FlowHash(t)
	bucket, tag := maglev.CTBucket(h, per), maglev.CTTag(h)
	var out []CTEntry
	for cpu := range uint32(ncpu) {
		var b xlbCtBucket
		if err := m.Lookup(cpu<<shift|bucket, &b); err != nil {
			return nil, fmt.Errorf("read xlb_ct: %w", err)
		}
		for w, e := range b.Way {
			if ent, used := decodeWay(cpu, bucket, w, e); used && ent.Tag == tag {
				out = append(out, ent)
			}
		}
	}
	return out, nil
}

// Tables returns each VIP's Maglev table as the forwarder reads it: the
// real id of every slot (0: none), read from the inner map the VIP's
// table slot holds.
func (p *Pinned) Tables() (map[state.VIPKey][]uint32, error) {
	tables, err := p.pinned("xlb_tables")
	if err != nil {
		return nil, err
	}
	var (
		k  xlbVipKey
		vi xlbVipInfo
	)
	out := map[state.VIPKey][]uint32{}
	it := p.maps["xlb_vips"].Iterate()
	for it.Next(&k, &vi) {
		var id uint32
		if err := tables.Lookup(vi.TableId, &id); err != nil {
			return nil, fmt.Errorf("table slot %d of %s: %w", vi.TableId, keyFromVip(k), err)
		}
		inner, err := ebpf.NewMapFromID(ebpf.MapID(id))
		if err != nil {
			return nil, fmt.Errorf("table of %s: %w", keyFromVip(k), err)
		}
		t := make([]uint32, 0, vi.TableSize)
		err = scanArray(inner, func(_ uint32, two *uint64) bool {
			t = append(t, uint32(*two), uint32(*two>>32))
			return true
		})
		inner.Close()
		if err != nil {
			return nil, fmt.Errorf("read the table of %s: %w", keyFromVip(k), err)
		}
		out[keyFromVip(k)] = t[:min(len(t), int(vi.TableSize))]
	}
	return out, it.Err()
}

// pinned returns the map pinned as name, opened read-only on first use.
func (p *Pinned) pinned(name string) (*ebpf.Map, error) {
	if m, ok := p.maps[name]; ok {
		return m, nil
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(p.dir, name), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("open %s under %s: %w", name, p.dir, err)
	}
	p.maps[name] = m
	return m, nil
}
