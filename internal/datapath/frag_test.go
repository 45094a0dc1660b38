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
	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/packet"
)

var (
	fragPeer4 = netip.MustParseAddr("10.0.0.12")
	fragPeer6 = netip.MustParseAddr("fd00::12")
	vip4x     = netip.MustParseAddr("10.200.0.9") // no service there takes fragments
	vip6x     = netip.MustParseAddr("fd00:200::9")
)

// fragState: UDP services on vip4:53 and vip6:53 with fragments on, eight
// backends each (so the choice depends on the flow), and vip4:54 /
// vip6:54 without fragments, and vip4x:54 / vip6x:54 without fragments
// (the only services of their addresses).
func fragState(pool FragPool) *State {
	st := &State{Node: testNode(), Services: map[VIPKey]*Service{}}
	st.Node.Fragments = pool
	next := uint32(1)
	add := func(svc uint32, key VIPKey, frags bool, base netip.Addr) {
		tbl := make([]uint32, 251)
		var ids []uint32
		a := base
		for i := 0; i < 8; i++ {
			st.Reals.Set(next, Real{Addr: a, SvcID: svc, Active: true})
			ids = append(ids, next)
			next++
			a = a.Next()
		}
		for i := range tbl {
			tbl[i] = ids[i%len(ids)]
		}
		st.Services[key] = &Service{SvcID: svc, Encap: EncapGRE, Fragments: frags, Table: tbl}
	}
	add(1, VIPKey{Addr: vip4, Port: 53, Proto: 17}, true, be4)
	add(2, VIPKey{Addr: vip6, Port: 53, Proto: 17}, true, be6)
	add(3, VIPKey{Addr: vip4, Port: 54, Proto: 17}, false, be4)
	add(4, VIPKey{Addr: vip6, Port: 54, Proto: 17}, false, be6)
	add(5, VIPKey{Addr: vip4x, Port: 54, Proto: 17}, false, be4)
	add(6, VIPKey{Addr: vip6x, Port: 54, Proto: 17}, false, be6)
	return st
}

func fragFlow(src, dst netip.Addr, sport, dport uint16, n int) packet.Flow {
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i*7 + int(sport))
	}
	return packet.Flow{Src: src, Dst: dst, SrcPort: sport, DstPort: dport, Proto: packet.ProtoUDP,
		Payload: payload, SrcMAC: peerMAC, DstMAC: nodeMAC}
}

func frameOf(ip []byte) []byte {
	et := uint16(packet.EtherIPv4)
	if ip[0]>>4 == 6 {
		et = packet.EtherIPv6
	}
	return packet.Ethernet(nodeMAC, peerMAC, 0, et, ip)
}

// backendOf runs a frame and returns the tunnel's backend, failing unless
// it is forwarded with the frame's IP datagram unchanged inside.
func backendOf(t *testing.T, prog *ebpf.Program, frame []byte) netip.Addr {
	t.Helper()
	ret, out := run(t, prog, frame)
	if ret != xdpTX {
		t.Fatalf("verdict %s, want TX", xdpNames[ret])
	}
	tun, err := packet.ParseTunnel(out)
	if err != nil {
		t.Fatalf("not a tunnel: %v", err)
	}
	if !bytes.Equal(tun.Inner, frame[14:]) {
		t.Fatalf("inner datagram changed")
	}
	return tun.Backend
}

func stat(t *testing.T, d *Datapath, name string) uint64 {
	t.Helper()
	s, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := s[name]
	if !ok {
		t.Fatalf("no counter %q", name)
	}
	return v
}

