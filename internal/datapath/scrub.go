package datapath

// The first commit of a process clears what the maps hold that no
// published VIP reaches: what a process killed in the middle of a commit
// left behind.

import "fmt"

// scrub runs in the first commit of a process (and again after the maps
// were read back following a failed undo). A process killed between two
// steps of a commit can leave:
//   - a new table installed in its service's spare slot, the VIP never
//     pointed at it, or the slots of a departed service not yet retired:
//     inner maps nothing reads, held for as long as the slot holds them;
//   - the scheduler of a service never published, or unpublished and not
//     yet cleared: a later service given that id and a scheduler equal to
//     the zero one would find it (writeSched writes only a change), and
//     the forwarder would schedule the new service from a stale list of
//     another service's reals;
//   - xlb_vip_addrs short of a published VIP's address, or holding a
//     departed one's: loadApplied does not read it back.
//
// The forwarder reads tables and schedulers only through a published VIP,
// so clearing the unreferenced ones changes nothing it sees, and there is
// nothing to undo. The VIP address set is made exact by syncVIPAddrs later
// in the commit.
func (c *commit) scrub() error {
	d := c.d
	if d.scrubbed {
		return nil
	}
	c.addrs = true
	ids := make(map[uint32]bool, len(c.cur.Services))
	slots := make(map[uint32]bool, len(c.cur.Services))
	for key, s := range c.cur.Services {
		ids[s.SvcID] = true
		slots[d.cur.live[key].slot] = true
	}
	var stray []uint32
	err := scanArray(d.objs.XlbSvcSched, func(id uint32, v *xlbSvcSched) bool {
		if !ids[id] && *v != (xlbSvcSched{}) {
			stray = append(stray, id)
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("read schedulers: %w", err)
	}
	for _, id := range stray {
		if err := d.objs.XlbSvcSched.Put(id, &xlbSvcSched{}); err != nil {
			return fmt.Errorf("clear the scheduler of unpublished service %d: %w", id, err)
		}
	}
	var orphans []uint32
	err = scanArray(d.objs.XlbTables, func(slot uint32, inner *uint32) bool {
		if *inner != 0 && !slots[slot] {
			orphans = append(orphans, slot)
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("read table slots: %w", err)
	}
	if len(stray) > 0 {
		d.log.Info("cleared the schedulers of services no VIP publishes (left by a process stopped in the middle of a commit)", "services", stray)
	}
	// Every slot retired by an earlier process holds that process's
	// placeholder, so there are orphans at most starts: they move to this
	// process's placeholder, and the earlier one is freed.
	d.log.Debug("unreferenced table slots pointed at the placeholder", "slots", len(orphans))
	return d.retireSlots(orphans)
}
