package datapath

// The locality-based schedulers' table (bpf/lblc.h): read for tests and
// views; only the forwarder writes it.

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
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
	now, err := ctNow()
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
