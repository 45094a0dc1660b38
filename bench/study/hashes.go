package study

import (
	"encoding/binary"
	"net/netip"

	"github.com/xlbproject/xlb/internal/maglev"
)

// FlowHasher is one of the flow hashes of the session-persistence study
// (doc.go; its section 3.2, algorithms 1-5) or xlb's own: Sum computes
// the hash of a 5-tuple and Pick maps it to one of n workers.
type FlowHasher struct {
	Name string `json:"name"`
	// Doc says exactly what is hashed and how a worker is picked.
	Doc  string                            `json:"doc"`
	Sum  func(t *maglev.Tuple) uint64      `json:"-"`
	Pick func(sum uint64, n uint32) uint32 `json:"-"`
}

// Names of the flow hashes, as they appear in results and report keys.
const (
	HashSrcModN      = "src_mod_n"
	HashXorSrc       = "xor_src"
	HashXorSrcDst    = "xor_src_dst"
	HashCRC16        = "crc16"
	HashToeplitz     = "toeplitz"
	HashFlowV1       = "flowhash_v1"
	HashFlowV1Bucket = "flowhash_v1_low"
)

// FlowHashers returns the hashes HashStudy compares, in the session-persistence study's order
// followed by xlb's flow hash v1 with its two ways of using the hash.
func FlowHashers() []FlowHasher {
	mod := func(s uint64, n uint32) uint32 { return uint32(s % uint64(n)) }
	return []FlowHasher{
		{HashSrcModN, "source address as a big-endian integer mod N (IPv6: its low 64 bits); the session-persistence study's algorithm 1",
			srcInt, mod},
		{HashXorSrc, "XOR of the source address bytes (8 bits) mod N; the session-persistence study's algorithm 2",
			xorSrc, mod},
		{HashXorSrcDst, "XOR of the source and destination address bytes (8 bits) mod N; the session-persistence study's algorithm 3",
			xorSrcDst, mod},
		{HashCRC16, "CRC-16/CCITT-FALSE (poly 0x1021, init 0xffff, no reflection, no final xor) of src addr, dst addr, sport, dport (big-endian), proto, mod N; the session-persistence study's algorithm 4",
			crc16Tuple, mod},
		{HashToeplitz, "Toeplitz RSS hash, standard Microsoft 40-byte key, input src addr, dst addr, sport, dport (NDIS TCP/UDP 4-tuple types), mod N (= an RSS indirection table of 128 entries filled round robin, for N dividing 128); the session-persistence study's algorithm 5",
			toeplitzTuple, mod},
		{HashFlowV1, "xlb flow hash v1 (maglev.FlowHash), worker = maglev.Slot(h, N): multiply-shift of the high 32 bits, the Maglev table index rule",
			flowV1, func(s uint64, n uint32) uint32 { return maglev.Slot(s, n) }},
		{HashFlowV1Bucket, "xlb flow hash v1, worker = low 32 bits mod N: the conntrack bucket rule (maglev.CTBucket for N a power of two)",
			flowV1, func(s uint64, n uint32) uint32 { return uint32(s) % n }},
	}
}

// srcInt is the source address as an integer (IPv6: the low 64 bits).
func srcInt(t *maglev.Tuple) uint64 {
	if t.Src.Is4() {
		a := t.Src.As4()
		return uint64(binary.BigEndian.Uint32(a[:]))
	}
	a := t.Src.As16()
	return binary.BigEndian.Uint64(a[8:])
}

// xorBytes folds the bytes of an address with XOR.
func xorBytes(a []byte) uint64 {
	var x byte
	for _, b := range a {
		x ^= b
	}
	return uint64(x)
}

// addrXor is the XOR fold of an address: 4 bytes for IPv4, 16 for IPv6.
func addrXor(a netip.Addr) uint64 {
	if a.Is4() {
		b := a.As4()
		return uint64(b[0] ^ b[1] ^ b[2] ^ b[3])
	}
	b := a.As16()
	return xorBytes(b[:])
}

func xorSrc(t *maglev.Tuple) uint64    { return addrXor(t.Src) }
func xorSrcDst(t *maglev.Tuple) uint64 { return addrXor(t.Src) ^ addrXor(t.Dst) }

// tupleBytes writes the wire form of t into buf (at least 37 bytes): source
// address, destination address, source port, destination port (both
// big-endian), protocol. It returns the length: 13 for IPv4, 37 for IPv6.
func tupleBytes(t *maglev.Tuple, buf []byte) int {
	n := 0
	if t.Src.Is4() && t.Dst.Is4() {
		s, d := t.Src.As4(), t.Dst.As4()
		n += copy(buf[n:], s[:])
		n += copy(buf[n:], d[:])
	} else {
		s, d := t.Src.As16(), t.Dst.As16()
		n += copy(buf[n:], s[:])
		n += copy(buf[n:], d[:])
	}
	binary.BigEndian.PutUint16(buf[n:], t.SrcPort)
	binary.BigEndian.PutUint16(buf[n+2:], t.DstPort)
	buf[n+4] = t.Proto
	return n + 5
}

