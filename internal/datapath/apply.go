package datapath

import (
	"errors"
	"fmt"
	"time"

	"github.com/xlbproject/xlb/internal/crashpoint"
	"github.com/xlbproject/xlb/internal/state"
)

// applied is what this process knows to be in the maps.
type applied struct {
	st   *state.State // the state the maps hold
	node xlbNodeInfo
	frag fragABI // the fragment pool as written
	live map[state.VIPKey]liveService
}

// liveService is where a service's table is in the maps.
type liveService struct {
	slot  uint32     // index in xlb_tables
	table *liveTable // the inner map in slot, mapped for in-place updates
}

// Snapshot returns the state the maps hold (what Open adopted plus what
// Apply wrote). It is not changed afterwards.
func (d *Datapath) Snapshot() *state.State { return d.cur.st }

// ApplyStats says what an Apply wrote.
type ApplyStats struct {
	RealsWritten    int
	TablesReplaced  int // new inner maps swapped in
	TablesPatched   int // tables changed in place
	TableEntries    int // entries of the replaced tables that differ from the old ones
	ServicesAdded   int
	ServicesRemoved int
	Duration        time.Duration
}

// Apply makes the maps hold next: Commit of the diff from the state they
// hold.
func (d *Datapath) Apply(next *state.State) (ApplyStats, error) {
	return d.Commit(next, state.Compare(d.cur.st, next))
}

// Commit makes the maps hold next, writing what diff names. diff is used
// when it leads from the state the maps hold (From is its generation) to
// next (To); otherwise Commit compares the two states itself.
//
// The steps keep every packet on a complete state (each is a method of
// commit below, in this order):
//
//  1. check: capacities, ids, node settings; nothing written.
//  2. prepare tables: every changed table is checked (only reals of its
//     own service) and, unless it is patched in place, filled into a new
//     inner map; nothing the forwarder reads is written.
//     The first commit of a process then clears the tables and schedulers
//     no published VIP reaches (scrub.go: what a process killed in the
//     middle of a commit left), and has the VIP address set rewritten.
//  3. node settings and 4. the fragment pool.
//  5. reals are written before any table refers to them.
//  6. a changed table of the same size is patched in place: each changed
//     64-bit element (two slots) is one atomic store into the mmapped
//     inner map, so a packet reads either the old or the new backend of
//     its slot, both valid;
//  7. new tables are installed in the services' spare slots of xlb_tables
//     (slot 2*svc_id + generation), in one batch;
//  8. each VIP entry is pointed at its new slot: one update per VIP, so
//     each service switches atomically from its complete old table to its
//     complete new one; 9. removed VIPs are unpublished;
//  10. the VIP address set follows the services;
//  11. slots no longer referenced point at an empty placeholder (one
//     batch), which frees the old tables; 12. reals that left are cleared.
//
// Updates of a map-of-maps wait for an RCU grace period in the kernel, so
// they are batched: a commit costs at most two grace periods whatever the
// number of services.
//
// A commit is atomic: if any write fails, what the commit wrote is undone
// in reverse order, and the maps hold the previous state again (Snapshot
// is unchanged). Should an undo fail too, the maps are read back so that
// Snapshot tells what they hold.
func (d *Datapath) Commit(next *state.State, diff state.Diff) (ApplyStats, error) {
	start := time.Now()
	cur := d.cur.st
	if cur.Generation == 0 || diff.From != cur.Generation || diff.To != next.Generation || next.Generation == 0 {
		diff = state.Compare(cur, next)
	}
	c := &commit{d: d, cur: cur, next: next, diff: diff}
	defer c.closeUnused()
	if err := c.run(); err != nil {
		if uerr := c.undo(); uerr != nil {
			d.log.Error("undo of a failed commit failed; reading the maps back", "error", uerr)
			if rerr := d.loadApplied(); rerr != nil {
				return c.stats, errors.Join(err, uerr, rerr)
			}
			return c.stats, errors.Join(err, fmt.Errorf("undo: %w", uerr))
		}
		return c.stats, err
	}
	c.finish()
	c.stats.Duration = time.Since(start)
	return c.stats, nil
}

