package datapath

// The packet fuzzer (docs/DESIGN.md: no input packet may crash or hang
// the forwarder, and a malformed packet never reaches a backend). Random and
// mutated frames run through the loaded forwarder with BPF_PROG_TEST_RUN;
// an independent Go classifier (verdictModel) says, from the rules in
// docs/ARCHITECTURE.md ("Verdicts for packets nobody planned for", "ICMP"),
// what the program must answer, and each answer is checked:
//
//   - never XDP_ABORTED; the verdict equals the model's;
//   - XDP_PASS leaves the frame unchanged;
//   - XDP_TX of a TCP/UDP packet or an ICMP error: a valid tunnel frame
//     (outer IPv4 checksum right, lengths consistent) to the VIP's backend
//     whose inner datagram is byte-identical to the input's;
//   - XDP_TX of an echo request: exactly the reply (addresses and MACs
//     swapped, type changed, TTL 64, checksums valid iff the request's were);
//   - fragments to the fragment-enabled services (the UDP ones on port 53):
//     a first fragment is forwarded like its flow, a later one is either
//     held (XDP_DROP) or forwarded unchanged to a backend of such a service
//     (which depends on the first fragments seen before).
//
// XLB_FUZZ_PACKETS sets the number of packets (default fuzzDefault; `make
// fuzz` runs XLB_FUZZ_PACKETS=10000000).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/internal/testenv/traces"
)

// fuzzDefault packets per `go test` run: about 1.5 s at the ~340k packets/s
// two CPUs reach here.
const fuzzDefault = 500_000

// Expected outcomes.
type outcome int

const (
	outPass    outcome = iota // XDP_PASS, frame unchanged
	outDrop                   // XDP_DROP
	outForward                // TCP/UDP to a VIP: XDP_TX, tunnel
	outICMPFwd                // ICMP error about a VIP flow: XDP_TX, tunnel
	outEcho                   // echo request to a VIP address: XDP_TX, reply
	// A later fragment to a fragment-enabled VIP: forwarded
	// by the fragment table (XDP_TX, a tunnel to one of the backends of
	// the address's fragment-enabled services, datagram unchanged) or
	// held (XDP_DROP): which depends on the fragments seen before.
	outFragLater
)

func (o outcome) String() string {
	return [...]string{"pass", "drop", "forward", "icmp-forward", "echo-reply", "fragment-later"}[o]
}

// verdictModel mirrors the documented rules; it shares no code with the
// program (nor with internal/packet's parsers).
type verdictModel struct {
	vips    map[VIPKey]netip.Addr // -> the only backend of the service
	addrs   map[netip.Addr]bool
	backend netip.Addr
	// Fragments: services taking them, and per (address, protocol) the
	// backends of those services.
	fragVIPs  map[VIPKey]bool
	fragAddrs map[VIPKey][]netip.Addr // port 0
}

func newVerdictModel(st *State) *verdictModel {
	m := &verdictModel{vips: map[VIPKey]netip.Addr{}, addrs: map[netip.Addr]bool{},
		fragVIPs: map[VIPKey]bool{}, fragAddrs: map[VIPKey][]netip.Addr{}}
	for k, s := range st.Services {
		m.vips[k] = st.Reals.At(s.Table[0]).Addr
		m.addrs[k.Addr] = true
		if s.Fragments {
			m.fragVIPs[k] = true
			ak := VIPKey{Addr: k.Addr, Proto: k.Proto}
			m.fragAddrs[ak] = append(m.fragAddrs[ak], st.Reals.At(s.Table[0]).Addr)
		}
	}
	return m
}

