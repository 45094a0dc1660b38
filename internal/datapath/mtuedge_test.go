package datapath

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/xlbproject/xlb/internal/kernelnet"
	"github.com/xlbproject/xlb/internal/packet"
	"golang.org/x/sys/unix"
)

// addRouteDevice creates a veth pair xlbm0/xlbm1 of MTU 1500 in the
// current namespace, up, with 10.0.1.254/24 and fd00:1::fe/64 on xlbm0:
// the route to be4 and be6, whose neighbours nobody will answer.
func addRouteDevice(t *testing.T) {
	t.Helper()
	d := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "xlbm0", MTU: 1500}, PeerName: "xlbm1"}
	if err := netlink.LinkAdd(d); err != nil {
		t.Fatal(err)
	}
	l, err := netlink.LinkByName("xlbm0")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"10.0.1.254/24", "fd00:1::fe/64"} {
		addr, _ := netlink.ParseAddr(a)
		addr.Flags = unix.IFA_F_NODAD
		if err := netlink.AddrAdd(l, addr); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"xlbm0", "xlbm1"} {
		if l, err := netlink.LinkByName(n); err != nil || netlink.LinkSetUp(l) != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
}

// TestTooBigUnresolvedNextHop: a backend whose next hop xlbd has not
// cached yet (just configured, neighbour unresolved): the kernel's route
// to it says MTU 1500, so a packet too big once encapsulated is answered
// as with a cached next hop (exact ICMP error with egress MTU less the
// encapsulation; IPv4 without DF to xlbd to be fragmented), never
// dropped as drop_too_big; a packet that fits goes on to the fallback
// gateway (the neighbour is unresolved).
func TestTooBigUnresolvedNextHop(t *testing.T) {
	newTestDatapath(t, Options{}) // root and bpffs checks
	inNewNetns(t, func() {
		addRouteDevice(t)
		d := newTestDatapath(t, Options{})
		st := fixtureState() // no real has a cached next hop
		st.Node.ICMPTooBigRate = 1 << 20
		if _, err := d.Apply(st); err != nil {
			t.Fatal(err)
		}
		// bpf_fib_lookup answers for an interface that forwards (as xlbd sets it)
		if _, err := kernelnet.EnableForwarding("lo"); err != nil {
			t.Fatal(err)
		}
		tcp := func(src, dst netip.Addr, n int) packet.Flow {
			return packet.Flow{Src: src, Dst: dst, SrcPort: 41000, DstPort: 80, Proto: packet.ProtoTCP,
				TCPFlags: packet.ACK, Payload: make([]byte, n), SrcMAC: peerMAC, DstMAC: nodeMAC}
		}
		before, _ := d.Stats()
		for _, c := range []struct {
			name string
			f    packet.Flow
			mtu  uint32
		}{
			{"v4 GRE", tcp(client4, vip4, 1460), 1476},
			{"v6 IP6IP6", tcp(client6, vip6, 1440), 1460},
		} {
			in, ip := dfFrame(c.f)
			ret, out := run(t, d.Program(), in)
			if ret != xdpTX {
				t.Fatalf("%s: verdict %s, want TX (the error)", c.name, xdpNames[ret])
			}
			checkTooBigReply(t, c.f, out, expectTooBig(c.f, ip, c.mtu))
		}
		small, _ := dfFrame(tcp(client4, vip4, 100))
		if ret, _ := run(t, d.Program(), small); ret != xdpTX {
			t.Fatalf("a packet that fits: verdict %s, want TX (fallback gateway)", xdpNames[ret])
		}
		big := fragFlow(client4, vip4, 40001, 53, 3000) // no DF
		if ret, _ := run(t, d.Program(), frameOf(big.IP())); ret != xdpDrop {
			t.Fatalf("IPv4 without DF: verdict %s, want DROP (to xlbd)", xdpNames[ret])
		}
		after, _ := d.Stats()
		// no holder runs here: the datagram is counted as xlbd's, stopped
		for name, want := range map[string]uint64{"icmp_too_big_sent": 2, "nexthop_fallback": 1, "too_big_no_xlbd": 1, "drop_too_big": 0} {
			if got := after[name] - before[name]; got != want {
				t.Errorf("%s +%d, want +%d", name, got, want)
			}
		}
	})
}

