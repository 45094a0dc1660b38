package decap

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/testenv"
)

// Addresses of the fixtures: the host under test has local4/local6; the
// load balancer (lb4/lb6) encapsulates client traffic for the VIP.
var (
	local4  = netip.MustParseAddr("192.0.2.2")
	local6  = netip.MustParseAddr("2001:db8::2")
	lb4     = netip.MustParseAddr("192.0.2.1")
	lb6     = netip.MustParseAddr("2001:db8::1")
	other4  = netip.MustParseAddr("192.0.2.99")
	other6  = netip.MustParseAddr("2001:db8::99")
	vip4    = netip.MustParseAddr("10.200.0.1")
	vip6    = netip.MustParseAddr("fd00:200::1")
	client4 = netip.MustParseAddr("198.51.100.7")
	client6 = netip.MustParseAddr("2001:db8:c::7")
)

const (
	xdpDrop = 1
	xdpPass = 2
)

// loadTestProgram loads the program without attaching it and marks
// local4 and local6 as this host's addresses.
func loadTestProgram(t testing.TB) *decapObjects {
	t.Helper()
	testenv.RequireRoot(t)
	var objs decapObjects
	if err := loadDecapObjects(&objs, nil); err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { objs.Close() })
	one := uint32(1)
	for _, a := range []netip.Addr{local4, local6} {
		k := addrKey(a)
		if err := objs.DecapLocal.Put(&k, &one); err != nil {
			t.Fatalf("put local address: %v", err)
		}
	}
	return &objs
}

// runProgram runs the program once over in and returns the action and the
// frame as the program left it.
func runProgram(t testing.TB, prog *ebpf.Program, in []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(in)+256)
	opts := ebpf.RunOptions{Data: in, DataOut: out}
	ret, err := prog.Run(&opts)
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret, opts.DataOut
}

type fixture struct {
	name    string
	in      []byte
	action  uint32
	out     []byte // nil: the frame must come out unchanged
	counter decapDecapCounter
}

