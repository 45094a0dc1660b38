package datapath

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/packet"
)

// TestVIPIndex fills the forwarder's VIP match to its capacity (MaxServices
// - 1 VIPs, IPv4 and IPv6, exact ports and one all-ports VIP) and checks by
// test runs that every VIP reaches its own backend, keys placed in their
// second bucket included; that changed VIPs (fresh entries swapped in) and
// removed ones take effect; and that a second Load on the same pins finds
// the same index.
func TestVIPIndex(t *testing.T) {
	const max = 64
	const n = max - 1 // service ids 1 .. max-1
	d := newTestDatapath(t, Options{MaxServices: max})
	st := &State{Node: testNode(), Services: map[VIPKey]*Service{}}
	keys := make([]VIPKey, 0, n)
	backend := map[VIPKey]netip.Addr{}
	for i := range n {
		id := uint32(i + 1)
		var key VIPKey
		switch {
		case i == 0:
			key = VIPKey{Addr: netip.MustParseAddr("10.202.0.1"), Port: 0, Proto: 6} // all ports
		case i%2 == 0:
			key = VIPKey{Addr: netip.AddrFrom4([4]byte{10, 201, byte(i / 8), 1}), Port: uint16(1000 + i), Proto: 6}
		default:
			key = VIPKey{Addr: netip.MustParseAddr(fmt.Sprintf("fd00:201::%x", i/4)), Port: uint16(2000 + i), Proto: 17}
		}
		be := netip.AddrFrom4([4]byte{10, 1, 0, byte(id)})
		st.Reals.Set(id, Real{Addr: be, SvcID: id, Active: true})
		st.Services[key] = &Service{SvcID: id, Encap: EncapGRE, Table: []uint32{id, id, id, id, id, id, id}}
		keys = append(keys, key)
		backend[key] = be
	}
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	second := 0
	for _, key := range keys {
		k := vipKey(key)
		p, ok := d.vidx.place[k]
		if !ok {
			t.Fatalf("%s not in the index", key)
		}
		if b1, _ := d.vidx.candidates(k); p.bucket != b1 {
			second++
		}
	}
	if second == 0 {
		t.Fatal("no key in its second bucket: the second probe is not exercised")
	}
	client := map[bool]netip.Addr{true: client4, false: client6}
	send := func(key VIPKey, port uint16) (uint32, *packet.Tunnel) {
		t.Helper()
		f := packet.Flow{Src: client[key.Addr.Is4()], Dst: key.Addr, SrcPort: 4242, DstPort: port,
			Proto: key.Proto, TCPFlags: packet.SYN}
		if key.Proto != 6 {
			f.TCPFlags = 0
		}
		ret, out := run(t, d.Program(), f.Frame())
		if ret != xdpTX {
			return ret, nil
		}
		tun, err := packet.ParseTunnel(out)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return ret, tun
	}
	check := func(what string, encap string) {
		t.Helper()
		for _, key := range keys {
			port := key.Port
			if port == 0 {
				port = 4711
			}
			ret, tun := send(key, port)
			if tun == nil || tun.Backend != backend[key] || tun.Kind != encap {
				t.Fatalf("%s: %s: verdict %d, tunnel %+v; want %s to %s", what, key, ret, tun, encap, backend[key])
			}
		}
	}
	check("filled", "gre")
	// A port no VIP of that address serves: not for a VIP.
	if ret, _ := send(keys[2], 9); ret != xdpPass {
		t.Fatalf("port without a VIP: verdict %d, want pass", ret)
	}

	// Every VIP changes (a fresh entry each, swapped in).
	for _, key := range keys {
		s := *st.Services[key]
		s.Encap = EncapIPIP
		st.Services[key] = &s
	}
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	check("changed", "ipip")

	// Half of them go; their packets are no longer for a VIP.
	removed := keys[n/2:]
	for _, key := range removed {
		delete(st.Services, key)
	}
	keys = keys[:n/2]
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	check("after removals", "ipip")
	for _, key := range removed {
		if ret, _ := send(key, key.Port); ret != xdpPass {
			t.Fatalf("removed %s: verdict %d, want pass", key, ret)
		}
	}
	if len(d.vidx.place) != len(keys) {
		t.Fatalf("index holds %d keys, want %d", len(d.vidx.place), len(keys))
	}

	// A second Load on the same pins reads the same index.
	d2, err := Load(d.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if len(d2.vidx.place) != len(d.vidx.place) {
		t.Fatalf("adopted index holds %d keys, want %d", len(d2.vidx.place), len(d.vidx.place))
	}
	for k, p := range d.vidx.place {
		if d2.vidx.place[k] != p {
			t.Fatalf("adopted %v at %+v, want %+v", k, d2.vidx.place[k], p)
		}
	}
	if len(d2.vidx.free)+len(d2.vidx.place) != 2*max {
		t.Fatalf("adopted index: %d free and %d used entry ids, want %d in all", len(d2.vidx.free), len(d2.vidx.place), 2*max)
	}
}