// icmpErrorLong is an ICMP error from router about client flow f whose
// quote is the first n bytes of a backend reply of size bytes.
func icmpErrorLong(f packet.Flow, typ, code uint8, rest uint32, size, n int) (frame, ip []byte) {
	reply := f
	reply.Src, reply.Dst, reply.SrcPort, reply.DstPort = f.Dst, f.Src, f.DstPort, f.SrcPort
	reply.Payload = make([]byte, size)
	for i := range reply.Payload {
		reply.Payload[i] = byte(i * 13)
	}
	emb := reply.IP()[:n]
	if f.Dst.Is4() {
		ip = packet.IPv4(router4, f.Dst, packet.ProtoICMP, 0xc0, 250, nil, packet.ICMPv4(typ, code, rest, emb))
		return packet.Ethernet(nodeMAC, peerMAC, f.VLAN, packet.EtherIPv4, ip), ip
	}
	ip = packet.IPv6(router6, f.Dst, packet.ProtoICMPv6, 0, 250, nil, packet.ICMPv6(router6, f.Dst, typ, code, rest, emb))
	return packet.Ethernet(nodeMAC, peerMAC, f.VLAN, packet.EtherIPv6, ip), ip
}

// TestICMPErrorCut: an ICMP error about a VIP flow that does not fit its
// backend's egress once encapsulated reaches the backend cut to fit (a
// multiple of 8 bytes of ICMP message), with exactly the bytes of the
// same error built with the shorter quote (lengths and checksums right);
// one that fits is untouched; one that cannot keep the quoted header and
// 8 bytes is dropped (drop_too_big).
func TestICMPErrorCut(t *testing.T) {
	d := newTestDatapath(t, Options{})
	flow4 := packet.Flow{Src: client4, Dst: vip4, SrcPort: 40000, DstPort: 80, Proto: packet.ProtoTCP}
	flow6 := packet.Flow{Src: client6, Dst: vip6, SrcPort: 40000, DstPort: 80, Proto: packet.ProtoTCP}
	for _, c := range []struct {
		name    string
		egress  uint32
		f       packet.Flow
		typ     uint8
		code    uint8
		size, n int // the reply's payload, the quote's bytes
		kept    int // quote bytes kept; 0: dropped, -1: untouched
	}{
		// GRE over IPv4: 600 - 24 = 576 for the error, 556 of ICMP message -> 552
		{"v4 frag-needed, GRE", 600, flow4, packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 1000, 544},
		{"v4 time exceeded, GRE", 600, flow4, packet.ICMPTimeExceeded, 0, 1400, 1440, 544},
		// IP6IP6: 1300 - 40 = 1260, 1220 of ICMPv6 message -> 1216
		{"v6 packet too big, IP6IP6", 1300, flow6, packet.ICMPv6PacketTooBig, 0, 1400, 1440, 1208},
		{"v4 fits", 1500, flow4, packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 1000, -1},
		// 60 - 24 = 36: 16 bytes of message, less than 8 + 20 + 8
		{"v4 no room", 60, flow4, packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 100, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := d.Apply(tooBigState(c.egress, 1000)); err != nil {
				t.Fatal(err)
			}
			before, _ := d.Stats()
			in, ip := icmpErrorLong(c.f, c.typ, c.code, 1400, c.size, c.n)
			ret, out := run(t, d.Program(), in)
			after, _ := d.Stats()
			if c.kept == 0 {
				if ret != xdpDrop || after["drop_too_big"] != before["drop_too_big"]+1 {
					t.Fatalf("verdict %s, drop_too_big %d -> %d; want dropped", xdpNames[ret], before["drop_too_big"], after["drop_too_big"])
				}
				return
			}
			if ret != xdpRedirect {
				t.Fatalf("verdict %s, want REDIRECT (cached next hop)", xdpNames[ret])
			}
			tun, err := packet.ParseTunnel(out)
			if err != nil {
				t.Fatal(err)
			}
			want, cuts := ip, uint64(0)
			if c.kept > 0 {
				_, want = icmpErrorLong(c.f, c.typ, c.code, 1400, c.size, c.kept)
				cuts = 1
			}
			if !bytes.Equal(tun.Inner, want) {
				t.Fatalf("error to the backend (%d bytes) differs from the one with a %d-byte quote (%d bytes)\n got % x\nwant % x",
					len(tun.Inner), c.kept, len(want), tun.Inner[:64], want[:64])
			}
			if uint32(len(out)-14) > c.egress {
				t.Fatalf("%d bytes once encapsulated, egress MTU %d", len(out)-14, c.egress)
			}
			if after["icmp_cut"]-before["icmp_cut"] != cuts || after["drop_too_big"] != before["drop_too_big"] {
				t.Fatalf("icmp_cut +%d, want +%d; drop_too_big +%d", after["icmp_cut"]-before["icmp_cut"], cuts,
					after["drop_too_big"]-before["drop_too_big"])
			}
		})
	}
}

