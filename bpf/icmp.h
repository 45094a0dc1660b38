/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* icmp.h: ICMP and ICMPv6 parsing for ICMP to a VIP, bounds checks only, no
 * map access, the packet is not changed. Classifies an ICMP message whose
 * IP header parse.h accepted (p->l4_off, p->l3_len) as an echo request, an
 * error about a TCP/UDP flow (with the flow, reversed, in a struct pkt of
 * its own), or something else.
 *
 * An error about a VIP flow embeds the start of a packet the backend sent
 * (source VIP:port, destination client:port). The flow xlb tracks is the
 * client's, so the embedded tuple is reversed: src = embedded destination,
 * dst = embedded source, ports swapped. The embedded packet must be of the
 * outer family, TCP or UDP, not a non-first fragment, with its first four
 * L4 bytes (the ports) inside the outer datagram; IPv6 embedded packets
 * must carry TCP/UDP directly (no extension headers). The outer packet's
 * destination must equal the embedded source (the router reports to the
 * sender). */
#pragma once

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "parse.h"
#include "types.h"

#define ICMP_ECHOREPLY 0
#define ICMP_DEST_UNREACH 3
#define ICMP_ECHO 8
#define ICMP_TIME_EXCEEDED 11
#define ICMP_FRAG_NEEDED 4 /* code of ICMP_DEST_UNREACH */

#define ICMPV6_DEST_UNREACH 1
#define ICMPV6_PKT_TOOBIG 2
#define ICMPV6_TIME_EXCEED 3
#define ICMPV6_ECHO_REQUEST 128
#define ICMPV6_ECHO_REPLY 129

/* Largest frame offset of an ICMP header handled (the linear part of an
 * XDP frame is smaller). */
#define ICMP_MAX_OFF 4096
#define ICMP_HLEN 8 /* type, code, checksum, 4 bytes rest (both versions) */

enum icmp_kind {
	ICMP_K_OTHER = 0,       /* not handled: to the kernel */
	ICMP_K_ECHO,            /* echo request (code 0) */
	ICMP_K_FRAG_NEEDED,     /* v4 unreachable/frag-needed, v6 packet-too-big */
	ICMP_K_UNREACH,         /* destination unreachable, other codes */
	ICMP_K_TIME_EXCEEDED,   /* time exceeded */
};

/* icmp_kind_of maps (family, type, code) to an enum icmp_kind. */
static __always_inline int icmp_kind_of(__u8 family, __u8 type, __u8 code)
{
	if (family == XLB_AF_INET) {
		if (type == ICMP_ECHO)
			return code == 0 ? ICMP_K_ECHO : ICMP_K_OTHER;
		if (type == ICMP_DEST_UNREACH)
			return code == ICMP_FRAG_NEEDED ? ICMP_K_FRAG_NEEDED : ICMP_K_UNREACH;
		if (type == ICMP_TIME_EXCEEDED)
			return ICMP_K_TIME_EXCEEDED;
		return ICMP_K_OTHER;
	}
	if (type == ICMPV6_ECHO_REQUEST)
		return code == 0 ? ICMP_K_ECHO : ICMP_K_OTHER;
	if (type == ICMPV6_PKT_TOOBIG)
		return ICMP_K_FRAG_NEEDED;
	if (type == ICMPV6_DEST_UNREACH)
		return ICMP_K_UNREACH;
	if (type == ICMPV6_TIME_EXCEED)
		return ICMP_K_TIME_EXCEEDED;
	return ICMP_K_OTHER;
}

static __always_inline int icmp_addr6_eq(const __u32 *a, const __u32 *b)
{
	return ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3])) == 0;
}

/* icmp_parse classifies the ICMP message of p (p->proto is ICMP of p's
 * family). For an error about a TCP/UDP flow it fills flow with the
 * client's flow (reversed embedded tuple). Returns an enum icmp_kind;
 * ICMP_K_OTHER for anything not handled, including errors whose embedded
 * packet does not qualify. */
static __always_inline int icmp_parse(struct xdp_md *ctx, const struct pkt *p, struct pkt *flow)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l4_off = p->l4_off;
	__u32 end_off = (__u32)p->l3_off + p->l3_len; /* end of the outer datagram */
	__u8 *ic;
	int kind;

	if (l4_off > ICMP_MAX_OFF) /* bounds the packet offsets for the verifier */
		return ICMP_K_OTHER;
	ic = data + l4_off;
	if ((void *)(ic + ICMP_HLEN) > data_end || l4_off + ICMP_HLEN > end_off)
		return ICMP_K_OTHER;
	kind = icmp_kind_of(p->family, ic[0], ic[1]);
	if (kind == ICMP_K_OTHER || kind == ICMP_K_ECHO)
		return kind;

	/* An error: the embedded packet follows the 8-byte ICMP header. */
	__u32 in_off = l4_off + ICMP_HLEN;
	__u32 l4in_off;

	if (p->family == XLB_AF_INET) {
		struct iphdr *in = (void *)(ic + ICMP_HLEN);
		__u32 hlen;

		if ((void *)(in + 1) > data_end || in_off + IPV4_HLEN > end_off)
			return ICMP_K_OTHER;
		hlen = in->ihl * 4;
		if (in->version != 4 || hlen < IPV4_HLEN)
			return ICMP_K_OTHER;
		if (in->protocol != IPPROTO_TCP && in->protocol != IPPROTO_UDP)
			return ICMP_K_OTHER;
		if (in->frag_off & bpf_htons(IP_OFFSET))
			return ICMP_K_OTHER; /* a later fragment has no ports */
		if (in->saddr != *(__u32 *)p->dst)
			return ICMP_K_OTHER;
		__builtin_memcpy(flow->src, &in->daddr, 4);
		__builtin_memcpy(flow->dst, &in->saddr, 4);
		flow->proto = in->protocol;
		l4in_off = in_off + hlen;
	} else {
		struct ipv6hdr *in6 = (void *)(ic + ICMP_HLEN);

		if ((void *)(in6 + 1) > data_end || in_off + IPV6_HLEN > end_off)
			return ICMP_K_OTHER;
		if (in6->version != 6)
			return ICMP_K_OTHER;
		if (in6->nexthdr != IPPROTO_TCP && in6->nexthdr != IPPROTO_UDP)
			return ICMP_K_OTHER;
		if (!icmp_addr6_eq((__u32 *)&in6->saddr, (const __u32 *)p->dst))
			return ICMP_K_OTHER;
		__builtin_memcpy(flow->src, &in6->daddr, 16);
		__builtin_memcpy(flow->dst, &in6->saddr, 16);
		flow->proto = in6->nexthdr;
		l4in_off = in_off + IPV6_HLEN;
	}
	if (l4in_off > ICMP_MAX_OFF + 128 || l4in_off + 4 > end_off)
		return ICMP_K_OTHER;
	__u16 *ports = data + l4in_off;

	if ((void *)(ports + 2) > data_end)
		return ICMP_K_OTHER;
	/* embedded sport = VIP port, dport = client port: the client's flow
	 * has them the other way round (sport | dport << 16 as loaded). */
	flow->ports = (__u32)ports[1] | (__u32)ports[0] << 16;
	flow->family = p->family;
	flow->have_dst = 1;
	return kind;
}
