package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
	"github.com/xlbproject/xlb/internal/tracer"
)

// XDP verdicts (enum xdp_action).
const (
	XDPAborted  = 0
	XDPDrop     = 1
	XDPPass     = 2
	XDPTX       = 3
	XDPRedirect = 4
)

// xdpMD mirrors struct xdp_md, the context BPF_PROG_TEST_RUN accepts for
// XDP (uapi, stable).
type xdpMD struct {
	Data, DataEnd, DataMeta      uint32
	IngressIfindex, RxQueueIndex uint32
	EgressIfindex                uint32
}

// ErrSelfCheck is wrapped by SelfCheck failures.
var ErrSelfCheck = errors.New("forwarder self-check failed")

// RunPacket runs frame through the loaded program as if it had arrived on
// the attach interface (BPF_PROG_TEST_RUN; the live maps are used, so a
// packet to a VIP is tracked and counted like any other). It returns the
// verdict and the frame as the program left it.
func (d *Datapath) RunPacket(frame []byte) (uint32, []byte, error) {
	return d.dryRun(frame)
}

// testRun runs frame through the program (BPF_PROG_TEST_RUN) with the
// attach interface as ingress.
func (d *Datapath) testRun(frame []byte) (uint32, []byte, error) {
	out := make([]byte, len(frame)+256)
	ctx := xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(d.ifindex)}
	opts := &ebpf.RunOptions{Data: frame, DataOut: out, Context: ctx, Repeat: 1}
	ret, err := d.objs.XlbForward.Run(opts)
	if err != nil {
		return 0, nil, fmt.Errorf("test run: %w", err)
	}
	return ret, opts.DataOut, nil
}

// SelfCheck verifies the live data plane (docs/DESIGN.md, Self-check): the pinned link
// still attaches this program to the interface, the interface delivers
// what the program transmits (CheckTX), and a probe packet run
// through the program gets the expected verdict: for a VIP (one per call,
// in turn), an encapsulated packet toward an active backend of that
// service; without VIPs, XDP_PASS for a packet to no VIP. Probes come from
// 192.0.2.1 / 2001:db8::1 (documentation addresses) and carry the
// self-check marker with this node's cookie (tracer.ProbeMarker): the
// forwarder selects their backend read-only (no conntrack entry made or
// refreshed) and counts them in selfcheck_probe, not in the service and
// real counters.
func (d *Datapath) SelfCheck() error {
	if err := d.checkLink(); err != nil {
		return err
	}
	if err := d.txError(); err != nil {
		return err
	}
	return d.probe()
}

// checkLink checks that the pinned link still runs this program on the
// interface.
func (d *Datapath) checkLink() error {
	if d.link == nil {
		return fmt.Errorf("%w: not attached", ErrSelfCheck)
	}
	info, err := d.link.Info()
	if err != nil {
		return fmt.Errorf("%w: link info: %v", ErrSelfCheck, err)
	}
	if x := info.XDP(); x == nil || int(x.Ifindex) != d.ifindex {
		return fmt.Errorf("%w: the xdp link is no longer attached to %s", ErrSelfCheck, d.opts.Interface)
	}
	pinfo, err := d.objs.XlbForward.Info()
	if err != nil {
		return fmt.Errorf("%w: program info: %v", ErrSelfCheck, err)
	}
	if id, ok := pinfo.ID(); ok && info.Program != id {
		return fmt.Errorf("%w: the link runs program %d, not ours (%d)", ErrSelfCheck, info.Program, id)
	}
	return nil
}

// probe runs a probe packet to the next VIP in turn through the program
// and checks its verdict and backend.
func (d *Datapath) probe() error {
	cur := d.cur.st
	keys := make([]state.VIPKey, 0, len(cur.Services))
	for k := range cur.Services {
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		f := packet.Flow{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"), SrcPort: 9, DstPort: 9, Proto: packet.ProtoUDP}
		ret, _, err := d.RunPacket(f.Frame())
		if err != nil || ret != XDPPass {
			return fmt.Errorf("%w: probe to no VIP: verdict %d, %v", ErrSelfCheck, ret, err)
		}
		return nil
	}
	slices.SortFunc(keys, state.VIPKey.Compare)
	d.probeTurn++
	k := keys[d.probeTurn%len(keys)]
	svc := cur.Services[k]
	if !slices.ContainsFunc(svc.Table, func(id uint32) bool { return id != 0 }) {
		return nil // no backend takes new flows: nothing to forward
	}
	src := netip.MustParseAddr("192.0.2.1")
	if k.Addr.Is6() {
		src = netip.MustParseAddr("2001:db8::1")
	}
	port := k.Port
	if port == 0 {
		port = 1
	}
	f := packet.Flow{Src: src, Dst: k.Addr, SrcPort: uint16(40000 + d.probeTurn%20000), DstPort: port, Proto: k.Proto, TCPFlags: packet.SYN,
		Payload: tracer.ProbeMarker(d.probeCookie)}
	if k.Proto == packet.ProtoUDP {
		f.TCPFlags = 0
	}
	ret, out, err := d.RunPacket(f.Frame())
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSelfCheck, err)
	}
	if ret != XDPTX && ret != XDPRedirect {
		return fmt.Errorf("%w: probe to %s: verdict %d, want XDP_TX or XDP_REDIRECT", ErrSelfCheck, k, ret)
	}
	tun, err := packet.ParseTunnel(out)
	if err != nil {
		return fmt.Errorf("%w: probe to %s: output is not a tunnel packet: %v", ErrSelfCheck, k, err)
	}
	for _, r := range cur.Reals.All() {
		if r.SvcID == svc.SvcID && r.Addr == tun.Backend && r.Active {
			return nil
		}
	}
	return fmt.Errorf("%w: probe to %s went to %s, not a backend of the service", ErrSelfCheck, k, tun.Backend)
}
