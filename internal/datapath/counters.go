package datapath

import (
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf/btf"

	"github.com/cilium/ebpf"
)

// Counters are packet, byte and new-flow counts summed over CPUs.
type Counters struct {
	Packets, Bytes, NewFlows uint64
}

// StatNames returns the global counter names in enum xlb_stat order,
// lowercased without the XLB_STAT_ prefix (e.g. "drop_no_backend"). They
// are read from the object's BTF, so C is their only definition.
var StatNames = sync.OnceValue(func() []string {
	names := make([]string, xlbXlbStatXLB_STAT__MAX)
	spec, err := loadXlb()
	if err != nil {
		panic(fmt.Sprintf("embedded forwarder object: %v", err))
	}
	var e *btf.Enum
	if err := spec.Types.TypeByName("xlb_stat", &e); err != nil {
		panic(fmt.Sprintf("embedded forwarder object has no enum xlb_stat: %v", err))
	}
	for _, v := range e.Values {
		if v.Value < uint64(len(names)) {
			names[v.Value] = strings.ToLower(strings.TrimPrefix(v.Name, "XLB_STAT_"))
		}
	}
	return names
})

// Stats returns the global counters by name (see StatNames), and, once a
// FragHolder runs, the holder's (HolderStatNames).
func (d *Datapath) Stats() (map[string]uint64, error) {
	out, err := readStats(d.objs.XlbStats)
	if err != nil {
		return nil, err
	}
	if h := d.holder.Load(); h != nil {
		s := h.Stats()
		for i, v := range []uint64{s.Received, s.Released, s.Expired, s.Overflow, s.InjectErrors, s.Fragmented, s.Pieces, s.FragmentErrs} {
			out[HolderStatNames[i]] = v
		}
	}
	return out, nil
}

// HolderStatNames name the FragHolder's counters in Stats: HOLD records
// read, frames released (re-injected), expired, dropped over the bounds,
// re-injections that failed; too-big datagrams fragmented, their pieces
// re-injected, FRAGMENT records that could not be split.
var HolderStatNames = []string{"frag_hold_received", "frag_released", "frag_expired", "frag_hold_overflow", "frag_inject_errors",
	"frag_needed_fragmented", "frag_needed_pieces", "frag_needed_errors"}

func readStats(m *ebpf.Map) (map[string]uint64, error) {
	var per []xlbXlbGlobal
	if err := m.Lookup(uint32(0), &per); err != nil {
		return nil, fmt.Errorf("read global counters: %w", err)
	}
	names := StatNames()
	out := make(map[string]uint64, len(names))
	for _, g := range per {
		for i, n := range names {
			out[n] += g.Count[i]
		}
	}
	return out, nil
}

func sumCounters(m *ebpf.Map, id uint32) (Counters, error) {
	var per []xlbXlbCounters
	if err := m.Lookup(id, &per); err != nil {
		return Counters{}, err
	}
	var c Counters
	for _, p := range per {
		c.Packets += p.Packets
		c.Bytes += p.Bytes
		c.NewFlows += p.NewFlows
	}
	return c, nil
}

// ServiceCounters returns the counters of service id.
func (d *Datapath) ServiceCounters(svcID uint32) (Counters, error) {
	c, err := sumCounters(d.objs.XlbSvcStats, svcID)
	if err != nil {
		return c, fmt.Errorf("read counters of service %d: %w", svcID, err)
	}
	return c, nil
}

// RealCounters returns the counters of real id.
func (d *Datapath) RealCounters(id uint32) (Counters, error) {
	c, err := sumCounters(d.objs.XlbRealStats, id)
	if err != nil {
		return c, fmt.Errorf("read counters of real %d: %w", id, err)
	}
	return c, nil
}
