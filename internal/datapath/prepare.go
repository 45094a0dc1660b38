package datapath

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/xlbproject/xlb/internal/state"
)

// pendingTable is a new inner map made for a service, not yet installed.
type pendingTable struct {
	key   state.VIPKey
	svc   *state.Service
	slot  uint32
	inner *liveTable
}

// prepareTables checks every changed table of next: each entry must be 0
// or a real of the table's own service. A table of the same service and
// size as the one in the maps is patched in place (c.patches); every other
// changed table is filled into a new inner map (c.tables) for its
// service's spare slot. The work is spread over all CPUs when there are
// many tables (a cold commit has thousands). Nothing the forwarder reads
// is written.
func (c *commit) prepareTables() error {
	for _, key := range c.diff.Services {
		s, ok := c.next.Services[key]
		if !ok {
			continue
		}
		old := c.cur.Services[key]
		ls := c.d.cur.live[key]
		switch {
		case old != nil && old.SvcID == s.SvcID && state.SameTable(old.Table, s.Table):
			// checked when it was applied
		case old != nil && old.SvcID == s.SvcID && len(old.Table) == len(s.Table) && ls.table != nil:
			c.patches = append(c.patches, key)
		default:
			slot := 2 * s.SvcID
			if old != nil && ls.slot == slot {
				slot++
			}
			c.tables = append(c.tables, pendingTable{key: key, svc: s, slot: slot})
		}
	}
	n := len(c.tables) + len(c.patches)
	errs := make([]error, n)
	forEach(n, func(i int) { errs[i] = c.prepareTable(i) })
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// prepareTable checks job i's table (i < len(c.tables): a new table,
// which it also makes and fills; else a patch).
func (c *commit) prepareTable(i int) error {
	var key state.VIPKey
	if i < len(c.tables) {
		key = c.tables[i].key
	} else {
		key = c.patches[i-len(c.tables)]
	}
	s := c.next.Services[key]
	foreign := func(rid uint32) error {
		return fmt.Errorf("service %s: table refers to real %d, not one of its own", key, rid)
	}
	if i >= len(c.tables) || c.owner == nil {
		if rid, ok := checkTable(s, c.owner, &c.next.Reals); !ok {
			return foreign(rid)
		}
	}
	if i >= len(c.tables) {
		return nil
	}
	inner, err := makeTable(len(s.Table))
	if err != nil {
		return fmt.Errorf("service %s: %w", key, err)
	}
	c.tables[i].inner = inner // closed by the commit unless installed
	if c.owner == nil {
		copy(inner.entries(len(s.Table)), s.Table)
	} else if rid, ok := copyChecked(inner.entries(len(s.Table)), s.Table, c.owner, s.SvcID); !ok {
		return foreign(rid)
	}
	inner.release() // opened again to install it (table.go)
	return nil
}

// forEach runs job(0..n-1), on all CPUs when n is large.
func forEach(n int, job func(int)) {
	workers := min(runtime.GOMAXPROCS(0), n/16+1)
	if workers <= 1 {
		for i := range n {
			job(i)
		}
		return
	}
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				job(i)
			}
		})
	}
	wg.Wait()
}

// copyChecked copies t to dst, checking each entry as checkTable does
// with owner on the way (one pass over a table that is rarely in cache).
func copyChecked(dst, t, owner []uint32, svc uint32) (uint32, bool) {
	dst = dst[:len(t)]
	for i, rid := range t {
		dst[i] = rid
		if rid != 0 && (rid >= uint32(len(owner)) || owner[rid] != svc) {
			return rid, false
		}
	}
	return 0, true
}

// checkTable reports whether every entry of s's table is 0 or a real of
// s's service (owner[id], or reals when owner is nil), and if not, the
// first one that is not.
func checkTable(s *state.Service, owner []uint32, reals *state.Reals) (uint32, bool) {
	if owner != nil {
		return copyChecked(make([]uint32, len(s.Table)), s.Table, owner, s.SvcID)
	}
	// A table names a few reals many times: each is looked up once, then
	// found in a small direct-mapped cache of reals known good.
	var good [64]uint32
	for _, rid := range s.Table {
		if rid == 0 || good[rid%64] == rid {
			continue
		}
		if r, ok := reals.Get(rid); !ok || r.SvcID != s.SvcID {
			return rid, false
		}
		good[rid%64] = rid
	}
	return 0, true
}
