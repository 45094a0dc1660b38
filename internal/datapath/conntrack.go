package datapath

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// CTEntry is one way of the connection table, decoded (see struct
// ct_bucket in bpf/types.h). The table is keyed by the flow hash: the
// 5-tuple is not stored.
type CTEntry struct {
	CPU, Bucket uint32
	Way         uint8
	Tag         uint32 // flow hash >> 37 (maglev.CTTag)
	RealID      uint32
	State       uint8 // enum xlb_ct_state: 1 SYN, 2 established, 3 closing
	Age         time.Duration
}

// A conntrack way as the forwarder packs it (enum xlb_ct_layout,
// bpf/types.h: tag 27 | real 19 | state 2 | last seen 16) and its clock.
const (
	ctTagShift   = xlbXlbCtLayoutXLB_CT_TAG_SHIFT
	ctRealShift  = xlbXlbCtLayoutXLB_CT_REAL_SHIFT
	ctRealMask   = uint64(xlbXlbCtLayoutXLB_CT_REAL_MASK)
	ctStateShift = xlbXlbCtLayoutXLB_CT_STATE_SHIFT
	ctStateMask  = uint64(xlbXlbCtLayoutXLB_CT_STATE_MASK)
	ctTimeMask   = uint64(xlbXlbCtLayoutXLB_CT_TIME_MASK)
	ctTickShift  = xlbXlbCtLayoutXLB_TICK_SHIFT // one tick is 2^ctTickShift ns
)

// RealsLimit is one more than the largest real id: the id has
// XLB_CT_REAL_BITS bits in a conntrack way.
const RealsLimit = uint32(xlbXlbCtLayoutXLB_MAX_REALS)

// decodeWay decodes way w of bucket (cpu, bucket), e as the forwarder
// packs it; false for a free way. Age is left to the caller, which knows
// the clock.
func decodeWay(cpu, bucket uint32, w int, e uint64) (CTEntry, bool) {
	state := uint8(e >> ctStateShift & ctStateMask)
	if state == uint8(xlbXlbCtStateXLB_CT_FREE) {
		return CTEntry{}, false
	}
	return CTEntry{CPU: cpu, Bucket: bucket, Way: uint8(w),
		Tag: uint32(e >> ctTagShift), RealID: uint32(e >> ctRealShift & ctRealMask), State: state}, true
}

// CTCapacity returns the table's entries over all CPUs.
func (d *Datapath) CTCapacity() uint64 {
	return uint64(d.objs.XlbCt.MaxEntries()) * uint64(len(xlbCtBucket{}.Way))
}

// ctNow is the forwarder's clock in conntrack ticks:
// bpf_ktime_get_coarse_ns() is the host's CLOCK_MONOTONIC_COARSE
// (clock.go).
func ctNow() (uint64, error) {
	ns, err := kernelMono(unix.CLOCK_MONOTONIC_COARSE)
	if err != nil {
		return 0, err
	}
	return ns >> ctTickShift, nil
}

// TestClockMap is the test variant's pinned map (in the pin directory)
// whose key 0 holds the nanoseconds its forwarder adds to the clock of
// conntrack, templates and lblc entries (bpf/xlb_variant.c). The normal
// build has no such map.
const TestClockMap = "xlb_test_clock"

// now is the clock of d's forwarder in conntrack ticks: ctNow, plus the
// test clock's offset in a binary built with the test variant (variant_on.go).
func (d *Datapath) now() (uint64, error) {
	ns, err := kernelMono(unix.CLOCK_MONOTONIC_COARSE)
	if err != nil {
		return 0, err
	}
	return (ns + d.clockOffset()) >> ctTickShift, nil
}

// ScanConntrack calls fn for every used way of the connection table, CPU
// by CPU, until fn returns false. Entries change while the scan runs; each
// 8-byte way is read whole. Ages are taken against the clock read after
// each batch: an entry refreshed during the scan is younger than that, not
// (with the 16-bit wrap) hours old and expired.
func (d *Datapath) ScanConntrack(fn func(CTEntry) bool) error {
	shift := CTGeometry(d.opts.ConntrackEntries)
	const chunk = 4096
	keys := make([]uint32, chunk)
	vals := make([]xlbCtBucket, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := d.objs.XlbCt.BatchLookup(&cursor, keys, vals, nil)
		now, cerr := d.now()
		if cerr != nil {
			return cerr
		}
		for i := 0; i < n; i++ {
			for w, e := range vals[i].Way {
				ent, used := decodeWay(keys[i]>>shift, keys[i]&(1<<shift-1), w, e)
				if !used {
					continue
				}
				ent.Age = time.Duration((now-e)&ctTimeMask) << ctTickShift
				if !fn(ent) {
					return nil
				}
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read connection table: %w", err)
		}
	}
}

// Timeout returns the idle timeout of an entry in state for protocol proto
// (6 TCP, 17 UDP), as the forwarder applies it.
func (d *Datapath) Timeout(state uint8, proto uint8) time.Duration {
	t := nodeFromInfo(d.cur.node).Timeouts
	switch {
	case proto != 6:
		return t.UDP
	case state == uint8(xlbXlbCtStateXLB_CT_SYN):
		return t.TCPSyn
	case state == uint8(xlbXlbCtStateXLB_CT_CLOSING):
		return t.TCPFin
	}
	return t.TCP
}