func fixtures() []fixture {
	tcp4 := ip4{src: client4, dst: vip4, proto: protoTCP}.build(tcpSyn(client4, vip4, 40000, 80))
	in4 := udp4(client4, vip4, 40001, 53, []byte("four"))
	in6 := udp6(client6, vip6, 40002, 53, []byte("six"))
	q100 := vlanTag{ether8021Q, 100}
	ad7 := vlanTag{ether8021AD, 7}
	gre4 := func(p []byte) []byte { return ip4{src: lb4, dst: local4, proto: protoGRE}.build(p) }
	gre6 := func(p []byte) []byte { return ip6{src: lb6, dst: local6, next: protoGRE}.build(p) }
	tiny := udp4(client4, vip4, 1, 2, nil)

	// Inner fragments: decapsulated like whole datagrams, so
	// the stack reassembles them.
	frag4 := ip4{src: client4, dst: vip4, proto: protoUDP, frag: 0x2000}.build(udp4(client4, vip4, 40003, 53, make([]byte, 64))[20:])
	frag4late := ip4{src: client4, dst: vip4, proto: protoUDP, frag: 0x0009}.build(make([]byte, 40))
	frag6 := ip6{src: client6, dst: vip6, next: 44}.build(cat([]byte{protoUDP, 0, 0, 9, 0, 0, 0, 7}, make([]byte, 40)))

	return []fixture{
		{
			name:    "gre4 inner ipv4 first fragment",
			in:      cat(ethHdr(etherIPv4), gre4(cat(greHdr(0, etherIPv4), frag4))),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv4), frag4),
			counter: decapDecapCounterDECAP_RX_GRE_4IN4,
		},
		{
			name:    "gre4 inner ipv4 later fragment",
			in:      cat(ethHdr(etherIPv4), gre4(cat(greHdr(0, etherIPv4), frag4late))),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv4), frag4late),
			counter: decapDecapCounterDECAP_RX_GRE_4IN4,
		},
		{
			name:    "gre6 inner ipv6 later fragment",
			in:      cat(ethHdr(etherIPv6), gre6(cat(greHdr(0, etherIPv6), frag6))),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv6), frag6),
			counter: decapDecapCounterDECAP_RX_GRE_6IN6,
		},
		// Decapsulated: the inner datagram behind the same L2 header.
		{
			name:    "gre4 tcp4",
			in:      cat(ethHdr(etherIPv4), gre4(cat(greHdr(0, etherIPv4), tcp4))),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv4), tcp4),
			counter: decapDecapCounterDECAP_RX_GRE_4IN4,
		},
		{
			name:    "gre4 udp6",
			in:      cat(ethHdr(etherIPv4), gre4(cat(greHdr(0, etherIPv6), in6))),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv6), in6),
			counter: decapDecapCounterDECAP_RX_GRE_6IN4,
		},
		{
			name:    "gre6 udp6",
			in:      cat(ethHdr(etherIPv6), gre6(cat(greHdr(0, etherIPv6), in6))),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv6), in6),
			counter: decapDecapCounterDECAP_RX_GRE_6IN6,
		},
		{
			name:    "gre6 tcp4",
			in:      cat(ethHdr(etherIPv6), gre6(cat(greHdr(0, etherIPv4), tcp4))),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv4), tcp4),
			counter: decapDecapCounterDECAP_RX_GRE_4IN6,
		},
		{
			name:    "gre4 with checksum key and sequence",
			in:      cat(ethHdr(etherIPv4), gre4(cat(greHdr(greC|greK|greS, etherIPv4, 0xabcd0000, 42, 7), in4))),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv4), in4),
			counter: decapDecapCounterDECAP_RX_GRE_4IN4,
		},
		{
			name:    "gre4 with key, recursion bits ignored",
			in:      cat(ethHdr(etherIPv4), gre4(cat(greHdr(greK|0x0100, etherIPv4, 99), in4))),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv4), in4),
			counter: decapDecapCounterDECAP_RX_GRE_4IN4,
		},
		{
			name:    "ipip 4in4",
			in:      cat(ethHdr(etherIPv4), ip4{src: lb4, dst: local4, proto: protoIPIP}.build(in4)),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv4), in4),
			counter: decapDecapCounterDECAP_RX_IPIP_4IN4,
		},
		{
			name:    "ipip 6in4",
			in:      cat(ethHdr(etherIPv4), ip4{src: lb4, dst: local4, proto: protoIPv6}.build(in6)),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv6), in6),
			counter: decapDecapCounterDECAP_RX_IPIP_6IN4,
		},
		{
			name:    "ip6ip6",
			in:      cat(ethHdr(etherIPv6), ip6{src: lb6, dst: local6, next: protoIPv6}.build(in6)),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv6), in6),
			counter: decapDecapCounterDECAP_RX_IPIP_6IN6,
		},
		{
			name:    "4in6",
			in:      cat(ethHdr(etherIPv6), ip6{src: lb6, dst: local6, next: protoIPIP}.build(in4)),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv4), in4),
			counter: decapDecapCounterDECAP_RX_IPIP_4IN6,
		},
		{
			name:    "vlan gre4 tcp4",
			in:      cat(ethHdr(etherIPv4, q100), gre4(cat(greHdr(0, etherIPv4), tcp4))),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv4, q100), tcp4),
			counter: decapDecapCounterDECAP_RX_GRE_4IN4,
		},
		{
			name:    "qinq 4in6",
			in:      cat(ethHdr(etherIPv6, ad7, q100), ip6{src: lb6, dst: local6, next: protoIPIP}.build(in4)),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv4, ad7, q100), in4),
			counter: decapDecapCounterDECAP_RX_IPIP_4IN6,
		},
		{
			name: "outer ipv4 options",
			in: cat(ethHdr(etherIPv4), ip4{src: lb4, dst: local4, proto: protoGRE,
				options: []byte{0x94, 0x04, 0, 0, 0x01, 0x01, 0x01, 0x00}}.build(cat(greHdr(0, etherIPv4), in4))),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv4), in4),
			counter: decapDecapCounterDECAP_RX_GRE_4IN4,
		},
		{
			name:    "bytes after the outer datagram stay behind the inner one",
			in:      cat(ethHdr(etherIPv4), ip4{src: lb4, dst: local4, proto: protoIPIP}.build(tiny), make([]byte, 6)),
			action:  xdpPass,
			out:     cat(ethHdr(etherIPv4), tiny, make([]byte, 6)),
			counter: decapDecapCounterDECAP_RX_IPIP_4IN4,
		},

		// Not ours: passed unchanged.
		{
			name:    "gre4 to another host",
			in:      cat(ethHdr(etherIPv4), ip4{src: lb4, dst: other4, proto: protoGRE}.build(cat(greHdr(0, etherIPv4), in4))),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_NOT_LOCAL,
		},
		{
			name:    "ip6ip6 to another host",
			in:      cat(ethHdr(etherIPv6), ip6{src: lb6, dst: other6, next: protoIPv6}.build(in6)),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_NOT_LOCAL,
		},
		{
			name:    "ipip to an address not in the local map",
			in:      cat(ethHdr(etherIPv4), ip4{src: lb4, dst: vip4, proto: protoIPIP}.build(in4)),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_NOT_LOCAL,
		},
		{
			name:    "plain udp4 to this host",
			in:      cat(ethHdr(etherIPv4), udp4(lb4, local4, 1000, 53, []byte("plain"))),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_NOT_TUNNEL,
		},
		{
			name:    "plain udp6 to this host",
			in:      cat(ethHdr(etherIPv6), udp6(lb6, local6, 1000, 53, []byte("plain"))),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_NOT_TUNNEL,
		},
		{
			name: "ipv6 tunnel behind a hop-by-hop header",
			in: cat(ethHdr(etherIPv6), ip6{src: lb6, dst: local6, next: 0}.build(
				cat([]byte{protoGRE, 0, 1, 4, 0, 0, 0, 0}, greHdr(0, etherIPv6), in6))),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_NOT_TUNNEL,
		},
		{
			name:    "arp",
			in:      cat(ethHdr(etherARP), make([]byte, 28)),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_NOT_IP,
		},
		{
			name:    "three vlan tags",
			in:      cat(ethHdr(etherIPv4, ad7, q100, q100), gre4(cat(greHdr(0, etherIPv4), in4))),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_NOT_IP,
		},
		{
			name:    "vlan tag cut off",
			in:      ethHdr(ether8021Q),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_NOT_IP,
		},
		{
			name:    "ethernet header only",
			in:      ethHdr(etherIPv4),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_OUTER_INVALID,
		},
		{
			name:    "gre version 1 (pptp)",
			in:      cat(ethHdr(etherIPv4), gre4(cat(greHdr(greK|1, 0x880B, 0), in4))),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_GRE_OTHER,
		},
		{
			name:    "gre routing present",
			in:      cat(ethHdr(etherIPv4), gre4(cat(greHdr(greR, etherIPv4, 0), in4))),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_GRE_OTHER,
		},
		{
			name:    "gre transparent ethernet bridging",
			in:      cat(ethHdr(etherIPv4), gre4(cat(greHdr(0, 0x6558), ethHdr(etherIPv4), in4))),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_GRE_OTHER,
		},
		{
			name:    "outer ipv4 bad checksum",
			in:      cat(ethHdr(etherIPv4), ip4{src: lb4, dst: local4, proto: protoIPIP, badCsum: true}.build(in4)),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_OUTER_INVALID,
		},
		{
			name:    "outer ipv4 ihl below 5",
			in:      cat(ethHdr(etherIPv4), ip4{src: lb4, dst: local4, proto: protoIPIP, ihl: 4}.build(in4)),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_OUTER_INVALID,
		},
		{
			name:    "outer ipv4 longer than the frame",
			in:      cat(ethHdr(etherIPv4), ip4{src: lb4, dst: local4, proto: protoIPIP, totLen: 20 + len(in4) + 1}.build(in4)),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_OUTER_INVALID,
		},
		{
			name:    "outer ipv6 longer than the frame",
			in:      cat(ethHdr(etherIPv6), ip6{src: lb6, dst: local6, next: protoIPv6, plen: len(in6) + 1}.build(in6)),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_OUTER_INVALID,
		},
		{
			name:    "ethertype ipv4, version 6",
			in:      cat(ethHdr(etherIPv4), ip6{src: lb6, dst: local6, next: protoIPv6}.build(in6)),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_OUTER_INVALID,
		},
		{
			name:    "outer ipv4 first fragment",
			in:      cat(ethHdr(etherIPv4), ip4{src: lb4, dst: local4, proto: protoIPIP, frag: 0x2000}.build(in4)),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_FRAGMENT,
		},
		{
			name:    "outer ipv4 later fragment",
			in:      cat(ethHdr(etherIPv4), ip4{src: lb4, dst: local4, proto: protoGRE, frag: 0x0010}.build(make([]byte, 32))),
			action:  xdpPass,
			counter: decapDecapCounterDECAP_PASS_FRAGMENT,
		},

		// Ours but malformed: dropped.
		{
			name:    "gre truncated",
			in:      cat(ethHdr(etherIPv4), gre4([]byte{0, 0})),
			action:  xdpDrop,
			counter: decapDecapCounterDECAP_DROP_TRUNCATED,
		},
		{
			name:    "gre key missing",
			in:      cat(ethHdr(etherIPv4), gre4(cat(greHdr(greK, etherIPv4), []byte{0, 0}))),
			action:  xdpDrop,
			counter: decapDecapCounterDECAP_DROP_TRUNCATED,
		},
		{
			name:    "gre truncated inside the outer datagram, frame padded",
			in:      cat(ethHdr(etherIPv4), gre4([]byte{0, 0}), make([]byte, 40)),
			action:  xdpDrop,
			counter: decapDecapCounterDECAP_DROP_TRUNCATED,
		},
		{
			name:    "gre6 without inner header",
			in:      cat(ethHdr(etherIPv6), gre6(greHdr(0, etherIPv6))),
			action:  xdpDrop,
			counter: decapDecapCounterDECAP_DROP_TRUNCATED,
		},
		{
			name:    "ipip inner truncated",
			in:      cat(ethHdr(etherIPv4), ip4{src: lb4, dst: local4, proto: protoIPIP}.build(in4[:12])),
			action:  xdpDrop,
			counter: decapDecapCounterDECAP_DROP_TRUNCATED,
		},
		{
			name:    "gre says ipv4, inner is ipv6",
			in:      cat(ethHdr(etherIPv4), gre4(cat(greHdr(0, etherIPv4), in6))),
			action:  xdpDrop,
			counter: decapDecapCounterDECAP_DROP_INNER_VERSION,
		},
		{
			name:    "gre says ipv6, inner is ipv4",
			in:      cat(ethHdr(etherIPv6), gre6(cat(greHdr(0, etherIPv6), in4, make([]byte, 40)))),
			action:  xdpDrop,
			counter: decapDecapCounterDECAP_DROP_INNER_VERSION,
		},
		{
			name:    "ipip proto 4, inner is ipv6",
			in:      cat(ethHdr(etherIPv4), ip4{src: lb4, dst: local4, proto: protoIPIP}.build(in6)),
			action:  xdpDrop,
			counter: decapDecapCounterDECAP_DROP_INNER_VERSION,
		},
		{
			name:    "ip6ip6, inner is ipv4",
			in:      cat(ethHdr(etherIPv6), ip6{src: lb6, dst: local6, next: protoIPv6}.build(cat(in4, make([]byte, 20)))),
			action:  xdpDrop,
			counter: decapDecapCounterDECAP_DROP_INNER_VERSION,
		},
		{
			name: "inner ipv4 longer than the outer payload",
			in: cat(ethHdr(etherIPv4), ip4{src: lb4, dst: local4, proto: protoIPIP}.build(
				ip4{src: client4, dst: vip4, proto: protoUDP, totLen: 200}.build(make([]byte, 8)))),
			action:  xdpDrop,
			counter: decapDecapCounterDECAP_DROP_INNER_LENGTH,
		},
		{
			name: "inner ipv4 ihl below 5",
			in: cat(ethHdr(etherIPv4), ip4{src: lb4, dst: local4, proto: protoIPIP}.build(
				ip4{src: client4, dst: vip4, proto: protoUDP, ihl: 3}.build(make([]byte, 8)))),
			action:  xdpDrop,
			counter: decapDecapCounterDECAP_DROP_INNER_LENGTH,
		},
		{
			name: "inner ipv6 longer than the outer payload",
			in: cat(ethHdr(etherIPv6), gre6(cat(greHdr(0, etherIPv6),
				ip6{src: client6, dst: vip6, next: protoUDP, plen: 100}.build(make([]byte, 8))))),
			action:  xdpDrop,
			counter: decapDecapCounterDECAP_DROP_INNER_LENGTH,
		},
	}
}

