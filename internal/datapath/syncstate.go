package datapath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// The rest of a flow's state a peer needs (bpf/sync.h xlb_sync_nat,
// xlb_sync_lblc): NAT flows' reply entries and the locality schedulers'
// entries, installed by xlb_sync_apply_state through BPF_PROG_TEST_RUN.

// SyncNATInstall is a peer's NAT flow in this node's terms: replies from
// the real's backend to Client:ClientPort are rewritten to VIP:VIPPort.
type SyncNATInstall struct {
	RealID     uint32
	Proto      uint8 // 6 or 17
	Client     netip.Addr
	ClientPort uint16
	VIP        netip.Addr
	VIPPort    uint16 // the port the client sent to
	Age        uint32 // conntrack ticks since the peer recorded the flow
}

// SyncLBLCInstall is a peer's lblc or lblcr entry in this node's terms:
// service SvcID's backends (real ids) for destination Dst.
type SyncLBLCInstall struct {
	SvcID uint32
	Dst   netip.Addr
	Reals []uint32 // at most 8 (lblc: the first)
	// Used and Modified: conntrack ticks since the peer last used the
	// entry and last changed its backends.
	Used, Modified uint32
}

// syncStateMax is how many records one run of xlb_sync_apply_state takes.
const syncStateMax = int(xlbXlbSyncConstXLB_SYNC_STATE_MAX)

// InstallSyncState writes peers' NAT flows and lblc entries. This node's
// own newer state is kept (counted in SyncCounters' Kept); records naming
// a real or service this node does not have as such are skipped.
func (d *Datapath) InstallSyncState(nats []SyncNATInstall, lblcs []SyncLBLCInstall) error {
	recs := make([]xlbSyncState, 0, len(nats)+len(lblcs))
	for _, n := range nats {
		r := xlbSyncState{Kind: SyncNAT, Proto: n.Proto, Cport: swap16(n.ClientPort), Vport: swap16(n.VIPPort), Age: n.Age}
		r.Addr, r.Family = addrBytes(n.Client)
		r.Vip, _ = addrBytes(n.VIP)
		r.Rid[0] = n.RealID
		recs = append(recs, r)
	}
	for _, l := range lblcs {
		if len(l.Reals) > len(xlbSyncState{}.Rid) {
			return fmt.Errorf("lblc entry of service %d with %d backends, at most 8", l.SvcID, len(l.Reals))
		}
		r := xlbSyncState{Kind: SyncLBLC, SvcId: l.SvcID, Age: l.Used, ModAge: l.Modified}
		r.Addr, r.Family = addrBytes(l.Dst)
		copy(r.Rid[:], l.Reals)
		recs = append(recs, r)
	}
	var buf bytes.Buffer
	for len(recs) > 0 {
		n := min(len(recs), syncStateMax)
		buf.Reset()
		if err := binary.Write(&buf, binary.LittleEndian, recs[:n]); err != nil {
			return err
		}
		ret, err := d.objs.XlbSyncApplyState.Run(&ebpf.RunOptions{Data: buf.Bytes(), Repeat: 1})
		if err != nil {
			return fmt.Errorf("run xlb_sync_apply_state: %w", err)
		}
		if ret != 2 { // XDP_PASS
			return fmt.Errorf("xlb_sync_apply_state answered %d", ret)
		}
		recs = recs[n:]
	}
	return nil
}

// LBLCTicks is the entry of service svcID for destination dst as a peer
// is sent it: its backends and the ticks since it was last used and
// changed; found is false when there is none.
func (d *Datapath) LBLCTicks(svcID uint32, dst netip.Addr) (reals []uint32, used, modified uint32, found bool, err error) {
	e, found, err := d.LBLC(svcID, dst)
	if !found || err != nil {
		return nil, 0, 0, found, err
	}
	return e.Reals, uint32(min(e.Used>>ctTickShift, 1<<32-1)), uint32(min(e.Modified>>ctTickShift, 1<<32-1)), true, nil
}

// NATEntry is a NAT flow's reply entry (xlb_nat): replies from
// Backend:BackendPort to Client:ClientPort go out from VIP:VIPPort.
type NATEntry struct {
	Backend, Client, VIP             netip.Addr
	BackendPort, ClientPort, VIPPort uint16
	Proto                            uint8
	RealID                           uint32
	// Age: conntrack ticks since the forward path (or a peer) last
	// recorded the flow, modulo 2^16 (the stamp's width).
	Age uint16
}

// NATEntries calls fn for each NAT reply entry until it returns false
// (connection sync's bulk copy; tests).
func (d *Datapath) NATEntries(fn func(NATEntry) bool) error {
	now, err := ctNow()
	if err != nil {
		return err
	}
	var k xlbNatKey
	var v xlbNatVal
	it := d.objs.XlbNat.Iterate()
	for it.Next(&k, &v) {
		e := NATEntry{Backend: addrFrom(k.Backend, k.Family), Client: addrFrom(k.Client, k.Family),
			VIP: addrFrom(v.Vip, k.Family), BackendPort: swap16(k.Bport), ClientPort: swap16(k.Cport),
			VIPPort: swap16(v.Vport), Proto: k.Proto, RealID: v.Rid, Age: uint16(now) - v.Seen}
		if !fn(e) {
			return nil
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read xlb_nat: %w", err)
	}
	return nil
}

// LBLCAll calls fn for each lblc/lblcr entry (service, destination, and
// the entry as LBLCTicks gives it) until it returns false. Ages are on
// the forwarder's clock (d.now), which stamps the entries.
func (d *Datapath) LBLCAll(fn func(svcID uint32, dst netip.Addr, reals []uint32, used, modified uint32) bool) error {
	now, err := d.now()
	if err != nil {
		return err
	}
	var k lblcKey
	var v lblcValue
	it := d.objs.XlbLblc.Iterate()
	for it.Next(&k, &v) {
		var reals []uint32
		for _, r := range v.Rid {
			if r != 0 {
				reals = append(reals, uint32(r))
			}
		}
		ticks := func(t uint64) uint32 { return uint32(min(max(0, int64(now-t)), 1<<32-1)) }
		if !fn(k.SvcID, addrFrom(k.Addr, k.Family), reals, ticks(v.Used), ticks(v.Mod)) {
			return nil
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read xlb_lblc: %w", err)
	}
	return nil
}
