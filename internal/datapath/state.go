package datapath

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Encap is how packets are wrapped for a backend (enum xlb_encap).
type Encap uint8

// Encapsulations; the values are the C enum's.
const (
	EncapDefault = Encap(xlbXlbEncapXLB_ENCAP_NONE) // on a real: the service's
	EncapGRE     = Encap(xlbXlbEncapXLB_ENCAP_GRE)
	EncapIPIP    = Encap(xlbXlbEncapXLB_ENCAP_IPIP)
)

// VIPKey identifies a VIP. Port 0 serves every port of Proto.
type VIPKey struct {
	Addr  netip.Addr
	Port  uint16
	Proto uint8 // 6 TCP, 17 UDP
}

// Compare orders keys by address, port, protocol.
func (k VIPKey) Compare(o VIPKey) int {
	if c := k.Addr.Compare(o.Addr); c != 0 {
		return c
	}
	if c := cmp.Compare(k.Port, o.Port); c != 0 {
		return c
	}
	return cmp.Compare(k.Proto, o.Proto)
}

func (k VIPKey) String() string {
	return fmt.Sprintf("%s/%d", netip.AddrPortFrom(k.Addr, k.Port), k.Proto)
}

// Service is one VIP's forwarding state.
type Service struct {
	SvcID uint32 // stable per VIP, >= 1
	Encap Encap
	// Fragments: the service takes IP fragments (SPEC F-DP9); without it
	// fragments to the VIP are dropped (drop_fragment).
	Fragments bool
	// Table is the Maglev lookup table: len(Table) = M, each entry a real
	// id (0 = no backend: packets to that slot are dropped).
	Table []uint32
}

// Real is one backend of one service.
type Real struct {
	Addr    netip.Addr
	SvcID   uint32
	Active  bool  // may keep its tracked flows
	Encap   Encap // EncapDefault: the service's
	NextHop NextHopCache
}

// NextHopCache is a backend's resolved next hop; the zero value means none
// (the forwarder then asks bpf_fib_lookup for each packet).
type NextHopCache struct {
	DMAC, SMAC [6]byte
	Ifindex    uint32
	MTU        uint32
}

// Timeouts are the conntrack idle timeouts.
type Timeouts struct {
	TCPSyn, TCP, TCPFin, UDP time.Duration
}

// Node is the per-node settings.
type Node struct {
	Addr4, Addr6 netip.Addr       // outer sources (invalid = none)
	GatewayMAC   net.HardwareAddr // fallback next hop (nil = none)
	Timeouts     Timeouts
	// FloodSynRate: new SYN flows per second each CPU tracks (0: no limit).
	FloodSynRate uint32
	// ICMPEchoRate: echo requests to a VIP address each CPU answers per
	// second (0: never answered; over the rate: dropped).
	ICMPEchoRate uint32
	// Fragments is the LB pool fragments are redirected over.
	Fragments FragPool
	// TraceRate: packet tracer records each CPU emits per second (0: off).
	TraceRate uint32
}

// FragPool is the pool of LB nodes fragments are spread over by their
// 3-tuple (SPEC F-DP9): the same list, in the same (sorted) order, on
// every node. Empty: fragment support is off (no redirect, no GRE
// decapsulation); fragments of fragment-enabled services are then handled
// where they arrive.
type FragPool struct {
	Peers []FragPeer // sorted by address; at most MaxFragPeers
	Self  int        // this node's index in Peers
	// Timeout is how long a first fragment's decision is used (default
	// DefaultFragTimeout: a datagram's fragments come within it, and an
	// IP id reused after it starts afresh).
	Timeout time.Duration
}

// FragPeer is one LB node of the fragment pool; NextHop as for reals.
type FragPeer struct {
	Addr    netip.Addr
	NextHop NextHopCache
}

// MaxFragPeers is the size of xlb_frag_peers.
const MaxFragPeers = 64

// DefaultFragTimeout is FragPool.Timeout when zero.
const DefaultFragTimeout = 5 * time.Second

