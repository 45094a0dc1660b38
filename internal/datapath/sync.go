package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// Connection sync's side of the data plane (bpf/sync.h): the forwarder's
// decision records, read from xlb_sync_ring, and the installer of peers'
// decisions, xlb_sync_apply, run through BPF_PROG_TEST_RUN.

// SyncDecision is one decision the forwarder reported (struct sync_event).
type SyncDecision struct {
	Hash   uint64 // flow hash v1
	RealID uint32 // this node's real id
	State  uint8  // enum xlb_ct_state
	Kind   uint8  // SyncNew, SyncState or SyncRefresh
}

// Why a decision was reported (enum xlb_sync_kind).
const (
	SyncNew     = uint8(xlbXlbSyncKindXLB_SYNC_EV_NEW)
	SyncState   = uint8(xlbXlbSyncKindXLB_SYNC_EV_STATE)
	SyncRefresh = uint8(xlbXlbSyncKindXLB_SYNC_EV_REFRESH)
)

// SyncRefreshShift is the default refresh period of a live flow: every
// 2^SyncRefreshShift conntrack ticks.
const SyncRefreshShift = uint32(xlbXlbSyncConstXLB_SYNC_REFRESH_SHIFT)

// syncApplyMax is how many installs one run of xlb_sync_apply takes.
const syncApplyMax = int(xlbXlbSyncConstXLB_SYNC_APPLY_MAX)

// syncInstallSize is sizeof(struct sync_install).
const syncInstallSize = 24

// SetSync turns the forwarder's decision records on or off; a live flow
// is reported again every 2^refreshShift conntrack ticks.
func (d *Datapath) SetSync(enabled bool, refreshShift uint32) error {
	c := xlbSyncConf{RefreshShift: refreshShift}
	if enabled {
		c.Enabled = 1
	}
	if err := d.objs.XlbSyncConf.Put(uint32(0), c); err != nil {
		return fmt.Errorf("write xlb_sync_conf: %w", err)
	}
	return nil
}

// CTShift is log2 of the connection table's buckets per CPU: the low bits
// of a flow hash that place its entry.
func (d *Datapath) CTShift() uint32 { return CTGeometry(d.opts.ConntrackEntries) }

// SyncReader reads the forwarder's decision records. One per process.
type SyncReader struct {
	r   *ringbuf.Reader
	rec ringbuf.Record
}

// ErrSyncClosed is returned by Read after Close.
var ErrSyncClosed = errors.New("sync reader closed")

// SyncReader opens the decision ring buffer.
func (d *Datapath) SyncReader() (*SyncReader, error) {
	r, err := ringbuf.NewReader(d.objs.XlbSyncRing)
	if err != nil {
		return nil, fmt.Errorf("open sync ring buffer: %w", err)
	}
	return &SyncReader{r: r}, nil
}

// Read appends to buf the records waiting, up to its capacity, waiting
// at most wait for the first one. It returns buf unchanged (no error) when
// none came.
func (s *SyncReader) Read(buf []SyncDecision, wait time.Duration) ([]SyncDecision, error) {
	s.r.SetDeadline(time.Now().Add(wait))
	for len(buf) < cap(buf) {
		err := s.r.ReadInto(&s.rec)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return buf, nil
		case errors.Is(err, ringbuf.ErrClosed):
			return buf, ErrSyncClosed
		case err != nil:
			return buf, fmt.Errorf("read sync ring buffer: %w", err)
		}
		if len(s.rec.RawSample) < 16 {
			continue
		}
		b := s.rec.RawSample
		buf = append(buf, SyncDecision{Hash: binary.LittleEndian.Uint64(b), RealID: binary.LittleEndian.Uint32(b[8:]),
			State: b[12], Kind: b[13]})
		s.r.SetDeadline(time.Now()) // the rest: only what is there already
	}
	return buf, nil
}

// Close stops the reader; a blocked Read returns ErrSyncClosed.
func (s *SyncReader) Close() error { return s.r.Close() }

// SyncInstall is a peer's decision in this node's terms.
type SyncInstall struct {
	Hash     uint64
	HashBits uint8 // low bits of Hash known (64, or the sender's bucket bits for a bulk copy)
	RealID   uint32
	State    uint8  // enum xlb_ct_state, never free
	Proto    uint8  // 6 or 17
	Age      uint16 // conntrack ticks since the sender last saw the flow
}

// InstallSync writes peers' decisions into this node's connection table
// (the slice of the CPU the caller runs on; the forwarder finds them from
// any CPU). A flow this node tracks live to another real keeps its entry.
func (d *Datapath) InstallSync(in []SyncInstall) error {
	buf := make([]byte, 0, syncApplyMax*syncInstallSize)
	for len(in) > 0 {
		n := min(len(in), syncApplyMax)
		buf = buf[:0]
		for _, s := range in[:n] {
			buf = binary.LittleEndian.AppendUint64(buf, s.Hash)
			buf = binary.LittleEndian.AppendUint32(buf, s.RealID)
			buf = binary.LittleEndian.AppendUint16(buf, s.Age)
			buf = append(buf, s.State, s.HashBits, s.Proto, 0, 0, 0, 0, 0, 0, 0)
		}
		ret, err := d.objs.XlbSyncApply.Run(&ebpf.RunOptions{Data: buf, Repeat: 1})
		if err != nil {
			return fmt.Errorf("run xlb_sync_apply: %w", err)
		}
		if ret != 2 { // XDP_PASS
			return fmt.Errorf("xlb_sync_apply answered %d (node settings missing?)", ret)
		}
		in = in[n:]
	}
	return nil
}

// SyncCounters are the data plane's sync counters, summed over CPUs
// (records made are counted by their reader).
type SyncCounters struct {
	Lost, Applied, Kept, Skipped uint64
}

// SyncCounters reads xlb_sync_stats.
func (d *Datapath) SyncCounters() (SyncCounters, error) {
	var c SyncCounters
	dst := []*uint64{&c.Lost, &c.Applied, &c.Kept, &c.Skipped}
	for i, p := range dst {
		var per []uint64
		if err := d.objs.XlbSyncStats.Lookup(uint32(i+1), &per); err != nil {
			return c, fmt.Errorf("read xlb_sync_stats: %w", err)
		}
		for _, v := range per {
			*p += v
		}
	}
	return c, nil
}

// CTTick is one conntrack tick, the unit of SyncInstall.Age.
const CTTick = time.Duration(1) << ctTickShift
