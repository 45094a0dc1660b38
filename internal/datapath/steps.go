package datapath

// The steps of a commit (apply.go), in the order Commit runs them. Each
// records how to undo a write before making it.

import (
	"fmt"

	"github.com/xlbproject/xlb/internal/state"
)

// manyReals is the size of a diff from which tables are checked against
// an owner array of every real rather than by looking reals up.
const manyReals = 4096

// check checks next against the maps' capacities and converts the node
// settings; it writes nothing.
func (c *commit) check() error {
	d, next := c.d, c.next
	if n := uint32(len(next.Services)); n > d.opts.MaxServices {
		return fmt.Errorf("%d services exceed the capacity of %d (node.max_services, read at start)", n, d.opts.MaxServices)
	}
	ids := make(map[uint32]state.VIPKey, len(next.Services))
	for key, s := range next.Services {
		if s.SvcID == 0 || s.SvcID > d.opts.MaxServices {
			return fmt.Errorf("service %s: id %d out of range 1..%d", key, s.SvcID, d.opts.MaxServices)
		}
		if other, dup := ids[s.SvcID]; dup {
			return fmt.Errorf("services %s and %s share id %d", key, other, s.SvcID)
		}
		ids[s.SvcID] = key
		if len(s.Table) == 0 {
			return fmt.Errorf("service %s: empty table", key)
		}
	}
	for _, id := range c.diff.Reals {
		if _, ok := next.Reals.Get(id); ok && (id == 0 || id > d.opts.MaxReals) {
			return fmt.Errorf("real id %d out of range 1..%d (node.max_backends, read at start)", id, d.opts.MaxReals)
		}
	}
	if len(c.diff.Reals) >= manyReals {
		c.owner = make([]uint32, d.opts.MaxReals+1)
		for id, r := range next.Reals.All() {
			c.owner[id] = r.SvcID
		}
	}
	for _, key := range c.diff.Services {
		a, b := c.cur.Services[key], next.Services[key]
		if a == nil || b == nil || a.Fragments != b.Fragments {
			c.addrs = true
		}
	}
	var err error
	if c.node, err = nodeInfo(next.Node, d.ifmac); err != nil {
		return err
	}
	c.node.ProbeCookie = d.probeCookie
	_, err = fragPoolABI(next.Node.Fragments)
	return err
}

// writeNode writes the node settings.
func (c *commit) writeNode() error {
	old := c.d.cur.node
	if c.node == old {
		return nil
	}
	if err := c.write("node settings"); err != nil {
		return err
	}
	c.onUndo(func() error { return c.d.objs.XlbNode.Put(uint32(0), &old) })
	if err := c.d.objs.XlbNode.Put(uint32(0), &c.node); err != nil {
		return fmt.Errorf("write node settings: %w", err)
	}
	return nil
}

// writeFragPool writes the fragment pool.
func (c *commit) writeFragPool() error {
	f, err := fragPoolABI(c.next.Node.Fragments)
	if err != nil {
		return err
	}
	old := c.d.cur.frag
	if f.equal(&old) {
		return nil
	}
	if err := c.write("fragment pool"); err != nil {
		return err
	}
	c.onUndo(func() error { return c.d.writeFragPool(&old) })
	if err := c.d.writeFragPool(&f); err != nil {
		return err
	}
	c.writtenFrag = &f
	return nil
}

// writeReals writes the reals that are new or changed, in one batch when
// there are many (a cold commit writes tens of thousands).
func (c *commit) writeReals() error {
	var (
		ids   []uint32
		infos []xlbRealInfo
		olds  []xlbRealInfo
	)
	for _, id := range c.diff.Reals {
		r, ok := c.next.Reals.Get(id)
		if !ok {
			continue
		}
		var old xlbRealInfo
		if o, had := c.cur.Reals.Get(id); had {
			if o == r {
				continue
			}
			old = realInfo(o)
		}
		ids, infos, olds = append(ids, id), append(infos, realInfo(r)), append(olds, old)
	}
	if len(ids) == 0 {
		return nil
	}
	c.onUndo(func() error { return c.d.putReals(ids, olds) })
	if err := c.write("reals"); err != nil {
		return err
	}
	c.stats.RealsWritten += len(ids)
	return c.d.putReals(ids, infos)
}

// patchTables changes the tables patched in place.
func (c *commit) patchTables() error {
	for _, key := range c.patches {
		lt := c.d.cur.live[key].table
		old, t := c.cur.Services[key].Table, c.next.Services[key].Table
		if err := c.write("patch " + key.String()); err != nil {
			return err
		}
		c.onUndo(func() error { lt.patch(t, old); return nil })
		c.stats.TableEntries += lt.patch(old, t)
		c.stats.TablesPatched++
	}
	return nil
}

