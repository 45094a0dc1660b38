package datapath

// The locality-based schedulers' table (bpf/lblc.h): read for tests and
// views; the forwarder writes it, the sweeper deletes expired entries.

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/state"
)

// LBLCTicks is an lblc entry's expiration in ticks, rounded up (32 bits:
// IPVS's default of a day fits).
func LBLCTicks(d time.Duration) uint32 {
	t := (uint64(d) + 1<<ctTickShift - 1) >> ctTickShift
	return uint32(min(t, 1<<32-1))
}

// lblcKey and lblcValue are struct lblc_key and struct lblc_ent.
type lblcKey struct {
	SvcID  uint32
	Family uint8
	_      [3]uint8
	Addr   [16]byte
}

type lblcValue struct {
	Used, Mod uint64
	Rid       [8]uint64
}

// LBLCEntry is a destination's entry of an lblc or lblcr service.
type LBLCEntry struct {
	// Reals are the recorded backends' real ids: lblc's one, or lblcr's
	// set in the order of its slots.
	Reals []uint32
	// Used and Modified are how long ago the entry was last used and
	// (lblcr) its set last changed.
	Used, Modified time.Duration
}

// LBLC is the entry of service svcID for destination dst; found is false
// when there is none.
func (d *Datapath) LBLC(svcID uint32, dst netip.Addr) (e LBLCEntry, found bool, err error) {
	k := lblcKey{SvcID: svcID}
	k.Addr, k.Family = addrBytes(dst)
	var v lblcValue
	if err := d.objs.XlbLblc.Lookup(&k, &v); errors.Is(err, ebpf.ErrKeyNotExist) {
		return e, false, nil
	} else if err != nil {
		return e, false, fmt.Errorf("lblc entry of service %d, %s: %w", svcID, dst, err)
	}
	now, err := d.now()
	if err != nil {
		return e, false, err
	}
	for _, r := range v.Rid {
		if r != 0 {
			e.Reals = append(e.Reals, uint32(r))
		}
	}
	e.Used = time.Duration(max(0, int64(now-v.Used))) << ctTickShift
	e.Modified = time.Duration(max(0, int64(now-v.Mod))) << ctTickShift
	return e, true, nil
}

// SweepLBLC deletes the lblc and lblcr entries that were not used for
// their service's expiration, which the forwarder already treats as
// forgotten (bpf/lblc.h: the next flow to the destination is scheduled
// afresh), and those of services that no longer have such a scheduler;
// it returns the entries deleted and those left. Without it an idle
// destination's entry stays until the LRU map needs its room. An entry
// is read again just before its deletion; one a new flow uses between
// that read and the deletion is lost, and that flow's successors are
// scheduled afresh, as after the expiration.
func (d *Datapath) SweepLBLC() (freed, live uint64, err error) {
	now, err := d.now()
	if err != nil {
		return 0, 0, err
	}
	expired := func(k *lblcKey, v *lblcValue, expire map[uint32]int64) bool {
		ex, ok := expire[k.SvcID]
		if !ok {
			ex = -1 // not an lblc or lblcr service
			var s xlbSvcSched
			if d.objs.XlbSvcSched.Lookup(k.SvcID, &s) == nil {
				if i := state.SchedKind(s.Kind).Info(); i != nil && i.Expires {
					ex = int64(s.Stride)
				}
			}
			expire[k.SvcID] = ex
		}
		return ex < 0 || int64(now-v.Used) > ex
	}
	expire := map[uint32]int64{}
	var (
		k     lblcKey
		v     lblcValue
		stale []lblcKey
	)
	it := d.objs.XlbLblc.Iterate()
	for it.Next(&k, &v) {
		if expired(&k, &v, expire) {
			stale = append(stale, k)
		} else {
			live++
		}
	}
	if err := it.Err(); err != nil {
		return 0, live, fmt.Errorf("read lblc entries: %w", err)
	}
	for _, k := range stale {
		if err := d.objs.XlbLblc.Lookup(&k, &v); err != nil {
			continue // gone meanwhile (the LRU made room)
		}
		if !expired(&k, &v, expire) {
			live++
			continue
		}
		if err := d.objs.XlbLblc.Delete(&k); err == nil {
			freed++
		} else if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return freed, live, fmt.Errorf("delete lblc entry of service %d: %w", k.SvcID, err)
		}
	}
	return freed, live, nil
}