// classifyFrag: a fragment to VIP address dst some of whose services take
// fragments. l4 is what follows the IPv4 header / the IPv6 fragment
// header, proto the protocol there, off the fragment offset; end is where
// the datagram ends in b.
func (m *verdictModel) classifyFrag(b []byte, c classification, dst netip.Addr, proto uint8, l4, end int, off uint16) classification {
	c.out = outDrop
	if l4 > end {
		return c // fragment header beyond the datagram
	}
	backends := m.fragAddrs[VIPKey{Addr: dst, Proto: proto}]
	if len(backends) == 0 {
		return c // no service of this protocol there takes fragments
	}
	if off != 0 {
		c.out, c.backends = outFragLater, backends
		return c
	}
	next, cur := proto, l4
	for i := 0; i < 8 && (next == 0 || next == 43 || next == 60 || next == 51) && !c.v4; i++ {
		if cur > 4096 || cur+8 > len(b) {
			return c
		}
		nc := cur + (int(b[cur+1])+1)*8
		if next == 51 {
			nc = cur + (int(b[cur+1])+2)*4
		}
		next, cur = b[cur], nc
	}
	if cur > 4096 || cur >= end {
		return c
	}
	room := end - cur
	ok := next == 6 && cur+20 <= len(b) && room >= 20 && b[cur+12]>>4 >= 5 && int(b[cur+12]>>4)*4 <= room ||
		next == 17 && cur+8 <= len(b) && room >= 8
	if !ok {
		return c
	}
	dport := be16(b[cur+2:])
	k := VIPKey{Addr: dst, Port: dport, Proto: next}
	if _, found := m.vips[k]; !found {
		k.Port = 0
	}
	if be, found := m.vips[k]; found && m.fragVIPs[k] {
		c.out, c.backend = outForward, be
	}
	return c
}

func (m *verdictModel) vip(dst netip.Addr, dport uint16, proto uint8) (netip.Addr, bool) {
	if b, ok := m.vips[VIPKey{Addr: dst, Port: dport, Proto: proto}]; ok {
		return b, true
	}
	b, ok := m.vips[VIPKey{Addr: dst, Port: 0, Proto: proto}]
	return b, ok
}

// classification is the model's answer for one frame.
type classification struct {
	out     outcome
	l3      int // offset of the IP header
	tot     int // IP datagram length
	backend netip.Addr
	v4      bool
	// outFragLater: the backends it may go to.
	backends []netip.Addr
}

func be16(b []byte) uint16 { return binary.BigEndian.Uint16(b) }

func isExt(n uint8) bool { return n == 0 || n == 43 || n == 44 || n == 51 || n == 60 }

