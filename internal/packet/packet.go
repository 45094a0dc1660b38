// Package packet builds and dissects the frames xlb handles: Ethernet
// (+802.1Q), IPv4 (with options), IPv6 (with extension headers), TCP, UDP,
// and the GRE and IP-in-IP encapsulations. Checksums are computed, so built
// frames are what a real stack would send. Used by tests, the fuzzer and
// `xlbctl explain`; nothing here is on the packet path but SplitFrame,
// with which xlbd fragments the datagrams the forwarder hands it.
package packet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// IP protocol numbers and Ethertypes used here.
const (
	ProtoIPIP = 4
	ProtoTCP  = 6
	ProtoUDP  = 17
	ProtoIPv6 = 41
	ProtoGRE  = 47

	EtherIPv4 = 0x0800
	EtherIPv6 = 0x86DD
	EtherVLAN = 0x8100
)

// TCP flag bits.
const (
	FIN = 0x01
	SYN = 0x02
	RST = 0x04
	PSH = 0x08
	ACK = 0x10
)

// Flow describes a TCP or UDP packet to build.
type Flow struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	Proto            uint8 // ProtoTCP or ProtoUDP
	TCPFlags         uint8 // default ACK for TCP
	Payload          []byte
	TOS              uint8
	TTL              uint8  // default 64
	VLAN             uint16 // 0: untagged
	IPv4Options      []byte // multiple of 4 bytes
	IPv6ExtHeaders   []ExtHeader
	SrcMAC, DstMAC   [6]byte
}

// ExtHeader is an IPv6 extension header (type and body after the 2-byte
// next-header/length prefix; body length+2 must be a multiple of 8).
type ExtHeader struct {
	Type uint8
	Body []byte
}

// L4 returns the TCP or UDP segment of f with a correct checksum.
func (f Flow) L4() []byte {
	var seg []byte
	switch f.Proto {
	case ProtoTCP:
		seg = make([]byte, 20+len(f.Payload))
		binary.BigEndian.PutUint16(seg[0:], f.SrcPort)
		binary.BigEndian.PutUint16(seg[2:], f.DstPort)
		binary.BigEndian.PutUint32(seg[4:], 1000)
		binary.BigEndian.PutUint32(seg[8:], 2000)
		seg[12] = 5 << 4
		flags := f.TCPFlags
		if flags == 0 {
			flags = ACK
		}
		seg[13] = flags
		binary.BigEndian.PutUint16(seg[14:], 65535)
		copy(seg[20:], f.Payload)
		binary.BigEndian.PutUint16(seg[16:], pseudoChecksum(f.Src, f.Dst, ProtoTCP, seg))
	default:
		seg = make([]byte, 8+len(f.Payload))
		binary.BigEndian.PutUint16(seg[0:], f.SrcPort)
		binary.BigEndian.PutUint16(seg[2:], f.DstPort)
		binary.BigEndian.PutUint16(seg[4:], uint16(len(seg)))
		copy(seg[8:], f.Payload)
		c := pseudoChecksum(f.Src, f.Dst, ProtoUDP, seg)
		if c == 0 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(seg[6:], c)
	}
	return seg
}

// IP returns the IP datagram of f.
func (f Flow) IP() []byte {
	ttl := f.TTL
	if ttl == 0 {
		ttl = 64
	}
	l4 := f.L4()
	if f.Src.Is4() {
		return IPv4(f.Src, f.Dst, f.Proto, f.TOS, ttl, f.IPv4Options, l4)
	}
	return IPv6(f.Src, f.Dst, f.Proto, f.TOS, ttl, f.IPv6ExtHeaders, l4)
}

// Frame returns the Ethernet frame of f.
func (f Flow) Frame() []byte {
	et := uint16(EtherIPv4)
	if f.Src.Is6() {
		et = EtherIPv6
	}
	return Ethernet(f.DstMAC, f.SrcMAC, f.VLAN, et, f.IP())
}

// Ethernet prepends an Ethernet header (and an 802.1Q tag if vlan != 0).
func Ethernet(dst, src [6]byte, vlan uint16, ethertype uint16, payload []byte) []byte {
	b := make([]byte, 0, 18+len(payload))
	b = append(b, dst[:]...)
	b = append(b, src[:]...)
	if vlan != 0 {
		b = binary.BigEndian.AppendUint16(b, EtherVLAN)
		b = binary.BigEndian.AppendUint16(b, vlan)
	}
	b = binary.BigEndian.AppendUint16(b, ethertype)
	return append(b, payload...)
}

// IPv4 returns an IPv4 datagram (DF clear, ID 0) with a correct checksum.
func IPv4(src, dst netip.Addr, proto, tos, ttl uint8, options, payload []byte) []byte {
	hl := 20 + len(options)
	b := make([]byte, hl+len(payload))
	b[0] = 0x40 | uint8(hl/4)
	b[1] = tos
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	b[8] = ttl
	b[9] = proto
	s, d := src.As4(), dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	copy(b[20:], options)
	binary.BigEndian.PutUint16(b[10:], Checksum(b[:hl]))
	copy(b[hl:], payload)
	return b
}