// TestFragmentRedirectTooBig: an IPv4 fragment whose pool node's egress
// does not fit it once in GRE goes to xlbd, which splits it further; each
// piece, run through the program, is redirected in GRE to the same node
// and fits, and the pieces are exactly the RFC 791 split of the fragment
// (same id, MF kept, 8-byte offsets from the fragment's own). An IPv6
// fragment gets the ICMPv6 error advertising the pool node's MTU less
// the GRE over IPv6 headers.
func TestFragmentRedirectTooBig(t *testing.T) {
	d := newTestDatapath(t, Options{})
	applyPool(t, d, nodeV4, fragPeer4, 1200)
	prog := d.Program()
	var pieces [][]byte
	h, mu := runInjectHolder(t, d, func(ret uint32, out []byte) {
		if ret == xdpRedirect {
			pieces = append(pieces, out)
		}
	})

	src := flowToPeer(t, client4, vip4, 2, 1)
	frags := packet.Fragment(fragFlow(src, vip4, 4242, 53, 3000), 0x77, 1480)
	first := frags[0] // 20 + 1480 bytes, MF, offset 0
	handToHolder(t, prog, h, frameOf(first))
	mu.Lock()
	defer mu.Unlock()
	// 1200 - 24 = 1176 per piece: 20 of header and 1152 (a multiple of 8)
	want := splitIPv4(first, 1152)
	if len(pieces) != len(want) {
		s, _ := d.Stats()
		t.Fatalf("%d pieces redirected, want %d (holder %+v, counters %v)", len(pieces), len(want), h.Stats(), s)
	}
	for i, p := range pieces {
		if len(p)-14 > 1200 {
			t.Fatalf("piece %d: %d bytes once in GRE, MTU 1200", i, len(p)-14)
		}
		outer := p[14:]
		if packet.Checksum(outer[:20]) != 0 || netip.AddrFrom4([4]byte(outer[16:20])) != fragPeer4 ||
			binary.BigEndian.Uint16(outer[20:]) != 0x0100 {
			t.Fatalf("piece %d: not a redirect to the pool node: % x", i, outer[:24])
		}
		if !bytes.Equal(outer[24:], want[i]) {
			t.Fatalf("piece %d differs\n got % x\nwant % x", i, outer[24:24+20], want[i][:20])
		}
	}
	s, _ := d.Stats()
	if s["too_big_fragment"] != 1 || s["frag_redirect"] != uint64(len(want)) || s["drop_too_big"] != 0 {
		t.Fatalf("counters %v", s)
	}

	// IPv6: the client gets packet-too-big for 1400 - 44.
	applyPool(t, d, nodeV6, fragPeer6, 1400)
	src6 := flowToPeer(t, client6, vip6, 2, 1)
	f6 := packet.Fragment(fragFlow(src6, vip6, 4242, 53, 3000), 0x78, 1400)[0]
	ret, out := run(t, prog, frameOf(f6))
	if ret != xdpTX {
		t.Fatalf("IPv6 fragment: verdict %s, want TX (the error)", xdpNames[ret])
	}
	ef := packet.Flow{Src: src6, Dst: vip6}
	checkTooBigReply(t, ef, out, expectTooBig(ef, f6, 1356))
}