// TestFragmentsFollowFirst: with no pool (one node), the first fragment
// goes to the backend of the unfragmented flow and later fragments follow
// it, for many flows, IPv4 and IPv6 (with extension headers in front of the
// fragment header); a service without fragments drops them and counts.
func TestFragmentsFollowFirst(t *testing.T) {
	d := newTestDatapath(t, Options{})
	if _, err := d.Apply(fragState(FragPool{})); err != nil {
		t.Fatal(err)
	}
	prog := d.Program()
	svcBefore, _ := d.ServiceCounters(1)
	backends := map[netip.Addr]bool{}
	for _, c := range []struct {
		name     string
		src, vip netip.Addr
		ext      []packet.ExtHeader
	}{
		{"v4", client4, vip4, nil},
		{"v6", client6, vip6, nil},
		{"v6 ext", client6, vip6, []packet.ExtHeader{{Type: 0, Body: make([]byte, 6)}, {Type: 60, Body: make([]byte, 14)}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for i := 0; i < 40; i++ {
				f := fragFlow(c.src, c.vip, uint16(20000+i), 53, 3000)
				f.IPv6ExtHeaders = c.ext
				want := backendOf(t, prog, f.Frame())
				backends[want] = true
				frags := packet.Fragment(f, uint32(1000+i), 1200)
				if len(frags) != 3 {
					t.Fatalf("%d fragments", len(frags))
				}
				for j, fr := range frags {
					if got := backendOf(t, prog, frameOf(fr)); got != want {
						t.Fatalf("flow %d fragment %d went to %s, the flow to %s", i, j, got, want)
					}
				}
			}
		})
	}
	if len(backends) < 8 {
		t.Fatalf("flows reached %d backends: the test does not show the choice depends on the flow", len(backends))
	}
	if got := stat(t, d, "frag_first"); got != 120 {
		t.Fatalf("frag_first %d, want 120", got)
	}
	if got := stat(t, d, "frag_forward"); got != 240 {
		t.Fatalf("frag_forward %d, want 240", got)
	}
	svc, _ := d.ServiceCounters(1)
	if svc.Packets-svcBefore.Packets != 40*4 {
		t.Fatalf("service counted %d packets, want 160 (40 whole + 120 fragments)", svc.Packets-svcBefore.Packets)
	}

	// Not enabled: dropped, counted. On an address where another
	// service of the protocol takes fragments, later fragments (no port)
	// cannot be told apart: they wait for a first fragment (held, then
	// expire); the first fragment is dropped.
	before, held := stat(t, d, "drop_fragment"), stat(t, d, "frag_held")
	for _, f := range []packet.Flow{
		fragFlow(client4, vip4x, 1, 54, 3000), fragFlow(client6, vip6x, 1, 54, 3000),
		fragFlow(client4, vip4, 1, 54, 3000), fragFlow(client6, vip6, 1, 54, 3000),
	} {
		for _, fr := range packet.Fragment(f, 77, 1200) {
			if ret, _ := run(t, prog, frameOf(fr)); ret != xdpDrop {
				t.Fatalf("fragment to a service without fragments: %s, want DROP", xdpNames[ret])
			}
		}
	}
	if got := stat(t, d, "drop_fragment") - before; got != 3+3+1+1 {
		t.Fatalf("drop_fragment +%d, want 8", got)
	}
	if got := stat(t, d, "frag_held") - held; got != 4 {
		t.Fatalf("frag_held +%d, want 4", got)
	}
}

// flowToPeer finds a source whose 3-tuple hash picks pool index idx.
func flowToPeer(t *testing.T, base, vip netip.Addr, peers, idx int) netip.Addr {
	t.Helper()
	a := base
	for i := 0; i < 1000; i++ {
		h := maglev.FlowHash(maglev.Tuple{Src: a, Dst: vip, Proto: 17})
		if int(maglev.Slot(h, uint32(peers))) == idx {
			return a
		}
		a = a.Next()
	}
	t.Fatal("no source found")
	return a
}

