package traces_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/internal/testenv/traces"
)

// Packet builders for the parser tests. Checksums are left zero: the
// parser does not read them.

func ipv4(src, dst string, proto uint8, frag uint16, opts int, l4 []byte) []byte {
	ihl := 20 + opts
	b := make([]byte, ihl, ihl+len(l4))
	b[0] = 0x40 | byte(ihl/4)
	binary.BigEndian.PutUint16(b[2:], uint16(ihl+len(l4)))
	binary.BigEndian.PutUint16(b[6:], frag)
	b[8], b[9] = 64, proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	return append(b, l4...)
}

func ipv6(src, dst string, next uint8, payload []byte) []byte {
	b := make([]byte, 40, 40+len(payload))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(payload)))
	b[6], b[7] = next, 64
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	return append(b, payload...)
}

func tcp(sport, dport uint16) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	b[12] = 5 << 4
	b[13] = 0x02 // SYN
	return b
}

func udp(sport, dport uint16) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], 8)
	return b
}

func ether(etype uint16, vlans int, l3 []byte) []byte {
	b := make([]byte, 12, 14+4*vlans+len(l3))
	for range vlans {
		b = binary.BigEndian.AppendUint16(b, 0x8100)
		b = binary.BigEndian.AppendUint16(b, 42)
	}
	b = binary.BigEndian.AppendUint16(b, etype)
	return append(b, l3...)
}

func tuple(src, dst string, sport, dport uint16, proto uint8) maglev.Tuple {
	return maglev.Tuple{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst),
		SrcPort: sport, DstPort: dport, Proto: proto}
}

func TestParseTuple(t *testing.T) {
	v4tcp := ipv4("198.51.100.1", "192.0.2.10", 6, 0, 0, tcp(40000, 80))
	v6udp := ipv6("2001:db8::1", "2001:db8::2", 17, udp(5353, 53))
	// Hop-by-hop (8 bytes), then a first fragment (offset 0, M set), then TCP.
	ext := append([]byte{44, 0, 1, 4, 0, 0, 0, 0}, []byte{6, 0, 0, 1, 0, 0, 0, 7}...)
	v6ext := ipv6("2001:db8::1", "2001:db8::2", 0, append(ext, tcp(1234, 443)...))
	sll := append(make([]byte, 14), 0x08, 0x00)
	sll2 := append([]byte{0x86, 0xdd}, make([]byte, 18)...)
	tests := []struct {
		name  string
		link  uint32
		frame []byte
		want  maglev.Tuple
		err   error
	}{
		{"ethernet ipv4 tcp", traces.LinkTypeEthernet, ether(0x0800, 0, v4tcp), tuple("198.51.100.1", "192.0.2.10", 40000, 80, 6), nil},
		{"ethernet padding", traces.LinkTypeEthernet, append(ether(0x0800, 0, ipv4("10.0.0.1", "10.0.0.2", 17, 0, 0, udp(1, 2))), make([]byte, 18)...),
			tuple("10.0.0.1", "10.0.0.2", 1, 2, 17), nil},
		{"ipv4 options", traces.LinkTypeEthernet, ether(0x0800, 0, ipv4("10.0.0.1", "10.0.0.2", 17, 0, 8, udp(7, 9))), tuple("10.0.0.1", "10.0.0.2", 7, 9, 17), nil},
		{"two vlan tags", traces.LinkTypeEthernet, ether(0x0800, 2, v4tcp), tuple("198.51.100.1", "192.0.2.10", 40000, 80, 6), nil},
		{"four vlan tags", traces.LinkTypeEthernet, ether(0x0800, 4, v4tcp), maglev.Tuple{}, traces.ErrMalformed},
		{"ethernet ipv6 udp", traces.LinkTypeEthernet, ether(0x86dd, 0, v6udp), tuple("2001:db8::1", "2001:db8::2", 5353, 53, 17), nil},
		{"ipv6 extension headers", traces.LinkTypeEthernet, ether(0x86dd, 0, v6ext), tuple("2001:db8::1", "2001:db8::2", 1234, 443, 6), nil},
		{"linux sll", traces.LinkTypeLinuxSLL, append(sll, v4tcp...), tuple("198.51.100.1", "192.0.2.10", 40000, 80, 6), nil},
		{"linux sll2", traces.LinkTypeLinuxSLL2, append(sll2, v6udp...), tuple("2001:db8::1", "2001:db8::2", 5353, 53, 17), nil},
		{"raw", traces.LinkTypeRaw, v6udp, tuple("2001:db8::1", "2001:db8::2", 5353, 53, 17), nil},
		{"raw ipv4", traces.LinkTypeIPv4, v4tcp, tuple("198.51.100.1", "192.0.2.10", 40000, 80, 6), nil},
		{"arp", traces.LinkTypeEthernet, ether(0x0806, 0, make([]byte, 28)), maglev.Tuple{}, traces.ErrNotIP},
		{"icmp", traces.LinkTypeEthernet, ether(0x0800, 0, ipv4("10.0.0.1", "10.0.0.2", 1, 0, 0, make([]byte, 8))), maglev.Tuple{}, traces.ErrNotTCPUDP},
		{"first fragment", traces.LinkTypeEthernet, ether(0x0800, 0, ipv4("10.0.0.1", "10.0.0.2", 17, 0x2000, 0, udp(1, 2))), tuple("10.0.0.1", "10.0.0.2", 1, 2, 17), nil},
		{"later fragment", traces.LinkTypeEthernet, ether(0x0800, 0, ipv4("10.0.0.1", "10.0.0.2", 17, 185, 0, udp(1, 2))), maglev.Tuple{}, traces.ErrFragment},
		{"ipv6 later fragment", traces.LinkTypeRaw, ipv6("::1", "::2", 44, append([]byte{17, 0, 0, 8, 0, 0, 0, 1}, udp(1, 2)...)), maglev.Tuple{}, traces.ErrFragment},
		{"truncated tcp", traces.LinkTypeEthernet, ether(0x0800, 0, v4tcp[:30]), maglev.Tuple{}, traces.ErrTruncated},
		{"truncated ethernet", traces.LinkTypeEthernet, make([]byte, 10), maglev.Tuple{}, traces.ErrTruncated},
		{"ihl below 5", traces.LinkTypeRaw, append([]byte{0x44}, v4tcp[1:]...), maglev.Tuple{}, traces.ErrMalformed},
		{"tcp data offset below 5", traces.LinkTypeRaw, ipv4("10.0.0.1", "10.0.0.2", 6, 0, 0, append(tcp(1, 2)[:12], append([]byte{0x40}, make([]byte, 7)...)...)), maglev.Tuple{}, traces.ErrMalformed},
		{"unknown link type", 147, v4tcp, maglev.Tuple{}, traces.ErrLinkType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := traces.ParseTuple(tt.link, tt.frame)
			if !errors.Is(err, tt.err) {
				t.Fatalf("error %v, want %v", err, tt.err)
			}
			if got != tt.want {
				t.Errorf("tuple %+v, want %+v", got, tt.want)
			}
		})
	}
}

