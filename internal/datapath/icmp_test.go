package datapath

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/packet"
	"golang.org/x/sys/unix"
)

var router4 = netip.MustParseAddr("198.51.100.1")
var router6 = netip.MustParseAddr("2001:db8:ffff::1")

// expectTunnelIP is the frame the forwarder must emit for the IP datagram
// inner (not necessarily TCP/UDP) sent to backend.
func expectTunnelIP(inner []byte, vlan uint16, kind string, backend netip.Addr, label uint32) []byte {
	innerV4 := inner[0]>>4 == 4
	var tos uint8
	if innerV4 {
		tos = inner[1]
	} else {
		tos = uint8(binary.BigEndian.Uint16(inner[0:]) >> 4)
	}
	var l4 []byte
	var proto uint8
	switch {
	case kind == "gre":
		l4 = make([]byte, 4)
		if innerV4 {
			binary.BigEndian.PutUint16(l4[2:], packet.EtherIPv4)
		} else {
			binary.BigEndian.PutUint16(l4[2:], packet.EtherIPv6)
		}
		proto = packet.ProtoGRE
	case innerV4:
		proto = packet.ProtoIPIP
	default:
		proto = packet.ProtoIPv6
	}
	payload := append(l4, inner...)
	var ip []byte
	et := uint16(packet.EtherIPv4)
	if backend.Is4() {
		ip = packet.IPv4(nodeV4, backend, proto, tos, 64, nil, payload)
		ip[6] = 0x40
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], packet.Checksum(ip[:20]))
	} else {
		ip = packet.IPv6(nodeV6, backend, proto, tos, 64, nil, payload)
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(tos)<<20|label)
		et = packet.EtherIPv6
	}
	var gw, lo [6]byte
	copy(gw[:], testGW)
	return packet.Ethernet(gw, lo, vlan, et, ip)
}

// icmpError builds the frame of an ICMP error from router to the embedded
// packet's source, embedding the first n bytes of the backend's reply
// (the reply of the client's flow f: source VIP:port, destination client).
func icmpError(f packet.Flow, router netip.Addr, typ, code uint8, rest uint32, n int) []byte {
	reply := f
	reply.Src, reply.Dst, reply.SrcPort, reply.DstPort = f.Dst, f.Src, f.DstPort, f.SrcPort
	reply.Payload = bytes.Repeat([]byte{0xab}, 64)
	emb := reply.IP()
	if n < len(emb) {
		emb = emb[:n]
	}
	if f.Dst.Is4() {
		ip := packet.IPv4(router, f.Dst, packet.ProtoICMP, 0xc0, 250, nil, packet.ICMPv4(typ, code, rest, emb))
		return packet.Ethernet(nodeMAC, peerMAC, f.VLAN, packet.EtherIPv4, ip)
	}
	ip := packet.IPv6(router, f.Dst, packet.ProtoICMPv6, 0, 250, nil, packet.ICMPv6(router, f.Dst, typ, code, rest, emb))
	return packet.Ethernet(nodeMAC, peerMAC, f.VLAN, packet.EtherIPv6, ip)
}

// echoRequest is an echo request from src to dst.
func echoRequest(src, dst netip.Addr, id, seq uint16, data []byte) []byte {
	rest := uint32(id)<<16 | uint32(seq)
	if src.Is4() {
		ip := packet.IPv4(src, dst, packet.ProtoICMP, 0, 64, nil, packet.ICMPv4(packet.ICMPEcho, 0, rest, data))
		return packet.Ethernet(nodeMAC, peerMAC, 0, packet.EtherIPv4, ip)
	}
	ip := packet.IPv6(src, dst, packet.ProtoICMPv6, 0, 64, nil, packet.ICMPv6(src, dst, packet.ICMPv6EchoRequest, 0, rest, data))
	return packet.Ethernet(nodeMAC, peerMAC, 0, packet.EtherIPv6, ip)
}

