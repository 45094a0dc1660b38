package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"
)

// Connection sync's side of the data plane (bpf/sync.h): the forwarder's
// decision records, read from xlb_sync_log (synclog.go), and the installer of peers'
// decisions, xlb_sync_apply, run through BPF_PROG_TEST_RUN.

// SyncDecision is one decision the forwarder reported (struct sync_event).
type SyncDecision struct {
	Hash   uint64 // flow hash v1
	RealID uint32 // this node's real id
	State  uint8  // enum xlb_ct_state
	Kind   uint8  // SyncNew, SyncState, SyncRefresh or SyncTemplate
	// Hold is, for SyncTemplate, the ticks the template lives on (one
	// refresh period more than here); Hash is then the client's source
	// hash (internal/maglev SourceHash), State 0.
	Hold uint16
}

// Why a decision was reported (enum xlb_sync_kind).
const (
	SyncNew     = uint8(xlbXlbSyncKindXLB_SYNC_EV_NEW)
	SyncState   = uint8(xlbXlbSyncKindXLB_SYNC_EV_STATE)
	SyncRefresh = uint8(xlbXlbSyncKindXLB_SYNC_EV_REFRESH)
	// SyncTemplate: a persistence template was made, or held on past a
	// refresh boundary.
	SyncTemplate = uint8(xlbXlbSyncKindXLB_SYNC_EV_TEMPLATE)
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

// SyncReader reads the forwarder's decision records (xlb_sync_log). One
// per process: it owns the CPUs' tails.
type SyncReader struct {
	mu     sync.Mutex
	log    *syncLog // nil once closed
	closed chan struct{}
	once   sync.Once
}

// ErrSyncClosed is returned by Read after Close.
var ErrSyncClosed = errors.New("sync reader closed")

// syncPoll is how often Read looks at the CPUs' heads while it waits (the
// forwarder wakes nobody).
const syncPoll = time.Millisecond

// SyncReader maps the decision records into this process.
func (d *Datapath) SyncReader() (*SyncReader, error) {
	l, err := openSyncLog(d.objs.XlbSyncLog, d.objs.XlbSyncCpus)
	if err != nil {
		return nil, fmt.Errorf("open sync records: %w", err)
	}
	return &SyncReader{log: l, closed: make(chan struct{})}, nil
}

// take appends the records there are; ErrSyncClosed after Close.
func (s *SyncReader) take(buf []SyncDecision) ([]SyncDecision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log == nil {
		return buf, ErrSyncClosed
	}
	return s.log.take(buf), nil
}

// Read appends to buf the records waiting, up to its capacity, waiting
// at most wait for the first one. It returns buf unchanged (no error) when
// none came.
func (s *SyncReader) Read(buf []SyncDecision, wait time.Duration) ([]SyncDecision, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	tick := time.NewTicker(syncPoll)
	defer tick.Stop()
	for {
		n := len(buf)
		var err error
		if buf, err = s.take(buf); err != nil || len(buf) > n || len(buf) == cap(buf) {
			return buf, err
		}
		select {
		case <-s.closed:
			return buf, ErrSyncClosed
		case <-t.C:
			return s.take(buf)
		case <-tick.C:
		}
	}
}

// Close stops the reader and unmaps the records; a waiting Read returns
// ErrSyncClosed.
func (s *SyncReader) Close() error {
	s.once.Do(func() { close(s.closed) })
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log != nil {
		s.log.close()
		s.log = nil
	}
	return nil
}

// SyncInstall is a peer's decision in this node's terms.
type SyncInstall struct {
	Hash     uint64
	HashBits uint8 // low bits of Hash known (64, or the sender's bucket bits for a bulk copy)
	RealID   uint32
	State    uint8  // enum xlb_ct_state, never free
	Proto    uint8  // 6 or 17
	Age      uint16 // conntrack ticks since the sender last saw the flow
	// Template: a persistence template, not a flow: Hash is the client's
	// source hash, Age the ticks it lives on from now (HashBits, State
	// and Proto unused). A live template of this node is kept.
	Template bool
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
			kind := uint8(0)
			if s.Template {
				kind = SyncTemplate
			}
			buf = append(buf, s.State, s.HashBits, s.Proto, kind, 0, 0, 0, 0, 0, 0)
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
