package api

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/packet"
)

func TestDescribeFrame(t *testing.T) {
	v6 := packet.Flow{
		Src: netip.MustParseAddr("2001:db8::9"), Dst: netip.MustParseAddr("2001:db8::100"),
		SrcPort: 5353, DstPort: 53, Proto: packet.ProtoUDP, Payload: []byte("abcd"), VLAN: 7,
		IPv6ExtHeaders: []packet.ExtHeader{{Type: 60, Body: make([]byte, 6)}},
	}
	inner := packet.Flow{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("10.0.0.100"),
		SrcPort: 1, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN | packet.ACK}
	ipip := packet.Ethernet([6]byte{2}, [6]byte{4}, 0, packet.EtherIPv6,
		packet.IPv6(netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8:1::1"), packet.ProtoIPIP, 0, 64, nil, inner.IP()))
	for _, tc := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"udp6 with vlan and dst options", v6.Frame(), `eth 00:00:00:00:00:00 > 00:00:00:00:00:00 type 0x8100
vlan 7
ipv6 2001:db8::9 > 2001:db8::100 next udp hlim 64 len 20 flowlabel 0x00000 ext dst
udp 5353 > 53 len 12`},
		{"4in6", ipip, `eth 04:00:00:00:00:00 > 02:00:00:00:00:00 type 0x86dd
ipv6 2001:db8::1 > 2001:db8:1::1 next ipip hlim 64 len 40 flowlabel 0x00000
ipv4 192.0.2.1 > 10.0.0.100 proto tcp ttl 64 len 40
tcp 1 > 80 [S.] seq 1000`},
		{"short", []byte{1, 2, 3}, "truncated ethernet (3 bytes)"},
		{"cut tcp", inner.Frame()[:40], `eth 00:00:00:00:00:00 > 00:00:00:00:00:00 type 0x0800
ipv4 192.0.2.1 > 10.0.0.100 proto tcp ttl 64 len 40
truncated tcp`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(DescribeFrame(tc.frame), "\n")
			if got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func FuzzDescribeFrame(f *testing.F) {
	f.Add(packet.Flow{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("10.0.0.100"),
		SrcPort: 1, DstPort: 80, Proto: packet.ProtoTCP}.Frame())
	f.Fuzz(func(t *testing.T, b []byte) { DescribeFrame(b) })
}

func TestTCPFlags(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint8
		str  string
	}{
		{"S", 0x02, "S"}, {"SA", 0x12, "S."}, {"s.", 0x12, "S."}, {"FA", 0x11, "F."}, {"R", 0x04, "R"},
		{"0x12", 0x12, "S."}, {"18", 0x12, "S."}, {"", 0, "none"}, {"PA", 0x18, "P."},
	} {
		got, err := ParseTCPFlags(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseTCPFlags(%q) = %#x, %v; want %#x", tc.in, got, err, tc.want)
		}
		if s := TCPFlagsString(got); s != tc.str {
			t.Errorf("TCPFlagsString(%#x) = %q, want %q", got, s, tc.str)
		}
	}
	for _, bad := range []string{"X", "300", "0xfff"} {
		if _, err := ParseTCPFlags(bad); err == nil {
			t.Errorf("ParseTCPFlags(%q) accepted", bad)
		}
	}
}