func (m *verdictModel) classify(b []byte) classification {
	c := classification{out: outPass}
	if len(b) < 14 {
		return c
	}
	et, off := be16(b[12:]), 14
	for i := 0; i < 2; i++ {
		if et != 0x8100 && et != 0x88a8 {
			break
		}
		if len(b) < off+4 {
			return c
		}
		et = be16(b[off+2:])
		off += 4
	}
	c.l3 = off
	var (
		dst         netip.Addr
		tot, l4     int
		proto       uint8
		bad, frag   bool
		fragOff     uint16
		icmpProto   uint8
		fixedHeader int
	)
	switch et {
	case 0x0800:
		if len(b) < off+20 {
			return c
		}
		c.v4, icmpProto, fixedHeader = true, 1, 20
		ip := b[off:]
		dst = netip.AddrFrom4([4]byte(ip[16:20]))
		hlen := int(ip[0]&0xf) * 4
		tot = int(be16(ip[2:]))
		switch {
		case ip[0]>>4 != 4 || hlen < 20 || tot < hlen || off+tot > len(b):
			bad = true
		case be16(ip[6:])&0x3fff != 0:
			frag, fragOff = true, be16(ip[6:])&0x1fff
		}
		proto, l4 = ip[9], off+hlen
	case 0x86dd:
		if len(b) < off+40 {
			return c
		}
		icmpProto, fixedHeader = 58, 40
		ip := b[off:]
		dst = netip.AddrFrom16([16]byte(ip[24:40]))
		tot = 40 + int(be16(ip[4:]))
		if ip[0]>>4 != 6 || tot == 40 || off+tot > len(b) {
			bad = true
			break
		}
		next, cur := ip[6], off+40
		for i := 0; i < 8 && isExt(next) && !bad && !frag; i++ {
			if cur+8 > len(b) {
				bad = true
				break
			}
			nc := cur + (int(b[cur+1])+1)*8
			switch next {
			case 44:
				if be16(b[cur+2:])&0xfff9 != 0 {
					frag, fragOff = true, be16(b[cur+2:])>>3
				}
				nc = cur + 8
			case 51:
				nc = cur + (int(b[cur+1])+2)*4
			}
			next, cur = b[cur], nc
		}
		if !bad && !frag && (isExt(next) || cur-off > tot) {
			bad = true
		}
		proto, l4 = next, cur
	default:
		return c
	}
	c.tot = tot
	isVIP := m.addrs[dst]
	if frag && !bad && isVIP {
		return m.classifyFrag(b, c, dst, proto, l4, off+tot, fragOff)
	}
	if bad || frag {
		if isVIP {
			c.out = outDrop
		}
		return c
	}
	end := off + tot
	switch proto {
	case 6, 17:
		room := end - l4
		ok := proto == 6 && l4+20 <= len(b) && room >= 20 && b[l4+12]>>4 >= 5 && int(b[l4+12]>>4)*4 <= room ||
			proto == 17 && l4+8 <= len(b) && room >= 8
		if !ok {
			if isVIP {
				c.out = outDrop
			}
			return c
		}
		if be, found := m.vip(dst, be16(b[l4+2:]), proto); found {
			c.out, c.backend = outForward, be
		}
		return c
	case icmpProto:
	default:
		return c
	}
	// ICMP of the packet's family, to a VIP address or not.
	if !isVIP || l4 > 4096 || l4+8 > len(b) || l4+8 > end {
		return c
	}
	typ, code := b[l4], b[l4+1]
	if c.v4 && typ == 8 || !c.v4 && typ == 128 {
		if code == 0 && l4 == off+fixedHeader {
			c.out = outEcho
		}
		return c
	}
	if !(c.v4 && (typ == 3 || typ == 11) || !c.v4 && typ >= 1 && typ <= 3) {
		return c
	}
	in := l4 + 8
	var src, cl netip.Addr
	var iproto uint8
	var l4in int
	if c.v4 {
		if in+20 > len(b) || in+20 > end {
			return c
		}
		ip := b[in:]
		hlen := int(ip[0]&0xf) * 4
		if ip[0]>>4 != 4 || hlen < 20 || be16(ip[6:])&0x1fff != 0 {
			return c
		}
		src, cl, iproto, l4in = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20])), ip[9], in+hlen
	} else {
		if in+40 > len(b) || in+40 > end {
			return c
		}
		ip := b[in:]
		if ip[0]>>4 != 6 {
			return c
		}
		src, cl, iproto, l4in = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40])), ip[6], in+40
	}
	_ = cl
	if iproto != 6 && iproto != 17 || src != dst || l4in > 4096+128 || l4in+4 > end || l4in+4 > len(b) {
		return c
	}
	if be, found := m.vip(src, be16(b[l4in:]), iproto); found {
		c.out, c.backend = outICMPFwd, be
	}
	return c
}

// fuzzChecker runs frames and checks the answers.
type fuzzChecker struct {
	prog  *ebpf.Program
	model *verdictModel
}

var xdpNames = map[uint32]string{0: "ABORTED", 1: "DROP", 2: "PASS", 3: "TX", 4: "REDIRECT"}

