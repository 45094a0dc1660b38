package datapath

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/packet"
)

var (
	vip4    = netip.MustParseAddr("10.200.0.1")
	vip6    = netip.MustParseAddr("fd00:200::1")
	client4 = netip.MustParseAddr("192.0.2.7")
	client6 = netip.MustParseAddr("2001:db8::7")
	be4     = netip.MustParseAddr("10.0.1.1")
	be6     = netip.MustParseAddr("fd00:1::1")
	nodeMAC = [6]byte{0x02, 0, 0, 0, 0, 0x11}
	peerMAC = [6]byte{0x02, 0, 0, 0, 0, 0x01}
)

// fixtureState: one VIP per (family, proto, encap) combination, each with
// a single backend filling its whole table (M=7), so the output is fixed.
func fixtureState() *State {
	st := &State{Node: testNode(), Services: map[VIPKey]*Service{}}
	add := func(id uint32, key VIPKey, encap Encap, backend netip.Addr) {
		st.Reals.Set(id, Real{Addr: backend, SvcID: id, Active: true})
		tbl := make([]uint32, 7)
		for i := range tbl {
			tbl[i] = id
		}
		st.Services[key] = &Service{SvcID: id, Encap: encap, Table: tbl}
	}
	add(1, VIPKey{Addr: vip4, Port: 80, Proto: 6}, EncapGRE, be4)
	add(2, VIPKey{Addr: vip4, Port: 53, Proto: 17}, EncapIPIP, be4)
	add(3, VIPKey{Addr: vip6, Port: 80, Proto: 6}, EncapIPIP, be6)
	add(4, VIPKey{Addr: vip6, Port: 53, Proto: 17}, EncapGRE, be6)
	add(5, VIPKey{Addr: vip4, Port: 0, Proto: 17}, EncapIPIP, be6) // all ports, 4in6
	add(6, VIPKey{Addr: vip6, Port: 443, Proto: 6}, EncapGRE, be4) // 6 in GRE over IPv4
	return st
}

// expectTunnel builds the exact frame the forwarder must emit.
func expectTunnel(t *testing.T, in packet.Flow, kind string, backend netip.Addr, label uint32) []byte {
	t.Helper()
	inner := in.IP()
	innerV4 := in.Src.Is4()
	var l4 []byte
	var proto uint8
	if kind == "gre" {
		l4 = make([]byte, 4)
		if innerV4 {
			binary.BigEndian.PutUint16(l4[2:], packet.EtherIPv4)
		} else {
			binary.BigEndian.PutUint16(l4[2:], packet.EtherIPv6)
		}
		proto = packet.ProtoGRE
	} else if innerV4 {
		proto = packet.ProtoIPIP
	} else {
		proto = packet.ProtoIPv6
	}
	payload := append(l4, inner...)
	var ip []byte
	et := uint16(packet.EtherIPv4)
	if backend.Is4() {
		ip = packet.IPv4(nodeV4, backend, proto, in.TOS, 64, nil, payload)
		ip[6] = 0x40 // DF
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], packet.Checksum(ip[:20]))
	} else {
		ip = packet.IPv6(nodeV6, backend, proto, in.TOS, 64, nil, payload)
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(in.TOS)<<20|label)
		et = packet.EtherIPv6
	}
	var gw [6]byte
	copy(gw[:], testGW)
	var lo [6]byte // the test's interface is lo: MAC all zero
	return packet.Ethernet(gw, lo, in.VLAN, et, ip)
}

