/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* icmp_echo.h: the node answers ICMP / ICMPv6 echo requests to a VIP
 * address itself, rate-limited per CPU by a token bucket
 * (node_info.icmp_echo_rate per second, burst of one second's worth). The
 * request is turned into the reply in place: MACs and addresses swapped,
 * type 8 -> 0 / 128 -> 129, TTL / hop limit 64, checksums updated
 * incrementally (RFC 1624; the ICMPv6 pseudo-header sum does not change
 * when the addresses swap). Only requests without IPv4 options or IPv6
 * extension headers are answered (the caller checks). */
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "csum.h"
#include "icmp.h"
#include "maps.h"
#include "parse.h"
#include "types.h"
#include "ratelimit.h"

/* icmp_echo_reply rewrites the echo request p in place into its reply.
 * Returns 0, or -1 if the headers are not where parsing left them. */
static __always_inline int icmp_echo_reply(struct xdp_md *ctx, const struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u8 mac[ETH_ALEN];
	__u32 l3 = p->l3_off, l4 = p->l4_off;
	__u16 *ic;

	if ((void *)(eth + 1) > data_end || l3 > ETH_HLEN + 2 * VLAN_HLEN || l4 > ICMP_MAX_OFF)
		return -1;
	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	ic = data + l4;
	if ((void *)(ic + ICMP_HLEN / 2) > data_end)
		return -1;
	if (p->family == XLB_AF_INET) {
		struct iphdr *ip = data + l3;
		__u16 old, new;
		__u32 a;

		if ((void *)(ip + 1) > data_end)
			return -1;
		a = ip->saddr;
		ip->saddr = ip->daddr;
		ip->daddr = a;
		old = *((__u16 *)ip + 4); /* ttl, protocol */
		ip->ttl = OUTER_TTL;
		new = *((__u16 *)ip + 4);
		ip->check = csum_replace16(ip->check, old, new);
		old = ic[0]; /* type, code */
		((__u8 *)ic)[0] = ICMP_ECHOREPLY;
		ic[1] = csum_replace16(ic[1], old, ic[0]);
	} else {
		struct ipv6hdr *ip6 = data + l3;
		__u8 a[16];
		__u16 old;

		if ((void *)(ip6 + 1) > data_end)
			return -1;
		__builtin_memcpy(a, &ip6->saddr, 16);
		__builtin_memcpy(&ip6->saddr, &ip6->daddr, 16);
		__builtin_memcpy(&ip6->daddr, a, 16);
		ip6->hop_limit = OUTER_TTL;
		old = ic[0];
		((__u8 *)ic)[0] = ICMPV6_ECHO_REPLY;
		ic[1] = csum_replace16(ic[1], old, ic[0]);
	}
	return 0;
}