// check runs one frame; it returns the verdict and an error describing a
// violation.
func (f *fuzzChecker) check(frame []byte, out []byte) (uint32, outcome, error) {
	opts := &ebpf.RunOptions{Data: frame, DataOut: out, Repeat: 1}
	ret, err := f.prog.Run(opts)
	if err != nil {
		return 0, 0, fmt.Errorf("test run: %w", err)
	}
	got := opts.DataOut
	c := f.model.classify(frame)
	want := map[outcome]uint32{outPass: xdpPass, outDrop: xdpDrop, outForward: xdpTX, outICMPFwd: xdpTX, outEcho: xdpTX}[c.out]
	if c.out == outFragLater {
		switch ret {
		case xdpDrop:
			return ret, c.out, nil
		case xdpTX:
			for _, be := range c.backends {
				c.backend = be
				if checkTunnel(frame, got, c) == nil {
					return ret, c.out, nil
				}
			}
			return ret, c.out, fmt.Errorf("later fragment forwarded, but not as a tunnel of it to any of %v: %v", c.backends, checkTunnel(frame, got, c))
		}
		return ret, c.out, fmt.Errorf("verdict %s for a later fragment, want DROP (held) or TX (by the table)", xdpNames[ret])
	}
	if ret != want {
		return ret, c.out, fmt.Errorf("verdict %s, model says %s (%s)", xdpNames[ret], c.out, xdpNames[want])
	}
	switch c.out {
	case outPass:
		if !bytes.Equal(got, frame) {
			return ret, c.out, errors.New("passed frame was modified")
		}
	case outForward, outICMPFwd:
		return ret, c.out, checkTunnel(frame, got, c)
	case outEcho:
		return ret, c.out, checkEcho(frame, got, c)
	}
	return ret, c.out, nil
}

// checkTunnel: got is in's datagram, byte-identical, in a valid tunnel to
// the backend; the L2 tags are kept.
func checkTunnel(in, got []byte, c classification) error {
	if len(got) < c.l3 || !bytes.Equal(got[12:c.l3-2], in[12:c.l3-2]) {
		return errors.New("VLAN tags changed")
	}
	// Strip the tags so ParseTunnel sees one Ethernet header.
	flat := append(append([]byte{}, got[:12]...), got[c.l3-2:]...)
	tun, err := packet.ParseTunnel(flat)
	if err != nil {
		return fmt.Errorf("forwarded frame is not a valid tunnel: %w", err)
	}
	if !bytes.Equal(tun.Inner, in[c.l3:c.l3+c.tot]) {
		return errors.New("inner datagram differs from the input's")
	}
	if tun.Backend != c.backend {
		return fmt.Errorf("sent to %s, the VIP's backend is %s", tun.Backend, c.backend)
	}
	if !bytes.Equal(got[:6], testGW) {
		return errors.New("destination MAC is not the gateway's")
	}
	return nil
}

// checkEcho: got is exactly the reply to in.
func checkEcho(in, got []byte, c classification) error {
	if len(got) != len(in) {
		return fmt.Errorf("reply of %d bytes for a request of %d", len(got), len(in))
	}
	want := bytes.Clone(in)
	copy(want[0:6], in[6:12])
	copy(want[6:12], in[0:6])
	ip := want[c.l3:]
	var l4 []byte
	var src, dst netip.Addr
	if c.v4 {
		copy(ip[12:16], in[c.l3+16:c.l3+20])
		copy(ip[16:20], in[c.l3+12:c.l3+16])
		ip[8] = 64
		l4 = ip[20:c.tot]
		l4[0] = 0
		src, dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
	} else {
		copy(ip[8:24], in[c.l3+24:c.l3+40])
		copy(ip[24:40], in[c.l3+8:c.l3+24])
		ip[7] = 64
		l4 = ip[40:c.tot]
		l4[0] = 129
		src, dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	}
	// Checksum fields as sent: compared by validity below.
	gip := got[c.l3:]
	if c.v4 {
		copy(ip[10:12], gip[10:12])
	}
	hl := map[bool]int{true: 20, false: 40}[c.v4]
	copy(l4[2:4], gip[hl+2:hl+4])
	if !bytes.Equal(got, want) {
		return fmt.Errorf("echo reply differs\n got % x\nwant % x", got, want)
	}
	proto := uint8(packet.ProtoICMPv6)
	inSrc, inDst := dst, src
	if c.v4 {
		proto = packet.ProtoICMP
		if (packet.Checksum(in[c.l3:c.l3+20]) == 0) != (packet.Checksum(gip[:20]) == 0) {
			return errors.New("reply IPv4 header checksum validity differs from the request's")
		}
	}
	inOK := packet.L4ChecksumOK(inSrc, inDst, proto, in[c.l3+hl:c.l3+c.tot])
	outOK := packet.L4ChecksumOK(src, dst, proto, gip[hl:c.tot])
	if inOK != outOK {
		return fmt.Errorf("reply ICMP checksum valid=%v, request's valid=%v", outOK, inOK)
	}
	return nil
}