// CRC-16/CCITT-FALSE (also called CRC-16/IBM-3740 or CRC-16/AUTODIN):
// polynomial x^16 + x^12 + x^5 + 1 (0x1021), initial value 0xffff, bits
// taken most significant first, no final XOR. Check value of "123456789":
// 0x29b1.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// CRC16 returns the CRC-16/CCITT-FALSE of b.
func CRC16(b []byte) uint16 {
	c := uint16(0xffff)
	for _, x := range b {
		c = c<<8 ^ crc16Table[byte(c>>8)^x]
	}
	return c
}

func crc16Tuple(t *maglev.Tuple) uint64 {
	var buf [37]byte
	n := tupleBytes(t, buf[:])
	return uint64(CRC16(buf[:n]))
}

// RSSKey is the standard 40-byte Toeplitz key of Microsoft's RSS
// documentation ("Verifying the RSS Hash Calculation"), the default of many
// NIC drivers.
var RSSKey = [40]byte{
	0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2,
	0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
	0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4,
	0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
	0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
}

// ToeplitzRef is the Toeplitz hash of input with key, bit by bit as the RSS
// specification states it: for every input bit, most significant bit of
// input[0] first, if the bit is 1 the result is XORed with the 32 key bits
// that start at that bit's position. The key must be at least len(input)+4
// bytes long.
func ToeplitzRef(key, input []byte) uint32 {
	var result uint32
	window := binary.BigEndian.Uint32(key[0:4])
	for i, b := range input {
		for bit := 7; bit >= 0; bit-- {
			if b>>bit&1 == 1 {
				result ^= window
			}
			// Slide the window one bit: shift in key bit 32 + position.
			next := key[i+4] >> bit & 1
			window = window<<1 | uint32(next)
		}
	}
	return result
}

// Toeplitz computes the same hash as ToeplitzRef, with one table per input
// byte position (what a software RSS does: 256 precomputed results per
// byte).
type Toeplitz struct {
	tab [36][256]uint32
	n   int // usable input length, len(key)-4 (at most 36)
}

// NewToeplitz precomputes the tables for key (at least 5 bytes) and inputs
// of up to min(len(key)-4, 36) bytes.
func NewToeplitz(key []byte) *Toeplitz {
	t := &Toeplitz{n: min(len(key)-4, 36)}
	for i := range t.n {
		// The 32-bit windows for the 8 bits of input byte i.
		var w [8]uint32
		for bit := range 8 {
			p := i*8 + bit // window starts at key bit p
			var v uint32
			for k := range 32 {
				q := p + k
				v = v<<1 | uint32(key[q/8]>>(7-q%8)&1)
			}
			w[bit] = v
		}
		for b := range 256 {
			var r uint32
			for bit := range 8 {
				if b>>(7-bit)&1 == 1 {
					r ^= w[bit]
				}
			}
			t.tab[i][b] = r
		}
	}
	return t
}

// Sum returns the Toeplitz hash of input, which must not be longer than
// the key allows (NewToeplitz).
func (t *Toeplitz) Sum(input []byte) uint32 {
	if len(input) > t.n {
		panic("study: Toeplitz input longer than the key allows")
	}
	var r uint32
	for i, b := range input {
		r ^= t.tab[i][b]
	}
	return r
}

// sum4 is Sum of the 12-byte IPv4 TCP/UDP input, unrolled.
func (t *Toeplitz) sum4(s, d [4]byte, sport, dport uint16) uint32 {
	return t.tab[0][s[0]] ^ t.tab[1][s[1]] ^ t.tab[2][s[2]] ^ t.tab[3][s[3]] ^
		t.tab[4][d[0]] ^ t.tab[5][d[1]] ^ t.tab[6][d[2]] ^ t.tab[7][d[3]] ^
		t.tab[8][byte(sport>>8)] ^ t.tab[9][byte(sport)] ^
		t.tab[10][byte(dport>>8)] ^ t.tab[11][byte(dport)]
}

var rssToeplitz = NewToeplitz(RSSKey[:])

// RSSInput returns the Toeplitz input of t for the NDIS hash types: source
// address, destination address, and for TCP and UDP the source and
// destination ports (big-endian); 12 or 36 bytes for TCP/UDP, 8 or 32
// otherwise.
func RSSInput(t *maglev.Tuple, buf []byte) []byte {
	n := tupleBytes(t, buf) - 1 // without the protocol byte
	if t.Proto != 6 && t.Proto != 17 {
		n -= 4
	}
	return buf[:n]
}

func toeplitzTuple(t *maglev.Tuple) uint64 {
	if t.Src.Is4() && t.Dst.Is4() && (t.Proto == 6 || t.Proto == 17) {
		return uint64(rssToeplitz.sum4(t.Src.As4(), t.Dst.As4(), t.SrcPort, t.DstPort))
	}
	var buf [37]byte
	return uint64(rssToeplitz.Sum(RSSInput(t, buf[:])))
}

func flowV1(t *maglev.Tuple) uint64 { return maglev.FlowHash(*t) }