// splitIPv4 is the RFC 791 split of IPv4 datagram or fragment ip
// (without options) into pieces of at most size bytes of data (a
// multiple of 8): offsets from the original's, MF on all but the last
// unless the original had it.
func splitIPv4(ip []byte, size int) [][]byte {
	hdr, data := ip[:20], ip[20:]
	field := binary.BigEndian.Uint16(hdr[6:])
	off, mf := int(field&0x1fff), field&0x2000 != 0
	var out [][]byte
	for o := 0; o < len(data); o += size {
		end := min(o+size, len(data))
		p := append(bytes.Clone(hdr), data[o:end]...)
		f := uint16(off+o/8) | field&0x4000
		if end < len(data) || mf {
			f |= 0x2000
		}
		binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
		binary.BigEndian.PutUint16(p[6:], f)
		binary.BigEndian.PutUint16(p[10:], 0)
		binary.BigEndian.PutUint16(p[10:], packet.Checksum(p[:20]))
		out = append(out, p)
	}
	return out
}

// TestTooBigXlbdStopped: an IPv4 datagram without DF too big once
// encapsulated is handed to xlbd's holder only while the holder reads the
// ring (it stamps xlb_frag_reader); with no holder, or one silent for
// more than 2 s (xlbd stopped), it is dropped and counted apart
// (too_big_no_xlbd), and nothing is left in the ring.
func TestTooBigXlbdStopped(t *testing.T) {
	d := newTestDatapath(t, Options{})
	if _, err := d.Apply(tooBigState(1500, 1000)); err != nil {
		t.Fatal(err)
	}
	in := frameOf(fragFlow(client4, vip4, 40001, 53, 3000).IP()) // no DF
	send := func(want string) {
		t.Helper()
		before, _ := d.Stats()
		if ret, _ := run(t, d.Program(), in); ret != xdpDrop {
			t.Fatalf("verdict %s, want DROP", xdpNames[ret])
		}
		after, _ := d.Stats()
		for _, c := range []string{"too_big_no_xlbd", "too_big_fragment", "too_big_fragment_fail", "drop_too_big"} {
			if got, w := after[c]-before[c], map[bool]uint64{true: 1}[c == want]; got != w {
				t.Fatalf("%s +%d, want +%d", c, got, w)
			}
		}
	}
	send("too_big_no_xlbd") // never a holder
	h, err := d.NewFragHolder(FragHoldOptions{Inject: func([]byte, uint32) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	send("too_big_fragment") // the holder opened: stamped
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts)
	if err := d.objs.XlbFragReader.Put(uint32(0), uint64(ts.Nano()-int64(3*time.Second))); err != nil {
		t.Fatal(err)
	}
	send("too_big_no_xlbd") // silent for 3 s
}

// TestFragmentsResplitExact: the three fragments of a datagram to a
// service that takes fragments, each too big for the backend's egress
// (MTU 1200) once in GRE: each goes to xlbd and is split again; every
// piece, run through the program, goes to the backend the first fragment
// chose, and the pieces are byte for byte the RFC 791 split of each
// fragment (offsets from the fragment's own, MF kept on all pieces of a
// fragment that had it, cleared only on the last piece of the last).
func TestFragmentsResplitExact(t *testing.T) {
	d := newTestDatapath(t, Options{})
	st := fragState(FragPool{})
	for id, r := range st.Reals.All() {
		r.NextHop = NextHopCache{DMAC: [6]byte{2, 0, 0, 0, 0, 0xbb}, SMAC: [6]byte{2, 0, 0, 0, 0, 0xaa}, Ifindex: 7, MTU: 1200}
		st.Reals.Set(id, r)
	}
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	prog := d.Program()
	var pieces []*packet.Tunnel
	h, mu := runInjectHolder(t, d, func(ret uint32, out []byte) {
		tun, err := packet.ParseTunnel(out)
		if ret != xdpRedirect || err != nil {
			t.Errorf("piece: verdict %s (%v), want REDIRECT in a tunnel", xdpNames[ret], err)
			return
		}
		if len(out)-14 > 1200 {
			t.Errorf("piece of %d bytes once encapsulated, MTU 1200", len(out)-14)
		}
		pieces = append(pieces, tun)
	})

	frags := packet.Fragment(fragFlow(client4, vip4, 4243, 53, 3200), 0x99, 1480) // 1480, 1480, 248 bytes of data
	var want [][]byte
	for i, fr := range frags {
		if len(fr) > 1200-24 {
			want = append(want, splitIPv4(fr, 1152)...) // 1200 - 24 - 20, a multiple of 8
		} else {
			want = append(want, fr)
		}
		ret, out := run(t, prog, frameOf(fr))
		switch {
		case len(fr) > 1200-24 && ret != xdpDrop:
			t.Fatalf("fragment %d (%d bytes): verdict %s, want DROP (to xlbd)", i, len(fr), xdpNames[ret])
		case len(fr) <= 1200-24:
			tun, err := packet.ParseTunnel(out)
			if ret != xdpRedirect || err != nil {
				t.Fatalf("fragment %d fits: verdict %s (%v)", i, xdpNames[ret], err)
			}
			mu.Lock()
			pieces = append(pieces, tun)
			mu.Unlock()
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			n := len(pieces)
			mu.Unlock()
			if n >= len(want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pieces) != len(want) {
		t.Fatalf("%d pieces, want %d (holder %+v)", len(pieces), len(want), h.Stats())
	}
	for i, p := range pieces {
		if p.Backend != pieces[0].Backend {
			t.Fatalf("piece %d to %s, the first to %s", i, p.Backend, pieces[0].Backend)
		}
		if !bytes.Equal(p.Inner, want[i]) {
			t.Fatalf("piece %d differs\n got % x\nwant % x", i, p.Inner[:20], want[i][:20])
		}
	}
	s, _ := d.Stats()
	if s["too_big_fragment"] != 2 || s["frag_needed_fragmented"] != 2 || s["drop_too_big"] != 0 {
		t.Fatalf("counters %v", s)
	}
	t.Logf("3 fragments -> %d pieces to %s", len(pieces), pieces[0].Backend)
}

// runInjectHolder starts a FragHolder on d whose re-injections each run
// the program once and hand got the verdict and the output frame, under
// the returned lock (the caller takes it to read what got kept); it stops
// when the test ends.
func runInjectHolder(t *testing.T, d *Datapath, got func(ret uint32, out []byte)) (*FragHolder, *sync.Mutex) {
	t.Helper()
	prog := d.Program()
	var mu sync.Mutex
	h, err := d.NewFragHolder(FragHoldOptions{Inject: func(frame []byte, _ uint32) error {
		opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256), Repeat: 1}
		ret, err := prog.Run(opts)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		got(ret, opts.DataOut)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return h, &mu
}

// applyPool applies fragState with the pool {self, peer} (self first),
// the peer's next hop cached with egress MTU mtu.
func applyPool(t *testing.T, d *Datapath, self, peer netip.Addr, mtu uint32) {
	t.Helper()
	pool := FragPool{Peers: []FragPeer{{Addr: self}, {Addr: peer}}, Self: 0}
	pool.Peers[1].NextHop = NextHopCache{DMAC: [6]byte{2, 0, 0, 0, 0, 0xbb}, SMAC: [6]byte{2, 0, 0, 0, 0, 0xaa}, Ifindex: 7, MTU: mtu}
	st := fragState(pool)
	st.Node.ICMPTooBigRate = 1000
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
}

// handToHolder runs frame, which the program must drop for xlbd to split,
// and waits until the holder has split it.
func handToHolder(t *testing.T, prog *ebpf.Program, h *FragHolder, frame []byte) {
	t.Helper()
	n := h.Stats().Fragmented
	if ret, _ := run(t, prog, frame); ret != xdpDrop {
		t.Fatalf("verdict %s, want DROP (to xlbd)", xdpNames[ret])
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.Stats().Fragmented == n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}
