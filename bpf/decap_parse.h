/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* decap_parse.h: header parsing for xlb-decap, bounds checks only, no map
 * access. Each step returns DECAP_NEXT to go on, or the counter that
 * decides the packet's fate (see decap_action). The packet is not changed. */
#pragma once

#include <stdbool.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include "decap_types.h"

/* DECAP_NEXT: this step accepted the packet, the next one decides. */
#define DECAP_NEXT DECAP_COUNTER_MAX

struct decap_cursor {
	void *pos;
	void *end;
};

/* What the parse learned about a tunnel packet. */
struct decap_tunnel {
	struct decap_addr dst; /* outer destination, key of decap_local */
	__u32 strip;           /* outer IP header + GRE header bytes */
	__u32 payload;         /* bytes of the outer datagram after the cursor */
	__u8 vlans;            /* VLAN tags in front of the outer header */
	__u8 proto;            /* IPPROTO_GRE, IPPROTO_IPIP, IPPROTO_IPV6 or IPPROTO_UDP (GUE) */
	__u8 outer6;           /* outer header is IPv6 */
	__u8 inner6;           /* inner datagram is IPv6 */
	__u8 frag;             /* outer IPv4 header is a fragment's */
};

/* decap_is_tunnel: proto (at l4, the outer payload) is a tunnel: GRE,
 * IPIP, or UDP to the GUE port. */
static __always_inline bool decap_is_tunnel(__u8 proto, const void *l4, const void *end)
{
	const __be16 *udp = l4;

	if (proto == IPPROTO_UDP)
		return decap_gue_port && (const void *)(udp + 2) <= end && udp[1] == decap_gue_port;
	return proto == IPPROTO_GRE || proto == IPPROTO_IPIP ||
	       proto == IPPROTO_IPV6;
}

/* decap_parse_l2 skips Ethernet and up to two VLAN tags; returns the
 * ethertype (network order), or 0 when the frame is too short. */
static __always_inline __be16 decap_parse_l2(struct decap_cursor *cur,
					     struct decap_tunnel *t)
{
	struct ethhdr *eth = cur->pos;
	struct decap_vlanhdr *vlan;
	__be16 proto;
	int i;

	if ((void *)(eth + 1) > cur->end)
		return 0;
	proto = eth->h_proto;
	cur->pos = eth + 1;

#pragma unroll
	for (i = 0; i < DECAP_VLAN_MAX; i++) {
		if (proto != BE_ETH_P_8021Q && proto != BE_ETH_P_8021AD)
			break;
		vlan = cur->pos;
		if ((void *)(vlan + 1) > cur->end)
			return 0;
		proto = vlan->proto;
		cur->pos = vlan + 1;
		t->vlans++;
	}
	return proto;
}

/* decap_ip4_csum_ok adds up the header's ihl 32-bit words in ones'
 * complement; a correct header sums to 0xffff. The caller has checked that
 * the header fits in the frame, but the verifier cannot carry that
 * variable-length check over to fixed offsets; without the per-word check
 * it says "invalid access to packet, off=42 size=4 ... R0 offset is outside
 * of the packet" at the first option word. */
static __always_inline bool decap_ip4_csum_ok(const struct iphdr *ip,
					      __u32 ihl, const void *end)
{
	const __u32 *w = (const void *)ip;
	__u64 sum = 0;
	int i;

#pragma unroll
	for (i = 0; i < 15; i++) {
		if (i < ihl && (const void *)(w + i + 1) <= end)
			sum += w[i];
	}
#pragma unroll
	for (i = 0; i < 4; i++)
		sum = (sum & 0xffff) + (sum >> 16);
	return sum == 0xffff;
}

/* decap_parse_ip4 validates the outer IPv4 header (options allowed) and
 * leaves the cursor behind it. */
static __always_inline enum decap_counter
decap_parse_ip4(struct decap_cursor *cur, struct decap_tunnel *t)
{
	struct iphdr *ip = cur->pos;
	__u32 hlen, tot;

	if ((void *)(ip + 1) > cur->end || ip->version != 4)
		return DECAP_PASS_OUTER_INVALID;
	hlen = ip->ihl * 4;
	if (hlen > 60 || !decap_is_tunnel(ip->protocol, (void *)ip + hlen, cur->end))
		return DECAP_PASS_NOT_TUNNEL;
	tot = bpf_ntohs(ip->tot_len);
	if (hlen < DECAP_IP4_HLEN || tot < hlen || (void *)ip + tot > cur->end)
		return DECAP_PASS_OUTER_INVALID;
	if (!decap_ip4_csum_ok(ip, ip->ihl, cur->end))
		return DECAP_PASS_OUTER_INVALID;

	t->proto = ip->protocol;
	t->frag = !!(ip->frag_off & bpf_htons(DECAP_IP_MF | DECAP_IP_OFFSET));
	t->dst.addr[10] = 0xff;
	t->dst.addr[11] = 0xff;
	__builtin_memcpy(&t->dst.addr[12], &ip->daddr, 4);
	t->strip = hlen;
	t->payload = tot - hlen;
	cur->pos = (void *)ip + hlen;
	return DECAP_NEXT;
}

/* decap_parse_ip6 validates the outer IPv6 header. A tunnel behind
 * extension headers is not recognised (the kernel gets it). */