// TestFragmentRedirect: a fragment whose 3-tuple hashes to another pool
// node leaves in GRE to that node with recursion control 1 (exact bytes);
// the same packet arriving at that node (GRE with recursion set, to its
// own address) is decapsulated and forwarded to the backend, never
// redirected again, although its hash names another node.
func TestFragmentRedirect(t *testing.T) {
	d := newTestDatapath(t, Options{})
	for _, c := range []struct {
		name       string
		self, peer netip.Addr
		client     netip.Addr
		vip        netip.Addr
	}{
		{"v4 over v4", nodeV4, fragPeer4, client4, vip4},
		{"v6 over v6", nodeV6, fragPeer6, client6, vip6},
		{"v6 over v4", nodeV4, fragPeer4, client6, vip6},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := FragPool{Peers: []FragPeer{{Addr: c.self}, {Addr: c.peer}}, Self: 0}
			if c.peer.Less(c.self) {
				pool = FragPool{Peers: []FragPeer{{Addr: c.peer}, {Addr: c.self}}, Self: 1}
			}
			if _, err := d.Apply(fragState(pool)); err != nil {
				t.Fatal(err)
			}
			prog := d.Program()
			src := flowToPeer(t, c.client, c.vip, 2, 1-pool.Self)
			f := fragFlow(src, c.vip, 4242, 53, 2000)
			frags := packet.Fragment(f, 99, 1200)
			before := stat(t, d, "frag_redirect")
			for _, fr := range frags {
				in := frameOf(fr)
				ret, out := run(t, prog, in)
				if ret != xdpTX {
					t.Fatalf("verdict %s, want TX", xdpNames[ret])
				}
				gre := make([]byte, 4)
				binary.BigEndian.PutUint16(gre, 0x0100) // recursion control 1
				et := uint16(packet.EtherIPv4)
				if c.vip.Is6() {
					et = packet.EtherIPv6
				}
				binary.BigEndian.PutUint16(gre[2:], et)
				var ip []byte
				oet := uint16(packet.EtherIPv4)
				if c.peer.Is4() {
					ip = packet.IPv4(c.self, c.peer, packet.ProtoGRE, 0, 64, nil, append(gre, fr...))
					ip[6] = 0x40
					binary.BigEndian.PutUint16(ip[10:], 0)
					binary.BigEndian.PutUint16(ip[10:], packet.Checksum(ip[:20]))
				} else {
					h := maglev.FlowHash(maglev.Tuple{Src: src, Dst: c.vip, Proto: 17})
					ip = packet.IPv6(c.self, c.peer, packet.ProtoGRE, 0, 64, nil, append(gre, fr...))
					binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(h&0xfffff))
					oet = packet.EtherIPv6
				}
				var gw, lo [6]byte
				copy(gw[:], testGW)
				want := packet.Ethernet(gw, lo, 0, oet, ip)
				if !bytes.Equal(out, want) {
					t.Fatalf("redirect differs\n got % x\nwant % x", out, want)
				}
				// At the peer: as if this node were it.
				peerPool := pool
				peerPool.Self = 1 - pool.Self
				st := fragState(peerPool)
				if c.peer.Is4() {
					st.Node.Addr4 = c.peer
				} else {
					st.Node.Addr6 = c.peer
				}
				if _, err := d.Apply(st); err != nil {
					t.Fatal(err)
				}
				arrived := packet.Ethernet(nodeMAC, peerMAC, 0, oet, ip)
				fb := stat(t, d, "frag_redirect")
				ret, out = run(t, prog, arrived)
				if ret != xdpTX {
					t.Fatalf("at the peer: verdict %s, want TX", xdpNames[ret])
				}
				tun, err := packet.ParseTunnel(out)
				if err != nil {
					t.Fatalf("at the peer: %v", err)
				}
				if !bytes.Equal(tun.Inner, fr) {
					t.Fatal("at the peer: the fragment changed")
				}
				if tun.Backend == c.self || tun.Backend == c.peer || stat(t, d, "frag_redirect") != fb {
					t.Fatal("a redirected fragment was redirected again")
				}
				if _, err := d.Apply(fragState(pool)); err != nil {
					t.Fatal(err)
				}
			}
			if got := stat(t, d, "frag_redirect") - before; got != uint64(len(frags)) {
				t.Fatalf("frag_redirect +%d, want %d", got, len(frags))
			}
		})
	}
	// GRE without recursion control, or to another address: the kernel's.
	f := fragFlow(client4, vip4, 1, 53, 100)
	plain := packet.Ethernet(nodeMAC, peerMAC, 0, packet.EtherIPv4,
		packet.IPv4(fragPeer4, nodeV4, packet.ProtoGRE, 0, 64, nil, append([]byte{0, 0, 8, 0}, f.IP()...)))
	if ret, _ := run(t, d.Program(), plain); ret != xdpPass {
		t.Fatalf("plain GRE to the node: %s, want PASS", xdpNames[ret])
	}
}