func l3Of(frame []byte) []byte {
	if binary.BigEndian.Uint16(frame[12:]) == packet.EtherVLAN {
		return frame[18:]
	}
	return frame[14:]
}

// TestICMPErrorFixtures: an ICMP error about a VIP flow is encapsulated,
// whole and unchanged, to the flow's backend; others go to the kernel.
func TestICMPErrorFixtures(t *testing.T) {
	d := newTestDatapath(t, Options{})
	st := fixtureState()
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	tcp := func(src, dst netip.Addr, dport uint16) packet.Flow {
		return packet.Flow{Src: src, Dst: dst, SrcPort: 40000, DstPort: dport, Proto: packet.ProtoTCP}
	}
	udp := func(src, dst netip.Addr, dport uint16) packet.Flow {
		f := tcp(src, dst, dport)
		f.Proto = packet.ProtoUDP
		return f
	}
	vlan := tcp(client4, vip4, 80)
	vlan.VLAN = 7
	cases := []struct {
		name    string
		in      []byte
		kind    string
		backend netip.Addr
		counter string
	}{
		{"v4 frag-needed tcp -> gre", icmpError(tcp(client4, vip4, 80), router4, packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 28), "gre", be4, "icmp_frag_needed"},
		{"v4 frag-needed, long quote", icmpError(tcp(client4, vip4, 80), router4, packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 548), "gre", be4, "icmp_frag_needed"},
		{"v4 frag-needed vlan", icmpError(vlan, router4, packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 28), "gre", be4, "icmp_frag_needed"},
		{"v4 port unreachable udp -> ipip", icmpError(udp(client4, vip4, 53), router4, packet.ICMPUnreach, 3, 0, 28), "ipip", be4, "icmp_unreach"},
		{"v4 time exceeded udp all-ports -> 4in6", icmpError(udp(client4, vip4, 9999), router4, packet.ICMPTimeExceeded, 0, 0, 28), "ipip", be6, "icmp_time_exceeded"},
		{"v6 packet-too-big tcp -> ip6ip6", icmpError(tcp(client6, vip6, 80), router6, packet.ICMPv6PacketTooBig, 0, 1280, 48), "ipip", be6, "icmp_frag_needed"},
		{"v6 unreachable udp -> gre", icmpError(udp(client6, vip6, 53), router6, packet.ICMPv6Unreach, 4, 0, 48), "gre", be6, "icmp_unreach"},
		{"v6 time exceeded tcp -> gre over v4", icmpError(tcp(client6, vip6, 443), router6, packet.ICMPv6TimeExceeded, 0, 0, 48), "gre", be4, "icmp_time_exceeded"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, _ := d.Stats()
			ret, out := run(t, d.Program(), c.in)
			if ret != xdpTX {
				t.Fatalf("verdict %d, want XDP_TX", ret)
			}
			tun, err := packet.ParseTunnel(out)
			if err != nil {
				t.Fatalf("not a tunnel frame: %v\n% x", err, out)
			}
			if !bytes.Equal(tun.Inner, l3Of(c.in)) {
				t.Fatalf("inner ICMP packet changed")
			}
			vlanID := uint16(0)
			if binary.BigEndian.Uint16(c.in[12:]) == packet.EtherVLAN {
				vlanID = binary.BigEndian.Uint16(c.in[14:])
			}
			// The IPv6 flow label is the flow's hash: the flow is the client's.
			want := expectTunnelIP(l3Of(c.in), vlanID, c.kind, c.backend, tun.Label)
			if !bytes.Equal(out, want) {
				t.Fatalf("output differs\n got % x\nwant % x", out, want)
			}
			after, _ := d.Stats()
			if after[c.counter] != before[c.counter]+1 {
				t.Fatalf("counter %s did not move: %v", c.counter, after)
			}
			if after["ct_hit"]+after["ct_miss"]+after["ct_remote_hit"] != before["ct_hit"]+before["ct_miss"]+before["ct_remote_hit"] {
				t.Fatalf("an ICMP error touched conntrack counters")
			}
		})
	}

	// Exact bytes of the first case, written out: IPv4 GRE to 10.0.1.1.
	in := icmpError(tcp(client4, vip4, 80), router4, packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 28)
	_, out := run(t, d.Program(), in)
	hdr := []byte{
		0x02, 0, 0, 0, 0, 0xfe, 0, 0, 0, 0, 0, 0, 0x08, 0x00, // eth: gw <- lo
		0x45, 0xc0, 0, 0x50, 0, 0, 0x40, 0, 64, 47, 0, 0, // outer IPv4 (checksum below)
		10, 0, 0, 11, 10, 0, 1, 1,
		0, 0, 0x08, 0x00, // GRE, IPv4
	}
	binary.BigEndian.PutUint16(hdr[24:], packet.Checksum(hdr[14:34]))
	if !bytes.Equal(out[:len(hdr)], hdr) || !bytes.Equal(out[len(hdr):], in[14:]) {
		t.Fatalf("frag-needed output\n got % x\nwant % x + inner", out, hdr)
	}

	pass := []struct {
		name string
		in   []byte
	}{
		{"outer dst is not the embedded source", func() []byte {
			f := tcp(client4, vip4, 80)
			b := icmpError(f, router4, packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 28)
			// embedded source 10.200.0.9 (another address), outer dst stays the VIP
			copy(b[14+20+8+12:], []byte{10, 200, 0, 9})
			return b
		}()},
		{"embedded flow is no VIP (port)", icmpError(tcp(client4, vip4, 81), router4, packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 28)},
		{"embedded packet too short for ports", icmpError(tcp(client4, vip4, 80), router4, packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 22)},
		{"redirect (not handled)", icmpError(tcp(client4, vip4, 80), router4, 5, 0, 0, 28)},
		{"v6 embedded with ext header", func() []byte {
			f := tcp(client6, vip6, 80)
			reply := packet.Flow{Src: vip6, Dst: client6, SrcPort: 80, DstPort: 40000, Proto: packet.ProtoTCP,
				IPv6ExtHeaders: []packet.ExtHeader{{Type: 60, Body: make([]byte, 6)}}}
			emb := reply.IP()[:56]
			ip := packet.IPv6(router6, f.Dst, packet.ProtoICMPv6, 0, 250, nil, packet.ICMPv6(router6, f.Dst, packet.ICMPv6PacketTooBig, 0, 1280, emb))
			return packet.Ethernet(nodeMAC, peerMAC, 0, packet.EtherIPv6, ip)
		}()},
		{"error to a non-VIP address", func() []byte {
			f := tcp(client4, netip.MustParseAddr("10.9.9.9"), 80)
			return icmpError(f, router4, packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 28)
		}()},
	}
	for _, c := range pass {
		t.Run(c.name, func(t *testing.T) {
			ret, out := run(t, d.Program(), c.in)
			if ret != xdpPass || !bytes.Equal(out, c.in) {
				t.Fatalf("verdict %d, want XDP_PASS unchanged", ret)
			}
		})
	}
}

