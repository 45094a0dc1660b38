package harness

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"golang.org/x/sys/unix"
)

// MeasureSync measures the forwarder (TableXLB) with connection sync's
// decision records off and on, side by side: one instance, and in each
// round of runs both have one run, so drift and neighbours affect them
// alike. While the runs go on, a reader on another CPU takes the records
// as xlbd's syncer does; a run in which a record was lost (the reader fell
// behind), or after which the reader does not get one record per new flow,
// fails the measurement, as its figure would not be of the record written.
// Results: off, then on (Results.Sync).
func MeasureSync(o Options) ([]Results, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	o.Repeat = min(o.Repeat, SyncRunPackets)
	return measureSpecs([]targetSpec{{table: TableXLB, noFIB: o.NoFIB}, {table: TableXLB, noFIB: o.NoFIB, sync: true}}, o)
}

// SyncRunPackets is the most packets of a MeasureSync run: half of what
// one CPU's part of the forwarder's record buffer holds, so a run's records
// fit even when the reader is kept off a CPU for the whole run (a shared
// machine).
const SyncRunPackets = uint32(datapath.SyncSlotsPerCPU / 2)

// syncState is the harness's side of connection sync: the switch as last
// set, the reader, and the lost-record count at the last check.
type syncState struct {
	on      bool
	lost    uint64
	expect  uint64 // new flows created with records on
	records atomic.Uint64
	stop    chan struct{}
	done    chan struct{}
}

// startSync starts the record reader if a target has sync on.
func (h *harness) startSync(specs []targetSpec) error {
	any := false
	for _, s := range specs {
		any = any || s.sync
	}
	if !any {
		return nil
	}
	r, err := h.dp.SyncReader()
	if err != nil {
		return err
	}
	h.sync.stop, h.sync.done = make(chan struct{}), make(chan struct{})
	go h.readSync(r)
	return nil
}

// readSync takes the records off the forwarder's buffer until stopped, on
// a thread kept off the measuring CPU when there is another.
func (h *harness) readSync(r *datapath.SyncReader) {
	defer close(h.sync.done)
	defer r.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if n := runtime.NumCPU(); n > 1 {
		var set unix.CPUSet
		for c := range n {
			if c != h.o.CPU {
				set.Set(c)
			}
		}
		unix.SchedSetaffinity(0, &set) // best effort
	}
	buf := make([]datapath.SyncDecision, 0, 4096)
	for {
		select {
		case <-h.sync.stop:
			return
		default:
		}
		got, err := r.Read(buf[:0], 5*time.Millisecond)
		if err != nil {
			return
		}
		h.sync.records.Add(uint64(len(got)))
	}
}

// stopSync stops the reader, if any.
func (h *harness) stopSync() {
	if h.sync.stop != nil {
		close(h.sync.stop)
		<-h.sync.done
		h.sync.stop = nil
	}
}

// syncFor sets the forwarder's records as target t wants them.
func (h *harness) syncFor(t *target) error {
	if t.res.Sync == h.sync.on {
		return nil
	}
	h.sync.on = t.res.Sync
	return h.dp.SetSync(t.res.Sync, datapath.SyncRefreshShift)
}

// syncCheck checks a run of t (r): no record was lost since the last
// check, and with records on, the reader takes one for every flow the run
// created (waiting up to 2 s, so every run starts with an empty buffer).
func (h *harness) syncCheck(t *target, r runResult) error {
	if h.sync.stop == nil {
		return nil
	}
	c, err := h.dp.SyncCounters()
	if err != nil {
		return err
	}
	if lost := c.Lost - h.sync.lost; lost > 0 {
		h.sync.lost = c.Lost
		return fmt.Errorf("%w: %d decision records lost (the reader fell behind; %d read so far)",
			ErrCounters, lost, h.sync.records.Load())
	}
	if !t.res.Sync {
		return nil
	}
	h.sync.expect += r.delta[benchXlbStatXLB_STAT_CT_MISS]
	for end := time.Now().Add(2 * time.Second); h.sync.records.Load() < h.sync.expect; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			return fmt.Errorf("%w: %d decision records read, want one per new flow: %d", ErrCounters, h.sync.records.Load(), h.sync.expect)
		}
	}
	return nil
}
