/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* toobig.h: a VIP packet that does not fit the egress MTU once
 * encapsulated (docs/ARCHITECTURE.md, "MTU").
 *
 *  - IPv4 with DF set, and any IPv6 packet: the node answers the client
 *    from the VIP with ICMP fragmentation-needed (type 3 code 4) / ICMPv6
 *    packet-too-big (type 2), carrying the MTU the client can use: the
 *    egress MTU less the encapsulation's headers for that backend (IPv4
 *    floor 68, IPv6 floor 1280). The packet is turned into the error in
 *    place and sent back out of the ingress (XDP_TX):
 *
 *      [eth, MACs swapped (+vlan)] [IP: VIP -> client] [ICMP] [quote]
 *
 *    quote = the start of the original IP datagram: the error is at most
 *    576 bytes (IPv4, RFC 1812 4.3.2.3) / 1280 bytes (IPv6, RFC 4443 2.4).
 *    Rate-limited per CPU (node_info.icmp_too_big_rate).
 *  - IPv4 without DF: the datagram may be fragmented, so xlbd does it: the
 *    frame goes to xlbd over the fragment ring (XLB_FRAG_EV_FRAGMENT) and
 *    the flow's decision is recorded in the fragment table (state
 *    XLB_FRAG_LOCAL); xlbd splits the inner datagram and runs each piece
 *    through the program, which sends it by that entry (frag.h,
 *    frag_hand_off). The same holds for IPv4 fragments that no longer
 *    fit (fragments of a fragment); IPv6 fragments get the ICMPv6 error. */
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "csum.h"
#include "encap.h"
#include "maps.h"
#include "icmp.h"
#include "nexthop.h"
#include "parse.h"
#include "types.h"

#define TOOBIG_V4_HDRS (IPV4_HLEN + ICMP_HLEN)
#define TOOBIG_V6_HDRS (IPV6_HLEN + ICMP_HLEN)
#define TOOBIG_V4_MAX 576  /* bytes of the whole IPv4 error */
#define TOOBIG_V6_MAX 1280 /* bytes of the whole IPv6 error */
#define TOOBIG_QUOTE_MAX (TOOBIG_V6_MAX - TOOBIG_V6_HDRS)
#define TOOBIG_V4_MIN_MTU 68
#define TOOBIG_V6_MIN_MTU 1280
#define TOOBIG_CSUM_CHUNK 512 /* bpf_csum_diff's limit on older kernels */

/* xlb_l4's answer for a packet to be answered with the error: this bit
 * or'ed with the MTU to advertise (not an XDP action). */
#define XLB_L4_TOO_BIG 0x10000

/* toobig_egress_mtu: 0 when p fits r's egress once outer bytes of headers
 * go in front, else that egress's MTU. A cached next hop has its MTU;
 * without one (a backend whose next hop xlbd has not resolved yet) the
 * kernel's FIB is asked with the outer length, which reports the route's
 * MTU whether or not the neighbour is resolved. */
/* xlb_toobig_fib is toobig_egress_mtu's answer for a real without a
 * cached next hop, tot_len bytes going out. A global function: inline, its
 * 64-byte lookup was zeroed on every packet (the compiler hoists the
 * zeroing above the cached next hop's test), and in a block of its own it
 * took the fragment stage's call chain past 512 bytes of stack. */
__attribute__((noinline)) __u32 xlb_toobig_fib(struct xdp_md *ctx, const struct real_info *r,
					       __u32 tot_len)
{
	struct bpf_fib_lookup fib = {};
	struct node_info *n;
	__u32 zero = 0;

	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!r || !n)
		return 0; /* nexthop_forward decides */
	if (nexthop_fib(ctx, &fib, r, n, tot_len) != BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return 0; /* fits, or no route: nexthop_forward decides */
	return fib.mtu_result ? fib.mtu_result : 1;
}

static __always_inline __u32 toobig_egress_mtu(struct xdp_md *ctx, const struct pkt *p,
					       const struct real_info *r, const struct node_info *n,
					       __u16 outer)
{
	if (r->flags & XLB_REAL_F_NEXTHOP)
		return (__u32)outer + p->l3_len <= r->mtu ? 0 : r->mtu;
	return xlb_toobig_fib(ctx, r, (__u32)outer + p->l3_len);
}