// State is the complete content the control plane wants in the maps.
type State struct {
	Node     Node
	Services map[VIPKey]*Service
	Reals    map[uint32]Real // id (1 .. MaxReals-1) -> real
	// Delta, when set, says how this state differs from another: Apply
	// then looks only at the reals it names when Delta.Base is the state
	// it applied last (otherwise it compares everything).
	Delta *Delta
}

// Delta describes a State as Base plus changes: every real whose id is not
// in Reals is in the State exactly as in Base (same id, same Real), and
// every service whose key is not in Services is too. An id or key listed
// may be added, changed, removed or unchanged; listing one twice is fine.
type Delta struct {
	Base     *State
	Reals    []uint32
	Services []VIPKey
}

// applied is what this process knows to be in the maps.
type applied struct {
	node     xlbNodeInfo
	frag     []byte // the FragPool last written (fragPoolKey)
	services map[VIPKey]*appliedService
	reals    map[uint32]Real
}

type appliedService struct {
	Service
	slot  uint32
	table *liveTable // the inner map in slot, mapped for in-place updates
}

// Snapshot returns the state currently in the maps (what Open adopted plus
// what Apply wrote).
func (d *Datapath) Snapshot() *State {
	st := &State{Services: map[VIPKey]*Service{}, Reals: map[uint32]Real{}}
	st.Node = nodeFromInfo(d.cache.node)
	for k, s := range d.cache.services {
		st.Services[k] = &Service{SvcID: s.SvcID, Encap: s.Encap, Fragments: s.Fragments, Table: slices.Clone(s.Table)}
	}
	for id, r := range d.cache.reals {
		st.Reals[id] = r
	}
	return st
}

// ApplyStats says what an Apply wrote.
type ApplyStats struct {
	RealsWritten    int
	TablesReplaced  int // new inner maps swapped in
	TablesPatched   int // tables changed in place
	TableEntries    int // entries of the replaced tables that differ from the old ones
	ServicesAdded   int
	ServicesRemoved int
	Duration        time.Duration
}

