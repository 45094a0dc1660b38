package api

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// DescribeFrame summarises an Ethernet frame one header per line, outermost
// first, the way tcpdump would name them: Ethernet, VLAN tags, IPv4/IPv6,
// GRE, and the tunnelled IP packet with its TCP or UDP header. A header cut
// short ends the list with a "truncated" line. It never fails.
func DescribeFrame(frame []byte) []string {
	var out []string
	if len(frame) < 14 {
		return []string{fmt.Sprintf("truncated ethernet (%d bytes)", len(frame))}
	}
	et := binary.BigEndian.Uint16(frame[12:14])
	out = append(out, fmt.Sprintf("eth %s > %s type 0x%04x", net.HardwareAddr(frame[6:12]), net.HardwareAddr(frame[0:6]), et))
	b := frame[14:]
	for et == 0x8100 || et == 0x88a8 {
		if len(b) < 4 {
			return append(out, "truncated vlan")
		}
		out = append(out, fmt.Sprintf("vlan %d", binary.BigEndian.Uint16(b[0:2])&0x0fff))
		et = binary.BigEndian.Uint16(b[2:4])
		b = b[4:]
	}
	switch et {
	case 0x0800:
		return describeIP(out, 4, b, 0)
	case 0x86dd:
		return describeIP(out, 6, b, 0)
	}
	return out
}

// IP protocol numbers DescribeFrame knows.
const (
	ipprotoIPIP = 4
	ipprotoTCP  = 6
	ipprotoUDP  = 17
	ipprotoIPv6 = 41
	ipprotoGRE  = 47
)

func protoName(p uint8) string {
	switch p {
	case ipprotoIPIP:
		return "ipip"
	case ipprotoTCP:
		return "tcp"
	case ipprotoUDP:
		return "udp"
	case ipprotoIPv6:
		return "ipv6"
	case ipprotoGRE:
		return "gre"
	case 1:
		return "icmp"
	case 58:
		return "icmpv6"
	}
	return fmt.Sprint(p)
}

// describeIP appends the IP header of version v at b and what it carries;
// depth bounds tunnel nesting.
func describeIP(out []string, v int, b []byte, depth int) []string {
	if depth > 3 {
		return out
	}
	var (
		proto   uint8
		payload []byte
		line    string
	)
	switch v {
	case 4:
		line, proto, payload = describeIPv4(b)
	case 6:
		line, proto, payload = describeIPv6(b)
	}
	if line != "" {
		out = append(out, line)
	}
	if strings.HasPrefix(line, "truncated") {
		return out
	}
	switch proto {
	case ipprotoIPIP:
		return describeIP(out, 4, payload, depth+1)
	case ipprotoIPv6:
		return describeIP(out, 6, payload, depth+1)
	case ipprotoGRE:
		return describeGRE(out, payload, depth)
	case ipprotoTCP:
		if len(payload) < 20 {
			return append(out, "truncated tcp")
		}
		out = append(out, fmt.Sprintf("tcp %d > %d [%s] seq %d",
			binary.BigEndian.Uint16(payload[0:2]), binary.BigEndian.Uint16(payload[2:4]),
			TCPFlagsString(payload[13]), binary.BigEndian.Uint32(payload[4:8])))
	case ipprotoUDP:
		if len(payload) < 8 {
			return append(out, "truncated udp")
		}
		out = append(out, fmt.Sprintf("udp %d > %d len %d",
			binary.BigEndian.Uint16(payload[0:2]), binary.BigEndian.Uint16(payload[2:4]), binary.BigEndian.Uint16(payload[4:6])))
	}
	return out
}

