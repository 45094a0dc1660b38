package datapath

// Converters between the state model (internal/state) and the forwarder's
// ABI structs (bpf/types.h, generated as xlb* types by bpf2go).

import (
	"bytes"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"time"

	"github.com/xlbproject/xlb/internal/state"
)

// encapABIs pairs each forwarding method with its enum xlb_encap value.
var encapABIs = []struct {
	e   state.Encap
	abi xlbXlbEncap
}{
	{state.EncapGRE, xlbXlbEncapXLB_ENCAP_GRE},
	{state.EncapIPIP, xlbXlbEncapXLB_ENCAP_IPIP},
	{state.EncapGUE, xlbXlbEncapXLB_ENCAP_GUE},
	{state.EncapDR, xlbXlbEncapXLB_ENCAP_DR},
	{state.EncapNAT, xlbXlbEncapXLB_ENCAP_NAT},
}

// encapABI is enum xlb_encap's value of e.
func encapABI(e state.Encap) uint8 {
	for _, m := range encapABIs {
		if m.e == e {
			return uint8(m.abi)
		}
	}
	return uint8(xlbXlbEncapXLB_ENCAP_NONE)
}

// encapFromABI is the Encap of an enum xlb_encap value.
func encapFromABI(v uint8) state.Encap {
	for _, m := range encapABIs {
		if uint8(m.abi) == v {
			return m.e
		}
	}
	return state.EncapDefault
}

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

func vipKey(k state.VIPKey) xlbVipKey {
	addr, fam := addrBytes(k.Addr)
	return xlbVipKey{Addr: addr, Port: bits.ReverseBytes16(k.Port), Proto: k.Proto, Family: fam}
}

func keyFromVip(k xlbVipKey) state.VIPKey {
	return state.VIPKey{Addr: addrFrom(k.Addr, k.Family), Port: bits.ReverseBytes16(k.Port), Proto: k.Proto}
}

func vipInfo(s *state.Service, slot uint32) xlbVipInfo {
	vi := xlbVipInfo{SvcId: s.SvcID, TableId: slot, TableSize: uint32(len(s.Table)), Encap: encapABI(s.Encap)}
	if s.Fragments {
		vi.Flags |= uint8(xlbXlbVipFlagsXLB_VIP_F_FRAGMENTS)
	}
	return vi
}

func realInfo(r state.Real) xlbRealInfo {
	addr, fam := addrBytes(r.Addr)
	ri := xlbRealInfo{Addr: addr, SvcId: r.SvcID, Family: fam, Encap: encapABI(r.Encap),
		Port: bits.ReverseBytes16(r.Port)}
	if r.Active {
		ri.Flags |= uint8(xlbXlbRealFlagsXLB_REAL_F_ACTIVE)
	}
	if r.NextHop.Local {
		ri.Flags |= uint8(xlbXlbRealFlagsXLB_REAL_F_LOCAL)
	}
	if nh := r.NextHop; nh.Ifindex != 0 {
		ri.Flags |= uint8(xlbXlbRealFlagsXLB_REAL_F_NEXTHOP)
		ri.Dmac, ri.Smac, ri.Ifindex, ri.Mtu = nh.DMAC, nh.SMAC, nh.Ifindex, uint16(min(nh.MTU, 0xffff))
	}
	return ri
}

func realFromInfo(ri xlbRealInfo) state.Real {
	r := state.Real{
		Addr: addrFrom(ri.Addr, ri.Family), SvcID: ri.SvcId,
		Active: ri.Flags&uint8(xlbXlbRealFlagsXLB_REAL_F_ACTIVE) != 0, Encap: encapFromABI(ri.Encap),
		Port: bits.ReverseBytes16(ri.Port),
	}
	if ri.Flags&uint8(xlbXlbRealFlagsXLB_REAL_F_NEXTHOP) != 0 {
		r.NextHop = state.NextHop{DMAC: ri.Dmac, SMAC: ri.Smac, Ifindex: ri.Ifindex, MTU: uint32(ri.Mtu)}
	}
	r.NextHop.Local = ri.Flags&uint8(xlbXlbRealFlagsXLB_REAL_F_LOCAL) != 0
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

func nodeInfo(n state.Node, ifmac net.HardwareAddr) (xlbNodeInfo, error) {
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
	ni.FloodSynLimit = floodLimit(n.FloodSynRate)
	ni.FloodNewLimit = floodLimit(n.FloodNewFlowRate)
	ni.IcmpEchoRate = n.ICMPEchoRate
	ni.IcmpTooBigRate = n.ICMPTooBigRate
	ni.TraceRate = n.TraceRate
	ni.GuePort = bits.ReverseBytes16(n.GUEPort)
	if n.NAT {
		ni.Flags |= uint16(xlbXlbNodeFlagsXLB_NODE_F_NAT)
	}
	return ni, nil
}

func nodeFromInfo(ni xlbNodeInfo) state.Node {
	var n state.Node
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
	n.FloodSynRate = floodRate(ni.FloodSynLimit)
	n.FloodNewFlowRate = floodRate(ni.FloodNewLimit)
	n.ICMPEchoRate = ni.IcmpEchoRate
	n.ICMPTooBigRate = ni.IcmpTooBigRate
	n.TraceRate = ni.TraceRate
	n.GUEPort = bits.ReverseBytes16(ni.GuePort)
	n.NAT = ni.Flags&uint16(xlbXlbNodeFlagsXLB_NODE_F_NAT) != 0
	n.Timeouts = state.Timeouts{
		TCPSyn: time.Duration(ni.TimeoutTcpSyn) * tick, TCP: time.Duration(ni.TimeoutTcp) * tick,
		TCPFin: time.Duration(ni.TimeoutTcpFin) * tick, UDP: time.Duration(ni.TimeoutUdp) * tick,
	}
	return n
}

// floodLimit is a flood rate (new flows per second per CPU, 0: no limit)
// as the program's limit per conntrack tick (2^28 ns).
func floodLimit(rate uint32) uint32 {
	if rate == 0 {
		return 0
	}
	return uint32(max(1, uint64(rate)<<ctTickShift/uint64(time.Second)))
}

// floodRate is floodLimit's inverse (rounded down).
func floodRate(limit uint32) uint32 {
	return uint32(uint64(limit) * uint64(time.Second) >> ctTickShift)
}
