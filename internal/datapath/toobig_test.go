package datapath

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/packet"
)

// tooBigState: the fixture services, every real with a cached next hop
// of egress MTU mtu (interface 7, not the test run's), and the too-big
// rate.
func tooBigState(mtu, rate uint32) *State {
	st := fixtureState()
	st.Node.ICMPTooBigRate = rate
	for id := uint32(1); id <= 6; id++ {
		r := st.Reals.At(id)
		r.NextHop = NextHopCache{DMAC: [6]byte{2, 0, 0, 0, 0, 0xbb}, SMAC: [6]byte{2, 0, 0, 0, 0, 0xaa}, Ifindex: 7, MTU: mtu}
		st.Reals.Set(id, r)
	}
	return st
}

// dfFrame is f's frame with DF set on IPv4 (IPv6: unchanged), from
// peerMAC to nodeMAC, and its IP datagram.
func dfFrame(f packet.Flow) (frame, ip []byte) {
	ip = f.IP()
	et := uint16(packet.EtherIPv6)
	if f.Src.Is4() {
		et = packet.EtherIPv4
		ip[6] |= 0x40
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], packet.Checksum(ip[:int(ip[0]&0xf)*4]))
	}
	return packet.Ethernet(nodeMAC, peerMAC, f.VLAN, et, ip), ip
}

// expectTooBig is the exact error the node must send for datagram ip of
// flow f: from the VIP to the client, MACs swapped, VLAN kept, the start
// of ip quoted (IPv4: 576 bytes in all at most, IPv6: 1280).
func expectTooBig(f packet.Flow, ip []byte, mtu uint32) []byte {
	if f.Src.Is4() {
		q := ip[:min(len(ip), 576-28)]
		reply := packet.IPv4(f.Dst, f.Src, packet.ProtoICMP, 0, 64, nil, packet.ICMPv4(packet.ICMPUnreach, packet.ICMPFragNeeded, mtu, q))
		return packet.Ethernet(peerMAC, nodeMAC, f.VLAN, packet.EtherIPv4, reply)
	}
	q := ip[:min(len(ip), 1280-48)]
	reply := packet.IPv6(f.Dst, f.Src, packet.ProtoICMPv6, 0, 64, nil, packet.ICMPv6(f.Dst, f.Src, packet.ICMPv6PacketTooBig, 0, mtu, q))
	return packet.Ethernet(peerMAC, nodeMAC, f.VLAN, packet.EtherIPv6, reply)
}

// checkTooBigReply fails unless out is a valid error: checksums included.
func checkTooBigReply(t *testing.T, f packet.Flow, out, want []byte) {
	t.Helper()
	if !bytes.Equal(out, want) {
		i := 0
		for i < min(len(out), len(want)) && out[i] == want[i] {
			i++
		}
		t.Fatalf("error differs from byte %d (got %d bytes, want %d)\n got % x\nwant % x",
			i, len(out), len(want), out[:min(len(out), 96)], want[:min(len(want), 96)])
	}
	l3 := out[14:]
	if f.VLAN != 0 {
		l3 = out[18:]
	}
	if f.Src.Is4() {
		if packet.Checksum(l3[:20]) != 0 || !packet.L4ChecksumOK(f.Dst, f.Src, packet.ProtoICMP, l3[20:]) {
			t.Fatal("IPv4 or ICMP checksum wrong")
		}
	} else if !packet.L4ChecksumOK(f.Dst, f.Src, packet.ProtoICMPv6, l3[40:]) {
		t.Fatal("ICMPv6 checksum wrong")
	}
}

