package maglev

import (
	"encoding/binary"
	"net/netip"
)

// FlowHashVersion is the version of the flow hash contract ("flow hash v1" in
// docs/ARCHITECTURE.md). Any change to FlowHash, Slot, CTBucket or CTTag that
// changes a result is a new version: the C data plane (bpf/hash.h) and every
// node must change together.
const FlowHashVersion = 1

// CTTagBits is the number of significant bits in a CTTag result: the
// conntrack way's tag (enum xlb_ct_layout in bpf/types.h), 64 less the
// tag's shift.
const CTTagBits = 27

const (
	flowK    = 0x9E3779B97F4A7C15
	flowSeed = 0x5851F42D4C957F2D
)

// Tuple is a flow's 5-tuple as the data plane sees it. Ports are in host
// order here; the hash consumes their wire (big-endian) bytes.
type Tuple struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	Proto            uint8
}

// Mix is the per-word step of the flow hash: xor, multiply by K, fold
// (hash_mix in bpf/hash.h; the forwarder's VIP match hashes with it too).
func Mix(h, v uint64) uint64 {
	h ^= v
	h *= flowK
	h ^= h >> 32
	return h
}

// Fmix64 is the MurmurHash3 64-bit finalizer (a bijection), as used by
// the flow hash v1 and by the Maglev permutation (hash_fmix64 in bpf/hash.h
// is the same in C).
func Fmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// FlowHash returns the 64-bit flow hash v1 of t, exactly as specified in
// docs/ARCHITECTURE.md ("DESIGN: flow hash v1") and as computed by the C data
// plane (bpf/hash.h). Address and port words are read little-endian from the
// wire bytes, which is what a plain load gives on the little-endian BPF
// target.
//
// The family is the packet's: if both addresses are IPv4 (netip Is4) the
// tuple is hashed as IPv4 (4-byte addresses); otherwise it is hashed as IPv6
// with the 16-byte form of each address, as the data plane does for an IPv6
// packet, also when it carries an IPv4-mapped address (::ffff:a.b.c.d). An
// invalid netip.Addr counts as 16 zero bytes. A mixed v4/v6 tuple never
// occurs on the wire.
func FlowHash(t Tuple) uint64 {
	var ports [4]byte
	binary.BigEndian.PutUint16(ports[0:2], t.SrcPort)
	binary.BigEndian.PutUint16(ports[2:4], t.DstPort)
	last := uint64(binary.LittleEndian.Uint32(ports[:])) | uint64(t.Proto)<<32

	src, dst := t.Src, t.Dst
	var h uint64
	if src.Is4() && dst.Is4() {
		s, d := src.As4(), dst.As4()
		h = Mix(flowSeed, uint64(binary.LittleEndian.Uint32(s[:]))|
			uint64(binary.LittleEndian.Uint32(d[:]))<<32)
	} else {
		s, d := src.As16(), dst.As16()
		h = Mix(flowSeed, binary.LittleEndian.Uint64(s[0:8]))
		h = Mix(h, binary.LittleEndian.Uint64(s[8:16]))
		h = Mix(h, binary.LittleEndian.Uint64(d[0:8]))
		h = Mix(h, binary.LittleEndian.Uint64(d[8:16]))
	}
	h = Mix(h, last)
	return Fmix64(h)
}

// Slot returns the Maglev table slot for flow hash h in a table of m
// entries: the high 32 bits of h scaled to [0, m) by multiply-shift,
// (uint64(uint32(h>>32)) * m) >> 32. The result is < m for every m > 0.
func Slot(h uint64, m uint32) uint32 {
	return uint32((uint64(uint32(h>>32)) * uint64(m)) >> 32)
}

// CTBucket returns the per-CPU conntrack bucket for flow hash h: the low 32
// bits of h masked to buckets-1. buckets must be a power of two.
func CTBucket(h uint64, buckets uint32) uint32 {
	return uint32(h) & (buckets - 1)
}

// CTTag returns the conntrack tag for flow hash h: h >> 37, CTTagBits (27)
// bits. The tag shares its bits with Slot's input, so two flows that share a
// bucket and a tag also share a Maglev slot (docs/ARCHITECTURE.md). The tag
// is each node's own (peers exchange the whole hash): it was h >> 36 until
// the real id of a conntrack way took a 19th bit.
func CTTag(h uint64) uint32 {
	return uint32(h >> (64 - CTTagBits))
}