// pcapFile renders a classic pcap file in the given byte order.
func pcapFile(order binary.ByteOrder, nano bool, link uint32, frames ...[]byte) []byte {
	var b bytes.Buffer
	magic := uint32(0xa1b2c3d4)
	if nano {
		magic = 0xa1b23c4d
	}
	h := make([]byte, 24)
	order.PutUint32(h[0:], magic)
	order.PutUint16(h[4:], 2)
	order.PutUint16(h[6:], 4)
	order.PutUint32(h[16:], 65535)
	order.PutUint32(h[20:], link)
	b.Write(h)
	for i, f := range frames {
		r := make([]byte, 16)
		order.PutUint32(r[0:], 1600000000+uint32(i))
		order.PutUint32(r[4:], 500)
		order.PutUint32(r[8:], uint32(len(f)))
		order.PutUint32(r[12:], uint32(len(f)))
		b.Write(r)
		b.Write(f)
	}
	return b.Bytes()
}

func TestPcapReader(t *testing.T) {
	f1 := ether(0x0800, 0, ipv4("198.51.100.1", "192.0.2.10", 6, 0, 0, tcp(40000, 80)))
	f2 := ether(0x0806, 0, make([]byte, 28))
	for _, tc := range []struct {
		name  string
		order binary.ByteOrder
		nano  bool
		ns    int
	}{{"little-endian micro", binary.LittleEndian, false, 500000}, {"big-endian nano", binary.BigEndian, true, 500}} {
		t.Run(tc.name, func(t *testing.T) {
			pr, err := traces.NewPcapReader(bytes.NewReader(pcapFile(tc.order, tc.nano, traces.LinkTypeEthernet, f1, f2)))
			if err != nil {
				t.Fatal(err)
			}
			if pr.LinkType() != traces.LinkTypeEthernet {
				t.Errorf("link type %d", pr.LinkType())
			}
			rec, err := pr.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(rec.Data, f1) || rec.OrigLen != len(f1) {
				t.Errorf("first record %x (%d), want %x", rec.Data, rec.OrigLen, f1)
			}
			if want := time.Unix(1600000000, int64(tc.ns)).UTC(); !rec.Time.Equal(want) {
				t.Errorf("time %v, want %v", rec.Time, want)
			}
			if rec, err = pr.Next(); err != nil || !bytes.Equal(rec.Data, f2) {
				t.Fatalf("second record %x, %v", rec.Data, err)
			}
			if _, err := pr.Next(); err != io.EOF {
				t.Errorf("after the last record: %v, want io.EOF", err)
			}
		})
	}
	t.Run("cut inside a record", func(t *testing.T) {
		b := pcapFile(binary.LittleEndian, false, traces.LinkTypeEthernet, f1)
		pr, err := traces.NewPcapReader(bytes.NewReader(b[:len(b)-5]))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pr.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("error %v, want io.ErrUnexpectedEOF", err)
		}
	})
	t.Run("huge record", func(t *testing.T) {
		b := pcapFile(binary.LittleEndian, false, traces.LinkTypeEthernet, f1)
		binary.LittleEndian.PutUint32(b[24+8:], 1<<30)
		pr, err := traces.NewPcapReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pr.Next(); !errors.Is(err, traces.ErrBadRecord) {
			t.Errorf("error %v, want ErrBadRecord", err)
		}
	})
	for _, tc := range []struct {
		name string
		data []byte
		err  error
	}{
		{"pcapng", []byte{0x0a, 0x0d, 0x0d, 0x0a, 0x1c, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, traces.ErrPcapNG},
		{"text", []byte("this is not a capture file at all"), traces.ErrNotPcap},
		{"short", []byte{0xd4, 0xc3}, traces.ErrNotPcap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := traces.NewPcapReader(bytes.NewReader(tc.data)); !errors.Is(err, tc.err) {
				t.Errorf("error %v, want %v", err, tc.err)
			}
		})
	}
}

