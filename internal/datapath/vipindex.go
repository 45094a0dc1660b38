package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/maglev"
	"golang.org/x/sys/unix"
)

// The forwarder's VIP match (bpf/select.h, struct vip_bucket in
// bpf/types.h): xlb_vip_index, a power-of-two array of buckets of
// xlbVipSlots entry ids, two candidate buckets per key; xlb_vip_ents, the
// entries (key and service) by id. xlb_vips stays the catalog that
// loadApplied and xlbctl read; every write to it is mirrored here.
//
// An entry is written before its id is published, and a published entry
// is never rewritten in place: a changed VIP gets a fresh id, swapped in by
// one atomic store into the mmapped index, so a packet sees the old or the
// new service, never a mix and never no VIP. Freed ids queue behind the
// others (FIFO), so an id is reused only after every other free id has
// been; there are twice as many ids as VIPs.

const (
	xlbVipSlots = int(xlbXlbVipMatchXLB_VIP_SLOTS)
	xlbVipSeed  = uint64(xlbXlbVipMatchXLB_VIP_SEED_HI)<<32 | uint64(xlbXlbVipMatchXLB_VIP_SEED_LO)
	vipBucketSz = int(unsafe.Sizeof(xlbVipBucket{}))
	vipMinBkts  = 64 // smallest index
)

// vipBuckets is the index size for max VIPs: a power of two at least max,
// so at most a quarter of the slots are in use.
func vipBuckets(vips uint32) uint32 {
	n := max(vips, vipMinBkts)
	return 1 << bits.Len32(n-1)
}

// vipHash is vip_hash (bpf/select.h) of a key: the address as two
// little-endian 64-bit words, then port (network order), proto and
// family as one little-endian 32-bit word.
func vipHash(k xlbVipKey) uint64 {
	a0 := binary.LittleEndian.Uint64(k.Addr[0:8])
	a1 := binary.LittleEndian.Uint64(k.Addr[8:16])
	// k.Port holds the port in network byte order in memory.
	tail := uint32(k.Port) | uint32(k.Proto)<<16 | uint32(k.Family)<<24
	h := maglev.Mix(xlbVipSeed, a0)
	h = maglev.Mix(h, a1)
	return maglev.Mix(h, uint64(tail))
}

type vipPlace struct {
	bucket, slot, id uint32
}

type vipIndex struct {
	ents  *ebpf.Map
	mem   []byte // xlb_vip_index, mmapped
	nb    uint32 // buckets
	place map[xlbVipKey]vipPlace
	free  []uint32 // FIFO of free entry ids
}

// openVIPIndex maps the index and reads what it holds (a restart keeps
// the pinned index and its entries).
func openVIPIndex(index, ents *ebpf.Map) (*vipIndex, error) {
	nb := index.MaxEntries()
	if nb == 0 || nb&(nb-1) != 0 || index.ValueSize() != uint32(vipBucketSz) {
		return nil, fmt.Errorf("xlb_vip_index: %d buckets of %d bytes", nb, index.ValueSize())
	}
	size := int(nb) * vipBucketSz
	size = (size + unix.Getpagesize() - 1) &^ (unix.Getpagesize() - 1)
	mem, err := unix.Mmap(index.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap xlb_vip_index: %w", err)
	}
	x := &vipIndex{ents: ents, mem: mem, nb: nb, place: map[xlbVipKey]vipPlace{}}
	used := map[uint32]bool{}
	for b := range nb {
		for s := range uint32(xlbVipSlots) {
			id := x.load(b, s)
			if id == 0 {
				continue
			}
			var e xlbVipEnt
			if err := ents.Lookup(id, &e); err != nil {
				x.close()
				return nil, fmt.Errorf("xlb_vip_ents %d: %w", id, err)
			}
			x.place[e.Key] = vipPlace{b, s, id}
			used[id] = true
		}
	}
	for id := uint32(1); id < ents.MaxEntries(); id++ {
		if !used[id] {
			x.free = append(x.free, id)
		}
	}
	return x, nil
}

func (x *vipIndex) close() {
	if x != nil && x.mem != nil {
		unix.Munmap(x.mem)
		x.mem = nil
	}
}

func (x *vipIndex) word(b, s uint32) *uint32 {
	return (*uint32)(unsafe.Pointer(&x.mem[b*uint32(vipBucketSz)+4*s]))
}

func (x *vipIndex) load(b, s uint32) uint32 { return atomic.LoadUint32(x.word(b, s)) }
func (x *vipIndex) store(b, s, id uint32)   { atomic.StoreUint32(x.word(b, s), id) }
func (x *vipIndex) candidates(k xlbVipKey) (uint32, uint32) {
	h := vipHash(k)
	return uint32(h) & (x.nb - 1), uint32(h>>32) & (x.nb - 1)
}

var errVIPIndexFull = errors.New("datapath: VIP index: both buckets of the key are full")

// put publishes (k, vi): a fresh entry, then one store of its id.
func (x *vipIndex) put(k xlbVipKey, vi xlbVipInfo) error {
	old, have := x.place[k]
	if have {
		var e xlbVipEnt
		if err := x.ents.Lookup(old.id, &e); err == nil && e.Info == vi {
			return nil
		}
	}
	var b, s uint32
	if have {
		b, s = old.bucket, old.slot
	} else {
		var ok bool
		if b, s, ok = x.freeSlot(k); !ok {
			return errVIPIndexFull
		}
	}
	if len(x.free) == 0 {
		return errors.New("datapath: VIP index: no free entry")
	}
	id := x.free[0]
	e := xlbVipEnt{Key: k, Info: vi}
	if err := x.ents.Put(id, &e); err != nil {
		return fmt.Errorf("write vip entry %d: %w", id, err)
	}
	x.free = x.free[1:]
	x.store(b, s, id)
	x.place[k] = vipPlace{b, s, id}
	if have {
		x.free = append(x.free, old.id)
	}
	return nil
}

// freeSlot is an empty slot in the less loaded of the key's buckets.
func (x *vipIndex) freeSlot(k xlbVipKey) (b, s uint32, ok bool) {
	b1, b2 := x.candidates(k)
	n1, s1 := x.usage(b1)
	n2, s2 := x.usage(b2)
	switch {
	case n1 < xlbVipSlots && (n1 <= n2 || b1 == b2):
		return b1, s1, true
	case n2 < xlbVipSlots:
		return b2, s2, true
	}
	return 0, 0, false
}

// usage counts the used slots of bucket b and returns its first free one.
func (x *vipIndex) usage(b uint32) (used int, free uint32) {
	free = uint32(xlbVipSlots)
	for s := range free {
		if x.load(b, s) != 0 {
			used++
		} else if free == uint32(xlbVipSlots) {
			free = s
		}
	}
	return used, free
}

// del unpublishes k (one store); its entry id goes to the back of the queue.
func (x *vipIndex) del(k xlbVipKey) {
	p, ok := x.place[k]
	if !ok {
		return
	}
	x.store(p.bucket, p.slot, 0)
	delete(x.place, k)
	x.free = append(x.free, p.id)
}

// sync makes the index hold exactly the catalog's VIPs (a start over
// pinned maps written by a build without the index, or an interrupted
// apply).
func (x *vipIndex) sync(cat map[xlbVipKey]xlbVipInfo) error {
	for k := range x.place {
		if _, ok := cat[k]; !ok {
			x.del(k)
		}
	}
	for k, vi := range cat {
		if err := x.put(k, vi); err != nil {
			return err
		}
	}
	return nil
}