/* toobig_client_mtu: the largest inner datagram that fits an egress MTU
 * of egress, floored. */
static __always_inline __u32 toobig_client_mtu(const struct pkt *p, __u32 egress, __u16 outer)
{
	__u32 m = egress > outer ? egress - outer : 0;
	__u32 floor = p->family == XLB_AF_INET ? TOOBIG_V4_MIN_MTU : TOOBIG_V6_MIN_MTU;

	if (m > 0xffff)
		m = 0xffff;
	return m < floor ? floor : m;
}

/* toobig_may_fragment: an IPv4 datagram without DF (parse.h accepted it
 * whole, so it is not a fragment); *id is its identification. */
static __always_inline int toobig_may_fragment(struct xdp_md *ctx, const struct pkt *p, __be16 *id)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3 = p->l3_off;
	struct iphdr *ip;

	if (p->family != XLB_AF_INET || l3 > ETH_HLEN + 2 * VLAN_HLEN)
		return 0;
	ip = data + l3;
	if ((void *)(ip + 1) > data_end)
		return 0;
	*id = ip->id;
	return !(ip->frag_off & bpf_htons(IP_DF));
}

/* toobig_quote_sum: the one's complement sum (32-bit partial) of the
 * first len bytes of the IP datagram at l3, copied to a scratch buffer
 * and zero-padded to a multiple of 4. -1 on failure. */
static __always_inline __s64 toobig_quote_sum(struct xdp_md *ctx, __u32 l3, __u32 len)
{
	__u32 zero = 0;
	struct frag_hold_buf *b = bpf_map_lookup_elem(&xlb_frag_buf, &zero);
	__s64 sum = 0;

	if (!b || len > TOOBIG_QUOTE_MAX || len < 1)
		return -1;
	if (bpf_xdp_load_bytes(ctx, l3, b->data, len))
		return -1;
	*(__u32 *)(b->data + len) = 0;
	len = (len + 3) & ~3U;
#pragma unroll
	for (__u32 off = 0; off < TOOBIG_QUOTE_MAX; off += TOOBIG_CSUM_CHUNK) {
		__u32 n = len - off;

		if (off >= len)
			break;
		if (n > TOOBIG_CSUM_CHUNK)
			n = TOOBIG_CSUM_CHUNK;
		sum = bpf_csum_diff(NULL, 0, (__be32 *)(b->data + off), n, (__u32)sum);
		if (sum < 0)
			return -1;
	}
	return sum;
}

/* toobig_reframe grows the head by hdrs bytes in front of the IP
 * datagram at l3, keeps the L2 header with the MACs swapped, and cuts the
 * frame after quote bytes of the datagram. 0 or -1. */
static __always_inline int toobig_reframe(struct xdp_md *ctx, const struct pkt *p, __u32 hdrs,
					  __u32 quote)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3 = p->l3_off;
	__u8 mac[2 * ETH_ALEN];

	if (data + ETH_HLEN > data_end || l3 < ETH_HLEN || l3 > ETH_HLEN + 2 * VLAN_HLEN)
		return -1;
	__builtin_memcpy(mac, data, 2 * ETH_ALEN);
	if (bpf_xdp_adjust_head(ctx, -(int)hdrs))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (encap_move_l2(data, data_end, l3, hdrs))
		return -1;
	if (data + ETH_HLEN > data_end)
		return -1;
	__builtin_memcpy(data, mac + ETH_ALEN, ETH_ALEN);
	__builtin_memcpy(data + ETH_ALEN, mac, ETH_ALEN);

	__u32 et_off = l3 - 2;

	asm volatile("" : "+r"(et_off));
	if (et_off > ETH_HLEN + 2 * VLAN_HLEN - 2 || data + et_off + 2 > data_end)
		return -1;
	*(__be16 *)(data + et_off) = p->family == XLB_AF_INET ? BE_ETH_P_IP : BE_ETH_P_IPV6;
	return bpf_xdp_adjust_tail(ctx, (int)(l3 + hdrs + quote) - (int)(data_end - data)) ? -1 : 0;
}

