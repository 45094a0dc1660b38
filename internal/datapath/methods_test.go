package datapath

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

var (
	vipDR4  = netip.MustParseAddr("10.200.0.2")
	vipDR6  = netip.MustParseAddr("fd00:200::2")
	vipNAT4 = netip.MustParseAddr("10.200.0.3")
	vipNAT6 = netip.MustParseAddr("fd00:200::3")
	vipGUE4 = netip.MustParseAddr("10.200.0.4")
	vipGUE6 = netip.MustParseAddr("fd00:200::4")
	vipLoc4 = netip.MustParseAddr("10.200.0.5")
)

const fixtureGUEPort = 6080

// methodsState: one VIP per (method, family), each with one backend
// filling its table (M=7). NAT backends listen on 8080 (TCP) or keep the
// VIP's port (UDP); the local one has the node's own address.
func methodsState() *State {
	st := &State{Node: testNode(), Services: map[VIPKey]*Service{}}
	st.Node.GUEPort, st.Node.NAT = fixtureGUEPort, true
	add := func(id uint32, key VIPKey, m Encap, r Real) {
		r.SvcID, r.Active = id, true
		st.Reals.Set(id, r)
		tbl := make([]uint32, 7)
		for i := range tbl {
			tbl[i] = id
		}
		st.Services[key] = &Service{SvcID: id, Encap: m, Table: tbl}
	}
	add(1, VIPKey{Addr: vipDR4, Port: 80, Proto: 6}, state.EncapDR, Real{Addr: be4})
	add(2, VIPKey{Addr: vipDR6, Port: 80, Proto: 6}, state.EncapDR, Real{Addr: be6})
	add(3, VIPKey{Addr: vipNAT4, Port: 80, Proto: 6}, state.EncapNAT, Real{Addr: be4, Port: 8080})
	add(4, VIPKey{Addr: vipNAT6, Port: 80, Proto: 6}, state.EncapNAT, Real{Addr: be6, Port: 8080})
	add(5, VIPKey{Addr: vipNAT4, Port: 53, Proto: 17}, state.EncapNAT, Real{Addr: be4})
	add(6, VIPKey{Addr: vipNAT6, Port: 53, Proto: 17}, state.EncapNAT, Real{Addr: be6})
	add(7, VIPKey{Addr: vipGUE4, Port: 80, Proto: 6}, state.EncapGUE, Real{Addr: be4})
	add(8, VIPKey{Addr: vipGUE6, Port: 53, Proto: 17}, state.EncapGUE, Real{Addr: be6})
	add(9, VIPKey{Addr: vipGUE4, Port: 443, Proto: 6}, state.EncapGUE, Real{Addr: be6}) // 4 in GUE over 6
	add(10, VIPKey{Addr: vipLoc4, Port: 80, Proto: 6}, state.EncapDR, Real{Addr: nodeV4, NextHop: state.NextHop{Local: true}})
	add(11, VIPKey{Addr: vipLoc4, Port: 81, Proto: 6}, state.EncapNAT, Real{Addr: nodeV4, Port: 8081, NextHop: state.NextHop{Local: true}})
	return st
}

func methodsFlow(src, dst netip.Addr, proto uint8, dport uint16) packet.Flow {
	f := packet.Flow{Src: src, Dst: dst, SrcPort: 40000, DstPort: dport, Proto: proto,
		Payload: []byte("hello"), TOS: 0x28, SrcMAC: peerMAC, DstMAC: nodeMAC}
	if proto == packet.ProtoTCP {
		f.TCPFlags = packet.SYN
	}
	return f
}

// withVLAN and withOptions vary a flow the ways the parser must follow.
func withVLAN(f packet.Flow) packet.Flow { f.VLAN = 42; return f }

func withOptions(f packet.Flow) packet.Flow {
	f.IPv4Options = []byte{1, 1, 1, 0} // NOP NOP NOP EOL
	return f
}

// routed is frame f as the fixture's next hop (the fallback gateway, from
// lo's all-zero MAC) receives it, its IP datagram ip.
func routed(f packet.Flow, ip []byte) []byte {
	var gw, lo [6]byte
	copy(gw[:], testGW)
	et := uint16(packet.EtherIPv4)
	if ip[0]>>4 == 6 {
		et = packet.EtherIPv6
	}
	return packet.Ethernet(gw, lo, f.VLAN, et, ip)
}

// natted is f with its destination rewritten as NAT must (checksums
// computed afresh by the packet package, so the incremental update is
// checked against a full one).
func natted(f packet.Flow, to netip.Addr, port uint16) packet.Flow {
	f.Dst, f.DstPort = to, port
	return f
}

