package study

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/maglev"
)

// rssVectors are the verification vectors of Microsoft's "Verifying the RSS
// Hash Calculation" (Windows driver documentation), for the standard key
// RSSKey: the hash over source and destination address only, and over
// addresses and TCP ports.
var rssVectors = []struct {
	src, dst     string
	sport, dport uint16
	ipOnly, tcp  uint32
}{
	{"66.9.149.187", "161.142.100.80", 2794, 1766, 0x323e8fc2, 0x51ccc178},
	{"199.92.111.2", "65.69.140.83", 14230, 4739, 0xd718262a, 0xc626b0ea},
	{"24.19.198.95", "12.22.207.184", 12898, 38024, 0xd2d0a5de, 0x5c2b394a},
	{"38.27.205.30", "209.142.163.6", 48228, 2217, 0x82989176, 0xafc7327f},
	{"153.39.163.191", "202.188.127.2", 44251, 1303, 0x5d1809c5, 0x10e828a2},
	{"3ffe:2501:200:1fff::7", "3ffe:2501:200:3::1", 2794, 1766, 0x2cc18cd5, 0x40207d3d},
	{"3ffe:501:8::260:97ff:fe40:efab", "ff02::1", 14230, 4739, 0x0f0c461c, 0xdde51bbf},
	{"3ffe:1900:4545:3:200:f8ff:fe21:67cf", "fe80::200:f8ff:fe21:67cf", 44251, 38024, 0x4b61e985, 0x02d1feef},
}

func TestToeplitzRSSVectors(t *testing.T) {
	fast := NewToeplitz(RSSKey[:])
	for _, v := range rssVectors {
		t.Run(v.src, func(t *testing.T) {
			tcp := maglev.Tuple{Src: netip.MustParseAddr(v.src), Dst: netip.MustParseAddr(v.dst),
				SrcPort: v.sport, DstPort: v.dport, Proto: 6}
			ip := tcp
			ip.Proto = 0 // no ports: the IPv4-only / IPv6-only hash type
			var buf [37]byte
			for _, c := range []struct {
				name string
				t    maglev.Tuple
				want uint32
			}{{"ip", ip, v.ipOnly}, {"tcp", tcp, v.tcp}} {
				in := RSSInput(&c.t, buf[:])
				if got := ToeplitzRef(RSSKey[:], in); got != c.want {
					t.Errorf("%s: ToeplitzRef = %#08x, want %#08x", c.name, got, c.want)
				}
				if got := fast.Sum(in); got != c.want {
					t.Errorf("%s: Toeplitz.Sum = %#08x, want %#08x", c.name, got, c.want)
				}
				if got := toeplitzTuple(&c.t); got != uint64(c.want) {
					t.Errorf("%s: toeplitz flow hash = %#08x, want %#08x", c.name, got, c.want)
				}
			}
		})
	}
}

// UDP uses the same 4-tuple input as TCP (NDIS_HASH_UDP_IPV4).
func TestToeplitzUDPAsTCP(t *testing.T) {
	v := rssVectors[0]
	u := maglev.Tuple{Src: netip.MustParseAddr(v.src), Dst: netip.MustParseAddr(v.dst),
		SrcPort: v.sport, DstPort: v.dport, Proto: 17}
	if got := toeplitzTuple(&u); got != uint64(v.tcp) {
		t.Errorf("UDP hash = %#08x, want the TCP vector %#08x", got, v.tcp)
	}
}

func TestToeplitzTablesMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	key := make([]byte, 40)
	for i := range key {
		key[i] = byte(r.Uint32())
	}
	for _, k := range [][]byte{RSSKey[:], key} {
		fast := NewToeplitz(k)
		for range 2000 {
			in := make([]byte, r.IntN(37))
			for i := range in {
				in[i] = byte(r.Uint32())
			}
			if a, b := ToeplitzRef(k, in), fast.Sum(in); a != b {
				t.Fatalf("input %x: reference %#08x, tables %#08x", in, a, b)
			}
		}
	}
}

func TestCRC16CheckValue(t *testing.T) {
	// The catalogue check value of CRC-16/CCITT-FALSE (CRC-16/IBM-3740).
	if got := CRC16([]byte("123456789")); got != 0x29b1 {
		t.Errorf("CRC16(123456789) = %#04x, want 0x29b1", got)
	}
	if got := CRC16(nil); got != 0xffff {
		t.Errorf("CRC16(empty) = %#04x, want the initial value 0xffff", got)
	}
}