// fuzzSetup loads the forwarder with the fixture services and answers
// every echo (rate high enough never to limit a test). The UDP services
// on port 53 take fragments (no pool: handled here).
func fuzzSetup(t testing.TB) (*Datapath, *fuzzChecker) {
	d := newTestDatapath(t, Options{})
	st := fixtureState()
	st.Node.ICMPEchoRate = 1 << 24
	for k, s := range st.Services {
		if k.Port == 53 {
			s.Fragments = true
		}
	}
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	return d, &fuzzChecker{prog: d.Program(), model: newVerdictModel(st)}
}

// fuzzSeeds are well-formed packets of every kind the program handles,
// and near misses.
func fuzzSeeds() [][]byte {
	var seeds [][]byte
	other4, other6 := netip.MustParseAddr("10.9.9.9"), netip.MustParseAddr("fd00:9::9")
	for _, c := range []struct {
		src, dst netip.Addr
		ports    []uint16
	}{
		{client4, vip4, []uint16{80, 53, 9999}},
		{client6, vip6, []uint16{80, 53, 443}},
		{client4, other4, []uint16{80}},
		{client6, other6, []uint16{80}},
	} {
		for _, port := range c.ports {
			for _, proto := range []uint8{packet.ProtoTCP, packet.ProtoUDP} {
				f := packet.Flow{Src: c.src, Dst: c.dst, SrcPort: 40000, DstPort: port, Proto: proto, TCPFlags: packet.SYN,
					Payload: []byte("payload!"), SrcMAC: peerMAC, DstMAC: nodeMAC}
				seeds = append(seeds, f.Frame())
				f.VLAN = 5
				seeds = append(seeds, f.Frame())
				f.VLAN = 0
				if c.src.Is4() {
					f.IPv4Options = []byte{1, 1, 1, 0}
				} else {
					f.IPv6ExtHeaders = []packet.ExtHeader{{Type: 0, Body: make([]byte, 6)}, {Type: 44, Body: make([]byte, 6)}}
				}
				seeds = append(seeds, f.Frame())
				rev := packet.Flow{Src: c.src, Dst: c.dst, SrcPort: 40000, DstPort: port, Proto: proto}
				if c.src.Is4() {
					seeds = append(seeds,
						icmpError(rev, router4, packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 28),
						icmpError(rev, router4, packet.ICMPUnreach, 3, 0, 60),
						icmpError(rev, router4, packet.ICMPTimeExceeded, 0, 0, 28))
				} else {
					seeds = append(seeds,
						icmpError(rev, router6, packet.ICMPv6PacketTooBig, 0, 1280, 48),
						icmpError(rev, router6, packet.ICMPv6Unreach, 4, 0, 80),
						icmpError(rev, router6, packet.ICMPv6TimeExceeded, 0, 0, 48))
				}
			}
		}
		seeds = append(seeds, echoRequest(c.src, c.dst, 7, 9, []byte("ping data 0123456789")))
		// Fragments of UDP datagrams, first and later ones sharing ids, to
		// fragment-enabled services and others.
		for _, port := range []uint16{53, 80} {
			f := packet.Flow{Src: c.src, Dst: c.dst, SrcPort: 40000, DstPort: port, Proto: packet.ProtoUDP,
				Payload: bytes.Repeat([]byte("fragment"), 40), SrcMAC: peerMAC, DstMAC: nodeMAC}
			for _, fr := range packet.Fragment(f, 7, 128) {
				et := uint16(packet.EtherIPv4)
				if c.src.Is6() {
					et = packet.EtherIPv6
				}
				seeds = append(seeds, packet.Ethernet(nodeMAC, peerMAC, 0, et, fr))
			}
		}
	}
	return seeds
}