// TestICMPErrorFollowsFlow: the error reaches the backend that owns the
// flow: the tracked one on the node that tracks it (even after the table
// moved the flow's slot elsewhere), the table's on a node that does not.
// The lookup writes nothing.
func TestICMPErrorFollowsFlow(t *testing.T) {
	d := newTestDatapath(t, Options{})
	other := newTestDatapath(t, Options{}) // another node: same config, no entries
	st := fixtureState()
	key := VIPKey{Addr: vip4, Port: 80, Proto: 6}
	b2 := netip.MustParseAddr("10.0.1.2")
	st.Reals.Set(20, Real{Addr: b2, SvcID: 1, Active: true})
	tbl := []uint32{1, 20, 1, 20, 1, 20, 1}
	st.Services[key] = &Service{SvcID: 1, Encap: EncapGRE, Table: tbl}
	for _, dp := range []*Datapath{d, other} {
		if _, err := dp.Apply(st); err != nil {
			t.Fatal(err)
		}
	}
	byID := map[uint32]netip.Addr{1: be4, 20: b2}
	for port := uint16(1000); port < 1064; port++ {
		f := packet.Flow{Src: client4, Dst: vip4, SrcPort: port, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN}
		h := maglev.FlowHash(maglev.Tuple{Src: f.Src, Dst: f.Dst, SrcPort: f.SrcPort, DstPort: f.DstPort, Proto: f.Proto})
		want := byID[tbl[uint32((h>>32)*7>>32)]]
		icmp := icmpError(f, router4, packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 28)
		for _, dp := range []*Datapath{d, other} {
			_, out := run(t, dp.Program(), icmp)
			tun, err := packet.ParseTunnel(out)
			if err != nil || tun.Backend != want {
				t.Fatalf("port %d: ICMP to %v (%v), want the table's %s", port, tun, err, want)
			}
		}
		// The flow is tracked on d; then every slot moves to the other backend.
		_, out := run(t, d.Program(), f.Frame())
		if tun, err := packet.ParseTunnel(out); err != nil || tun.Backend != want {
			t.Fatalf("flow: %v %v", tun, err)
		}
	}
	st2 := fixtureState()
	st2.Reals.Set(20, st.Reals.At(20))
	st2.Services[key] = &Service{SvcID: 1, Encap: EncapGRE, Table: []uint32{20, 1, 20, 1, 20, 1, 20}}
	if _, err := d.Apply(st2); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Apply(st2); err != nil {
		t.Fatal(err)
	}
	before, _ := d.Stats()
	for port := uint16(1000); port < 1064; port++ {
		f := packet.Flow{Src: client4, Dst: vip4, SrcPort: port, DstPort: 80, Proto: packet.ProtoTCP}
		h := maglev.FlowHash(maglev.Tuple{Src: f.Src, Dst: f.Dst, SrcPort: f.SrcPort, DstPort: f.DstPort, Proto: f.Proto})
		slot := uint32((h >> 32) * 7 >> 32)
		tracked, now := byID[tbl[slot]], byID[st2.Services[key].Table[slot]]
		icmp := icmpError(f, router4, packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 28)
		_, out := run(t, d.Program(), icmp)
		if tun, err := packet.ParseTunnel(out); err != nil || tun.Backend != tracked {
			t.Fatalf("port %d on the tracking node: %v %v, want the tracked %s", port, tun, err, tracked)
		}
		_, out = run(t, other.Program(), icmp)
		if tun, err := packet.ParseTunnel(out); err != nil || tun.Backend != now {
			t.Fatalf("port %d on the other node: %v %v, want the table's %s", port, tun, err, now)
		}
	}
	after, _ := d.Stats()
	for _, c := range []string{"ct_hit", "ct_miss", "ct_remote_hit", "ct_reselect"} {
		if after[c] != before[c] {
			t.Fatalf("ICMP lookups moved %s: %d -> %d", c, before[c], after[c])
		}
	}
}