// TestFragmentsHeld: later fragments that come before their first are
// held in xlbd (ring buffer) and released, through the program, to the
// first fragment's backend once it comes; unreleased ones expire; the
// holder's bounds hold.
func TestFragmentsHeld(t *testing.T) {
	d := newTestDatapath(t, Options{})
	if _, err := d.Apply(fragState(FragPool{})); err != nil {
		t.Fatal(err)
	}
	prog := d.Program()
	var (
		mu      sync.Mutex
		outputs = map[string]netip.Addr{} // inner datagram -> backend
	)
	h, err := d.NewFragHolder(FragHoldOptions{Hold: 500 * time.Millisecond, MaxFrames: 50, Inject: func(frame []byte, _ uint32) error {
		out := make([]byte, len(frame)+256)
		opts := &ebpf.RunOptions{Data: frame, DataOut: out, Repeat: 1}
		ret, err := prog.Run(opts)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if ret == xdpTX {
			if tun, err := packet.ParseTunnel(opts.DataOut); err == nil {
				outputs[string(tun.Inner)] = tun.Backend
			}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	defer func() { cancel(); <-done }()

	const flows = 20
	var later [][]byte
	wants := map[string]netip.Addr{}
	for i := 0; i < flows; i++ {
		src := client4
		vip := vip4
		if i%2 == 1 {
			src, vip = client6, vip6
		}
		f := fragFlow(src, vip, uint16(30000+i), 53, 3000) // test runs take ~3.5 KB frames
		want := backendOf(t, prog, f.Frame())
		frags := packet.Fragment(f, uint32(5000+i), 800)
		// later fragments first, in reverse order
		for j := len(frags) - 1; j >= 1; j-- {
			if ret, _ := run(t, prog, frameOf(frags[j])); ret != xdpDrop {
				t.Fatalf("early later fragment: %s, want DROP (held)", xdpNames[ret])
			}
			wants[string(frags[j])] = want
			later = append(later, frags[j])
		}
		if got := backendOf(t, prog, frameOf(frags[0])); got != want {
			t.Fatalf("first fragment to %s, flow to %s", got, want)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(outputs)
		mu.Unlock()
		if n == len(later) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	for _, fr := range later {
		got, ok := outputs[string(fr)]
		if !ok {
			t.Fatalf("a held fragment was not released (%d of %d)", len(outputs), len(later))
		}
		if got != wants[string(fr)] {
			t.Fatalf("released fragment went to %s, its flow to %s", got, wants[string(fr)])
		}
	}
	mu.Unlock()
	if got := stat(t, d, "frag_held"); got != uint64(len(later)) {
		t.Fatalf("frag_held %d, want %d", got, len(later))
	}
	if got := stat(t, d, "frag_release"); got != flows {
		t.Fatalf("frag_release %d, want %d", got, flows)
	}
	if s := h.Stats(); s.Released != uint64(len(later)) || s.Frames != 0 {
		t.Fatalf("holder %+v, want %d released, none held", s, len(later))
	}

	// Never released: expire. Over the bound: dropped.
	f := fragFlow(client4, vip4, 999, 53, 3000)
	frags := packet.Fragment(f, 31337, 40) // 75 fragments
	for _, fr := range frags[1:] {
		run(t, prog, frameOf(fr))
	}
	time.Sleep(1200 * time.Millisecond)
	s := h.Stats()
	if s.Overflow != uint64(len(frags)-1-50) || s.Expired != 50 || s.Frames != 0 || s.Bytes != 0 {
		t.Fatalf("holder %+v, want %d overflow, 50 expired, none held", s, len(frags)-1-50)
	}
	t.Logf("held and released %d fragments of %d datagrams; then %d later fragments without their first: %d expired, %d over the bound", len(later), flows, len(frags)-1, s.Expired, s.Overflow)
}

// TestFragmentTableBound: the fragment table keeps at most FragEntries
// datagrams however many come.
func TestFragmentTableBound(t *testing.T) {
	d := newTestDatapath(t, Options{FragEntries: 256})
	if _, err := d.Apply(fragState(FragPool{})); err != nil {
		t.Fatal(err)
	}
	prog := d.Program()
	f := fragFlow(client4, vip4, 5, 53, 3000)
	first := frameOf(packet.Fragment(f, 1, 1200)[0])
	for i := 0; i < 5000; i++ {
		binary.BigEndian.PutUint16(first[14+4:], uint16(i))
		binary.BigEndian.PutUint16(first[14+10:], 0)
		binary.BigEndian.PutUint16(first[14+10:], packet.Checksum(first[14:34]))
		if ret, _ := run(t, prog, first); ret != xdpTX {
			t.Fatalf("first fragment %d: %s", i, xdpNames[ret])
		}
	}
	w, dec, err := d.FragEntries()
	if err != nil {
		t.Fatal(err)
	}
	if w+dec > 256 || dec < 100 {
		t.Fatalf("table holds %d waiting + %d decided, want at most 256 (and most of them)", w, dec)
	}
}
