package harness

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

// The forwarding methods' settings of benchState.
const (
	natBackendPort = 8080 // the backends' port behind method nat
	gueBenchPort   = 6080 // node.gue_port
)

// checkOutput checks the last output frame of a run whose services use
// method m: for the tunnels (GRE, IPIP) checkTunnel; for GUE an outer
// IPv4/IPv6 UDP datagram to gueBenchPort of a backend; for DR the client's
// datagram to a VIP, for NAT to a backend's natBackendPort (a reply: from
// VIP:80 to the client); always to the gateway's MAC.
func checkOutput(out []byte, m state.Encap) error {
	switch m {
	case state.EncapDefault, state.EncapGRE, state.EncapIPIP:
		return checkTunnel(out)
	}
	if len(out) < 14+20+8 || !slices.Equal(out[:6], gwMAC) {
		return fmt.Errorf("%w: %s output too short or not to the gateway: % x", ErrVerdict, methodName(m), out[:min(len(out), 14)])
	}
	ip := out[14:]
	var src, dst netip.Addr
	var proto uint8
	l4 := ip[20:]
	if ip[0]>>4 == 4 {
		src, dst, proto, l4 = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20])), ip[9], ip[int(ip[0]&0xf)*4:]
	} else if len(ip) >= 40+4 {
		src, dst, proto, l4 = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40])), ip[6], ip[40:]
	}
	if len(l4) < 4 {
		return fmt.Errorf("%w: %s output truncated", ErrVerdict, methodName(m))
	}
	sport, dport := binary.BigEndian.Uint16(l4[0:]), binary.BigEndian.Uint16(l4[2:])
	backend := netip.MustParsePrefix(backendNet4).Contains(dst) || netip.MustParsePrefix(backendNet6).Contains(dst)
	var ok bool
	switch m {
	case state.EncapGUE:
		ok = backend && proto == packet.ProtoUDP && dport == gueBenchPort
	case state.EncapDR:
		ok = dst == vip4 || dst == vip6
	case state.EncapNAT: // a client's packet, or a reply (natreply.go) back from the VIP
		ok = backend && dport == natBackendPort || (src == vip4 || src == vip6) && sport == vipTCP4.Port && !backend
	}
	if !ok {
		return fmt.Errorf("%w: %s output to %s proto %d port %d", ErrVerdict, methodName(m), dst, proto, dport)
	}
	return nil
}

// methodName is m as the config spells it.
func methodName(m state.Encap) string {
	return map[state.Encap]string{state.EncapGRE: "gre", state.EncapIPIP: "ipip", state.EncapGUE: "gue",
		state.EncapDR: "dr", state.EncapNAT: "nat"}[m]
}
