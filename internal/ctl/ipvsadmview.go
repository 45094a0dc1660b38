package ctl

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
)

// printIPVSAdm prints the services in the layout of `ipvsadm -Ln`: a
// line per service (protocol, VIP:port, scheduler, persistence flags),
// a line per backend (address:port, forwarding, weight, connections),
// padded as ipvsadm pads them, so tools that read ipvsadm's listing read
// this one. The first line names xlb, not IPVS.
func (c *CLI) printIPVSAdm(r *pb.ListServicesResponse) error {
	var b strings.Builder
	fmt.Fprintf(&b, "xlb services (%d, the layout of ipvsadm -Ln)\n", len(r.Services))
	b.WriteString("Prot LocalAddress:Port Scheduler Flags\n")
	b.WriteString("  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n")
	for _, s := range r.Services {
		b.WriteString(ipvsServiceLine(s))
		for _, be := range s.Backends {
			fmt.Fprintf(&b, "  -> %-28s %-7s %-6d %-10d %-10d\n", ipvsAddrPort(be.Address, s.Port), forward(be),
				ipvsWeight(s, be), be.ActiveConns, be.InactConns)
		}
	}
	_, err := fmt.Fprint(c.Out, b.String())
	return err
}

// ipvsServiceLine is a service's line: "TCP  10.0.0.1:80 wlc persistent 300
// mask 255.255.255.0" (IPv4 masks dotted, IPv6 as a prefix length;
// neither when the whole address).
func ipvsServiceLine(s *pb.Service) string {
	line := fmt.Sprintf("%s  %s %s", protoName(s.Protocol), ipvsAddrPort(s.Vip, s.Port), s.Scheduler)
	p := s.GetPersistence()
	if p == nil {
		return line + "\n"
	}
	line += " persistent " + strconv.FormatInt(int64(p.GetTimeout().AsDuration().Seconds()), 10)
	a, err := netip.ParseAddr(s.Vip)
	switch {
	case err != nil:
	case a.Is4() && p.Netmask != 0 && p.Netmask < 32:
		m := ^uint32(0) << (32 - p.Netmask)
		line += fmt.Sprintf(" mask %d.%d.%d.%d", m>>24, m>>16&0xff, m>>8&0xff, m&0xff)
	case a.Is6() && p.Netmask6 != 0 && p.Netmask6 < 128:
		line += fmt.Sprintf(" mask %d", p.Netmask6)
	}
	return line + "\n"
}

// ipvsAddrPort is "10.0.0.1:80" or "[2001:db8::1]:80", numeric like
// ipvsadm -n; an all-ports service has port 0 there.
func ipvsAddrPort(addr string, port uint32) string {
	if a, err := netip.ParseAddr(addr); err == nil && a.Is6() {
		addr = "[" + addr + "]"
	}
	return addr + ":" + strconv.FormatUint(uint64(port), 10)
}

// ipvsWeight is the weight new flows see, as IPVS would hold it: the
// weight in effect, 0 (IPVS's quiesced) for a backend drained, down, or
// outside the service's active pool.
func ipvsWeight(s *pb.Service, b *pb.Backend) uint32 {
	h := b.GetHealth()
	down := h.GetCheck() != "" && h.GetKnown() && !h.GetHealthy()
	if b.State == pb.BackendState_BACKEND_STATE_DRAIN || down || b.Pool != s.ActivePool {
		return 0
	}
	return b.Weight
}