// commit is one Commit in progress.
type commit struct {
	d           *Datapath
	cur, next   *state.State
	diff        state.Diff
	stats       ApplyStats
	writes      int            // kernel writes made (for fault injection)
	undos       []func() error // what undoes each write made, in order
	node        xlbNodeInfo
	owner       []uint32 // owner[real id] = its service, for large commits
	tables      []pendingTable
	patches     []state.VIPKey
	retire      []liveService // slots (and their tables) to free
	addrs       bool          // the VIP address set may change
	writtenFrag *fragABI      // the fragment pool written, if it changed
}

// commitStep is one named step of a commit.
type commitStep struct {
	name string
	run  func() error
}

// steps are the commit's steps in the order run does them.
func (c *commit) steps() []commitStep {
	return []commitStep{
		{"check", c.check}, {"prepare tables", c.prepareTables}, {"scrub", c.scrub},
		{"node", c.writeNode}, {"fragment pool", c.writeFragPool}, {"reals", c.writeReals},
		{"patch tables", c.patchTables}, {"install tables", c.installTables},
		{"schedulers", c.writeSched}, {"publish", c.publishVIPs}, {"unpublish", c.unpublishVIPs},
		{"clear schedulers", c.clearSched}, {"vip addresses", c.syncVIPAddrs},
		{"retire tables", c.retireSlots}, {"clear reals", c.clearReals},
	}
}

// CommitSteps names Commit's steps in order. A build with the
// xlb_crashpoints tag (tests only) can stop dead after each: its crash
// point is "datapath: after " and the step's name.
func CommitSteps() []string {
	var names []string
	for _, s := range (&commit{}).steps() {
		names = append(names, s.name)
	}
	return names
}

// run does the steps in order.
func (c *commit) run() error {
	for _, step := range c.steps() {
		if err := step.run(); err != nil {
			return err
		}
		crashpoint.At("datapath: after " + step.name)
	}
	return nil
}

// write is called before each write to a map the forwarder reads; what
// names it. A test's fault hook may fail it.
func (c *commit) write(what string) error {
	c.writes++
	if h := c.d.faultHook; h != nil {
		if err := h(what, c.writes); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// onUndo records how to undo a write about to be made.
func (c *commit) onUndo(f func() error) { c.undos = append(c.undos, f) }

// undo undoes every write made, last first.
func (c *commit) undo() error {
	var errs []error
	for i := len(c.undos) - 1; i >= 0; i-- {
		if err := c.undos[i](); err != nil {
			errs = append(errs, err)
		}
	}
	c.undos = nil
	return errors.Join(errs...)
}

// finish records next as what the maps hold.
func (c *commit) finish() {
	d := c.d
	live := make(map[state.VIPKey]liveService, len(c.next.Services))
	for k, ls := range d.cur.live {
		if _, ok := c.next.Services[k]; ok {
			live[k] = ls
		}
	}
	for i, p := range c.tables {
		live[p.key] = liveService{slot: p.slot, table: p.inner}
		c.tables[i].inner = nil // owned by d.cur from here on
	}
	for _, ls := range c.retire {
		if ls.table != nil {
			ls.table.close()
		}
	}
	st := c.next.Clone()
	st.Generation = c.next.Generation
	d.cur = applied{st: st, node: c.node, frag: d.cur.frag, live: live}
	d.setDefenceSettings(&st.Node)
	d.scrubbed = true
	if c.writtenFrag != nil {
		d.cur.frag = *c.writtenFrag
	}
}

// closeUnused closes the new tables a failed commit did not install.
func (c *commit) closeUnused() {
	for _, p := range c.tables {
		if p.inner != nil {
			p.inner.close()
		}
	}
}
