package datapath

// Connection counts per backend (bpf/conns.h) and the sweep that frees
// idle connection-table ways (bpf/sweep.h).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cilium/ebpf"
)

// sweepChunk is how many buckets one run of the sweep program visits.
const sweepChunk = 16384

// SweepConntrack frees every way of the connection table idle past its
// timeout (or whose backend left or failed), uncounting it, and returns
// the ways freed and those left live. Each run of the sweep program
// visits up to sweepChunk buckets of one CPU's slice with
// compare-and-swaps; the forwarder keeps running meanwhile.
func (d *Datapath) SweepConntrack() (freed, live uint64, err error) {
	freed, live, _, err = d.sweepConntrack()
	return freed, live, err
}

// sweepConntrack is SweepConntrack, which also returns the fill of the
// fullest CPU's slice (live ways over its ways, 0..1).
func (d *Datapath) sweepConntrack() (freed, live uint64, fill float64, err error) {
	total := d.objs.XlbCt.MaxEntries()
	ncpu, err := ebpf.PossibleCPU()
	if err != nil || ncpu < 1 || total%uint32(ncpu) != 0 {
		ncpu = 1
	}
	slice := total / uint32(ncpu)
	for start := uint32(0); start < total; start += slice {
		var sliceLive uint64
		for at := start; at < start+slice; at += sweepChunk {
			now, err := d.now()
			if err != nil {
				return freed, live, fill, err
			}
			in := xlbSweepCtx{Start: at, Count: min(sweepChunk, start+slice-at), Now: now}
			var out xlbSweepCtx
			if _, err := d.objs.XlbCtSweep.Run(&ebpf.RunOptions{Context: in, ContextOut: &out}); err != nil {
				return freed, live, fill, fmt.Errorf("conntrack sweep: %w", err)
			}
			freed += uint64(out.Freed)
			sliceLive += uint64(out.Live)
		}
		live += sliceLive
		fill = max(fill, float64(sliceLive)/float64(uint64(slice)*uint64(len(xlbCtBucket{}.Way))))
	}
	return freed, live, fill, nil
}

// SweepTemplates frees every persistence template that expired
// (bpf/persist.h) and returns the slots freed and the templates left live.
func (d *Datapath) SweepTemplates() (freed, live uint64, err error) {
	now, err := d.now()
	if err != nil {
		return 0, 0, err
	}
	return d.sweepTemplatesAt(now)
}

// sweepTemplatesAt is SweepTemplates on the forwarder's clock read as now
// (ticks): tests run it ahead of the clock.
func (d *Datapath) sweepTemplatesAt(now uint64) (freed, live uint64, err error) {
	total := d.objs.XlbPersist.MaxEntries()
	for start := uint32(0); start < total; start += sweepChunk {
		in := xlbSweepCtx{Start: start, Count: min(sweepChunk, total-start), Now: now}
		var out xlbSweepCtx
		if _, err := d.objs.XlbPersistSweep.Run(&ebpf.RunOptions{Context: in, ContextOut: &out}); err != nil {
			return freed, live, fmt.Errorf("template sweep: %w", err)
		}
		freed += uint64(out.Freed)
		live += uint64(out.Live)
	}
	return freed, live, nil
}

// RunSweeper sweeps the connection table and the persistence templates
// every interval until ctx ends, and after each sweep of the table
// switches the defence modes by the fill it found (defence.go).
func (d *Datapath) RunSweeper(ctx context.Context, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	modes := d.defenceNow()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, live, fill, err := d.sweepConntrack()
		if err != nil {
			log.Error("conntrack sweep", "error", err)
			continue
		}
		def, next, err := d.defend(modes, fill, log)
		if err != nil {
			log.Error("defence modes", "error", err)
		}
		modes = next
		_, tpl, err := d.SweepTemplates()
		if err != nil {
			log.Error("persistence templates", "error", err)
			continue
		}
		_, lblc, err := d.SweepLBLC() // lblc.go
		if err != nil {
			log.Error("lblc entries", "error", err)
			continue
		}
		d.occupancy.Store(&Occupancy{Entries: live, Templates: tpl, LBLC: lblc, Defence: def})
	}
}