func TestMethodFixtures(t *testing.T) {
	d, prog := methodsDatapath(t) // naticmp_test.go
	tcp, udp := uint8(packet.ProtoTCP), uint8(packet.ProtoUDP)
	cases := []struct {
		name string
		in   packet.Flow
		want func(in packet.Flow) []byte
		verd uint32
	}{
		{"dr v4", methodsFlow(client4, vipDR4, tcp, 80), func(in packet.Flow) []byte { return routed(in, in.IP()) }, xdpTX},
		{"dr v4 vlan", withVLAN(methodsFlow(client4, vipDR4, tcp, 80)), func(in packet.Flow) []byte { return routed(in, in.IP()) }, xdpTX},
		{"dr v4 options", withOptions(methodsFlow(client4, vipDR4, tcp, 80)), func(in packet.Flow) []byte { return routed(in, in.IP()) }, xdpTX},
		{"dr v6", methodsFlow(client6, vipDR6, tcp, 80), func(in packet.Flow) []byte { return routed(in, in.IP()) }, xdpTX},
		{"dr v6 vlan", withVLAN(methodsFlow(client6, vipDR6, tcp, 80)), func(in packet.Flow) []byte { return routed(in, in.IP()) }, xdpTX},
		{"nat v4 tcp port", methodsFlow(client4, vipNAT4, tcp, 80), func(in packet.Flow) []byte { return routed(in, natted(in, be4, 8080).IP()) }, xdpTX},
		{"nat v4 tcp vlan options", withVLAN(withOptions(methodsFlow(client4, vipNAT4, tcp, 80))), func(in packet.Flow) []byte { return routed(in, natted(in, be4, 8080).IP()) }, xdpTX},
		{"nat v6 tcp port", methodsFlow(client6, vipNAT6, tcp, 80), func(in packet.Flow) []byte { return routed(in, natted(in, be6, 8080).IP()) }, xdpTX},
		{"nat v6 tcp vlan", withVLAN(methodsFlow(client6, vipNAT6, tcp, 80)), func(in packet.Flow) []byte { return routed(in, natted(in, be6, 8080).IP()) }, xdpTX},
		{"nat v4 udp", methodsFlow(client4, vipNAT4, udp, 53), func(in packet.Flow) []byte { return routed(in, natted(in, be4, 53).IP()) }, xdpTX},
		{"nat v4 udp options", withOptions(methodsFlow(client4, vipNAT4, udp, 53)), func(in packet.Flow) []byte { return routed(in, natted(in, be4, 53).IP()) }, xdpTX},
		{"nat v6 udp", methodsFlow(client6, vipNAT6, udp, 53), func(in packet.Flow) []byte { return routed(in, natted(in, be6, 53).IP()) }, xdpTX},
		{"local dr", methodsFlow(client4, vipLoc4, tcp, 80), func(in packet.Flow) []byte { return in.Frame() }, xdpPass},
		{"local nat", withVLAN(methodsFlow(client4, vipLoc4, tcp, 81)), func(in packet.Flow) []byte { return natted(in, nodeV4, 8081).Frame() }, xdpPass},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ret, out := run(t, prog, c.in.Frame())
			if ret != c.verd {
				t.Fatalf("verdict %d, want %d", ret, c.verd)
			}
			if want := c.want(c.in); !bytes.Equal(out, want) {
				t.Fatalf("output differs\n got % x\nwant % x", out, want)
			}
		})
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st["forward_local"] != 2 || st["nat_track_fail"] != 0 {
		t.Errorf("counters: forward_local %d (want 2), nat_track_fail %d", st["forward_local"], st["nat_track_fail"])
	}
}

// expectGUE is the GUE frame of in toward backend, its UDP source port
// sport and IPv6 flow label as the output has them (checked apart).
func expectGUE(in packet.Flow, backend netip.Addr, sport uint16, label uint32) []byte {
	inner := in.IP()
	udp := make([]byte, 8, 8+len(inner))
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], fixtureGUEPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(inner)))
	udp = append(udp, inner...)
	var ip []byte
	if backend.Is4() {
		ip = packet.IPv4(nodeV4, backend, packet.ProtoUDP, in.TOS, 64, nil, udp)
		ip[6] = 0x40 // DF
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], packet.Checksum(ip[:20]))
	} else {
		ip = packet.IPv6(nodeV6, backend, packet.ProtoUDP, in.TOS, 64, nil, udp)
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(in.TOS)<<20|label)
	}
	return routed(in, ip)
}

