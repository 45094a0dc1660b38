package decap

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/testenv"
	"golang.org/x/sys/unix"
)

const testGUEPort = 6080

// gueHdr is the UDP header of GUE version 1 carrying inner: source port
// sport, destination the GUE port, checksum 0 (as xlb sends it).
func gueHdr(sport uint16, inner []byte) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], testGUEPort)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(inner)))
	return cat(b, inner)
}

// TestGUEProgram: GUE to the configured port is stripped like the other
// tunnels, for both outer and inner families and behind VLAN tags; UDP to
// another port, GUE version 0 (a GUE header) and GUE to another host pass
// untouched.
func TestGUEProgram(t *testing.T) {
	testenv.RequireRoot(t)
	var objs decapObjects
	if err := loadObjects(&objs, testGUEPort); err != nil {
		t.Fatalf("load: %v", err)
	}
	defer objs.Close()
	one := uint32(1)
	for _, a := range []netip.Addr{local4, local6} {
		k := addrKey(a)
		if err := objs.DecapLocal.Put(&k, &one); err != nil {
			t.Fatal(err)
		}
	}
	in4 := udp4(client4, vip4, 40001, 53, []byte("four"))
	in6 := udp6(client6, vip6, 40002, 53, []byte("six"))
	o4 := func(p []byte) []byte { return ip4{src: lb4, dst: local4, proto: protoUDP}.build(p) }
	o4opt := func(p []byte) []byte {
		return ip4{src: lb4, dst: local4, proto: protoUDP, options: []byte{1, 1, 1, 0}}.build(p)
	}
	o6 := func(p []byte) []byte { return ip6{src: lb6, dst: local6, next: protoUDP}.build(p) }
	q100 := vlanTag{ether8021Q, 100}
	gue0 := cat([]byte{0, 0, 0, 0}, in4) // GUE version 0: a header, then the inner datagram
	otherPort := udp4(lb4, local4, 40000, 5000, in4)
	cases := []struct {
		name    string
		in, out []byte
		counter decapDecapCounter
	}{
		{"4in4", cat(ethHdr(etherIPv4), o4(gueHdr(50000, in4))), cat(ethHdr(etherIPv4), in4), decapDecapCounterDECAP_RX_GUE_4IN4},
		{"6in4 outer options", cat(ethHdr(etherIPv4), o4opt(gueHdr(50001, in6))), cat(ethHdr(etherIPv6), in6), decapDecapCounterDECAP_RX_GUE_6IN4},
		{"4in6 vlan", cat(ethHdr(etherIPv6, q100), o6(gueHdr(50002, in4))), cat(ethHdr(etherIPv4, q100), in4), decapDecapCounterDECAP_RX_GUE_4IN6},
		{"6in6", cat(ethHdr(etherIPv6), o6(gueHdr(50003, in6))), cat(ethHdr(etherIPv6), in6), decapDecapCounterDECAP_RX_GUE_6IN6},
		{"udp to another port", cat(ethHdr(etherIPv4), o4(otherPort[20:])), nil, decapDecapCounterDECAP_PASS_NOT_TUNNEL},
		{"gue version 0", cat(ethHdr(etherIPv4), o4(gueHdr(50004, gue0))), nil, decapDecapCounterDECAP_PASS_GUE_OTHER},
		{"gue to another host", cat(ethHdr(etherIPv4), ip4{src: lb4, dst: other4, proto: protoUDP}.build(gueHdr(50005, in4))), nil,
			decapDecapCounterDECAP_PASS_NOT_LOCAL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := readTestCounters(t, &objs)
			action, out := runProgram(t, objs.XlbDecap, c.in)
			after := readTestCounters(t, &objs)
			if action != xdpPass {
				t.Fatalf("action %d, want XDP_PASS", action)
			}
			want := c.out
			if want == nil {
				want = c.in
			}
			if !bytes.Equal(out, want) {
				t.Errorf("output differs\n got %s\nwant %s", hex.EncodeToString(out), hex.EncodeToString(want))
			}
			if d := after[c.counter].Packets - before[c.counter].Packets; d != 1 {
				t.Errorf("counter %s moved by %d, want 1", after[c.counter].Name, d)
			}
		})
	}
}

// TestGUEEndToEnd: a backend namespace with xlb-decap attached (default
// GUE port) gets GUE sent from another namespace in its UDP servers bound
// to the VIPs, from the inner source.
func TestGUEEndToEnd(t *testing.T) {
	n := newTestNet(t)
	n.attach(t, ModeAuto)
	srv := n.servers(t)
	for _, c := range []struct {
		name  string
		outer netip.Addr
		v6    bool
	}{{"4in4", local4, false}, {"6in4", local4, true}, {"4in6", local6, false}, {"6in6", local6, true}} {
		t.Run(c.name, func(t *testing.T) {
			inner, conn, client := udp4(client4, vip4, 40000, serverPort, []byte("gue "+c.name)), srv.v4, client4
			if c.v6 {
				inner, conn, client = udp6(client6, vip6, 40000, serverPort, []byte("gue "+c.name)), srv.v6, client6
			}
			from, ok := receive(t, conn, []byte("gue "+c.name), 5*time.Second, func() {
				n.sendRaw(t, c.outer, unix.IPPROTO_UDP, gueHdr(50000, inner))
			})
			if !ok {
				t.Fatalf("GUE %s to %s: the server got nothing", c.name, c.outer)
			}
			if from.Addr() != client {
				t.Errorf("datagram from %s, want the inner source %s", from, client)
			}
		})
	}
	st := n.status(t)
	for _, k := range []decapDecapCounter{decapDecapCounterDECAP_RX_GUE_4IN4, decapDecapCounterDECAP_RX_GUE_6IN4,
		decapDecapCounterDECAP_RX_GUE_4IN6, decapDecapCounterDECAP_RX_GUE_6IN6} {
		if st.Counters[k].Packets == 0 {
			t.Errorf("counter %s = 0", st.Counters[k].Name)
		}
	}
}
