package datapath

// The Maglev tables as the forwarder reads them: one inner map per
// service (an mmapable array in xlb_tables), mapped into this process so a
// changed table of the same size is patched in place with atomic stores.

import (
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// liveTable is an inner Maglev table mapped into this process: two real
// ids per 64-bit element, slot 2k in the low half. The mapping keeps the
// map alive, so its file descriptor is closed (release) once the table is
// filled, and opened again by id only to install it: 20,000 services
// would otherwise hold 20,000 descriptors, 40,000 during a cold commit.
type liveTable struct {
	m   *ebpf.Map // nil while released
	id  ebpf.MapID
	mem []byte
}

// mapTable maps inner (an mmapable array of 8-byte elements).
func mapTable(inner *ebpf.Map) (*liveTable, error) {
	info, err := inner.Info()
	if err != nil {
		return nil, fmt.Errorf("table info: %w", err)
	}
	id, _ := info.ID()
	size := int(inner.MaxEntries()) * 8
	page := os.Getpagesize()
	mem, err := unix.Mmap(inner.FD(), 0, (size+page-1)/page*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap table: %w", err)
	}
	return &liveTable{m: inner, id: id, mem: mem[:size]}, nil
}

// release closes the table's descriptor; the mapping stays.
func (lt *liveTable) release() {
	if lt.m != nil {
		lt.m.Close()
		lt.m = nil
	}
}

// fd returns a descriptor of the table, opened again by id if released.
func (lt *liveTable) fd() (uint32, error) {
	if lt.m == nil {
		m, err := ebpf.NewMapFromID(lt.id)
		if err != nil {
			return 0, fmt.Errorf("open table %d: %w", lt.id, err)
		}
		lt.m = m
	}
	return uint32(lt.m.FD()), nil
}

// tableChunk bounds the descriptors putTables opens at once.
const tableChunk = 1024

// putTables points slots[i] of outer at tables[i], tableChunk at a time,
// releasing each table's descriptor after.
func putTables(outer *ebpf.Map, slots []uint32, tables []*liveTable) error {
	for lo := 0; lo < len(slots); lo += tableChunk {
		hi := min(lo+tableChunk, len(slots))
		fds := make([]uint32, hi-lo)
		var err error
		for i := range fds {
			if fds[i], err = tables[lo+i].fd(); err != nil {
				break
			}
		}
		if err == nil {
			_, err = outer.BatchUpdate(slots[lo:hi], fds, nil)
		}
		for _, lt := range tables[lo:hi] {
			lt.release()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// newTable returns a new inner map holding t.
func newTable(t []uint32) (*liveTable, error) {
	lt, err := makeTable(len(t))
	if err != nil {
		return nil, err
	}
	copy(lt.entries(len(t)), t)
	return lt, nil
}

// makeTable returns a new inner map of m entries, all 0, mapped.
func makeTable(m int) (*liveTable, error) {
	inner, err := ebpf.NewMap(&ebpf.MapSpec{
		Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: uint32(m+1) / 2,
		Flags: unix.BPF_F_INNER_MAP | unix.BPF_F_MMAPABLE,
	})
	if err != nil {
		return nil, fmt.Errorf("create table of %d entries: %w", m, err)
	}
	lt, err := mapTable(inner)
	if err != nil {
		inner.Close()
		return nil, err
	}
	return lt, nil
}

// entries returns the first m entries of the mapped table, entry i at
// byte 4i in native order (two per 64-bit element, as patch writes them).
func (lt *liveTable) entries(m int) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(lt.mem))), m)[:m:m]
}

// patch writes the elements of t that differ from old (the table's current
// content), each with one atomic 64-bit store, and returns the number of
// entries that changed.
func (lt *liveTable) patch(old, t []uint32) int {
	n := 0
	for k := 0; 2*k < len(t); k++ {
		lo, hi := t[2*k], uint32(0)
		olo, ohi := old[2*k], uint32(0)
		if 2*k+1 < len(t) {
			hi, ohi = t[2*k+1], old[2*k+1]
		}
		if lo == olo && hi == ohi {
			continue
		}
		if lo != olo {
			n++
		}
		if hi != ohi {
			n++
		}
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&lt.mem[8*k])), uint64(lo)|uint64(hi)<<32)
	}
	return n
}

// read returns the table's m entries.
func (lt *liveTable) read(m int) []uint32 {
	return slices.Clone(lt.entries(m))
}

func (lt *liveTable) close() {
	unix.Munmap(lt.mem[:cap(lt.mem)])
	lt.release()
}
