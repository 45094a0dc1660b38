package packet

import (
	"encoding/binary"
	"net/netip"
)

// ICMP protocol numbers and the message types xlb handles (docs/ARCHITECTURE.md, ICMP).
const (
	ProtoICMP   = 1
	ProtoICMPv6 = 58

	ICMPEchoReply    = 0
	ICMPUnreach      = 3
	ICMPEcho         = 8
	ICMPTimeExceeded = 11
	ICMPFragNeeded   = 4 // code of ICMPUnreach

	ICMPv6Unreach      = 1
	ICMPv6PacketTooBig = 2
	ICMPv6TimeExceeded = 3
	ICMPv6EchoRequest  = 128
	ICMPv6EchoReply    = 129
)

// ICMPv4 returns an ICMP message (type, code, the 4 bytes after the
// checksum, body) with a correct checksum.
func ICMPv4(typ, code uint8, rest uint32, body []byte) []byte {
	b := icmpHeader(typ, code, rest, body)
	binary.BigEndian.PutUint16(b[2:], Checksum(b))
	return b
}

// ICMPv6 returns an ICMPv6 message from src to dst with a correct checksum
// (over the IPv6 pseudo-header).
func ICMPv6(src, dst netip.Addr, typ, code uint8, rest uint32, body []byte) []byte {
	b := icmpHeader(typ, code, rest, body)
	binary.BigEndian.PutUint16(b[2:], pseudoChecksum(src, dst, ProtoICMPv6, b))
	return b
}

func icmpHeader(typ, code uint8, rest uint32, body []byte) []byte {
	b := make([]byte, 8+len(body))
	b[0], b[1] = typ, code
	binary.BigEndian.PutUint32(b[4:], rest)
	copy(b[8:], body)
	return b
}

// L4ChecksumOK tells whether seg (TCP, UDP or ICMPv6 from src to dst, or
// ICMPv4 when proto is ProtoICMP) carries a correct checksum.
func L4ChecksumOK(src, dst netip.Addr, proto uint8, seg []byte) bool {
	if proto == ProtoICMP {
		return Checksum(seg) == 0
	}
	var s uint32
	s = sum(src.AsSlice(), s)
	s = sum(dst.AsSlice(), s)
	s += uint32(proto) + uint32(len(seg))
	return fold(sum(seg, s)) == 0xffff
}