// pinCPU keeps the calling goroutine on one CPU (the first it may use),
// so per-CPU state (the echo token bucket) is one bucket.
func pinCPU(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	cpu := 0
	for ; cpu < 1024 && !set.IsSet(cpu); cpu++ {
	}
	restore, err := pinThread(cpu)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(restore)
}

func TestICMPEchoReply(t *testing.T) {
	d := newTestDatapath(t, Options{})
	st := fixtureState()
	st.Node.ICMPEchoRate = 100
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	data := []byte("abcdefghijklmnopqrstuvwxyz012345")
	for _, c := range []struct {
		name        string
		client, vip netip.Addr
	}{{"v4", client4, vip4}, {"v6", client6, vip6}} {
		t.Run(c.name, func(t *testing.T) {
			in := echoRequest(c.client, c.vip, 0x1234, 7, data)
			in[14+8] = 57 // IPv4: arrives with TTL 57 (IPv6 is rebuilt below)
			var want []byte
			rest := uint32(0x1234)<<16 | 7
			if c.client.Is4() {
				binary.BigEndian.PutUint16(in[14+10:], 0)
				binary.BigEndian.PutUint16(in[14+10:], packet.Checksum(in[14:34]))
				ip := packet.IPv4(c.vip, c.client, packet.ProtoICMP, 0, 64, nil, packet.ICMPv4(packet.ICMPEchoReply, 0, rest, data))
				want = packet.Ethernet(peerMAC, nodeMAC, 0, packet.EtherIPv4, ip)
			} else {
				in = echoRequest(c.client, c.vip, 0x1234, 7, data)
				in[14+7] = 57
				ip := packet.IPv6(c.vip, c.client, packet.ProtoICMPv6, 0, 64, nil, packet.ICMPv6(c.vip, c.client, packet.ICMPv6EchoReply, 0, rest, data))
				want = packet.Ethernet(peerMAC, nodeMAC, 0, packet.EtherIPv6, ip)
			}
			ret, out := run(t, d.Program(), in)
			if ret != xdpTX {
				t.Fatalf("verdict %d, want XDP_TX", ret)
			}
			if !bytes.Equal(out, want) {
				t.Fatalf("reply differs\n got % x\nwant % x", out, want)
			}
			l3 := out[14:]
			if c.client.Is4() {
				if packet.Checksum(l3[:20]) != 0 || !packet.L4ChecksumOK(c.vip, c.client, packet.ProtoICMP, l3[20:]) {
					t.Fatal("reply checksums wrong")
				}
			} else if !packet.L4ChecksumOK(c.vip, c.client, packet.ProtoICMPv6, l3[40:]) {
				t.Fatal("reply ICMPv6 checksum wrong")
			}
		})
	}
	// Incremental updates over many identifiers/sequences: always valid.
	st.Node.ICMPEchoRate = 1 << 20
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000; i++ {
		in := echoRequest(client4, vip4, uint16(i*7919), uint16(i), data[:i%len(data)])
		in[14+8] = uint8(i)
		binary.BigEndian.PutUint16(in[14+10:], 0)
		binary.BigEndian.PutUint16(in[14+10:], packet.Checksum(in[14:34]))
		ret, out := run(t, d.Program(), in)
		if ret != xdpTX || packet.Checksum(out[14:34]) != 0 || !packet.L4ChecksumOK(vip4, client4, packet.ProtoICMP, out[34:]) {
			t.Fatalf("request %d: verdict %d, checksums wrong\n% x", i, ret, out)
		}
	}
	// Not to a VIP address: to the kernel.
	other := echoRequest(client4, netip.MustParseAddr("10.9.9.9"), 1, 1, data)
	if ret, out := run(t, d.Program(), other); ret != xdpPass || !bytes.Equal(out, other) {
		t.Fatalf("echo to another address: verdict %d", ret)
	}
}

func TestICMPEchoRateLimit(t *testing.T) {
	pinCPU(t)
	d := newTestDatapath(t, Options{})
	st := fixtureState()
	st.Node.ICMPEchoRate = 10
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	count := func() (tx, drop int) {
		for i := 0; i < 100; i++ {
			switch ret, _ := run(t, d.Program(), echoRequest(client4, vip4, 1, uint16(i), nil)); ret {
			case xdpTX:
				tx++
			case xdpDrop:
				drop++
			default:
				t.Fatalf("verdict %d", ret)
			}
		}
		return
	}
	tx, drop := count()
	if tx < 10 || tx > 11 || tx+drop != 100 {
		t.Fatalf("limit 10/s: %d answered, %d dropped of 100", tx, drop)
	}
	s, _ := d.Stats()
	if s["icmp_echo_reply"] != uint64(tx) || s["icmp_echo_limited"] != uint64(drop) {
		t.Fatalf("counters %v", s)
	}
	// Rate 0: never answered.
	st.Node.ICMPEchoRate = 0
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	if tx, _ := count(); tx != 0 {
		t.Fatalf("rate 0: %d answered", tx)
	}
}