// mutate returns a random variation of seed (or, sometimes, random bytes).
func mutate(r *rand.Rand, seed []byte, seeds [][]byte) []byte {
	if r.IntN(50) == 0 { // random frame, IP ethertype half the time
		b := make([]byte, 14+r.IntN(200))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if r.IntN(2) == 0 {
			binary.BigEndian.PutUint16(b[12:], []uint16{0x0800, 0x86dd, 0x8100}[r.IntN(3)])
		}
		return b
	}
	b := bytes.Clone(seed)
	l3 := 14
	if be16(b[12:]) == 0x8100 {
		l3 = 18
	}
	v4 := be16(b[l3-2:]) == 0x0800
	n := 1 + r.IntN(3)
	for i := 0; i < n; i++ {
		switch r.IntN(14) {
		case 0: // truncate
			b = b[:r.IntN(len(b)+1)]
		case 1, 2: // flip a bit in the headers
			if len(b) > 0 {
				k := r.IntN(min(len(b), l3+100))
				b[k] ^= 1 << r.IntN(8)
			}
		case 3: // a random byte in the headers
			if len(b) > 0 {
				b[r.IntN(min(len(b), l3+100))] = byte(r.Uint32())
			}
		case 4: // IHL / version nibble
			if len(b) > l3 {
				b[l3] = byte(r.Uint32())
				if r.IntN(2) == 0 {
					b[l3] = b[l3]&0x0f | 0x40
				}
			}
		case 5: // total length / payload length
			k := l3 + 2
			if !v4 {
				k = l3 + 4
			}
			if len(b) > k+1 {
				v := uint16(r.Uint32())
				if r.IntN(2) == 0 {
					v = be16(b[k:]) + uint16(r.IntN(9)) - 4
				}
				binary.BigEndian.PutUint16(b[k:], v)
			}
		case 6: // TCP data offset (or whatever byte sits there)
			k := l3 + 20 + 12
			if !v4 {
				k = l3 + 40 + 12
			}
			if len(b) > k {
				b[k] = byte(r.IntN(16)) << 4
			}
		case 7: // fragment bits
			if v4 && len(b) > l3+7 {
				binary.BigEndian.PutUint16(b[l3+6:], uint16(r.Uint32())&0x3fff)
			} else if !v4 && len(b) >= l3+40 {
				b = insertExt(r, b, l3, 1, true)
			}
		case 8: // a long IPv6 extension-header chain
			if !v4 && len(b) >= l3+40 {
				b = insertExt(r, b, l3, 1+r.IntN(12), false)
			}
		case 9: // VLAN tags: add one (0x8100 or 0x88a8)
			tag := []byte{0x81, 0x00, 0, byte(r.IntN(4096))}
			if r.IntN(3) == 0 {
				tag[0], tag[1] = 0x88, 0xa8
			}
			if len(b) >= 12 {
				b = append(b[:12:12], append(tag, b[12:]...)...)
				l3 += 4
			}
		case 10: // trailing padding
			pad := make([]byte, r.IntN(64))
			for j := range pad {
				pad[j] = byte(r.Uint32())
			}
			b = append(b, pad...)
		case 11: // a random byte anywhere
			if len(b) > 0 {
				b[r.IntN(len(b))] = byte(r.Uint32())
			}
		case 12: // splice: the head of another seed
			o := seeds[r.IntN(len(seeds))]
			k := r.IntN(len(o) + 1)
			if k < len(b) {
				b = append(bytes.Clone(o[:k]), b[k:]...)
			}
		case 13: // nothing: the seed itself (checks the good path under load)
		}
	}
	return b
}

