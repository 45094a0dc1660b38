package datapath

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/packet"
)

// quoting is the IP datagram of an ICMP error (type, code, rest) from src
// to dst quoting the first n bytes of q (all of it if n is 0).
func quoting(src, dst netip.Addr, typ, code uint8, rest uint32, q packet.Flow, n int) []byte {
	emb := q.IP()
	if n > 0 && n < len(emb) {
		emb = emb[:n]
	}
	if src.Is4() {
		return packet.IPv4(src, dst, packet.ProtoICMP, 0xc0, 250, nil, packet.ICMPv4(typ, code, rest, emb))
	}
	return packet.IPv6(src, dst, packet.ProtoICMPv6, 0, 250, nil, packet.ICMPv6(src, dst, typ, code, rest, emb))
}

// received is datagram ip as a frame from the peer to the node.
func received(vlan uint16, ip []byte) []byte {
	et := uint16(packet.EtherIPv4)
	if ip[0]>>4 == 6 {
		et = packet.EtherIPv6
	}
	return packet.Ethernet(nodeMAC, peerMAC, vlan, et, ip)
}

// replyOf is the reply to the client's flow f from addr:port.
func replyOf(f packet.Flow, addr netip.Addr, port uint16) packet.Flow {
	r := f
	r.Src, r.SrcPort, r.Dst, r.DstPort = addr, port, f.Src, f.SrcPort
	r.Payload = bytes.Repeat([]byte{0xab}, 64)
	if f.Proto == packet.ProtoTCP {
		r.TCPFlags = packet.SYN | packet.ACK
	}
	return r
}

// natICMPCase is an ICMP error about the NAT flow fwd: type, code, rest
// (the MTU of a too-big), the bytes quoted (0: all), the flow's backend
// and its port; to the backend: the kind's counter; to the client: whether
// the flow is tracked (else the error quotes a flow the node never NATed).
type natICMPCase struct {
	name      string
	fwd       packet.Flow
	typ, code uint8
	rest      uint32
	n         int
	backend   netip.Addr
	bport     uint16
	count     string
	tracked   bool
}

// methodsDatapath is a test datapath with methodsState applied.
func methodsDatapath(t *testing.T) (*Datapath, *ebpf.Program) {
	t.Helper()
	d := newTestDatapath(t, Options{})
	if _, err := d.Apply(methodsState()); err != nil {
		t.Fatal(err)
	}
	return d, d.Program()
}

// TestNATICMPToBackendFixtures: an ICMP error to a NAT VIP about a reply
// (VIP:vport -> client) reaches the flow's backend as if the backend's own
// packet (backend:bport -> client) had caused it: outer destination, the
// quoted source address and port rewritten, every checksum the quote
// holds valid. The error's MTU passes unchanged.
func TestNATICMPToBackendFixtures(t *testing.T) {
	d, prog := methodsDatapath(t)
	tcp, udp := uint8(packet.ProtoTCP), uint8(packet.ProtoUDP)
	cases := []natICMPCase{
		{"v4 tcp frag-needed, 28 bytes", methodsFlow(client4, vipNAT4, tcp, 80), packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 28, be4, 8080, "icmp_frag_needed", false},
		{"v4 tcp frag-needed, whole", methodsFlow(client4, vipNAT4, tcp, 80), packet.ICMPUnreach, packet.ICMPFragNeeded, 1280, 0, be4, 8080, "icmp_frag_needed", false},
		{"v4 tcp port unreachable, quote with options, vlan", withVLAN(withOptions(methodsFlow(client4, vipNAT4, tcp, 80))), packet.ICMPUnreach, 3, 0, 0, be4, 8080, "icmp_unreach", false},
		{"v4 udp port unreachable", methodsFlow(client4, vipNAT4, udp, 53), packet.ICMPUnreach, 3, 0, 0, be4, 53, "icmp_unreach", false},
		{"v4 udp time exceeded, 36 bytes", methodsFlow(client4, vipNAT4, udp, 53), packet.ICMPTimeExceeded, 0, 0, 36, be4, 53, "icmp_time_exceeded", false},
		{"v6 tcp packet-too-big", methodsFlow(client6, vipNAT6, tcp, 80), packet.ICMPv6PacketTooBig, 0, 1280, 0, be6, 8080, "icmp_frag_needed", false},
		{"v6 tcp time exceeded, 48 bytes, vlan", withVLAN(methodsFlow(client6, vipNAT6, tcp, 80)), packet.ICMPv6TimeExceeded, 0, 0, 48, be6, 8080, "icmp_time_exceeded", false},
		{"v6 udp unreachable, 48 bytes", methodsFlow(client6, vipNAT6, udp, 53), packet.ICMPv6Unreach, 4, 0, 48, be6, 53, "icmp_unreach", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, err := d.Stats()
			if err != nil {
				t.Fatal(err)
			}
			router := router4
			if c.fwd.Dst.Is6() {
				router = router6
			}
			reply := replyOf(c.fwd, c.fwd.Dst, c.fwd.DstPort) // as the client saw it
			in := received(c.fwd.VLAN, quoting(router, c.fwd.Dst, c.typ, c.code, c.rest, reply, c.n))
			ret, out := run(t, prog, in)
			if ret != xdpTX {
				t.Fatalf("verdict %d, want XDP_TX", ret)
			}
			sent := replyOf(c.fwd, c.backend, c.bport) // as the backend sent it
			want := routed(c.fwd, quoting(router, c.backend, c.typ, c.code, c.rest, sent, c.n))
			if !bytes.Equal(out, want) {
				t.Fatalf("output differs\n got % x\nwant % x", out, want)
			}
			after, err := d.Stats()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"nat_icmp", c.count} {
				if after[k] != before[k]+1 {
					t.Errorf("%s moved by %d, want 1", k, after[k]-before[k])
				}
			}
		})
	}
}