// installTables puts the new tables into their slots (not yet used).
func (c *commit) installTables() error {
	if len(c.tables) == 0 {
		return nil
	}
	slots := make([]uint32, len(c.tables))
	tables := make([]*liveTable, len(c.tables))
	for i, p := range c.tables {
		slots[i], tables[i] = p.slot, p.inner
		c.stats.TableEntries += len(p.svc.Table)
	}
	if err := c.write("install tables"); err != nil {
		return err
	}
	c.onUndo(func() error { return c.d.retireSlots(slots) })
	if err := putTables(c.d.objs.XlbTables, slots, tables); err != nil {
		return fmt.Errorf("install %d tables: %w", len(c.tables), err)
	}
	c.stats.TablesReplaced = len(c.tables)
	return nil
}

// publishVIPs points each new or changed service's VIP at its table.
func (c *commit) publishVIPs() error {
	d := c.d
	slots := make(map[state.VIPKey]uint32, len(c.tables))
	for _, p := range c.tables {
		slots[p.key] = p.slot
	}
	for _, key := range c.diff.Services {
		s, ok := c.next.Services[key]
		if !ok {
			continue
		}
		old, had := c.cur.Services[key]
		ls := d.cur.live[key]
		slot, moved := slots[key]
		if !moved {
			slot = ls.slot
		}
		vi := vipInfo(s, slot)
		if had && vipInfo(old, ls.slot) == vi {
			continue
		}
		if !had {
			if err := d.resetSvcStats(s.SvcID); err != nil {
				return err
			}
			c.stats.ServicesAdded++
		}
		if err := c.write("publish " + key.String()); err != nil {
			return err
		}
		if had {
			c.onUndo(func() error { return d.publishVIP(key, vipInfo(old, ls.slot)) })
		} else {
			c.onUndo(func() error { return d.unpublishVIP(key) })
		}
		if err := d.publishVIP(key, vi); err != nil {
			return fmt.Errorf("publish vip %s: %w", key, err)
		}
		if had && moved {
			c.retire = append(c.retire, ls)
		}
	}
	return nil
}

// unpublishVIPs removes the VIPs of services that left.
func (c *commit) unpublishVIPs() error {
	d := c.d
	for _, key := range c.diff.Services {
		old, had := c.cur.Services[key]
		if _, stays := c.next.Services[key]; stays || !had {
			continue
		}
		ls := d.cur.live[key]
		if err := c.write("unpublish " + key.String()); err != nil {
			return err
		}
		c.onUndo(func() error { return d.publishVIP(key, vipInfo(old, ls.slot)) })
		if err := d.unpublishVIP(key); err != nil {
			return fmt.Errorf("delete vip %s: %w", key, err)
		}
		c.retire = append(c.retire, ls)
		c.stats.ServicesRemoved++
	}
	return nil
}

// syncVIPAddrs makes xlb_vip_addrs hold next's VIP addresses, when the
// set of services or their fragment settings changed.
func (c *commit) syncVIPAddrs() error {
	if !c.addrs {
		return nil
	}
	if err := c.write("vip addresses"); err != nil {
		return err
	}
	c.onUndo(func() error { return c.d.syncVIPAddrs(vipAddrSet(c.cur.Services)) })
	return c.d.syncVIPAddrs(vipAddrSet(c.next.Services))
}

// retireSlots points the slots of replaced and removed tables at the
// placeholder, which frees those tables once nothing else holds them.
func (c *commit) retireSlots() error {
	if len(c.retire) == 0 {
		return nil
	}
	slots := make([]uint32, len(c.retire))
	tables := make([]*liveTable, len(c.retire))
	for i, ls := range c.retire {
		slots[i], tables[i] = ls.slot, ls.table
	}
	if err := c.write("retire tables"); err != nil {
		return err
	}
	c.onUndo(func() error { return putTables(c.d.objs.XlbTables, slots, tables) })
	return c.d.retireSlots(slots)
}

// clearReals clears the reals that left (after every table that named
// them is gone).
func (c *commit) clearReals() error {
	var ids []uint32
	var olds, zeros []xlbRealInfo
	for _, id := range c.diff.Reals {
		if _, stays := c.next.Reals.Get(id); stays {
			continue
		}
		if o, had := c.cur.Reals.Get(id); had {
			ids, olds, zeros = append(ids, id), append(olds, realInfo(o)), append(zeros, xlbRealInfo{})
		}
	}
	if len(ids) == 0 {
		return nil
	}
	c.onUndo(func() error { return c.d.putReals(ids, olds) })
	if err := c.write("clear reals"); err != nil {
		return err
	}
	c.stats.RealsWritten += len(ids)
	return c.d.putReals(ids, zeros)
}