// insertExt puts k IPv6 extension headers (hop-by-hop, routing,
// destination, AH, fragment: random) after the fixed header of the IPv6
// packet at l3, fixing the payload length. frag forces one fragment header
// with a random offset / M flag.
func insertExt(r *rand.Rand, b []byte, l3, k int, frag bool) []byte {
	ip := b[l3:]
	next := ip[6]
	var chain []byte
	types := []uint8{0, 43, 60, 51, 44}
	for i := k - 1; i >= 0; i-- {
		t := types[r.IntN(len(types))]
		if frag {
			t = 44
		}
		var h []byte
		switch t {
		case 44:
			h = make([]byte, 8)
			binary.BigEndian.PutUint16(h[2:], uint16(r.Uint32()))
		case 51:
			units := 1 + r.IntN(3) // (len+2)*4 bytes
			h = make([]byte, (units+2)*4)
			h[1] = byte(units)
		default:
			units := r.IntN(3)
			h = make([]byte, (units+1)*8)
			h[1] = byte(units)
		}
		h[0] = next
		next = t
		chain = append(h, chain...)
	}
	out := append(bytes.Clone(b[:l3+40]), chain...)
	out = append(out, b[l3+40:]...)
	out[l3+6] = next
	binary.BigEndian.PutUint16(out[l3+4:], be16(out[l3+4:])+uint16(len(chain)))
	return out
}

// fuzzCount is the number of packets to run.
func fuzzCount(t *testing.T) int {
	if s := os.Getenv("XLB_FUZZ_PACKETS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			t.Fatalf("XLB_FUZZ_PACKETS=%q is not a count", s)
		}
		return n
	}
	if testing.Short() {
		return fuzzDefault / 10
	}
	return fuzzDefault
}

// TestPacketFuzz runs random and mutated packets through the program on
// all CPUs and fails on the first violations (up to 10 reported).
func TestPacketFuzz(t *testing.T) {
	d, fc := fuzzSetup(t)
	seeds := fuzzSeeds()
	// Every seed alone first: the model and the program agree on them.
	out := make([]byte, 4096)
	for i, s := range seeds {
		if _, _, err := fc.check(s, out); err != nil {
			t.Fatalf("seed %d: %v\n% x", i, err, s)
		}
	}
	total := fuzzCount(t)
	workers := runtime.GOMAXPROCS(0)
	var (
		next       atomic.Int64
		violations atomic.Int64
		mu         sync.Mutex
		byOutcome  [6]int64
		reports    []string
	)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w)+1, uint64(start.UnixNano())))
			out := make([]byte, 4096)
			var local [6]int64
			const batch = 1024
			for {
				lo := next.Add(batch) - batch
				if lo >= int64(total) || violations.Load() >= 10 {
					break
				}
				for i := lo; i < min(lo+batch, int64(total)); i++ {
					frame := mutate(r, seeds[r.IntN(len(seeds))], seeds)
					if len(frame) < 14 { // the test run needs an Ethernet header
						frame = append(frame, make([]byte, 14-len(frame))...)
					}
					if len(frame) > 3000 {
						frame = frame[:3000]
					}
					_, oc, err := fc.check(frame, out)
					local[oc]++
					if err != nil {
						if violations.Add(1) <= 10 {
							mu.Lock()
							reports = append(reports, fmt.Sprintf("%v\n  frame % x", err, frame))
							mu.Unlock()
						}
					}
				}
			}
			mu.Lock()
			for i := range local {
				byOutcome[i] += local[i]
			}
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	el := time.Since(start)
	var ran int64
	for _, n := range byOutcome {
		ran += n
	}
	t.Logf("%d packets in %v on %d workers (%.0f packets/s): pass %d, drop %d, forward %d, icmp-forward %d, echo %d, later fragment %d",
		ran, el.Round(time.Millisecond), workers, float64(ran)/el.Seconds(),
		byOutcome[outPass], byOutcome[outDrop], byOutcome[outForward], byOutcome[outICMPFwd], byOutcome[outEcho], byOutcome[outFragLater])
	for _, r := range reports {
		t.Error(r)
	}
	if v := violations.Load(); v > 0 {
		t.Fatalf("%d violations", v)
	}
	for o, n := range byOutcome {
		if ran > 10000 && n == 0 {
			t.Errorf("no packet ended as %s: the mutations miss a path", outcome(o))
		}
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fragments: first %d, forwarded by the table %d, held %d", st["frag_first"], st["frag_forward"], st["frag_held"])
	for _, n := range []string{"frag_first", "frag_forward", "frag_held"} {
		if ran > 10000 && st[n] == 0 {
			t.Errorf("%s stayed 0: the mutations miss a fragment path", n)
		}
	}
}

