package datapath

// Publishing what the forwarder matches on: VIP entries, the VIP address
// set, reals, and the slots of xlb_tables.

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/state"
)

// publishVIP writes a VIP to the catalog (xlb_vips) and to the
// forwarder's match (xlb_vip_index).
func (d *Datapath) publishVIP(key state.VIPKey, vi xlbVipInfo) error {
	vk := vipKey(key)
	if err := d.objs.XlbVips.Put(&vk, &vi); err != nil {
		return err
	}
	return d.vidx.put(vk, vi)
}

// unpublishVIP removes a VIP: from the forwarder's match first, then from
// the catalog.
func (d *Datapath) unpublishVIP(key state.VIPKey) error {
	vk := vipKey(key)
	d.vidx.del(vk)
	if err := d.objs.XlbVips.Delete(&vk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// putReals writes reals ids[i] = infos[i]: one at a time for a few, in
// one batch for many.
func (d *Datapath) putReals(ids []uint32, infos []xlbRealInfo) error {
	if len(ids) >= 64 {
		if _, err := d.objs.XlbReals.BatchUpdate(ids, infos, nil); err != nil {
			return fmt.Errorf("write %d reals: %w", len(ids), err)
		}
		return nil
	}
	for i, id := range ids {
		if err := d.objs.XlbReals.Put(id, &infos[i]); err != nil {
			return fmt.Errorf("write real %d: %w", id, err)
		}
	}
	return nil
}

// vipAddrSet is what xlb_vip_addrs holds for services: each VIP address
// with the protocols whose services take fragments.
func vipAddrSet(services map[state.VIPKey]*state.Service) map[xlbVipKey]uint32 {
	want := map[xlbVipKey]uint32{}
	for k, s := range services {
		ak := vipKey(state.VIPKey{Addr: k.Addr})
		want[ak] |= uint32(xlbXlbVipAddrFlagsXLB_VADDR_F_VIP)
		if s.Fragments && k.Proto == 6 {
			want[ak] |= uint32(xlbXlbVipAddrFlagsXLB_VADDR_F_FRAG_TCP)
		}
		if s.Fragments && k.Proto == 17 {
			want[ak] |= uint32(xlbXlbVipAddrFlagsXLB_VADDR_F_FRAG_UDP)
		}
	}
	return want
}

// syncVIPAddrs makes xlb_vip_addrs hold exactly want.
func (d *Datapath) syncVIPAddrs(want map[xlbVipKey]uint32) error {
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
