/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* encap.h: wraps the client's IP datagram for its backend (the tunnel
 * methods; bpf/methods.h has the others). The inner
 * datagram is not touched; in front of it go the L2 header (VLAN tags moved,
 * MAC addresses left to the next-hop stage), an outer IPv4 or IPv6 header
 * from this node to the backend, and for GRE the RFC 2784 base header:
 *
 *   [eth (+vlan)] [outer IPv4/IPv6] [GRE: 0x0000 | proto] [inner IP ...]
 *
 * IPIP uses the outer protocol number instead of GRE: 4 for an inner IPv4
 * datagram, 41 for an inner IPv6 one, whatever the outer family. GUE puts
 * a UDP header where GRE's is (GUE version 1: the inner IP header follows
 * it directly, its version nibble saying which family):
 *
 *   [eth (+vlan)] [outer IPv4/IPv6] [UDP: hash port -> gue_port] [inner IP ...] */
#pragma once

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "csum.h"
#include "parse.h"
#include "types.h"

struct gre_base {
	__be16 flags;
	__be16 proto;
};

#define GUE_HLEN 8 /* the UDP header; GUE version 1 adds nothing */

/* encap_outer_len: the bytes method encap puts in front of the client's
 * datagram toward a real of family (0: dr, nat). */
static __always_inline __u16 encap_outer_len(__u8 encap, __u8 family)
{
	__u16 ip = family == XLB_AF_INET ? IPV4_HLEN : IPV6_HLEN;

	switch (encap) {
	case XLB_ENCAP_GRE:
		return ip + GRE_HLEN;
	case XLB_ENCAP_GUE:
		return ip + GUE_HLEN;
	case XLB_ENCAP_IPIP:
		return ip;
	}
	return 0;
}

/* encap_gue_sport: the outer UDP source port, from the flow hash, in the
 * dynamic range 49152..65535, so that a backend's NIC spreads the flows
 * over its queues (RSS on the outer 4-tuple). */
static __always_inline __be16 encap_gue_sport(__u64 h)
{
	return bpf_htons(0xc000 | (__u16)((h >> 32 ^ h) & 0x3fff));
}

/* Word copies. __builtin_memcpy of byte arrays (alignment 1) compiles to
 * one load and one store per byte on BPF; these use 8/4/2-byte accesses
 * instead. Packet and map-value accesses may be unaligned on the
 * architectures xlb runs on (the verifier checks alignment only with
 * BPF_F_STRICT_ALIGNMENT); stack ones are never made unaligned here. */
static __always_inline void copy_mac(void *dst, const void *src)
{
	__u32 a = *(const __u32 *)src;
	__u16 b = *(const __u16 *)(src + 4);

	*(__u32 *)dst = a;
	*(__u16 *)(dst + 4) = b;
}

static __always_inline void copy_addr6(void *dst, const void *src)
{
	__u64 a = *(const __u64 *)src;
	__u64 b = *(const __u64 *)(src + 8);

	*(__u64 *)dst = a;
	*(__u64 *)(dst + 8) = b;
}

/* encap_move_l2 copies the L2 header from old (outer_len bytes further on)
 * to the new start; l3_off is one of 14, 18, 22. All of it is loaded
 * before any of it is stored: with 22 bytes and a 20-byte shift the two
 * places overlap. Without VLAN tags nothing needs moving: every verdict
 * that sends the packet writes both MAC addresses (nexthop_forward) and
 * encap_push writes the ethertype; only the bounds are checked. */
static __always_inline int encap_move_l2(void *data, void *data_end, __u16 l3_off, __u16 shift)
{
	void *old = data + shift;
	__u64 w0, w1;
	__u32 w2;
	__u16 w3;

	if (l3_off == ETH_HLEN) {
		if (old + ETH_HLEN > data_end)
			return -1;
	} else if (l3_off == ETH_HLEN + VLAN_HLEN) {
		if (old + ETH_HLEN + VLAN_HLEN > data_end)
			return -1;
		w0 = *(__u64 *)old;
		w1 = *(__u64 *)(old + 8);
		w3 = *(__u16 *)(old + 16);
		*(__u64 *)data = w0;
		*(__u64 *)(data + 8) = w1;
		*(__u16 *)(data + 16) = w3;
	} else {
		if (old + ETH_HLEN + 2 * VLAN_HLEN > data_end)
			return -1;
		w0 = *(__u64 *)old;
		w1 = *(__u64 *)(old + 8);
		w2 = *(__u32 *)(old + 16);
		w3 = *(__u16 *)(old + 20);
		*(__u64 *)data = w0;
		*(__u64 *)(data + 8) = w1;
		*(__u32 *)(data + 16) = w2;
		*(__u16 *)(data + 20) = w3;
	}
	return 0;
}

static __always_inline __u8 encap_inner_proto(const struct pkt *p)
{
	return p->family == XLB_AF_INET ? IPPROTO_IPIP : IPPROTO_IPV6;
}

static __always_inline __be16 encap_inner_ethertype(const struct pkt *p)
{
	return p->family == XLB_AF_INET ? BE_ETH_P_IP : BE_ETH_P_IPV6;
}

/* encap_outer4 writes the outer IPv4 header at l3: five words (little-endian
 * loads of the wire bytes): version 4, IHL 5, TOS, total length | id 0, DF |
 * TTL, protocol, checksum | source | destination. The checksum is summed from
 * these registers, not read back. */
