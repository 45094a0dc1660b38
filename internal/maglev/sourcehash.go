package maglev

import "net/netip"

// SourceHash is the hash the maglev-source and sh schedulers read the
// Maglev table with (bpf/sched.h, sched_source_hash): FlowHash of the
// client address cut to its family's prefix length (plen4 for IPv4,
// plen6 for IPv6), the zero address of that family, ports 0, protocol 0.
// Every node and CPU computes it alike, so a client (a client network)
// reaches one backend wherever its connections land.
func SourceHash(src netip.Addr, plen4, plen6 int) uint64 {
	if src.Is4() {
		p, _ := src.Prefix(plen4)
		return FlowHash(Tuple{Src: p.Addr(), Dst: netip.IPv4Unspecified()})
	}
	p, _ := src.Prefix(plen6)
	return FlowHash(Tuple{Src: p.Addr(), Dst: netip.IPv6Unspecified()})
}

// DestHash is the hash of the dh scheduler (bpf/sched.h,
// sched_dest_hash): FlowHash of the zero address, dst, ports 0,
// protocol 0.
func DestHash(dst netip.Addr) uint64 {
	if dst.Is4() {
		return FlowHash(Tuple{Src: netip.IPv4Unspecified(), Dst: dst})
	}
	return FlowHash(Tuple{Src: netip.IPv6Unspecified(), Dst: dst})
}
