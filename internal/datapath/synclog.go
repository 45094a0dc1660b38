package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// syncSlots is how many records each CPU's part of xlb_sync_log holds.
const syncSlots = uint64(xlbXlbSyncConstXLB_SYNC_SLOTS)

// SyncSlotsPerCPU is how many decision records each CPU's part of the
// forwarder's buffer holds until xlbd takes them.
const SyncSlotsPerCPU = int(syncSlots)

// syncEventSize is sizeof(struct sync_event); syncCPUSize of struct sync_cpu.
const (
	syncEventSize = 16
	syncCPUSize   = 64
)

// syncLog is xlbd's view of the forwarder's decision records
// (bpf/sync.h sync_put): xlb_sync_log and xlb_sync_cpus mapped into this
// process. Each CPU writes its own part and publishes its head after the
// record; the reader takes the records between its tail and the head and
// then moves the tail, which frees their slots.
type syncLog struct {
	recs, cpus []byte
	ncpu       int
}

// openSyncLog maps the two arrays.
func openSyncLog(log, cpus *ebpf.Map) (*syncLog, error) {
	n := int(cpus.MaxEntries())
	if uint64(log.MaxEntries()) != uint64(n)*syncSlots {
		return nil, fmt.Errorf("xlb_sync_log has %d slots, want %d CPUs of %d", log.MaxEntries(), n, syncSlots)
	}
	recs, err := mapArray(log, int(log.MaxEntries())*syncEventSize)
	if err != nil {
		return nil, err
	}
	c, err := mapArray(cpus, n*syncCPUSize)
	if err != nil {
		unix.Munmap(recs)
		return nil, err
	}
	return &syncLog{recs: recs, cpus: c, ncpu: n}, nil
}

// mapArray maps size bytes of an mmapable array.
func mapArray(m *ebpf.Map, size int) ([]byte, error) {
	page := unix.Getpagesize()
	b, err := unix.Mmap(m.FD(), 0, (size+page-1)/page*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s into memory: %w", m, err)
	}
	return b, nil
}

// word is the 8-byte field at off of cpu's struct sync_cpu.
func (l *syncLog) word(cpu, off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&l.cpus[cpu*syncCPUSize+off]))
}

// take appends the records written since the last take, up to buf's
// capacity, and frees their slots.
func (l *syncLog) take(buf []SyncDecision) []SyncDecision {
	for cpu := 0; cpu < l.ncpu && len(buf) < cap(buf); cpu++ {
		head := atomic.LoadUint64(l.word(cpu, 0))
		tailp := l.word(cpu, 8)
		tail := atomic.LoadUint64(tailp)
		for ; tail != head && len(buf) < cap(buf); tail++ {
			off := (uint64(cpu)*syncSlots + tail%syncSlots) * syncEventSize
			b := l.recs[off : off+syncEventSize]
			buf = append(buf, SyncDecision{Hash: binary.LittleEndian.Uint64(b), RealID: binary.LittleEndian.Uint32(b[8:]),
				State: b[12], Kind: b[13], Hold: binary.LittleEndian.Uint16(b[14:])})
		}
		atomic.StoreUint64(tailp, tail)
	}
	return buf
}

// close unmaps the arrays.
func (l *syncLog) close() {
	unix.Munmap(l.recs)
	unix.Munmap(l.cpus)
}

// retiredPins are maps earlier builds pinned that this one has no use
// for: xlb_sync_ring held the decision records before xlb_sync_log.
var retiredPins = []string{"xlb_sync_ring"}

// removeRetiredPins removes them from pinDir (a forwarder still running
// with one keeps it until it is replaced).
func removeRetiredPins(pinDir string, log *slog.Logger) {
	for _, name := range retiredPins {
		err := os.Remove(filepath.Join(pinDir, name))
		if err == nil {
			log.Info("removed the pin of a map this build does not use", "map", name)
		} else if !errors.Is(err, fs.ErrNotExist) {
			log.Warn("cannot remove the pin of a map this build does not use", "map", name, "err", err)
		}
	}
}