func TestGUEFixtures(t *testing.T) {
	_, prog := methodsDatapath(t) // naticmp_test.go
	cases := []struct {
		name    string
		in      packet.Flow
		backend netip.Addr
	}{
		{"v4 tcp", methodsFlow(client4, vipGUE4, packet.ProtoTCP, 80), be4},
		{"v4 tcp vlan", withVLAN(methodsFlow(client4, vipGUE4, packet.ProtoTCP, 80)), be4},
		{"v4 tcp options", withOptions(methodsFlow(client4, vipGUE4, packet.ProtoTCP, 80)), be4},
		{"v6 udp", methodsFlow(client6, vipGUE6, packet.ProtoUDP, 53), be6},
		{"v6 udp vlan", withVLAN(methodsFlow(client6, vipGUE6, packet.ProtoUDP, 53)), be6},
		{"v4 in v6", methodsFlow(client4, vipGUE4, packet.ProtoTCP, 443), be6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ret, out := run(t, prog, c.in.Frame())
			if ret != xdpTX {
				t.Fatalf("verdict %d, want XDP_TX", ret)
			}
			off := 14
			if c.in.VLAN != 0 {
				off = 18
			}
			var label uint32
			udp := off + 20
			if c.backend.Is6() {
				label, udp = binary.BigEndian.Uint32(out[off:])&0xfffff, off+40
			}
			sport := binary.BigEndian.Uint16(out[udp:])
			if sport < 0xc000 {
				t.Errorf("UDP source port %d outside 49152..65535", sport)
			}
			if want := expectGUE(c.in, c.backend, sport, label); !bytes.Equal(out, want) {
				t.Fatalf("output differs\n got % x\nwant % x", out, want)
			}
		})
	}
	// The source port follows the flow: the same for its packets, spread
	// over flows (a backend's RSS sees them apart).
	ports := map[uint16]bool{}
	for i := 0; i < 64; i++ {
		f := methodsFlow(client4, vipGUE4, packet.ProtoTCP, 80)
		f.SrcPort = uint16(30000 + i)
		_, a := run(t, prog, f.Frame())
		_, b := run(t, prog, f.Frame())
		pa, pb := binary.BigEndian.Uint16(a[34:]), binary.BigEndian.Uint16(b[34:])
		if pa != pb {
			t.Fatalf("flow %d: source ports %d then %d", i, pa, pb)
		}
		ports[pa] = true
	}
	if len(ports) < 48 {
		t.Errorf("64 flows got only %d distinct GUE source ports", len(ports))
	}
}

// NAT replies: rewritten back to the VIP wherever they arrive; replies
// of no tracked flow pass untouched.
func TestNATReplyFixtures(t *testing.T) {
	d, prog := methodsDatapath(t) // naticmp_test.go
	tcp, udp := uint8(packet.ProtoTCP), uint8(packet.ProtoUDP)
	reply := func(fwd packet.Flow, from netip.Addr, port uint16) packet.Flow {
		r := fwd
		r.Src, r.SrcPort, r.Dst, r.DstPort = from, port, fwd.Src, fwd.SrcPort
		r.TCPFlags = packet.SYN | packet.ACK
		r.SrcMAC, r.DstMAC = peerMAC, nodeMAC
		return r
	}
	cases := []struct {
		name    string
		fwd     packet.Flow
		from    netip.Addr
		bport   uint16
		vip     netip.Addr
		vport   uint16
		tracked bool
	}{
		{"v4 tcp", methodsFlow(client4, vipNAT4, tcp, 80), be4, 8080, vipNAT4, 80, true},
		{"v4 tcp vlan options", withVLAN(withOptions(methodsFlow(client4, vipNAT4, tcp, 80))), be4, 8080, vipNAT4, 80, true},
		{"v6 tcp", methodsFlow(client6, vipNAT6, tcp, 80), be6, 8080, vipNAT6, 80, true},
		{"v4 udp", methodsFlow(client4, vipNAT4, udp, 53), be4, 53, vipNAT4, 53, true},
		{"v6 udp vlan", withVLAN(methodsFlow(client6, vipNAT6, udp, 53)), be6, 53, vipNAT6, 53, true},
		{"v4 untracked port", methodsFlow(client4, vipNAT4, tcp, 80), be4, 9999, vipNAT4, 80, false},
		{"v6 untracked client", methodsFlow(client6, vipNAT6, tcp, 80), be6, 8080, vipNAT6, 80, false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.fwd.SrcPort = uint16(41000 + i)
			if ret, _ := run(t, prog, c.fwd.Frame()); ret != xdpTX {
				t.Fatalf("forward verdict %d", ret)
			}
			r := reply(c.fwd, c.from, c.bport)
			if !c.tracked && c.from == be6 {
				r.DstPort++ // a client port no flow has
			}
			ret, out := run(t, prog, r.Frame())
			// The fixture's FIB has no route to the client: the
			// rewritten reply goes to the kernel to route.
			if ret != xdpPass {
				t.Fatalf("reply verdict %d, want XDP_PASS", ret)
			}
			want := r.Frame()
			if c.tracked {
				back := r
				back.Src, back.SrcPort = c.vip, c.vport
				want = back.Frame()
			}
			if !bytes.Equal(out, want) {
				t.Fatalf("reply output differs\n got % x\nwant % x", out, want)
			}
		})
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st["nat_reply_pass"] != 5 || st["nat_reply"] != 0 {
		t.Errorf("counters: nat_reply_pass %d (want 5), nat_reply %d", st["nat_reply_pass"], st["nat_reply"])
	}
}
