package datapath

// Re-adoption: what earlier daemons (or this one) left in the pinned maps,
// read back as the state the maps hold.

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/state"
)

// loadApplied reads the state the pinned maps hold into d.cur (replacing
// what d.cur held) and opens the VIP index.
func (d *Datapath) loadApplied() error {
	d.closeLive()
	d.scrubbed = false // the first commit clears what no VIP reaches (scrub.go)
	d.cur = applied{st: state.Empty(), live: map[state.VIPKey]liveService{}}
	d.cur.st.Generation = state.NewGeneration()
	if err := d.objs.XlbNode.Lookup(uint32(0), &d.cur.node); err != nil {
		return err
	}
	d.cur.st.Node = nodeFromInfo(d.cur.node)
	// Self-check probes carry the cookie (trace.h): keep the pinned one,
	// so probes of a restarted daemon are recognised before its first
	// Apply; draw one on a first start.
	d.probeCookie = d.cur.node.ProbeCookie
	for d.probeCookie == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("probe cookie: %w", err)
		}
		d.probeCookie = binary.LittleEndian.Uint64(b[:])
	}
	frag, pool, err := d.readFragPool()
	if err != nil {
		return err
	}
	d.cur.frag, d.cur.st.Node.Fragments = frag, pool
	catalog, err := d.adoptServices()
	if err != nil {
		return err
	}
	d.vidx.close()
	if d.vidx, err = openVIPIndex(d.objs.XlbVipIndex, d.objs.XlbVipEnts); err != nil {
		return err
	}
	if err := d.vidx.sync(catalog); err != nil {
		return fmt.Errorf("VIP index: %w", err)
	}
	return scanArray(d.objs.XlbReals, func(id uint32, ri *xlbRealInfo) bool {
		if ri.SvcId != 0 {
			d.cur.st.Reals.Set(id, realFromInfo(*ri))
		}
		return true
	})
}

// adoptServices reads the VIP catalog and every service's table (mapping
// it for in-place updates) into d.cur, and returns the catalog.
func (d *Datapath) adoptServices() (map[xlbVipKey]xlbVipInfo, error) {
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
			return nil, fmt.Errorf("table of %s: %w", key, err)
		}
		inner, err := ebpf.NewMapFromID(ebpf.MapID(innerID))
		if err != nil {
			return nil, fmt.Errorf("open table of %s: %w", key, err)
		}
		lt, err := mapTable(inner)
		if err != nil {
			inner.Close()
			return nil, fmt.Errorf("table of %s: %w", key, err)
		}
		lt.release()
		sc, err := d.readSched(vi.SvcId)
		if err != nil {
			lt.close()
			return nil, err
		}
		d.cur.st.Services[key] = &state.Service{SvcID: vi.SvcId, Encap: encapFromABI(vi.Encap), Table: lt.read(int(vi.TableSize)),
			Fragments: vi.Flags&uint8(xlbXlbVipFlagsXLB_VIP_F_FRAGMENTS) != 0, Sched: sc}
		d.cur.live[key] = liveService{slot: vi.TableId, table: lt}
	}
	return catalog, it.Err()
}

// closeLive unmaps and closes the tables d.cur holds open.
func (d *Datapath) closeLive() {
	for _, ls := range d.cur.live {
		if ls.table != nil {
			ls.table.close()
		}
	}
	d.cur.live = nil
}