// Apply makes the maps hold st. The order keeps every packet on a complete
// state:
//
//  1. reals are written before any table refers to them;
//  2. a changed table of the same size is patched in place: each changed
//     64-bit element (two slots) is one atomic store into the mmapped
//     inner map, so a packet reads either the old or the new backend of
//     its slot, both valid (no map-of-maps update, no grace period);
//     a new table, or one whose size changed, is filled (mmap, one copy)
//     into a fresh inner map before step 1 and installed here in the
//     service's spare slot of xlb_tables (slot 2*svc_id + generation), all
//     in one batch;
//  3. each VIP entry is updated to point to its new slot: one map update
//     per VIP, so each service switches atomically from its complete old
//     table to its complete new one;
//  4. removed VIPs are deleted, then the slots no longer referenced are
//     pointed at an empty placeholder (one batch), which frees the old
//     tables; reals that left are cleared last.
//
// Updates of a map-of-maps wait for an RCU grace period in the kernel, so
// they are batched: a commit costs at most two grace periods whatever the
// number of services. Capacity and every changed table (only reals of its
// own service) are checked first, and the new inner maps made then (see
// prepareTables), so a state that does not fit or fails a check changes
// nothing.
func (d *Datapath) Apply(st *State) (ApplyStats, error) {
	start := time.Now()
	var stats ApplyStats
	// delta is st.Delta when the maps hold its base, as applied last.
	delta := st.Delta
	if delta != nil && (d.applied == nil || delta.Base != d.applied) {
		delta = nil
	}
	d.applied = nil // until this Apply succeeds
	owner, err := d.checkCapacity(st, delta)
	if err != nil {
		return stats, err
	}
	node, err := nodeInfo(st.Node, d.ifmac)
	if err != nil {
		return stats, err
	}
	// Tables are checked, and new ones created and filled, before anything
	// is written: a table naming a real of another service changes nothing.
	tables, patches, err := d.prepareTables(st, owner)
	defer func() {
		for _, p := range tables {
			if p.inner != nil {
				p.inner.close()
			}
		}
	}()
	if err != nil {
		return stats, err
	}
	node.ProbeCookie = d.probeCookie
	if node != d.cache.node {
		if err := d.objs.XlbNode.Put(uint32(0), &node); err != nil {
			return stats, fmt.Errorf("write node settings: %w", err)
		}
		d.cache.node = node
	}
	if err := d.applyFragPool(st.Node.Fragments); err != nil {
		return stats, err
	}
	// Reals that differ from the cache are written in one batch (a cold
	// commit writes tens of thousands).
	var (
		realIDs   []uint32
		realVals  []Real
		realInfos []xlbRealInfo
	)
	if delta == nil {
		realIDs = make([]uint32, 0, len(st.Reals))
		realVals = make([]Real, 0, len(st.Reals))
		realInfos = make([]xlbRealInfo, 0, len(st.Reals))
	}
	collect := func(id uint32, r Real) {
		if old, ok := d.cache.reals[id]; ok && old == r {
			return
		}
		realIDs, realVals, realInfos = append(realIDs, id), append(realVals, r), append(realInfos, realInfo(r))
	}
	if delta != nil {
		seen := make(map[uint32]bool, len(delta.Reals))
		for _, id := range delta.Reals {
			if r, ok := st.Reals[id]; ok && !seen[id] {
				seen[id] = true
				collect(id, r)
			}
		}
	} else {
		for id, r := range st.Reals {
			collect(id, r)
		}
	}
	if len(realIDs) > 0 {
		if err := d.writeReals(realIDs, realVals, realInfos); err != nil {
			return stats, err
		}
		if len(d.cache.reals) == 0 {
			d.cache.reals = make(map[uint32]Real, len(realIDs)) // sized once
		}
		for i, id := range realIDs {
			d.cache.reals[id] = realVals[i]
		}
		stats.RealsWritten += len(realIDs)
	}

	// 2. Tables of unchanged size patched in place; new tables (made
	// above) installed in spare slots.
	var (
		retire []uint32
		old    []*liveTable
	)
	defer func() {
		for _, t := range old {
			t.close()
		}
	}()
	for _, key := range patches {
		cur, s := d.cache.services[key], st.Services[key]
		stats.TableEntries += cur.table.patch(cur.Table, s.Table)
		stats.TablesPatched++
		cur.Table = s.Table
	}
	for _, p := range tables {
		stats.TableEntries += len(p.svc.Table)
	}
	if len(tables) > 0 {
		keys := make([]uint32, len(tables))
		fds := make([]uint32, len(tables))
		for i, p := range tables {
			keys[i], fds[i] = p.slot, uint32(p.inner.m.FD())
		}
		if _, err := d.objs.XlbTables.BatchUpdate(keys, fds, nil); err != nil {
			return stats, fmt.Errorf("install %d tables: %w", len(tables), err)
		}
		stats.TablesReplaced = len(tables)
	}

	// 3. Publish: one VIP entry update per service.
	newSlot := map[VIPKey]uint32{}
	newLive := map[VIPKey]*liveTable{}
	for i, p := range tables {
		newSlot[p.key] = p.slot
		newLive[p.key] = p.inner
		tables[i].inner = nil // owned by the cache from here on
	}
	for key, s := range st.Services {
		cur := d.cache.services[key]
		slot, changed := newSlot[key]
		if !changed {
			slot = cur.slot
		}
		if cur != nil && !changed {
			if cur.Encap != s.Encap || cur.Fragments != s.Fragments {
				vk := vipKey(key)
				vi := vipInfo(s, cur.slot)
				if err := d.publishVIP(vk, vi); err != nil {
					return stats, fmt.Errorf("publish vip %s: %w", key, err)
				}
				cur.Encap, cur.Fragments = s.Encap, s.Fragments
			}
			continue
		}
		if cur == nil {
			if err := d.resetSvcStats(s.SvcID); err != nil {
				return stats, err
			}
			stats.ServicesAdded++
			d.vipAddrsSynced = false
		}
		vk := vipKey(key)
		vi := vipInfo(s, slot)
		if err := d.publishVIP(vk, vi); err != nil {
			return stats, fmt.Errorf("publish vip %s: %w", key, err)
		}
		if cur != nil && changed {
			retire = append(retire, cur.slot)
			if cur.table != nil {
				old = append(old, cur.table)
			}
		}
		d.cache.services[key] = &appliedService{
			Service: Service{SvcID: s.SvcID, Encap: s.Encap, Fragments: s.Fragments, Table: s.Table},
			slot:    slot,
			table:   newLive[key],
		}
	}

	// 4. Removed VIPs, then free what nothing refers to any more.
	for key, s := range d.cache.services {
		if _, ok := st.Services[key]; ok {
			continue
		}
		vk := vipKey(key)
		d.vidx.del(vk) // the forwarder's match first, then the catalog
		if err := d.objs.XlbVips.Delete(&vk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return stats, fmt.Errorf("delete vip %s: %w", key, err)
		}
		retire = append(retire, s.slot)
		if s.table != nil {
			old = append(old, s.table)
		}
		delete(d.cache.services, key)
		stats.ServicesRemoved++
		d.vipAddrsSynced = false
	}
	if err := d.retireSlots(retire); err != nil {
		return stats, err
	}
	// The VIP addresses change only with the set of services.
	if !d.vipAddrsSynced {
		if err := d.syncVIPAddrs(); err != nil {
			return stats, err
		}
		d.vipAddrsSynced = true
	}
	clearReal := func(id uint32) error {
		if _, ok := st.Reals[id]; ok {
			return nil
		}
		if _, ok := d.cache.reals[id]; !ok {
			return nil
		}
		var zero xlbRealInfo
		if err := d.objs.XlbReals.Put(id, &zero); err != nil {
			return fmt.Errorf("clear real %d: %w", id, err)
		}
		delete(d.cache.reals, id)
		stats.RealsWritten++
		return nil
	}
	if delta != nil {
		for _, id := range delta.Reals {
			if err := clearReal(id); err != nil {
				return stats, err
			}
		}
	} else if len(d.cache.reals) > len(st.Reals) {
		// The cache holds every real of st (written above): only a
		// larger cache has reals to clear.
		for id := range d.cache.reals {
			if err := clearReal(id); err != nil {
				return stats, err
			}
		}
	}
	d.applied = st
	stats.Duration = time.Since(start)
	return stats, nil
}