// IPv6 returns an IPv6 datagram with the given extension headers.
func IPv6(src, dst netip.Addr, proto, tc, hop uint8, ext []ExtHeader, payload []byte) []byte {
	var exts []byte
	for i, e := range ext {
		next := proto
		if i+1 < len(ext) {
			next = ext[i+1].Type
		}
		l := 2 + len(e.Body)
		exts = append(exts, next, uint8(l/8-1))
		if e.Type == 51 { // AH counts 4-byte units minus 2
			exts[len(exts)-1] = uint8(l/4 - 2)
		}
		exts = append(exts, e.Body...)
	}
	first := proto
	if len(ext) > 0 {
		first = ext[0].Type
	}
	b := make([]byte, 40, 40+len(exts)+len(payload))
	binary.BigEndian.PutUint32(b[0:], 6<<28|uint32(tc)<<20)
	binary.BigEndian.PutUint16(b[4:], uint16(len(exts)+len(payload)))
	b[6] = first
	b[7] = hop
	s, d := src.As16(), dst.As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	b = append(b, exts...)
	return append(b, payload...)
}

// Checksum is the Internet checksum of b.
func Checksum(b []byte) uint16 {
	return ^fold(sum(b, 0))
}

func sum(b []byte, s uint32) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

func pseudoChecksum(src, dst netip.Addr, proto uint8, seg []byte) uint16 {
	var s uint32
	s = sum(src.AsSlice(), s)
	s = sum(dst.AsSlice(), s)
	s += uint32(proto) + uint32(len(seg))
	return ^fold(sum(seg, s))
}

// Tunnel is a decoded encapsulated frame.
type Tunnel struct {
	VLAN     uint16
	Outer    netip.Addr // outer source
	Backend  netip.Addr // outer destination
	Kind     string     // "gre" or "ipip"
	OuterTTL uint8
	OuterTOS uint8
	DF       bool
	Label    uint32 // IPv6 flow label
	Inner    []byte // the inner IP datagram, exactly as carried
}

// ErrNotTunnel is returned by ParseTunnel for a frame that is not GRE or IPIP.
var ErrNotTunnel = errors.New("not a GRE or IP-in-IP frame")

// ParseTunnel decodes an encapsulated Ethernet frame, verifying the outer
// IPv4 checksum and the lengths.
func ParseTunnel(frame []byte) (*Tunnel, error) {
	t := &Tunnel{}
	if len(frame) < 14 {
		return nil, errors.New("short frame")
	}
	et := binary.BigEndian.Uint16(frame[12:])
	off := 14
	if et == EtherVLAN {
		if len(frame) < 18 {
			return nil, errors.New("short vlan frame")
		}
		t.VLAN = binary.BigEndian.Uint16(frame[14:]) & 0x0fff
		et = binary.BigEndian.Uint16(frame[16:])
		off = 18
	}
	ip := frame[off:]
	var proto uint8
	var rest []byte
	switch et {
	case EtherIPv4:
		if len(ip) < 20 || ip[0]>>4 != 4 {
			return nil, errors.New("bad outer ipv4")
		}
		hl := int(ip[0]&0xf) * 4
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		if hl < 20 || tot < hl || tot > len(ip) {
			return nil, fmt.Errorf("outer ipv4 lengths: hl %d tot %d have %d", hl, tot, len(ip))
		}
		if Checksum(ip[:hl]) != 0 {
			return nil, errors.New("outer ipv4 checksum wrong")
		}
		t.OuterTOS, t.OuterTTL, proto = ip[1], ip[8], ip[9]
		t.DF = ip[6]&0x40 != 0
		t.Outer = netip.AddrFrom4([4]byte(ip[12:16]))
		t.Backend = netip.AddrFrom4([4]byte(ip[16:20]))
		rest = ip[hl:tot]
	case EtherIPv6:
		if len(ip) < 40 || ip[0]>>4 != 6 {
			return nil, errors.New("bad outer ipv6")
		}
		pl := int(binary.BigEndian.Uint16(ip[4:]))
		if 40+pl > len(ip) {
			return nil, errors.New("outer ipv6 payload length beyond frame")
		}
		w := binary.BigEndian.Uint32(ip[0:])
		t.OuterTOS, t.Label = uint8(w>>20), w&0xfffff
		proto, t.OuterTTL = ip[6], ip[7]
		t.Outer = netip.AddrFrom16([16]byte(ip[8:24]))
		t.Backend = netip.AddrFrom16([16]byte(ip[24:40]))
		rest = ip[40 : 40+pl]
	default:
		return nil, ErrNotTunnel
	}
	switch proto {
	case ProtoGRE:
		if len(rest) < 4 || binary.BigEndian.Uint16(rest) != 0 {
			return nil, errors.New("bad gre header")
		}
		inner := binary.BigEndian.Uint16(rest[2:])
		t.Kind, t.Inner = "gre", rest[4:]
		if (inner == EtherIPv4) != (len(t.Inner) > 0 && t.Inner[0]>>4 == 4) {
			return nil, errors.New("gre protocol does not match the inner version")
		}
	case ProtoIPIP, ProtoIPv6:
		t.Kind, t.Inner = "ipip", rest
		if (proto == ProtoIPIP) != (len(t.Inner) > 0 && t.Inner[0]>>4 == 4) {
			return nil, errors.New("ipip protocol does not match the inner version")
		}
	default:
		return nil, ErrNotTunnel
	}
	return t, nil
}