func TestForwardFixtures(t *testing.T) {
	d := newTestDatapath(t, Options{})
	if _, err := d.Apply(fixtureState()); err != nil {
		t.Fatal(err)
	}
	prog := d.Program()
	tcp := func(src, dst netip.Addr, dport uint16) packet.Flow {
		return packet.Flow{Src: src, Dst: dst, SrcPort: 40000, DstPort: dport, Proto: packet.ProtoTCP,
			TCPFlags: packet.SYN, Payload: []byte("hello"), TOS: 0x28, SrcMAC: peerMAC, DstMAC: nodeMAC}
	}
	udp := func(src, dst netip.Addr, dport uint16) packet.Flow {
		f := tcp(src, dst, dport)
		f.Proto, f.TCPFlags = packet.ProtoUDP, 0
		return f
	}
	cases := []struct {
		name    string
		in      packet.Flow
		kind    string
		backend netip.Addr
	}{
		{"v4 tcp gre", tcp(client4, vip4, 80), "gre", be4},
		{"v4 udp ipip", udp(client4, vip4, 53), "ipip", be4},
		{"v6 tcp ip6ip6", tcp(client6, vip6, 80), "ipip", be6},
		{"v6 udp gre over v6", udp(client6, vip6, 53), "gre", be6},
		{"v4 udp all-ports 4in6", udp(client4, vip4, 9999), "ipip", be6},
		{"v6 tcp gre over v4", tcp(client6, vip6, 443), "gre", be4},
		{"v4 tcp vlan", func() packet.Flow { f := tcp(client4, vip4, 80); f.VLAN = 42; return f }(), "gre", be4},
		{"v4 options", func() packet.Flow {
			f := tcp(client4, vip4, 80)
			f.IPv4Options = []byte{1, 1, 1, 0} // NOP NOP NOP EOL
			return f
		}(), "gre", be4},
		{"v6 ext headers", func() packet.Flow {
			f := udp(client6, vip6, 53)
			f.IPv6ExtHeaders = []packet.ExtHeader{
				{Type: 0, Body: make([]byte, 6)},   // hop-by-hop, PadN
				{Type: 60, Body: make([]byte, 14)}, // destination options
				{Type: 44, Body: make([]byte, 6)},  // atomic fragment (offset 0, M 0)
			}
			return f
		}(), "gre", be6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			frame := c.in.Frame()
			ret, out := run(t, prog, frame)
			if ret != xdpTX {
				t.Fatalf("verdict %d, want XDP_TX (%d)", ret, xdpTX)
			}
			tun, err := packet.ParseTunnel(out)
			if err != nil {
				t.Fatalf("output is not a valid tunnel frame: %v\n% x", err, out)
			}
			if !bytes.Equal(tun.Inner, c.in.IP()) {
				t.Fatalf("inner datagram changed")
			}
			want := expectTunnel(t, c.in, c.kind, c.backend, tun.Label)
			if !bytes.Equal(out, want) {
				t.Fatalf("output differs\n got % x\nwant % x", out, want)
			}
		})
	}
}