// TestTooBigICMP: a client packet (IPv4 with DF, IPv6) that does not fit
// its real's egress MTU once encapsulated is answered with the exact
// ICMP error, advertising egress MTU less the encapsulation (IPv6 floor
// 1280); the flow's conntrack entry is made, so a smaller packet of the
// flow then hits it and is forwarded; packets that fit are forwarded.
func TestTooBigICMP(t *testing.T) {
	d := newTestDatapath(t, Options{})
	tcp := func(src, dst netip.Addr, dport uint16, n int, vlan uint16) packet.Flow {
		return packet.Flow{Src: src, Dst: dst, SrcPort: 41000, DstPort: dport, Proto: packet.ProtoTCP,
			TCPFlags: packet.ACK, Payload: make([]byte, n), VLAN: vlan, SrcMAC: peerMAC, DstMAC: nodeMAC}
	}
	udp := func(src, dst netip.Addr, dport uint16, n int) packet.Flow {
		f := tcp(src, dst, dport, n, 0)
		f.Proto, f.TCPFlags = packet.ProtoUDP, 0
		return f
	}
	for _, c := range []struct {
		name   string
		egress uint32
		f      packet.Flow
		mtu    uint32
	}{
		{"v4 GRE", 1500, tcp(client4, vip4, 80, 1460, 0), 1476},
		{"v4 GRE, VLAN", 1500, tcp(client4, vip4, 80, 1460, 42), 1476},
		{"v4 IPIP", 1500, udp(client4, vip4, 53, 1472), 1480},
		{"v4 in IPv6", 1500, udp(client4, vip4, 5353, 1472), 1460},
		{"v6 IP6IP6", 1500, tcp(client6, vip6, 80, 1440, 0), 1460},
		{"v6 IP6IP6, VLAN", 1500, tcp(client6, vip6, 80, 1440, 7), 1460},
		{"v6 GRE over IPv6", 1500, udp(client6, vip6, 53, 1452), 1456},
		{"v6 GRE over IPv4", 1500, tcp(client6, vip6, 443, 1440, 0), 1476},
		{"v6 floor 1280", 1300, tcp(client6, vip6, 80, 1240, 0), 1280},
		{"v4 quote shorter than 548", 100, tcp(client4, vip4, 80, 100, 0), 76},
	} {
		t.Run(c.name, func(t *testing.T) {
			pinCPU(t) // the small packet must hit the entry on the CPU that made it
			if _, err := d.Apply(tooBigState(c.egress, 1<<20)); err != nil {
				t.Fatal(err)
			}
			before, _ := d.Stats()
			in, ip := dfFrame(c.f)
			ret, out := run(t, d.Program(), in)
			if ret != xdpTX {
				t.Fatalf("verdict %s, want TX (the error)", xdpNames[ret])
			}
			checkTooBigReply(t, c.f, out, expectTooBig(c.f, ip, c.mtu))
			after, _ := d.Stats()
			if after["icmp_too_big_sent"] != before["icmp_too_big_sent"]+1 || after["drop_too_big"] != before["drop_too_big"] {
				t.Fatalf("counters before %v after %v", before, after)
			}
			// The flow is tracked: a packet that fits hits and is forwarded.
			small := c.f
			small.Payload = small.Payload[:10]
			frame, _ := dfFrame(small)
			if ret, _ := run(t, d.Program(), frame); ret != xdpRedirect {
				t.Fatalf("small packet of the flow: %s, want REDIRECT", xdpNames[ret])
			}
			if s, _ := d.Stats(); s["ct_hit"] != after["ct_hit"]+1 {
				t.Fatalf("small packet of the flow: no conntrack hit (ct_hit %d -> %d)", after["ct_hit"], s["ct_hit"])
			}
		})
	}
}