func TestReadPcapFlows(t *testing.T) {
	syn := ether(0x0800, 0, ipv4("198.51.100.1", "192.0.2.10", 6, 0, 0, tcp(40000, 80)))
	other := ether(0x0800, 0, ipv4("198.51.100.2", "192.0.2.10", 17, 0, 0, udp(53, 9999)))
	arp := ether(0x0806, 0, make([]byte, 28))
	path := filepath.Join(t.TempDir(), "x.pcap")
	if err := os.WriteFile(path, pcapFile(binary.LittleEndian, false, traces.LinkTypeEthernet, syn, arp, syn, other), 0o644); err != nil {
		t.Fatal(err)
	}
	ff, err := traces.ReadPcapFlows(path)
	if err != nil {
		t.Fatal(err)
	}
	if ff.Packets != 4 || ff.Parsed != 3 || len(ff.Flows) != 2 || ff.Skipped[traces.ErrNotIP.Error()] != 1 {
		t.Errorf("packets %d, parsed %d, flows %d, skipped %v; want 4, 3, 2, one not-IP", ff.Packets, ff.Parsed, len(ff.Flows), ff.Skipped)
	}
	if ff.Flows[0] != tuple("198.51.100.1", "192.0.2.10", 40000, 80, 6) {
		t.Errorf("first flow %+v", ff.Flows[0])
	}
	bad := filepath.Join(t.TempDir(), "y.pcap")
	if err := os.WriteFile(bad, pcapFile(binary.LittleEndian, false, 147, syn), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := traces.ReadPcapFlows(bad); !errors.Is(err, traces.ErrLinkType) {
		t.Errorf("link type 147: %v, want ErrLinkType", err)
	}
}

// The real captures (testdata/traces/README.md): every file is
// classic pcap with Ethernet framing, and the counts of TCP/UDP packets
// match tcpdump's ("(tcp or udp) and not a later fragment").
func TestRealTraces(t *testing.T) {
	dir := testenv.TracesDir(t)
	files, err := traces.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct{ packets, parsed, flows int }{
		"amp.TCP.reflection.SYNACK.pcap": {8000, 7842, 7693},
		"amp.UDP.bacnet.IOT.37810.pcap":  {9617, 9462, 6147},
		"amp.UDP.isakmp.pcap":            {3984, 3984, 3978},
		"amp.UDP.snmp.src161.pcap":       {4373, 4079, 4045},
		"pkt.TCP.synflood.spoofed.pcap":  {37841, 37841, 37669},
	}
	total := 0
	for _, f := range files {
		t.Logf("%s: link type %d, %d packets, %d TCP/UDP, %d distinct flows, skipped %v",
			f.Name, f.LinkType, f.Packets, f.Parsed, len(f.Flows), f.Skipped)
		if len(f.Flows) == 0 {
			t.Errorf("%s: no flow", f.Name)
		}
		total += len(f.Flows)
		if w, ok := want[f.Name]; ok && (f.Packets != w.packets || f.Parsed != w.parsed || len(f.Flows) != w.flows) {
			t.Errorf("%s: %d packets, %d parsed, %d flows; want %d, %d, %d",
				f.Name, f.Packets, f.Parsed, len(f.Flows), w.packets, w.parsed, w.flows)
		}
	}
	if total == 0 {
		t.Fatal("no flow in any capture")
	}
}

func TestFindTracesDirEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(traces.DirEnv, dir)
	if _, err := traces.FindDir("."); !errors.Is(err, traces.ErrNoTraces) {
		t.Errorf("empty %s: %v, want ErrNoTraces", traces.DirEnv, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.pcap"), pcapFile(binary.LittleEndian, false, traces.LinkTypeEthernet), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := traces.FindDir("."); err != nil || got != dir {
		t.Errorf("FindDir = %q, %v; want %q", got, err, dir)
	}
}