// writeReals writes reals ids[i] = infos[i]: one at a time for a few, in
// one batch for many.
func (d *Datapath) writeReals(ids []uint32, vals []Real, infos []xlbRealInfo) error {
	if len(ids) >= 64 {
		if _, err := d.objs.XlbReals.BatchUpdate(ids, infos, nil); err != nil {
			return fmt.Errorf("write %d reals: %w", len(ids), err)
		}
		return nil
	}
	for i, id := range ids {
		if err := d.objs.XlbReals.Put(id, &infos[i]); err != nil {
			return fmt.Errorf("write real %d (%s): %w", id, vals[i].Addr, err)
		}
	}
	return nil
}

// checkCapacity checks st against the maps' capacities: the number of
// services, service and real ids. With a delta (whose base is in the maps,
// so was checked) it checks only the reals the delta names. Without one it
// returns owner, owner[id] = the service of real id (0: no such real), for
// prepareTables to check tables entry by entry.
func (d *Datapath) checkCapacity(st *State, delta *Delta) (owner []uint32, err error) {
	if n := uint32(len(st.Services)); n > d.opts.MaxServices {
		return nil, fmt.Errorf("%d services exceed the capacity of %d (raise max_services)", n, d.opts.MaxServices)
	}
	checkID := func(id uint32) error {
		if id == 0 || id >= d.opts.MaxReals {
			return fmt.Errorf("real id %d out of range 1..%d", id, d.opts.MaxReals-1)
		}
		return nil
	}
	if delta != nil {
		for _, id := range delta.Reals {
			if _, ok := st.Reals[id]; ok {
				if err := checkID(id); err != nil {
					return nil, err
				}
			}
		}
	} else {
		owner = make([]uint32, d.opts.MaxReals)
		for id, r := range st.Reals {
			if err := checkID(id); err != nil {
				return nil, err
			}
			owner[id] = r.SvcID
		}
	}
	ids := make(map[uint32]VIPKey, len(st.Services))
	for key, s := range st.Services {
		if s.SvcID == 0 || s.SvcID >= d.opts.MaxServices {
			return nil, fmt.Errorf("service %s: id %d out of range 1..%d", key, s.SvcID, d.opts.MaxServices-1)
		}
		if other, dup := ids[s.SvcID]; dup {
			return nil, fmt.Errorf("services %s and %s share id %d", key, other, s.SvcID)
		}
		ids[s.SvcID] = key
		if len(s.Table) == 0 {
			return nil, fmt.Errorf("service %s: empty table", key)
		}
	}
	return owner, nil
}