// FuzzForwarder is the native fuzz target (go test -fuzz FuzzForwarder),
// seeded with the fixtures; the same checks as TestPacketFuzz.
func FuzzForwarder(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	_, fc := fuzzSetup(f)
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 14 || len(frame) > 3000 {
			t.Skip()
		}
		out := make([]byte, len(frame)+256)
		if _, _, err := fc.check(frame, out); err != nil {
			t.Fatalf("%v\n% x", err, frame)
		}
	})
}

// TestReplaySynFlood replays the real spoofed SYN-flood capture through
// the program with a VIP at its destination (and the flood defence on):
// every packet gets the model's verdict, and the counters add up.
func TestReplaySynFlood(t *testing.T) {
	path := filepath.Join(testenv.TracesDir(t), "pkt.TCP.synflood.spoofed.pcap")
	fh, err := os.Open(path)
	if err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	defer fh.Close()
	pr, err := traces.NewPcapReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	dsts := map[VIPKey]int{}
	for {
		rec, err := pr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fr := bytes.Clone(rec.Data)
		frames = append(frames, fr)
		if tu, err := traces.ParseTuple(pr.LinkType(), fr); err == nil {
			dsts[VIPKey{Addr: tu.Dst, Port: tu.DstPort, Proto: tu.Proto}]++
		}
	}
	var victim VIPKey
	for k, n := range dsts {
		if n > dsts[victim] {
			victim = k
		}
	}
	if dsts[victim] < len(frames)/2 {
		t.Fatalf("no dominant destination in %s: %v", path, victim)
	}
	d := newTestDatapath(t, Options{ConntrackEntries: 1 << 14})
	st := fixtureState()
	st.Node.FloodSynRate = 10000
	backend := netip.MustParseAddr("10.0.1.99")
	st.Reals.Set(40, Real{Addr: backend, SvcID: 40, Active: true})
	st.Services[victim] = &Service{SvcID: 40, Encap: EncapGRE, Table: []uint32{40, 40, 40, 40, 40, 40, 40}}
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	fc := &fuzzChecker{prog: d.Program(), model: newVerdictModel(st)}
	out := make([]byte, 4096)
	var counts [5]uint64
	var tx uint64
	for i, fr := range frames {
		if len(fr) < 14 {
			continue
		}
		ret, oc, err := fc.check(fr, out)
		if err != nil {
			t.Fatalf("packet %d: %v\n% x", i, err, fr)
		}
		counts[oc]++
		if ret == xdpTX {
			tx++
		}
	}
	s, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := d.ServiceCounters(40)
	fwd := counts[outForward]
	t.Logf("%s: %d packets to %s: forwarded %d, passed %d, dropped %d; counters %v", filepath.Base(path), len(frames), victim,
		fwd, counts[outPass], counts[outDrop], s)
	switch {
	case fwd < uint64(len(frames))/2:
		t.Fatalf("only %d of %d packets forwarded", fwd, len(frames))
	case s["forward_tx"] != tx:
		t.Fatalf("forward_tx %d, XDP_TX verdicts %d", s["forward_tx"], tx)
	case sc.Packets != fwd:
		t.Fatalf("service packets %d, forwarded %d", sc.Packets, fwd)
	case s["ct_hit"]+s["ct_remote_hit"]+s["ct_miss"] != fwd:
		t.Fatalf("conntrack hits+misses %d, forwarded %d", s["ct_hit"]+s["ct_remote_hit"]+s["ct_miss"], fwd)
	case s["flood_untracked"] > sc.NewFlows || sc.NewFlows > fwd:
		t.Fatalf("new flows %d, untracked %d, forwarded %d", sc.NewFlows, s["flood_untracked"], fwd)
	}
}