func TestVerdictsForOtherPackets(t *testing.T) {
	d := newTestDatapath(t, Options{})
	if _, err := d.Apply(fixtureState()); err != nil {
		t.Fatal(err)
	}
	prog := d.Program()
	base := packet.Flow{Src: client4, Dst: vip4, SrcPort: 1234, DstPort: 80, Proto: packet.ProtoTCP, SrcMAC: peerMAC, DstMAC: nodeMAC}
	good := base.Frame()
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	other := base
	other.Dst = netip.MustParseAddr("10.9.9.9")
	wrongPort := base
	wrongPort.DstPort = 81
	v6 := packet.Flow{Src: client6, Dst: vip6, SrcPort: 1, DstPort: 80, Proto: packet.ProtoTCP}
	longChain := v6
	for i := 0; i < 9; i++ {
		longChain.IPv6ExtHeaders = append(longChain.IPv6ExtHeaders, packet.ExtHeader{Type: 60, Body: make([]byte, 6)})
	}
	frag6 := v6
	frag6.IPv6ExtHeaders = []packet.ExtHeader{{Type: 44, Body: []byte{0, 1, 0, 0, 0, 7}}} // M flag, id 7
	cases := []struct {
		name string
		in   []byte
		want uint32
	}{
		{"arp", packet.Ethernet(nodeMAC, peerMAC, 0, 0x0806, make([]byte, 28)), xdpPass},
		{"ethernet header only", good[:14], xdpPass},
		{"not a vip", other.Frame(), xdpPass},
		{"vip address, port not served", wrongPort.Frame(), xdpPass},
		{"truncated ipv4 header", good[:14+12], xdpPass},
		{"bad ihl to vip", mut(func(b []byte) []byte { b[14] = 0x43; return b }), xdpDrop},
		{"bad version to vip", mut(func(b []byte) []byte { b[14] = 0x55; return b }), xdpDrop},
		{"total length beyond frame to vip", mut(func(b []byte) []byte { binary.BigEndian.PutUint16(b[16:], 2000); return b }), xdpDrop},
		{"truncated tcp to vip", mut(func(b []byte) []byte {
			b = b[:14+20+8]
			binary.BigEndian.PutUint16(b[16:], 28)
			return b
		}), xdpDrop},
		{"tcp header outside the datagram (in the frame's padding)", mut(func(b []byte) []byte { binary.BigEndian.PutUint16(b[16:], 20); return b }), xdpDrop},
		{"tcp data offset beyond the datagram", mut(func(b []byte) []byte { b[14+20+12] = 0xf0; return b }), xdpDrop},
		{"ipv4 fragment to vip", mut(func(b []byte) []byte { b[14+6] = 0x20; return b }), xdpDrop},
		// ICMP to a VIP address (icmp_test.go has the forwarded
		// cases): not an error about a VIP flow nor an echo request -> kernel;
		// echo requests with node.icmp_echo_rate 0 -> dropped.
		{"icmp (source quench) to vip", mut(func(b []byte) []byte { b[14+9] = 1; return b }), xdpPass},
		{"icmp echo to vip, rate 0", echoRequest(client4, vip4, 1, 1, nil), xdpDrop},
		{"icmpv6 echo to vip, rate 0", echoRequest(client6, vip6, 1, 1, nil), xdpDrop},
		{"icmp echo to another address", echoRequest(client4, other.Dst, 1, 1, nil), xdpPass},
		{"icmp error embedding a non-VIP flow", icmpError(packet.Flow{Src: client4, Dst: vip4, SrcPort: 1, DstPort: 81, Proto: packet.ProtoTCP}, router4, 3, 4, 1400, 28), xdpPass},
		{"ipv6 ext chain too long", longChain.Frame(), xdpDrop},
		{"ipv6 fragment", frag6.Frame(), xdpDrop},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ret, out := run(t, prog, c.in)
			if ret != c.want {
				t.Fatalf("verdict %d, want %d", ret, c.want)
			}
			if ret == xdpPass && !bytes.Equal(out, c.in) {
				t.Fatalf("passed packet was modified")
			}
		})
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st["drop_malformed"] == 0 || st["drop_fragment"] != 2 || st["pass_not_vip"] == 0 ||
		st["icmp_echo_limited"] != 2 || st["icmp_pass"] != 2 || st["pass_other_proto"] != 1 {
		t.Fatalf("counters: %v", st)
	}
}

// TestCachedNextHop: a real with a resolved next hop is sent with its MACs
// without a FIB lookup (XDP_TX on the ingress interface, XDP_REDIRECT to
// another), and an outer packet larger than its MTU is not sent (here IPv4
// without DF: for xlbd to fragment, see toobig_test.go; no holder runs
// here, so it is dropped as with xlbd stopped).
func TestCachedNextHop(t *testing.T) {
	d := newTestDatapath(t, Options{})
	st := fixtureState()
	dmac, smac := [6]byte{2, 0, 0, 0, 0, 0xbb}, [6]byte{2, 0, 0, 0, 0, 0xaa}
	r := st.Reals.At(1)
	r.NextHop = NextHopCache{DMAC: dmac, SMAC: smac, Ifindex: 7, MTU: 1500}
	st.Reals.Set(1, r)
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	f := packet.Flow{Src: client4, Dst: vip4, SrcPort: 40000, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN}
	// The test run has no ingress interface (ifindex 0 != 7): redirect.
	ret, out := run(t, d.Program(), f.Frame())
	if ret != xdpRedirect {
		t.Fatalf("verdict %d, want XDP_REDIRECT", ret)
	}
	if !bytes.Equal(out[0:6], dmac[:]) || !bytes.Equal(out[6:12], smac[:]) {
		t.Fatalf("MACs % x, want the cached ones", out[:12])
	}
	big := f
	big.Payload = make([]byte, 1480)
	if ret, _ := run(t, d.Program(), big.Frame()); ret != xdpDrop {
		t.Fatalf("oversized outer packet: verdict %d, want XDP_DROP", ret)
	}
	st2, _ := d.Stats()
	// no FragHolder reads the ring here: counted as for a stopped xlbd
	if st2["too_big_no_xlbd"] != 1 || st2["too_big_fragment"] != 0 || st2["forward_redirect"] != 1 || st2["nexthop_fallback"] != 0 {
		t.Fatalf("counters: %v", st2)
	}
}

