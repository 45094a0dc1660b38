package decap

import (
	"encoding/binary"
	"net/netip"
)

// A small packet builder for the fixtures and the namespace tests: each
// function returns fresh bytes with correct lengths and checksums, and a
// frame is the concatenation of its layers.

const (
	etherIPv4   = 0x0800
	etherIPv6   = 0x86DD
	etherARP    = 0x0806
	ether8021Q  = 0x8100
	ether8021AD = 0x88A8

	protoIPIP = 4
	protoTCP  = 6
	protoUDP  = 17
	protoIPv6 = 41
	protoGRE  = 47
)

var (
	macDst = []byte{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}
	macSrc = []byte{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}
)

type vlanTag struct {
	tpid uint16
	tci  uint16
}

// ethHdr builds an Ethernet header with the given tags (outermost first)
// and ethertype.
func ethHdr(ethertype uint16, tags ...vlanTag) []byte {
	b := append(append([]byte{}, macDst...), macSrc...)
	for _, t := range tags {
		b = binary.BigEndian.AppendUint16(b, t.tpid)
		b = binary.BigEndian.AppendUint16(b, t.tci)
	}
	return binary.BigEndian.AppendUint16(b, ethertype)
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// csumAdd adds b to a ones' complement sum; csumFold finishes it.
func csumAdd(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	return sum
}

func csumFold(sum uint32) uint16 {
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// ip4 describes an IPv4 header; zero values give IHL 5, DF, TTL 64.
type ip4 struct {
	src, dst netip.Addr
	proto    uint8
	options  []byte // padded to 4 bytes by the caller
	frag     uint16 // flags and offset; 0 means DF
	totLen   int    // overrides the total length when non-zero
	version  uint8  // overrides 4 when non-zero
	ihl      uint8  // overrides the computed IHL when non-zero
	badCsum  bool
}

func (h ip4) build(payload []byte) []byte {
	hlen := 20 + len(h.options)
	b := make([]byte, hlen, hlen+len(payload))
	ver, ihl := h.version, h.ihl
	if ver == 0 {
		ver = 4
	}
	if ihl == 0 {
		ihl = uint8(hlen / 4)
	}
	b[0] = ver<<4 | ihl
	tot := hlen + len(payload)
	if h.totLen != 0 {
		tot = h.totLen
	}
	binary.BigEndian.PutUint16(b[2:], uint16(tot))
	binary.BigEndian.PutUint16(b[4:], 0x1234)
	frag := h.frag
	if frag == 0 {
		frag = 0x4000
	}
	binary.BigEndian.PutUint16(b[6:], frag)
	b[8] = 64
	b[9] = h.proto
	copy(b[12:16], h.src.AsSlice())
	copy(b[16:20], h.dst.AsSlice())
	copy(b[20:], h.options)
	sum := csumFold(csumAdd(0, b))
	if h.badCsum {
		sum ^= 0x5555
	}
	binary.BigEndian.PutUint16(b[10:], sum)
	return append(b, payload...)
}

// ip6 describes an IPv6 header without extension headers.
type ip6 struct {
	src, dst netip.Addr
	next     uint8
	plen     int // overrides the payload length when non-zero
	version  uint8
}

func (h ip6) build(payload []byte) []byte {
	b := make([]byte, 40, 40+len(payload))
	ver := h.version
	if ver == 0 {
		ver = 6
	}
	b[0] = ver << 4
	plen := len(payload)
	if h.plen != 0 {
		plen = h.plen
	}
	binary.BigEndian.PutUint16(b[4:], uint16(plen))
	b[6] = h.next
	b[7] = 64
	copy(b[8:24], h.src.AsSlice())
	copy(b[24:40], h.dst.AsSlice())
	return append(b, payload...)
}

// GRE flag bits (first 16 bits of the header).
const (
	greC = 0x8000
	greR = 0x4000
	greK = 0x2000
	greS = 0x1000
)

// greHdr builds a GRE header: flags (version in the low 3 bits), protocol
// type, then one 4-byte word per optional field (C, K, S order) given.
func greHdr(flags, proto uint16, opts ...uint32) []byte {
	b := binary.BigEndian.AppendUint16(nil, flags)
	b = binary.BigEndian.AppendUint16(b, proto)
	for _, o := range opts {
		b = binary.BigEndian.AppendUint32(b, o)
	}
	return b
}

// pseudoSum is the ones' complement sum of the L4 pseudo header.
func pseudoSum(src, dst netip.Addr, proto uint8, length int) uint32 {
	sum := csumAdd(0, src.AsSlice())
	sum = csumAdd(sum, dst.AsSlice())
	return sum + uint32(proto) + uint32(length)
}

// udp builds a UDP datagram with its checksum over the pseudo header.
func udp(src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	b = append(b, payload...)
	sum := csumFold(csumAdd(pseudoSum(src, dst, protoUDP, len(b)), b))
	if sum == 0 {
		sum = 0xffff
	}
	binary.BigEndian.PutUint16(b[6:], sum)
	return b
}

// tcpSyn builds a 20-byte TCP SYN segment with its checksum.
func tcpSyn(src, dst netip.Addr, sport, dport uint16) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint32(b[4:], 0x01020304)
	b[12] = 5 << 4
	b[13] = 0x02
	binary.BigEndian.PutUint16(b[14:], 64240)
	binary.BigEndian.PutUint16(b[16:], csumFold(csumAdd(pseudoSum(src, dst, protoTCP, len(b)), b)))
	return b
}

// udp4 and udp6 build a whole inner datagram.
func udp4(src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	return ip4{src: src, dst: dst, proto: protoUDP}.build(udp(src, dst, sport, dport, payload))
}

func udp6(src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	return ip6{src: src, dst: dst, next: protoUDP}.build(udp(src, dst, sport, dport, payload))
}