static __always_inline void encap_outer4(__u32 *w, const struct pkt *p, const struct real_info *r,
					 const struct node_info *n, __u16 outer, __u8 proto)
{
	__u32 saddr = *(const __u32 *)n->addr4;
	__u32 daddr = *(const __u32 *)r->addr;
	__u32 w0 = 0x45 | (__u32)p->tos << 8 | (__u32)bpf_htons(outer + p->l3_len) << 16;
	__u32 w1 = (__u32)bpf_htons(IP_DF) << 16;
	__u32 w2 = OUTER_TTL | (__u32)proto << 8;

	w2 |= (__u32)csum_ipv4_words(w0, w1, w2, saddr, daddr) << 16;
	w[0] = w0;
	w[1] = w1;
	w[2] = w2;
	w[3] = saddr;
	w[4] = daddr;
}

/* encap_outer6 writes the outer IPv6 header: version 6, traffic class from
 * the inner packet, flow label from the flow hash so routers spread tunnels
 * by flow. */
static __always_inline void encap_outer6(struct ipv6hdr *ip6, const struct pkt *p,
					 const struct real_info *r, const struct node_info *n,
					 __u16 gre, __u8 proto, __u64 h)
{
	__u32 label = (__u32)h & 0xfffff;

	*(__be32 *)ip6 = bpf_htonl(6U << 28 | (__u32)p->tos << 20 | label);
	ip6->payload_len = bpf_htons(gre + p->l3_len);
	ip6->nexthdr = proto;
	ip6->hop_limit = OUTER_TTL;
	copy_addr6(&ip6->saddr, n->addr6);
	copy_addr6(&ip6->daddr, r->addr);
}

/* encap_tunnel_hdr writes the GRE or GUE header that ends the outer headers
 * at l3 + outer (nothing for IPIP). */
static __always_inline int encap_tunnel_hdr(void *l3, void *data_end, const struct pkt *p,
					    const struct node_info *n, __u8 encap, __u16 outer, __u64 h)
{
	if (encap == XLB_ENCAP_GRE) {
		struct gre_base *g = l3 + outer - GRE_HLEN;

		if ((void *)(g + 1) > data_end)
			return XLB_STAT_DROP_INTERNAL;
		g->flags = 0;
		g->proto = encap_inner_ethertype(p);
	} else if (encap == XLB_ENCAP_GUE) {
		__be16 *u = l3 + outer - GUE_HLEN;

		if ((void *)(u + 4) > data_end)
			return XLB_STAT_DROP_INTERNAL;
		/* source, destination, length, checksum 0: none for IPv4,
		 * the zero checksum of tunnels for IPv6 (RFC 6935) */
		u[0] = encap_gue_sport(h);
		u[1] = n->gue_port;
		u[2] = bpf_htons(GUE_HLEN + p->l3_len);
		u[3] = 0;
	}
	return 0;
}

/* encap_push grows the head and writes the outer headers. The outer
 * ethertype is set; MAC addresses are left to the next-hop stage. Returns 0
 * or an enum xlb_stat drop reason. */
static __always_inline int encap_push(struct xdp_md *ctx, const struct pkt *p,
				      const struct real_info *r, __u8 encap,
				      const struct node_info *n, __u64 h)
{
	__u16 gre = encap == XLB_ENCAP_GRE ? GRE_HLEN : encap == XLB_ENCAP_GUE ? GUE_HLEN : 0;
	__u16 outer = (r->family == XLB_AF_INET ? IPV4_HLEN : IPV6_HLEN) + gre;
	__u16 l3_off = p->l3_off;
	__u8 proto = encap == XLB_ENCAP_GRE ? IPPROTO_GRE : encap == XLB_ENCAP_GUE ? IPPROTO_UDP :
		     encap_inner_proto(p);
	void *data, *data_end;

	if (r->family == XLB_AF_INET && !(n->flags & XLB_NODE_F_ADDR4))
		return XLB_STAT_DROP_NO_SOURCE;
	if (r->family == XLB_AF_INET6 && !(n->flags & XLB_NODE_F_ADDR6))
		return XLB_STAT_DROP_NO_SOURCE;
	if (bpf_xdp_adjust_head(ctx, -(int)outer))
		return XLB_STAT_DROP_ENCAP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (encap_move_l2(data, data_end, l3_off, outer))
		return XLB_STAT_DROP_INTERNAL;
	if (l3_off < ETH_HLEN || l3_off > ETH_HLEN + 2 * VLAN_HLEN)
		return XLB_STAT_DROP_INTERNAL;

	__u32 et_off = l3_off - 2;

	asm volatile("" : "+r"(et_off)); /* a pointer of its own, not l3 - 2 */
	void *l3 = data + l3_off;
	__be16 *ethertype = data + et_off;

	if ((void *)(ethertype + 1) > data_end || l3 + IPV6_HLEN + GRE_HLEN > data_end)
		return XLB_STAT_DROP_INTERNAL;

	if (r->family == XLB_AF_INET) {
		*ethertype = BE_ETH_P_IP;
		encap_outer4(l3, p, r, n, outer, proto);
	} else {
		*ethertype = BE_ETH_P_IPV6;
		encap_outer6(l3, p, r, n, gre, proto, h);
	}
	return encap_tunnel_hdr(l3, data_end, p, n, encap, outer, h);
}