// TestTablePatchAndAdopt: a table change of the same size is patched in
// place (no new inner map), packets follow it, and a second Load on the
// same pins reads back exactly the applied state.
func TestTablePatchAndAdopt(t *testing.T) {
	d := newTestDatapath(t, Options{})
	st := fixtureState()
	st.Reals.Set(7, Real{Addr: netip.MustParseAddr("10.0.1.7"), SvcID: 1, Active: true})
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	key := VIPKey{Addr: vip4, Port: 80, Proto: 6}
	next := *st.Services[key]
	next.Table = []uint32{7, 7, 7, 7, 7, 7, 7}
	st.Services[key] = &next
	as, err := d.Apply(st)
	if err != nil {
		t.Fatal(err)
	}
	if as.TablesPatched != 1 || as.TablesReplaced != 0 || as.TableEntries != 7 {
		t.Fatalf("apply stats %+v, want one table patched in place", as)
	}
	f := packet.Flow{Src: client4, Dst: vip4, SrcPort: 4242, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN}
	_, out := run(t, d.Program(), f.Frame())
	tun, err := packet.ParseTunnel(out)
	if err != nil || tun.Backend != netip.MustParseAddr("10.0.1.7") {
		t.Fatalf("after patch: %v %v", tun, err)
	}
	// Adopt: a new Load on the same pins sees the same state.
	o := d.opts
	d2, err := Load(o)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	requireSameState(t, d2.Snapshot(), d.Snapshot())
	if as, err := d2.Apply(st); err != nil || as.TablesPatched+as.TablesReplaced+as.RealsWritten != 0 {
		t.Fatalf("re-applying the adopted state wrote %+v (%v)", as, err)
	}
}

// TestFloodDefence: over the per-CPU new-SYN limit, new SYN flows are
// still forwarded (by Maglev) but not tracked, so they evict nothing.
func TestFloodDefence(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out conntrack ticks, tens of seconds: make test runs it, -short (make check) does not")
	}
	d := newTestDatapath(t, Options{ConntrackEntries: 1024}) // 128 buckets per CPU
	st := fixtureState()
	st.Node.FloodSynRate = 4 // one new SYN flow per tick
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	est := packet.Flow{Src: client4, Dst: vip4, SrcPort: 1000, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.ACK}
	run(t, d.Program(), est.Frame()) // tracked (not a SYN: no limit)
	for i := 0; i < 5000; i++ {
		f := packet.Flow{Src: client4, Dst: vip4, SrcPort: uint16(2000 + i), DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN}
		if ret, _ := run(t, d.Program(), f.Frame()); ret != xdpTX {
			t.Fatalf("flood SYN %d: verdict %d, want forwarded", i, ret)
		}
	}
	before, _ := d.Stats()
	run(t, d.Program(), est.Frame())
	after, _ := d.Stats()
	// The test's thread may run on either CPU: a hit in the other CPU's
	// slice counts as remote.
	if after["ct_hit"]+after["ct_remote_hit"] != before["ct_hit"]+before["ct_remote_hit"]+1 {
		t.Fatalf("the established flow lost its entry under the flood: %v", after)
	}
	if after["flood_activations"] == 0 || after["flood_untracked"] < 4900 {
		t.Fatalf("flood counters: %v", after)
	}
	t.Logf("5000 SYNs: %d untracked, %d activations", after["flood_untracked"], after["flood_activations"])
}