// describeIPv4 describes an IPv4 header and returns its protocol and
// payload (line "truncated ..." when it is cut short).
func describeIPv4(b []byte) (string, uint8, []byte) {
	if len(b) < 20 || b[0]>>4 != 4 {
		return "truncated ipv4", 0, nil
	}
	ihl := int(b[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(b[2:4]))
	if ihl < 20 || len(b) < ihl {
		return "truncated ipv4", 0, nil
	}
	src, _ := netip.AddrFromSlice(b[12:16])
	dst, _ := netip.AddrFromSlice(b[16:20])
	proto := b[9]
	line := fmt.Sprintf("ipv4 %s > %s proto %s ttl %d len %d", src, dst, protoName(proto), b[8], total)
	if b[6]&0x40 != 0 {
		line += " df"
	}
	if off := binary.BigEndian.Uint16(b[6:8]); off&0x3fff != 0 {
		line += " fragment"
	}
	end := min(max(total, ihl), len(b))
	return line, proto, b[ihl:end]
}

// describeIPv6 describes an IPv6 header with its extension headers
// (hop-by-hop, routing, destination options, fragment) and returns the
// upper protocol and its payload.
func describeIPv6(b []byte) (string, uint8, []byte) {
	if len(b) < 40 || b[0]>>4 != 6 {
		return "truncated ipv6", 0, nil
	}
	src, _ := netip.AddrFromSlice(b[8:24])
	dst, _ := netip.AddrFromSlice(b[24:40])
	proto := b[6]
	plen := int(binary.BigEndian.Uint16(b[4:6]))
	flow := binary.BigEndian.Uint32(b[0:4]) & 0xfffff
	payload := b[40:min(40+plen, len(b))]
	var ext []string
	for range 8 {
		if proto != 0 && proto != 43 && proto != 60 && proto != 44 {
			break
		}
		if len(payload) < 8 {
			return "truncated ipv6 extension header", 0, nil
		}
		n := (int(payload[1]) + 1) * 8
		if proto == 44 {
			n = 8
			ext = append(ext, "frag")
		} else {
			ext = append(ext, map[uint8]string{0: "hop", 43: "rt", 60: "dst"}[proto])
		}
		if len(payload) < n {
			return "truncated ipv6 extension header", 0, nil
		}
		proto, payload = payload[0], payload[n:]
	}
	line := fmt.Sprintf("ipv6 %s > %s next %s hlim %d len %d flowlabel 0x%05x", src, dst, protoName(proto), b[7], plen, flow)
	if len(ext) > 0 {
		line += " ext " + strings.Join(ext, ",")
	}
	return line, proto, payload
}

// describeGRE describes a GRE header and what it carries.
func describeGRE(out []string, payload []byte, depth int) []string {
	if len(payload) < 4 {
		return append(out, "truncated gre")
	}
	flags := binary.BigEndian.Uint16(payload[0:2])
	et := binary.BigEndian.Uint16(payload[2:4])
	out = append(out, fmt.Sprintf("gre proto 0x%04x", et))
	n := 4
	for _, bit := range []uint16{0x8000, 0x2000, 0x1000} { // checksum, key, sequence
		if flags&bit != 0 {
			n += 4
		}
	}
	if len(payload) < n {
		return append(out, "truncated gre")
	}
	switch et {
	case 0x0800:
		return describeIP(out, 4, payload[n:], depth+1)
	case 0x86dd:
		return describeIP(out, 6, payload[n:], depth+1)
	}
	return out
}

// TCP flag letters, tcpdump's, in bit order.
var tcpFlagLetters = []struct {
	bit    uint8
	letter byte
}{{0x01, 'F'}, {0x02, 'S'}, {0x04, 'R'}, {0x08, 'P'}, {0x10, '.'}, {0x20, 'U'}, {0x40, 'E'}, {0x80, 'W'}}

// TCPFlagsString formats TCP flags tcpdump style: "S", "S.", "F.", "R";
// "none" when no flag is set.
func TCPFlagsString(f uint8) string {
	var b []byte
	for _, l := range tcpFlagLetters {
		if f&l.bit != 0 && l.letter != '.' {
			b = append(b, l.letter)
		}
	}
	if f&0x10 != 0 {
		b = append(b, '.')
	}
	if len(b) == 0 {
		return "none"
	}
	return string(b)
}

// ParseTCPFlags parses flags written as letters (tcpdump's, plus A for ACK:
// "S", "SA", "S.", "FA", "R") or as a number ("0x12", "18").
func ParseTCPFlags(s string) (uint8, error) {
	if s == "" || s == "none" {
		return 0, nil
	}
	if s[0] >= '0' && s[0] <= '9' {
		n, err := strconv.ParseUint(s, 0, 8)
		if err != nil {
			return 0, fmt.Errorf("tcp flags %q: not a number 0..255", s)
		}
		return uint8(n), nil
	}
	var f uint8
	for _, c := range strings.ToUpper(s) {
		switch c {
		case 'F':
			f |= 0x01
		case 'S':
			f |= 0x02
		case 'R':
			f |= 0x04
		case 'P':
			f |= 0x08
		case 'A', '.':
			f |= 0x10
		case 'U':
			f |= 0x20
		case 'E':
			f |= 0x40
		case 'W', 'C':
			f |= 0x80
		default:
			return 0, fmt.Errorf("tcp flags %q: unknown flag %q (letters F S R P A U E W, or a number)", s, c)
		}
	}
	return f, nil
}
