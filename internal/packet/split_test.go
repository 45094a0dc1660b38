package packet

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
)

// splitCase is a datagram to split: its options, its fragment field (MF
// and offset of a datagram that is itself a fragment) and the piece size.
type splitCase struct {
	name    string
	options []byte
	vlan    uint16
	fo      uint16 // MF and offset of the original
	payload int
	maxIP   int
}

// TestSplitFrame splits datagrams and checks RFC 791 on the pieces: each
// at most maxIP bytes with a valid header checksum, data in 8-byte units
// at contiguous offsets from the original's, MF on every piece but the
// last (and on the last too when the original had it), the first piece
// with every option and the others with the copied ones only, the L2
// header repeated, and the data put back together equal to the original.
func TestSplitFrame(t *testing.T) {
	routerAlert := []byte{0x94, 4, 0, 0}                     // copied flag set
	recordRoute := []byte{7, 7, 4, 0, 0, 0, 0, 0}            // not copied; 7 bytes and end of list
	withNop := []byte{1, 0x94, 4, 0, 0, 7, 3, 4, 0, 0, 0, 0} // a no-op, router alert, record route
	for _, c := range []splitCase{
		{name: "no options", payload: 3000, maxIP: 1000},
		{name: "vlan, exact multiple", vlan: 7, payload: 1960, maxIP: 1000},
		{name: "options", options: append(append([]byte{}, routerAlert...), recordRoute...), payload: 2500, maxIP: 576},
		{name: "no-op option", options: withNop, payload: 1500, maxIP: 600},
		{name: "a fragment split again", fo: 0x2000 | 100, payload: 2000, maxIP: 900},
		{name: "fits", payload: 100, maxIP: 1500},
	} {
		t.Run(c.name, func(t *testing.T) { checkSplit(t, c) })
	}
}

func checkSplit(t *testing.T, c splitCase) {
	src, dst := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	data := make([]byte, c.payload)
	for i := range data {
		data[i] = byte(i * 7)
	}
	ip := IPv4(src, dst, ProtoUDP, 0, 64, c.options, data)
	binary.BigEndian.PutUint16(ip[6:], c.fo)
	binary.BigEndian.PutUint16(ip[10:], 0)
	binary.BigEndian.PutUint16(ip[10:], Checksum(ip[:20+len(c.options)]))
	frame := Ethernet([6]byte{2, 0, 0, 0, 0, 2}, [6]byte{2, 0, 0, 0, 0, 1}, c.vlan, EtherIPv4, ip)
	l2 := len(frame) - len(ip)

	pieces, err := SplitFrame(frame, c.maxIP)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for i, p := range pieces {
		if !bytes.Equal(p[:l2], frame[:l2]) {
			t.Fatalf("piece %d: L2 header % x, want % x", i, p[:l2], frame[:l2])
		}
		h := p[l2:]
		hl := int(h[0]&0xf) * 4
		tot := int(binary.BigEndian.Uint16(h[2:]))
		fo := binary.BigEndian.Uint16(h[6:])
		last := i == len(pieces)-1
		switch {
		case tot != len(h) || tot > c.maxIP:
			t.Fatalf("piece %d: total length %d, frame holds %d, max %d", i, tot, len(h), c.maxIP)
		case Checksum(h[:hl]) != 0:
			t.Fatalf("piece %d: bad header checksum", i)
		case int(fo&0x1fff) != int(c.fo&0x1fff)+len(got)/8:
			t.Fatalf("piece %d: offset %d, want %d", i, fo&0x1fff, int(c.fo&0x1fff)+len(got)/8)
		case fo&0x2000 == 0 && (!last || c.fo&0x2000 != 0):
			t.Fatalf("piece %d of %d: MF clear", i, len(pieces))
		case fo&0x2000 != 0 && last && c.fo&0x2000 == 0:
			t.Fatalf("last piece: MF set")
		case !last && (tot-hl)%8 != 0:
			t.Fatalf("piece %d: %d bytes of data, not a multiple of 8", i, tot-hl)
		case h[1] != ip[1] || !bytes.Equal(h[4:6], ip[4:6]) || !bytes.Equal(h[8:10], ip[8:10]) || !bytes.Equal(h[12:20], ip[12:20]):
			t.Fatalf("piece %d: header % x, original % x", i, h[:20], ip[:20])
		}
		wantOpts := c.options
		if i > 0 {
			wantOpts = copiedOptions(c.options)
		}
		if !bytes.Equal(h[20:hl], wantOpts) {
			t.Fatalf("piece %d: options % x, want % x", i, h[20:hl], wantOpts)
		}
		got = append(got, h[hl:]...)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("pieces carry %d bytes, not the original %d", len(got), len(data))
	}
	if c.payload+20+len(c.options) <= c.maxIP && len(pieces) != 1 {
		t.Fatalf("a datagram that fits was split in %d", len(pieces))
	}
}

// TestCopiedOptions checks which options every piece repeats: those with
// the copied flag, padded to 4 bytes; a malformed list ends the scan.
func TestCopiedOptions(t *testing.T) {
	for _, c := range []struct {
		in, want []byte
	}{
		{nil, nil},
		{[]byte{0x94, 4, 0, 0}, []byte{0x94, 4, 0, 0}},
		{[]byte{7, 7, 4, 0, 0, 0, 0, 0}, nil},
		{[]byte{1, 0x83, 3, 1, 7, 3, 4, 0}, []byte{0x83, 3, 1, 0}},
		{[]byte{0x94, 9, 0, 0}, nil}, // length beyond the options
		{[]byte{0x94, 1, 0, 0}, nil}, // length below 2
	} {
		if got := copiedOptions(c.in); !bytes.Equal(got, c.want) {
			t.Errorf("copiedOptions(% x) = % x, want % x", c.in, got, c.want)
		}
	}
}

// TestSplitFrameRefuses checks the datagrams that are not split.
func TestSplitFrameRefuses(t *testing.T) {
	src, dst := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	ip := IPv4(src, dst, ProtoUDP, 0, 64, nil, make([]byte, 1000))
	df := bytes.Clone(ip)
	df[6] |= 0x40
	v6 := IPv6(netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), ProtoUDP, 0, 64, nil, make([]byte, 100))
	short := bytes.Clone(ip)
	binary.BigEndian.PutUint16(short[2:], 2000)
	mac := [6]byte{2, 0, 0, 0, 0, 1}
	for _, c := range []struct {
		name  string
		frame []byte
		maxIP int
		want  string
	}{
		{"DF", Ethernet(mac, mac, 0, EtherIPv4, df), 500, "DF set"},
		{"IPv6", Ethernet(mac, mac, 0, EtherIPv6, v6), 500, "not an IPv4 frame"},
		{"IPv6 in IPv4's ethertype", Ethernet(mac, mac, 0, EtherIPv4, v6), 500, "not an IPv4 datagram"},
		{"length beyond the frame", Ethernet(mac, mac, 0, EtherIPv4, short), 500, "beyond the frame"},
		{"no room", Ethernet(mac, mac, 0, EtherIPv4, ip), 27, "no room for data"},
		{"truncated", []byte{1, 2, 3}, 500, "not an IPv4 frame"},
	} {
		_, err := SplitFrame(c.frame, c.maxIP)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}