// Occupancy is what the last sweep found in use: live connection table
// entries, persistence templates and lblc (lblcr) entries; and the
// defence modes it left on.
type Occupancy struct {
	Entries, Templates, LBLC uint64
	Defence                  Defence
}

// LastOccupancy returns the last sweep's finding; nil before the first.
func (d *Datapath) LastOccupancy() *Occupancy { return d.occupancy.Load() }

// Conns are a backend's connection counts: the live ways of the
// connection table that name it (IPVS ActiveConn, InActConn).
type Conns struct {
	Active, Inactive int64
}

// RealConns returns the counts of real id.
func (d *Datapath) RealConns(id uint32) (Conns, error) {
	var v xlbRealConns
	if err := d.objs.XlbRealConns.Lookup(id, &v); err != nil {
		return Conns{}, fmt.Errorf("connections of real %d: %w", id, err)
	}
	return Conns{Active: max(v.Active, 0), Inactive: max(v.Inactive, 0)}, nil
}

// rebuildConns counts the table's live ways into xlb_real_conns when the
// counts are all zero but the table is not empty: the counts map is new
// (an upgrade from a version without counts, or its pin was recreated)
// while the table was kept. Flows that change while it counts may leave
// a count off by one until they end.
func (d *Datapath) rebuildConns() error {
	counted := false
	err := scanArray(d.objs.XlbRealConns, func(_ uint32, v *xlbRealConns) bool {
		counted = v.Active != 0 || v.Inactive != 0
		return !counted
	})
	if err != nil || counted {
		return err
	}
	counts := map[uint32]*xlbRealConns{}
	err = d.ScanConntrack(func(e CTEntry) bool {
		c := counts[e.RealID]
		if c == nil {
			c = &xlbRealConns{}
			counts[e.RealID] = c
		}
		if e.State == uint8(xlbXlbCtStateXLB_CT_ESTABLISHED) {
			c.Active++
		} else {
			c.Inactive++
		}
		return true
	})
	if err != nil {
		return err
	}
	for rid, c := range counts {
		if err := d.objs.XlbRealConns.Put(rid, c); err != nil {
			return fmt.Errorf("connections of real %d: %w", rid, err)
		}
	}
	return nil
}

// ScanTemplates calls fn for every live persistence template
// (bpf/persist.h) until fn returns false: Bucket is its slot, Tag the
// template hash's top 22 bits, RealID the backend of the service that
// set it, Age the time it lives on (the template's timeout after its last
// use, or longer while a connection of it lives); State is 0. Expired
// slots the sweep has not freed yet are not reported.
func (d *Datapath) ScanTemplates(fn func(CTEntry) bool) error {
	const chunk = 4096
	keys := make([]uint32, chunk)
	vals := make([]uint64, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := d.objs.XlbPersist.BatchLookup(&cursor, keys, vals, nil)
		now, cerr := d.now()
		if cerr != nil {
			return cerr
		}
		for i := 0; i < n; i++ {
			left, ok := templateLeft(vals[i], now)
			if !ok {
				continue
			}
			e := CTEntry{Bucket: keys[i], Tag: uint32(vals[i] >> persistTagShift),
				RealID: uint32(vals[i] >> persistRealShift & ctRealMask), Age: time.Duration(left) << ctTickShift}
			if !fn(e) {
				return nil
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read persistence templates: %w", err)
		}
	}
}

// templateLeft returns the ticks template w lives on after now, and
// whether it is live (persist_live, bpf/persist.h).
func templateLeft(w, now uint64) (uint64, bool) {
	left := (w - now) & persistTimeMask
	return left, w != 0 && left < 1<<(persistTimeBits-1)
}

// TemplateCapacity is the persistence templates' slots.
const TemplateCapacity = uint64(xlbXlbPersistLayoutXLB_PERSIST_SLOTS)

// The template layout (enum xlb_persist_layout).
const (
	persistTagShift  = xlbXlbPersistLayoutXLB_PERSIST_TAG_SHIFT
	persistRealShift = xlbXlbPersistLayoutXLB_PERSIST_REAL_SHIFT
	persistTimeBits  = xlbXlbPersistLayoutXLB_PERSIST_TIME_BITS
	persistTimeMask  = uint64(xlbXlbPersistLayoutXLB_PERSIST_TIME_MASK)
)
