package plan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/state"
)

// tableEntry is a table in the Planner's cache.
type tableEntry struct {
	table []uint32 // nil while being built
	gen   uint64   // the last plan that used it
	key   string   // its key in the cache
}

// useTable gives svc the table of key tk: the cached one if the last
// plan or this one used it, else one built by a new job (j) or by
// another service's job (same).
func (p *Planner) useTable(svc *state.Service, tk string, j buildJob, bl *builds, same *[]sameTable) *tableEntry {
	e := p.tables[tk]
	switch {
	case e != nil && e.table != nil && e.gen+1 >= p.gen:
		e.gen = p.gen
		svc.Table = e.table
	case e != nil && e.gen == p.gen:
		*same = append(*same, sameTable{svc, e}) // built by another service's job
	default:
		e = &tableEntry{gen: p.gen, key: tk}
		p.tables[tk] = e
		j.entry = e
		bl.add(&j)
	}
	return e
}

// finishTables waits for the jobs' tables, hands them to the services
// that share them and drops the tables this plan did not use from the
// cache: every one (all), or those of stale, which holds every table the
// last plan used that this one may not have.
func (p *Planner) finishTables(bl *builds, same []sameTable, stale []*tableEntry, all bool) error {
	if err := bl.wait(); err != nil {
		return err
	}
	for _, j := range bl.jobs {
		j.entry.table = j.svc.Table
	}
	for _, x := range same {
		x.svc.Table = x.entry.table
	}
	if !all {
		for _, e := range stale {
			if e.gen != p.gen && p.tables[e.key] == e {
				delete(p.tables, e.key)
			}
		}
		return nil
	}
	for k, e := range p.tables {
		if e.gen != p.gen {
			delete(p.tables, k)
		}
	}
	return nil
}

// sameTable is a service whose table another service's job builds.
type sameTable struct {
	svc   *state.Service
	entry *tableEntry
}

// buildJob is one Maglev population the plan needs.
type buildJob struct {
	svc    *state.Service
	name   string
	entry  *tableEntry
	usable []config.Backend
	m      uint32
	ids    map[netip.Addr]uint32
	err    error
}

// builds runs the Maglev populations a plan needs on every CPU, starting
// with the first ones listed while the plan goes on (population is the
// bulk of a cold plan, which lists thousands). The first job waits for a
// second: a plan of one table (one backend changed) builds it itself in
// wait, rather than waking workers on other threads and waiting for them.
type builds struct {
	workers int // 0: GOMAXPROCS
	jobs    []*buildJob
	ch      chan *buildJob // nil until the second job
	wg      sync.WaitGroup
	done    bool // the jobs are built
}

// add lists j and, from the second job on, hands the jobs to workers.
func (bl *builds) add(j *buildJob) {
	bl.jobs = append(bl.jobs, j)
	if len(bl.jobs) == 1 {
		return
	}
	if bl.ch == nil {
		bl.ch = make(chan *buildJob, 64)
		n := bl.workers
		if n <= 0 {
			n = runtime.GOMAXPROCS(0)
		}
		for range n {
			bl.wg.Go(func() {
				var tb tableBuilder
				for j := range bl.ch {
					j.run(&tb)
				}
			})
		}
		bl.ch <- bl.jobs[0]
	}
	bl.ch <- j
}

// run builds j's table with tb.
func (j *buildJob) run(tb *tableBuilder) {
	t, err := tb.build(j.usable, j.m, j.ids)
	if err != nil {
		j.err = fmt.Errorf("service %s: %w", j.name, err)
		return
	}
	j.svc.Table = t
}

// wait waits for every job listed and returns their errors, in the order
// listed. It may be called more than once.
func (bl *builds) wait() error {
	if !bl.done {
		bl.done = true
		if bl.ch != nil {
			close(bl.ch)
			bl.wg.Wait()
			bl.ch = nil
		} else if len(bl.jobs) == 1 {
			var tb tableBuilder
			bl.jobs[0].run(&tb)
		}
	}
	var errs []error
	for _, j := range bl.jobs {
		if j.err != nil {
			errs = append(errs, j.err)
		}
	}
	return errors.Join(errs...)
}

// tableKey identifies a table by everything it is computed from: m, then
// per usable backend its address (16 bytes, and whether it is IPv4), weight
// and real id, all fixed width.
func tableKey(m uint32, usable []config.Backend, ids map[netip.Addr]uint32) string {
	b := make([]byte, 0, 4+len(usable)*25)
	b = binary.LittleEndian.AppendUint32(b, m)
	for _, u := range usable {
		a := u.Addr.As16()
		b = append(b, a[:]...)
		if u.Addr.Is4() {
			b = append(b, 4)
		} else {
			b = append(b, 6)
		}
		b = binary.LittleEndian.AppendUint32(b, u.Weight)
		b = binary.LittleEndian.AppendUint32(b, ids[u.Addr])
	}
	return string(b)
}

// tableBuilder builds tables, keeping its working memory from one to the
// next (one per goroutine).
type tableBuilder struct {
	mb   maglev.Builder
	bs   []maglev.Backend
	rids []uint32
}

// build returns the Maglev table over usable as real ids; all zero (drop)
// when there is no usable backend. The backends are named by their
// canonical address string (maglev.Backend.Name).
func (tb *tableBuilder) build(usable []config.Backend, m uint32, ids map[netip.Addr]uint32) ([]uint32, error) {
	out := make([]uint32, m)
	if len(usable) == 0 {
		return out, nil
	}
	tb.bs, tb.rids = tb.bs[:0], tb.rids[:0]
	for _, b := range usable {
		tb.bs = append(tb.bs, maglev.Backend{Name: b.Addr.String(), Weight: b.Weight})
		tb.rids = append(tb.rids, ids[b.Addr])
	}
	if err := tb.mb.Fill(out, tb.bs, tb.rids, m); err != nil {
		return nil, err
	}
	return out, nil
}