func readTestCounters(t testing.TB, objs *decapObjects) []Counter {
	t.Helper()
	c, err := readCounters(objs.DecapCounters)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestProgram runs each fixture through BPF_PROG_TEST_RUN and checks the
// action, the exact output bytes and that exactly the expected counter
// moved by one packet of the frame's length.
func TestProgram(t *testing.T) {
	objs := loadTestProgram(t)
	for _, fx := range fixtures() {
		t.Run(fx.name, func(t *testing.T) {
			before := readTestCounters(t, objs)
			action, out := runProgram(t, objs.XlbDecap, fx.in)
			after := readTestCounters(t, objs)

			if action != fx.action {
				t.Errorf("action = %d, want %d", action, fx.action)
			}
			want := fx.out
			if want == nil {
				want = fx.in
			}
			if fx.action == xdpPass && !bytes.Equal(out, want) {
				t.Errorf("output differs\n got %s\nwant %s", hex.EncodeToString(out), hex.EncodeToString(want))
			}
			for i := range after {
				dp, db := after[i].Packets-before[i].Packets, after[i].Bytes-before[i].Bytes
				if decapDecapCounter(i) == fx.counter {
					if dp != 1 || db != uint64(len(fx.in)) {
						t.Errorf("counter %s moved by %d packets, %d bytes; want 1, %d", after[i].Name, dp, db, len(fx.in))
					}
				} else if dp != 0 {
					t.Errorf("counter %s moved by %d packets, want 0", after[i].Name, dp)
				}
			}
		})
	}
}

// FuzzProgram feeds arbitrary frames to the program: it must pass or drop
// (never abort or bounce), and a passed frame is either unchanged or the
// input with bytes cut out after the L2 header (at most 22 bytes, whose
// MAC addresses stay).
func FuzzProgram(f *testing.F) {
	objs := loadTestProgram(f)
	for _, fx := range fixtures() {
		f.Add(fx.in)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 14 {
			return // the kernel refuses shorter XDP test input
		}
		action, out := runProgram(t, objs.XlbDecap, in)
		switch action {
		case xdpDrop:
		case xdpPass:
			if bytes.Equal(out, in) {
				return
			}
			cut := len(in) - len(out)
			if cut < 20 || !bytes.Equal(out[:12], in[:12]) || !bytes.Equal(out[22:], in[22+cut:]) {
				t.Fatalf("passed frame altered beyond decapsulation\n in %x\nout %x", in, out)
			}
		default:
			t.Fatalf("action %d", action)
		}
	})
}