/* toobig_write_v4 writes the IPv4 header and the ICMP header at l3. */
static __always_inline int toobig_write_v4(struct xdp_md *ctx, const struct pkt *p, __u32 quote,
					   __u32 mtu, __u32 qsum)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3 = p->l3_off;
	__u32 *w;

	if (l3 > ETH_HLEN + 2 * VLAN_HLEN)
		return -1;
	w = data + l3;
	if ((void *)(w + TOOBIG_V4_HDRS / 4) > data_end)
		return -1;
	__u32 saddr = *(const __u32 *)p->dst, daddr = *(const __u32 *)p->src;
	__u32 w0 = 0x45 | (__u32)bpf_htons(TOOBIG_V4_HDRS + quote) << 16;
	__u32 w2 = OUTER_TTL | (__u32)IPPROTO_ICMP << 8;
	__u32 i0 = ICMP_DEST_UNREACH | ICMP_FRAG_NEEDED << 8;
	__u32 i1 = (__u32)bpf_htons(mtu) << 16;

	w2 |= (__u32)csum_ipv4_words(w0, 0, w2, saddr, daddr) << 16;
	i0 |= (__u32)csum_ipv4_words(i0, i1, qsum, 0, 0) << 16;
	w[0] = w0;
	w[1] = 0; /* id 0, no flags */
	w[2] = w2;
	w[3] = saddr;
	w[4] = daddr;
	w[5] = i0;
	w[6] = i1;
	return 0;
}

/* toobig_write_v6 writes the IPv6 header and the ICMPv6 header at l3;
 * the checksum covers the pseudo-header (RFC 8200 8.1). */
static __always_inline int toobig_write_v6(struct xdp_md *ctx, const struct pkt *p, __u32 quote,
					   __u32 mtu, __u32 qsum)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3 = p->l3_off, len = ICMP_HLEN + quote;
	const __u32 *s = (const __u32 *)p->dst, *d = (const __u32 *)p->src;
	__u64 sum = qsum;
	__u32 *w;

	if (l3 > ETH_HLEN + 2 * VLAN_HLEN)
		return -1;
	w = data + l3;
	if ((void *)(w + TOOBIG_V6_HDRS / 4) > data_end)
		return -1;
	__u32 i0 = ICMPV6_PKT_TOOBIG, i1 = bpf_htonl(mtu);

#pragma unroll
	for (int i = 0; i < 4; i++)
		sum += (__u64)s[i] + d[i];
	sum += (__u64)bpf_htonl(len) + bpf_htonl(IPPROTO_ICMPV6) + i0 + i1; /* 64-bit: no carry lost */
	i0 |= (__u32)csum_fold64(sum) << 16;
	w[0] = bpf_htonl(6U << 28);
	w[1] = bpf_htons(len) | (__u32)IPPROTO_ICMPV6 << 16 | (__u32)OUTER_TTL << 24;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		w[2 + i] = s[i];
		w[6 + i] = d[i];
	}
	w[10] = i0;
	w[11] = i1;
	return 0;
}

/* toobig_icmp turns packet p into the ICMP error to its source that
 * advertises mtu. 0, or -1 (the packet is then unusable: drop it). */
static __always_inline int toobig_icmp(struct xdp_md *ctx, const struct pkt *p, __u32 mtu)
{
	__u32 v4 = p->family == XLB_AF_INET;
	__u32 hdrs = v4 ? TOOBIG_V4_HDRS : TOOBIG_V6_HDRS;
	__u32 quote = (v4 ? TOOBIG_V4_MAX : TOOBIG_V6_MAX) - hdrs;
	__s64 qsum;

	if (quote > p->l3_len)
		quote = p->l3_len;
	qsum = toobig_quote_sum(ctx, p->l3_off, quote);
	if (qsum < 0 || toobig_reframe(ctx, p, hdrs, quote))
		return -1;
	if (v4)
		return toobig_write_v4(ctx, p, quote, mtu, (__u32)qsum);
	return toobig_write_v6(ctx, p, quote, mtu, (__u32)qsum);
}