func TestTupleBytes(t *testing.T) {
	tu := maglev.Tuple{Src: netip.MustParseAddr("1.2.3.4"), Dst: netip.MustParseAddr("5.6.7.8"),
		SrcPort: 0x0102, DstPort: 0x0304, Proto: 17}
	var buf [37]byte
	n := tupleBytes(&tu, buf[:])
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 17}
	if string(buf[:n]) != string(want) {
		t.Errorf("tupleBytes = %x, want %x", buf[:n], want)
	}
	tu6 := maglev.Tuple{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"), Proto: 6}
	if n := tupleBytes(&tu6, buf[:]); n != 37 {
		t.Errorf("IPv6 tuple is %d bytes, want 37", n)
	}
}

func TestSimpleHashes(t *testing.T) {
	tu := maglev.Tuple{Src: netip.MustParseAddr("10.1.2.3"), Dst: netip.MustParseAddr("192.0.2.7"), Proto: 6}
	if got, want := srcInt(&tu), uint64(0x0a010203); got != want {
		t.Errorf("srcInt = %#x, want %#x", got, want)
	}
	if got, want := xorSrc(&tu), uint64(10^1^2^3); got != want {
		t.Errorf("xorSrc = %#x, want %#x", got, want)
	}
	if got, want := xorSrcDst(&tu), uint64(10^1^2^3^192^0^2^7); got != want {
		t.Errorf("xorSrcDst = %#x, want %#x", got, want)
	}
	tu6 := maglev.Tuple{Src: netip.MustParseAddr("2001:db8::1:2"), Dst: netip.MustParseAddr("::1")}
	if got, want := srcInt(&tu6), uint64(0x0000000000010002); got != want {
		t.Errorf("srcInt(IPv6) = %#x, want the low 64 bits %#x", got, want)
	}
	if got := maglev.FlowHash(tu); flowV1(&tu) != got {
		t.Errorf("flowV1 differs from maglev.FlowHash")
	}
}

// Every hasher picks a worker in [0, n) for every n, IPv4 and IPv6.
func TestPickRange(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var tuples []maglev.Tuple
	for i := range 500 {
		var a, b [16]byte
		binary.LittleEndian.PutUint64(a[:], r.Uint64())
		binary.LittleEndian.PutUint64(a[8:], r.Uint64())
		binary.LittleEndian.PutUint64(b[:], r.Uint64())
		binary.LittleEndian.PutUint64(b[8:], r.Uint64())
		tu := maglev.Tuple{SrcPort: uint16(r.Uint32()), DstPort: uint16(r.Uint32()), Proto: []uint8{6, 17}[i%2]}
		if i%2 == 0 {
			tu.Src, tu.Dst = netip.AddrFrom4([4]byte(a[:4])), netip.AddrFrom4([4]byte(b[:4]))
		} else {
			tu.Src, tu.Dst = netip.AddrFrom16(a), netip.AddrFrom16(b)
		}
		tuples = append(tuples, tu)
	}
	for _, h := range FlowHashers() {
		for _, n := range []uint32{1, 2, 3, 7, 64, 1000} {
			for i := range tuples {
				if w := h.Pick(h.Sum(&tuples[i]), n); w >= n {
					t.Fatalf("%s: worker %d of %d", h.Name, w, n)
				}
			}
		}
	}
}

// On random 5-tuples every hash but the XOR folds (8-bit) and the source
// modulo spreads within a few ideal standard deviations of uniform.
func TestHashesBalanceRandomFlows(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	flows := make([]maglev.Tuple, 20000)
	for i := range flows {
		v := r.Uint64()
		flows[i] = maglev.Tuple{
			Src: netip.AddrFrom4([4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}),
			Dst: netip.MustParseAddr("192.0.2.1"), SrcPort: uint16(v >> 32), DstPort: 80, Proto: 6,
		}
	}
	for _, h := range FlowHashers() {
		b := hashBalance(h, 16, flows)
		if b.Flows != len(flows) {
			t.Fatalf("%s: %d flows counted, want %d", h.Name, b.Flows, len(flows))
		}
		if b.CV > 2*b.IdealCV {
			t.Errorf("%s: CV %.4f on random flows, ideal %.4f", h.Name, b.CV, b.IdealCV)
		}
	}
}

func BenchmarkFlowHashers(b *testing.B) {
	tu := maglev.Tuple{Src: netip.MustParseAddr("66.9.149.187"), Dst: netip.MustParseAddr("161.142.100.80"),
		SrcPort: 2794, DstPort: 1766, Proto: 6}
	for _, h := range FlowHashers() {
		b.Run(h.Name, func(b *testing.B) {
			var acc uint64
			for b.Loop() {
				acc += h.Sum(&tu)
			}
			_ = acc
		})
	}
}