static __always_inline enum decap_counter
decap_parse_ip6(struct decap_cursor *cur, struct decap_tunnel *t)
{
	struct ipv6hdr *ip6 = cur->pos;
	__u32 plen;

	if ((void *)(ip6 + 1) > cur->end || ip6->version != 6)
		return DECAP_PASS_OUTER_INVALID;
	if (!decap_is_tunnel(ip6->nexthdr, ip6 + 1, cur->end))
		return DECAP_PASS_NOT_TUNNEL;
	plen = bpf_ntohs(ip6->payload_len);
	if ((void *)(ip6 + 1) + plen > cur->end)
		return DECAP_PASS_OUTER_INVALID;

	t->proto = ip6->nexthdr;
	t->outer6 = 1;
	__builtin_memcpy(t->dst.addr, &ip6->daddr, 16);
	t->strip = DECAP_IP6_HLEN;
	t->payload = plen;
	cur->pos = ip6 + 1;
	return DECAP_NEXT;
}

/* decap_parse_outer parses L2 and the outer IP header. */
static __always_inline enum decap_counter
decap_parse_outer(struct decap_cursor *cur, struct decap_tunnel *t)
{
	__be16 proto = decap_parse_l2(cur, t);

	if (proto == BE_ETH_P_IP)
		return decap_parse_ip4(cur, t);
	if (proto == BE_ETH_P_IPV6)
		return decap_parse_ip6(cur, t);
	return DECAP_PASS_NOT_IP;
}

/* decap_parse_gre skips the GRE header and its optional fields and sets
 * the inner family from the protocol type. */
static __always_inline enum decap_counter
decap_parse_gre(struct decap_cursor *cur, struct decap_tunnel *t)
{
	struct decap_grehdr *gre = cur->pos;
	__u32 len = DECAP_GRE_HLEN;

	if ((void *)(gre + 1) > cur->end || t->payload < DECAP_GRE_HLEN)
		return DECAP_DROP_TRUNCATED;
	if (gre->flags & (BE_GRE_R | BE_GRE_VERSION))
		return DECAP_PASS_GRE_OTHER;
	if (gre->proto == BE_ETH_P_IP)
		t->inner6 = 0;
	else if (gre->proto == BE_ETH_P_IPV6)
		t->inner6 = 1;
	else
		return DECAP_PASS_GRE_OTHER;
	if (gre->flags & BE_GRE_C)
		len += DECAP_GRE_OPT_LEN;
	if (gre->flags & BE_GRE_K)
		len += DECAP_GRE_OPT_LEN;
	if (gre->flags & BE_GRE_S)
		len += DECAP_GRE_OPT_LEN;
	if (cur->pos + len > cur->end || t->payload < len)
		return DECAP_DROP_TRUNCATED;

	cur->pos += len;
	t->payload -= len;
	t->strip += len;
	return DECAP_NEXT;
}

/* decap_parse_gue skips the UDP header of GUE version 1 (no GUE header:
 * the inner IP header's version nibble says its family). Version 0 (a GUE
 * header, perhaps with options) goes to the kernel's fou/gue, if set up. */
static __always_inline enum decap_counter
decap_parse_gue(struct decap_cursor *cur, struct decap_tunnel *t)
{
	const __u8 *udp = cur->pos;
	__u8 v;

	if ((void *)(udp + DECAP_UDP_HLEN + 1) > cur->end || t->payload < DECAP_UDP_HLEN + 1)
		return DECAP_DROP_TRUNCATED;
	v = udp[DECAP_UDP_HLEN] >> 4;
	if (v == 4)
		t->inner6 = 0;
	else if (v == 6)
		t->inner6 = 1;
	else
		return DECAP_PASS_GUE_OTHER;
	cur->pos += DECAP_UDP_HLEN;
	t->payload -= DECAP_UDP_HLEN;
	t->strip += DECAP_UDP_HLEN;
	return DECAP_NEXT;
}

/* decap_check_inner4 wants a whole IPv4 header whose lengths fit in what
 * the outer datagram carries. */
static __always_inline enum decap_counter
decap_check_inner4(const struct decap_cursor *cur, const struct decap_tunnel *t)
{
	struct iphdr *ip = cur->pos;
	__u32 hlen, tot;

	if ((void *)(ip + 1) > cur->end || t->payload < DECAP_IP4_HLEN)
		return DECAP_DROP_TRUNCATED;
	if (ip->version != 4)
		return DECAP_DROP_INNER_VERSION;
	hlen = ip->ihl * 4;
	tot = bpf_ntohs(ip->tot_len);
	if (hlen < DECAP_IP4_HLEN || tot < hlen || tot > t->payload)
		return DECAP_DROP_INNER_LENGTH;
	return DECAP_NEXT;
}

/* decap_check_inner6: the same for an IPv6 header. */
static __always_inline enum decap_counter
decap_check_inner6(const struct decap_cursor *cur, const struct decap_tunnel *t)
{
	struct ipv6hdr *ip6 = cur->pos;

	if ((void *)(ip6 + 1) > cur->end || t->payload < DECAP_IP6_HLEN)
		return DECAP_DROP_TRUNCATED;
	if (ip6->version != 6)
		return DECAP_DROP_INNER_VERSION;
	if (DECAP_IP6_HLEN + bpf_ntohs(ip6->payload_len) > t->payload)
		return DECAP_DROP_INNER_LENGTH;
	return DECAP_NEXT;
}

/* decap_parse_tunnel parses what follows the outer header of a packet for
 * this host: GRE, UDP (GUE) or nothing (IPIP), then checks the inner
 * header. */
static __always_inline enum decap_counter
decap_parse_tunnel(struct decap_cursor *cur, struct decap_tunnel *t)
{
	enum decap_counter c;

	if (t->proto == IPPROTO_GRE || t->proto == IPPROTO_UDP) {
		c = t->proto == IPPROTO_GRE ? decap_parse_gre(cur, t) : decap_parse_gue(cur, t);
		if (c != DECAP_NEXT)
			return c;
	} else {
		t->inner6 = t->proto == IPPROTO_IPV6;
	}
	if (t->inner6)
		return decap_check_inner6(cur, t);
	return decap_check_inner4(cur, t);
}