// TestNATICMPToClientFixtures: a NAT backend's ICMP error about a tracked
// flow's packet (client -> backend:bport) reaches the client as if the
// VIP had sent it, quoting the client's own packet (client -> VIP:vport).
// Errors about no tracked flow, and ICMP too short to hold the quoted
// ports, pass untouched.
func TestNATICMPToClientFixtures(t *testing.T) {
	d, prog := methodsDatapath(t)
	tcp, udp := uint8(packet.ProtoTCP), uint8(packet.ProtoUDP)
	cases := []natICMPCase{
		{"v4 udp port unreachable", methodsFlow(client4, vipNAT4, udp, 53), packet.ICMPUnreach, 3, 0, 0, be4, 53, "", true},
		{"v4 tcp frag-needed, 28 bytes, vlan", withVLAN(methodsFlow(client4, vipNAT4, tcp, 80)), packet.ICMPUnreach, packet.ICMPFragNeeded, 1300, 28, be4, 8080, "", true},
		{"v4 tcp unreachable, options", withOptions(methodsFlow(client4, vipNAT4, tcp, 80)), packet.ICMPUnreach, 1, 0, 0, be4, 8080, "", true},
		{"v6 udp port unreachable", methodsFlow(client6, vipNAT6, udp, 53), packet.ICMPv6Unreach, 4, 0, 0, be6, 53, "", true},
		{"v6 tcp packet-too-big, 60 bytes", methodsFlow(client6, vipNAT6, tcp, 80), packet.ICMPv6PacketTooBig, 0, 1280, 60, be6, 8080, "", true},
		{"v4 untracked backend port", methodsFlow(client4, vipNAT4, tcp, 80), packet.ICMPUnreach, 3, 0, 0, be4, 9999, "", false},
		{"v4 quote too short for the ports", methodsFlow(client4, vipNAT4, tcp, 80), packet.ICMPUnreach, 3, 0, 22, be4, 8080, "", false},
		{"v6 untracked", methodsFlow(client6, vipNAT6, udp, 53), packet.ICMPv6Unreach, 4, 0, 0, be6, 54, "", false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.fwd.SrcPort = uint16(42000 + i)
			if ret, _ := run(t, prog, c.fwd.Frame()); ret != xdpTX {
				t.Fatalf("forward verdict %d", ret)
			}
			before, err := d.Stats()
			if err != nil {
				t.Fatal(err)
			}
			got := natted(c.fwd, c.backend, c.bport) // what the backend received
			in := received(c.fwd.VLAN, quoting(c.backend, c.fwd.Src, c.typ, c.code, c.rest, got, c.n))
			ret, out := run(t, prog, in)
			// The fixture's FIB has no route to the client: the
			// rewritten error goes to the kernel to route, as replies do.
			if ret != xdpPass {
				t.Fatalf("verdict %d, want XDP_PASS", ret)
			}
			want := in
			counter := "pass_other_proto"
			if c.tracked {
				want = received(c.fwd.VLAN, quoting(c.fwd.Dst, c.fwd.Src, c.typ, c.code, c.rest, c.fwd, c.n))
				counter = "nat_reply_pass"
			}
			if !bytes.Equal(out, want) {
				t.Fatalf("output differs\n got % x\nwant % x", out, want)
			}
			after, err := d.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if after[counter] != before[counter]+1 {
				t.Errorf("%s moved by %d, want 1", counter, after[counter]-before[counter])
			}
		})
	}
}