// TestTooBigRateLimit: 100 too-big packets on one CPU at 10/s: 10 or 11
// errors sent, the rest dropped and counted; rate 0: none sent.
func TestTooBigRateLimit(t *testing.T) {
	pinCPU(t)
	d := newTestDatapath(t, Options{})
	f := packet.Flow{Src: client4, Dst: vip4, SrcPort: 41000, DstPort: 80, Proto: packet.ProtoTCP,
		TCPFlags: packet.ACK, Payload: make([]byte, 1460), SrcMAC: peerMAC, DstMAC: nodeMAC}
	in, _ := dfFrame(f)
	count := func(rate uint32) (tx, drop int) {
		if _, err := d.Apply(tooBigState(1500, rate)); err != nil {
			t.Fatal(err)
		}
		for range 100 {
			switch ret, _ := run(t, d.Program(), in); ret {
			case xdpTX:
				tx++
			case xdpDrop:
				drop++
			default:
				t.Fatalf("verdict %s", xdpNames[ret])
			}
		}
		return
	}
	tx, drop := count(10)
	if tx < 10 || tx > 11 || tx+drop != 100 {
		t.Fatalf("limit 10/s: %d sent, %d dropped of 100", tx, drop)
	}
	s, _ := d.Stats()
	if s["icmp_too_big_sent"] != uint64(tx) || s["icmp_too_big_limited"] != uint64(drop) {
		t.Fatalf("counters %v", s)
	}
	if tx, _ := count(0); tx != 0 {
		t.Fatalf("rate 0: %d sent", tx)
	}
}

// TestTooBigFragmented: an IPv4 datagram without DF too big for its
// real's egress goes to xlbd, which fragments it; each piece, run through
// the program, goes to the whole datagram's backend (the service takes
// no fragments of its own), fits the MTU, and the pieces reassemble to
// the datagram.
func TestTooBigFragmented(t *testing.T) {
	d := newTestDatapath(t, Options{})
	if _, err := d.Apply(tooBigState(1500, 1000)); err != nil {
		t.Fatal(err)
	}
	prog := d.Program()
	var pieces []*packet.Tunnel
	h, mu := runInjectHolder(t, d, func(ret uint32, out []byte) {
		if tun, err := packet.ParseTunnel(out); err == nil && ret == xdpRedirect {
			if len(out)-14 > 1500 {
				t.Errorf("piece of %d bytes once encapsulated, MTU 1500", len(out)-14)
			}
			pieces = append(pieces, tun)
		}
	})

	f := fragFlow(client4, vip4, 40001, 53, 3000) // UDP 53: IPIP to be4, outer 20
	ip := f.IP()
	binary.BigEndian.PutUint16(ip[4:], 0x4242) // the datagram's id
	binary.BigEndian.PutUint16(ip[10:], 0)
	binary.BigEndian.PutUint16(ip[10:], packet.Checksum(ip[:20]))
	handToHolder(t, prog, h, frameOf(ip))
	mu.Lock()
	defer mu.Unlock()
	if len(pieces) != 3 { // 3008 bytes of UDP in pieces of 1480 - 20 = 1456 (a multiple of 8)
		s, _ := d.Stats()
		t.Fatalf("%d pieces forwarded, want 3 (holder %+v, counters %v)", len(pieces), h.Stats(), s)
	}
	var data []byte
	for i, p := range pieces {
		if p.Backend != be4 || p.Kind != "ipip" {
			t.Fatalf("piece %d to %s (%s), want %s (ipip)", i, p.Backend, p.Kind, be4)
		}
		in := p.Inner
		if packet.Checksum(in[:20]) != 0 || binary.BigEndian.Uint16(in[4:]) != 0x4242 ||
			int(binary.BigEndian.Uint16(in[6:])&0x1fff)*8 != len(data) || (in[6]&0x20 != 0) != (i < 2) {
			t.Fatalf("piece %d: bad IPv4 header % x", i, in[:20])
		}
		data = append(data, in[20:]...)
	}
	if !bytes.Equal(data, ip[20:]) {
		t.Fatal("pieces do not reassemble to the datagram")
	}
	s, _ := d.Stats()
	if s["too_big_fragment"] != 1 || s["frag_needed_fragmented"] != 1 || s["frag_needed_pieces"] != 3 ||
		s["drop_fragment"] != 0 || s["icmp_too_big_sent"] != 0 {
		t.Fatalf("counters %v", s)
	}
}