// pendingTable is a new inner map made for a service, not yet installed.
type pendingTable struct {
	key   VIPKey
	svc   *Service
	slot  uint32
	inner *liveTable
}

// prepareTables checks every table of st that differs from the one in the
// maps: each entry must be 0 or a real of the table's own service (looked
// up in owner, or in st.Reals when owner is nil). It returns the services
// whose table is patched in place (same service id and size), and a new,
// filled inner map for every other changed table. The work is spread over
// all CPUs when there are many tables (a cold commit has thousands). On
// an error it returns the maps it made, for the caller to close, and
// nothing has been written to a map the forwarder reads.
func (d *Datapath) prepareTables(st *State, owner []uint32) ([]pendingTable, []VIPKey, error) {
	var (
		tables  []pendingTable
		patches []VIPKey
	)
	for key, s := range st.Services {
		cur := d.cache.services[key]
		if cur != nil && cur.SvcID == s.SvcID && sameTable(cur.Table, s.Table) {
			continue // checked when it was applied
		}
		if cur != nil && cur.SvcID == s.SvcID && len(cur.Table) == len(s.Table) && cur.table != nil {
			patches = append(patches, key)
			continue
		}
		slot := 2 * s.SvcID
		if cur != nil && cur.slot == slot {
			slot++
		}
		tables = append(tables, pendingTable{key: key, svc: s, slot: slot})
	}
	// Job i < len(tables) makes table i; the others check patches.
	n := len(tables) + len(patches)
	errs := make([]error, n)
	job := func(i int) {
		var key VIPKey
		var s *Service
		if i < len(tables) {
			key, s = tables[i].key, tables[i].svc
		} else {
			key = patches[i-len(tables)]
			s = st.Services[key]
		}
		foreign := func(rid uint32) error {
			return fmt.Errorf("service %s: table refers to real %d, not one of its own", key, rid)
		}
		if i >= len(tables) || owner == nil {
			if rid, ok := checkTable(s, owner, st.Reals); !ok {
				errs[i] = foreign(rid)
				return
			}
		}
		if i < len(tables) {
			inner, err := makeTable(len(s.Table))
			if err != nil {
				errs[i] = fmt.Errorf("service %s: %w", key, err)
				return
			}
			tables[i].inner = inner
			if owner == nil {
				copy(inner.entries(len(s.Table)), s.Table)
			} else if rid, ok := copyChecked(inner.entries(len(s.Table)), s.Table, owner, s.SvcID); !ok {
				errs[i] = foreign(rid) // the caller closes inner
			}
		}
	}
	workers := min(runtime.GOMAXPROCS(0), n/16+1)
	if workers <= 1 {
		for i := range n {
			job(i)
		}
	} else {
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
	for _, err := range errs {
		if err != nil {
			return tables, nil, err
		}
	}
	return tables, patches, nil
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
// s's service (owner[id], or reals[id] when owner is nil), and if not, the
// first one that is not.
func checkTable(s *Service, owner []uint32, reals map[uint32]Real) (uint32, bool) {
	if owner != nil {
		for _, rid := range s.Table {
			if rid != 0 && (rid >= uint32(len(owner)) || owner[rid] != s.SvcID) {
				return rid, false
			}
		}
		return 0, true
	}
	// A table names a few reals many times: each is looked up in the map
	// once, then found in a small direct-mapped cache of reals known good.
	var good [64]uint32
	for _, rid := range s.Table {
		if rid == 0 || good[rid%64] == rid {
			continue
		}
		if r, ok := reals[rid]; !ok || r.SvcID != s.SvcID {
			return rid, false
		}
		good[rid%64] = rid
	}
	return 0, true
}

// sameTable reports whether a and b hold the same entries; tables the
// planner did not rebuild share their backing array, which is checked first.
func sameTable(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	return slices.Equal(a, b)
}

// liveTable is an inner Maglev table kept open and mapped into this
// process: two real ids per 64-bit element, slot 2k in the low half.
type liveTable struct {
	m   *ebpf.Map
	mem []byte
}

// mapTable maps inner (an mmapable array of 8-byte elements).
func mapTable(inner *ebpf.Map) (*liveTable, error) {
	size := int(inner.MaxEntries()) * 8
	page := os.Getpagesize()
	mem, err := unix.Mmap(inner.FD(), 0, (size+page-1)/page*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap table: %w", err)
	}
	return &liveTable{m: inner, mem: mem[:size]}, nil
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
	lt.m.Close()
}

// retireSlots points slots at an empty placeholder table (arrays cannot
// delete elements in a batch), which releases the tables they held.
func (d *Datapath) retireSlots(slots []uint32) error {
	if len(slots) == 0 {
		return nil
	}
	if d.placeholder == nil {
		lt, err := newTable([]uint32{0})
		if err != nil {
			return err
		}
		d.placeholder = lt
	}
	fds := make([]uint32, len(slots))
	for i := range fds {
		fds[i] = uint32(d.placeholder.m.FD())
	}
	if _, err := d.objs.XlbTables.BatchUpdate(slots, fds, nil); err != nil {
		return fmt.Errorf("release %d old tables: %w", len(slots), err)
	}
	return nil
}

func (d *Datapath) resetSvcStats(id uint32) error {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	zero := make([]xlbXlbCounters, ncpu)
	if err := d.objs.XlbSvcStats.Put(id, zero); err != nil {
		return fmt.Errorf("reset counters of service %d: %w", id, err)
	}
	return nil
}

// syncVIPAddrs makes xlb_vip_addrs hold exactly the VIP addresses.
func (d *Datapath) syncVIPAddrs() error {
	want := map[xlbVipKey]uint32{}
	for k, s := range d.cache.services {
		ak := vipKey(VIPKey{Addr: k.Addr})
		want[ak] |= uint32(xlbXlbVipAddrFlagsXLB_VADDR_F_VIP)
		if s.Fragments && k.Proto == 6 {
			want[ak] |= uint32(xlbXlbVipAddrFlagsXLB_VADDR_F_FRAG_TCP)
		}
		if s.Fragments && k.Proto == 17 {
			want[ak] |= uint32(xlbXlbVipAddrFlagsXLB_VADDR_F_FRAG_UDP)
		}
	}
	var (
		k   xlbVipKey
		v   uint32
		old []xlbVipKey
	)
	it := d.objs.XlbVipAddrs.Iterate()
	for it.Next(&k, &v) {
		w, ok := want[k]
		if !ok {
			old = append(old, k)
		} else if w == v {
			delete(want, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read vip addresses: %w", err)
	}
	for k, v := range want {
		if err := d.objs.XlbVipAddrs.Put(&k, &v); err != nil {
			return fmt.Errorf("write vip address: %w", err)
		}
	}
	for _, k := range old {
		if err := d.objs.XlbVipAddrs.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete vip address: %w", err)
		}
	}
	return nil
}

// publishVIP writes a VIP to the catalog (xlb_vips) and to the
// forwarder's match (xlb_vip_index).
func (d *Datapath) publishVIP(vk xlbVipKey, vi xlbVipInfo) error {
	if err := d.objs.XlbVips.Put(&vk, &vi); err != nil {
		return err
	}
	return d.vidx.put(vk, vi)
}

// loadApplied reads what earlier daemons left in pinned maps.
func (d *Datapath) loadApplied() error {
	d.cache = applied{services: map[VIPKey]*appliedService{}, reals: map[uint32]Real{}}
	if err := d.objs.XlbNode.Lookup(uint32(0), &d.cache.node); err != nil {
		return err
	}
	// Self-check probes carry the cookie (trace.h): keep the pinned one,
	// so probes of a restarted daemon are recognised before its first
	// Apply; draw one on a first start.
	d.probeCookie = d.cache.node.ProbeCookie
	for d.probeCookie == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("probe cookie: %w", err)
		}
		d.probeCookie = binary.LittleEndian.Uint64(b[:])
	}
	var (
		k  xlbVipKey
		vi xlbVipInfo
	)
	catalog := map[xlbVipKey]xlbVipInfo{}
	it := d.objs.XlbVips.Iterate()
	for it.Next(&k, &vi) {
		catalog[k] = vi
		key := keyFromVip(k)
		var innerID uint32
		if err := d.objs.XlbTables.Lookup(vi.TableId, &innerID); err != nil {
			return fmt.Errorf("table of %s: %w", key, err)
		}
		inner, err := ebpf.NewMapFromID(ebpf.MapID(innerID))
		if err != nil {
			return fmt.Errorf("open table of %s: %w", key, err)
		}
		lt, err := mapTable(inner)
		if err != nil {
			inner.Close()
			return fmt.Errorf("table of %s: %w", key, err)
		}
		table := lt.read(int(vi.TableSize))
		d.cache.services[key] = &appliedService{
			Service: Service{SvcID: vi.SvcId, Encap: Encap(vi.Encap), Table: table,
				Fragments: vi.Flags&uint8(xlbXlbVipFlagsXLB_VIP_F_FRAGMENTS) != 0},
			slot: vi.TableId, table: lt,
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	vidx, err := openVIPIndex(d.objs.XlbVipIndex, d.objs.XlbVipEnts)
	if err != nil {
		return err
	}
	d.vidx = vidx
	if err := vidx.sync(catalog); err != nil {
		return fmt.Errorf("VIP index: %w", err)
	}
	var (
		id uint32
		ri xlbRealInfo
	)
	rit := d.objs.XlbReals.Iterate()
	for rit.Next(&id, &ri) {
		if ri.SvcId == 0 {
			continue
		}
		d.cache.reals[id] = realFromInfo(ri)
	}
	return rit.Err()
}

// Helpers converting between Go types and the ABI structs.

func addrBytes(a netip.Addr) (b [16]uint8, family uint8) {
	if a.Is4() {
		v := a.As4()
		copy(b[:], v[:])
		return b, uint8(xlbXlbFamilyXLB_AF_INET)
	}
	return a.As16(), uint8(xlbXlbFamilyXLB_AF_INET6)
}

func addrFrom(b [16]uint8, family uint8) netip.Addr {
	if family == uint8(xlbXlbFamilyXLB_AF_INET) {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16(b)
}

func vipKey(k VIPKey) xlbVipKey {
	addr, fam := addrBytes(k.Addr)
	return xlbVipKey{Addr: addr, Port: bits.ReverseBytes16(k.Port), Proto: k.Proto, Family: fam}
}

func keyFromVip(k xlbVipKey) VIPKey {
	return VIPKey{Addr: addrFrom(k.Addr, k.Family), Port: bits.ReverseBytes16(k.Port), Proto: k.Proto}
}

func vipInfo(s *Service, slot uint32) xlbVipInfo {
	vi := xlbVipInfo{SvcId: s.SvcID, TableId: slot, TableSize: uint32(len(s.Table)), Encap: uint8(s.Encap)}
	if s.Fragments {
		vi.Flags |= uint8(xlbXlbVipFlagsXLB_VIP_F_FRAGMENTS)
	}
	return vi
}

func realInfo(r Real) xlbRealInfo {
	addr, fam := addrBytes(r.Addr)
	ri := xlbRealInfo{Addr: addr, SvcId: r.SvcID, Family: fam, Encap: uint8(r.Encap)}
	if r.Active {
		ri.Flags |= uint8(xlbXlbRealFlagsXLB_REAL_F_ACTIVE)
	}
	if nh := r.NextHop; nh.Ifindex != 0 {
		ri.Flags |= uint8(xlbXlbRealFlagsXLB_REAL_F_NEXTHOP)
		ri.Dmac, ri.Smac, ri.Ifindex, ri.Mtu = nh.DMAC, nh.SMAC, nh.Ifindex, nh.MTU
	}
	return ri
}

func realFromInfo(ri xlbRealInfo) Real {
	r := Real{
		Addr: addrFrom(ri.Addr, ri.Family), SvcID: ri.SvcId,
		Active: ri.Flags&uint8(xlbXlbRealFlagsXLB_REAL_F_ACTIVE) != 0, Encap: Encap(ri.Encap),
	}
	if ri.Flags&uint8(xlbXlbRealFlagsXLB_REAL_F_NEXTHOP) != 0 {
		r.NextHop = NextHopCache{DMAC: ri.Dmac, SMAC: ri.Smac, Ifindex: ri.Ifindex, MTU: ri.Mtu}
	}
	return r
}

// Ticks converts a duration to conntrack ticks (2^28 ns), saturating at
// the 16-bit field's maximum.
func Ticks(d time.Duration) uint16 {
	t := (uint64(d) + 1<<ctTickShift - 1) >> ctTickShift
	if t > ctTimeMask {
		return uint16(ctTimeMask)
	}
	return uint16(t)
}

func nodeInfo(n Node, ifmac net.HardwareAddr) (xlbNodeInfo, error) {
	var ni xlbNodeInfo
	if n.Addr4.IsValid() {
		if !n.Addr4.Unmap().Is4() {
			return ni, fmt.Errorf("node address %s is not IPv4", n.Addr4)
		}
		ni.Addr4 = n.Addr4.Unmap().As4()
		ni.Flags |= uint16(xlbXlbNodeFlagsXLB_NODE_F_ADDR4)
	}
	if n.Addr6.IsValid() {
		if !n.Addr6.Is6() || n.Addr6.Is4In6() {
			return ni, fmt.Errorf("node address6 %s is not IPv6", n.Addr6)
		}
		ni.Addr6 = n.Addr6.As16()
		ni.Flags |= uint16(xlbXlbNodeFlagsXLB_NODE_F_ADDR6)
	}
	if len(n.GatewayMAC) > 0 {
		if len(n.GatewayMAC) != 6 {
			return ni, fmt.Errorf("gateway MAC %s is not Ethernet", n.GatewayMAC)
		}
		copy(ni.GwMac[:], n.GatewayMAC)
		ni.Flags |= uint16(xlbXlbNodeFlagsXLB_NODE_F_GATEWAY)
	}
	copy(ni.IfMac[:], ifmac)
	ni.TimeoutTcpSyn = Ticks(n.Timeouts.TCPSyn)
	ni.TimeoutTcp = Ticks(n.Timeouts.TCP)
	ni.TimeoutTcpFin = Ticks(n.Timeouts.TCPFin)
	ni.TimeoutUdp = Ticks(n.Timeouts.UDP)
	if n.FloodSynRate > 0 {
		// The limit applies per conntrack tick (2^28 ns).
		ni.FloodSynLimit = uint32(max(1, uint64(n.FloodSynRate)<<ctTickShift/uint64(time.Second)))
	}
	ni.IcmpEchoRate = n.ICMPEchoRate
	ni.TraceRate = n.TraceRate
	return ni, nil
}

func nodeFromInfo(ni xlbNodeInfo) Node {
	var n Node
	if ni.Flags&uint16(xlbXlbNodeFlagsXLB_NODE_F_ADDR4) != 0 {
		n.Addr4 = netip.AddrFrom4(ni.Addr4)
	}
	if ni.Flags&uint16(xlbXlbNodeFlagsXLB_NODE_F_ADDR6) != 0 {
		n.Addr6 = netip.AddrFrom16(ni.Addr6)
	}
	if ni.Flags&uint16(xlbXlbNodeFlagsXLB_NODE_F_GATEWAY) != 0 {
		n.GatewayMAC = bytes.Clone(ni.GwMac[:])
	}
	tick := time.Duration(1) << ctTickShift
	if ni.FloodSynLimit > 0 {
		n.FloodSynRate = uint32(uint64(ni.FloodSynLimit) * uint64(time.Second) >> ctTickShift)
	}
	n.ICMPEchoRate = ni.IcmpEchoRate
	n.TraceRate = ni.TraceRate
	n.Timeouts = Timeouts{
		TCPSyn: time.Duration(ni.TimeoutTcpSyn) * tick, TCP: time.Duration(ni.TimeoutTcp) * tick,
		TCPFin: time.Duration(ni.TimeoutTcpFin) * tick, UDP: time.Duration(ni.TimeoutUdp) * tick,
	}
	return n
}
