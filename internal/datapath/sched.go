package datapath

// Schedulers (bpf/sched.h): each service's svc_sched, written before its
// VIP is published and cleared after it is unpublished.

import (
	"fmt"
	"time"

	"github.com/xlbproject/xlb/internal/state"
)

// schedInfo is sc as the forwarder reads it.
func schedInfo(sc *state.Sched) xlbSvcSched {
	v := xlbSvcSched{Kind: uint8(sc.Kind), Proto: sc.Proto, Plen4: sc.Plen4, Plen6: sc.Plen6,
		N: uint32(len(sc.List)), Total: sc.Total(), Stride: sc.Stride,
		PersistId: sc.Persist.ID, PersistTimeout: Ticks(sc.Persist.Timeout), Pplen4: sc.Persist.Plen4, Pplen6: sc.Persist.Plen6}
	if i := sc.Kind.Info(); i != nil && i.Expires {
		v.Stride = LBLCTicks(sc.Expire)
	}
	for i, e := range sc.List {
		if i < len(v.Ent) {
			v.Ent[i] = xlbSchedEnt{Rid: e.RealID, Weight: e.Weight}
		}
	}
	return v
}

// schedFromInfo is schedInfo's inverse.
func schedFromInfo(v *xlbSvcSched) state.Sched {
	sc := state.Sched{Kind: state.SchedKind(v.Kind), Proto: v.Proto, Plen4: v.Plen4, Plen6: v.Plen6, Stride: v.Stride}
	if v.PersistTimeout != 0 {
		sc.Persist = state.Persist{ID: v.PersistId, Timeout: time.Duration(v.PersistTimeout) << ctTickShift,
			Plen4: v.Pplen4, Plen6: v.Pplen6}
	}
	if i := sc.Kind.Info(); i != nil && i.Expires {
		sc.Stride, sc.Expire = 0, time.Duration(v.Stride)<<ctTickShift
	}
	for i := uint32(0); i < v.N && int(i) < len(v.Ent); i++ {
		sc.List = append(sc.List, state.SchedEnt{RealID: v.Ent[i].Rid, Weight: v.Ent[i].Weight})
	}
	return sc
}

// readSched is the scheduler the maps hold for service id.
func (d *Datapath) readSched(id uint32) (state.Sched, error) {
	var v xlbSvcSched
	if err := d.objs.XlbSvcSched.Lookup(id, &v); err != nil {
		return state.Sched{}, fmt.Errorf("scheduler of service %d: %w", id, err)
	}
	return schedFromInfo(&v), nil
}

// writeSched writes the schedulers of new and changed services.
func (c *commit) writeSched() error {
	for _, key := range c.diff.Services {
		s, ok := c.next.Services[key]
		if !ok {
			continue
		}
		old, had := c.cur.Services[key]
		var prev state.Sched
		if had {
			prev = old.Sched
		}
		if s.Sched.Equal(&prev) {
			continue
		}
		if err := c.putSched("scheduler of "+key.String(), s.SvcID, &prev, &s.Sched); err != nil {
			return err
		}
	}
	return nil
}

// clearSched zeroes the schedulers of services that left (their ids are
// not reused in the same commit).
func (c *commit) clearSched() error {
	for _, key := range c.diff.Services {
		old, had := c.cur.Services[key]
		if _, stays := c.next.Services[key]; stays || !had || old.Sched.Equal(&state.Sched{}) {
			continue
		}
		if err := c.putSched("clear scheduler of "+key.String(), old.SvcID, &old.Sched, &state.Sched{}); err != nil {
			return err
		}
	}
	return nil
}

// putSched writes service id's scheduler, old to new.
func (c *commit) putSched(what string, id uint32, old, sc *state.Sched) error {
	if err := c.write(what); err != nil {
		return err
	}
	ov, nv := schedInfo(old), schedInfo(sc)
	c.onUndo(func() error { return c.d.objs.XlbSvcSched.Put(id, &ov) })
	if err := c.d.objs.XlbSvcSched.Put(id, &nv); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
