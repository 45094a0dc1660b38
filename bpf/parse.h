/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* parse.h: header parsing, bounds checks only, no map access. Fills a
 * struct pkt with what the later stages need; the packet is not changed. */
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "types.h"

enum parse_result {
	PARSE_OK = 0,      /* TCP or UDP, headers complete */
	PARSE_NOT_IP,      /* not IPv4/IPv6 (ARP, LLDP...) */
	PARSE_BAD_L3,      /* IP header invalid; dst known only if have_dst */
	PARSE_BAD_L4,      /* TCP/UDP header truncated or invalid */
	PARSE_FRAGMENT,    /* a fragment (first or later) */
	PARSE_OTHER_PROTO, /* neither TCP nor UDP */
};

#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10

struct pkt {
	__u8 src[16];
	__u8 dst[16];
	__u32 ports;    /* sport | dport << 16, as loaded from the wire */
	__u16 l3_off;   /* bytes of L2 header: 14, 18 or 22 */
	__u16 l3_len;   /* IP datagram length (header + payload) */
	__u16 l4_off;   /* frame offset of the L4 header (set when parsing got there) */
	__u8 family;    /* enum xlb_family */
	__u8 proto;     /* L4 protocol */
	__u8 tcp_flags; /* TCP_FLAG_* */
	__u8 tos;       /* IPv4 TOS / IPv6 traffic class */
	__u8 have_dst;  /* dst is valid even if parsing failed later */
	/* Fragments: filled by bpf/frag.h (frag_parse), not here. */
	__u8 frag_l4;   /* first fragment whose TCP/UDP header (ports) was read */
	__u16 frag_off; /* offset in 8-byte units; 0: the first fragment */
	__u32 frag_id;  /* IPv4 id (16 bits) or IPv6 identification, as loaded */
};

static __always_inline __be16 pkt_dport(const struct pkt *p)
{
	return (__be16)(p->ports >> 16);
}

/* parse_l2 skips Ethernet and up to two VLAN tags; returns the ethertype
 * (network order) and sets l3_off, or 0 when the frame is too short. */
static __always_inline __be16 parse_l2(void *data, void *data_end, struct pkt *p)
{
	struct ethhdr *eth = data;
	__be16 proto;

	if ((void *)(eth + 1) > data_end)
		return 0;
	proto = eth->h_proto;
	p->l3_off = ETH_HLEN;
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != BE_ETH_P_8021Q && proto != BE_ETH_P_8021AD)
			break;
		__be16 *inner = data + p->l3_off + 2;
		if ((void *)(inner + 1) > data_end)
			return 0;
		proto = *inner;
		p->l3_off += VLAN_HLEN;
	}
	return proto;
}

/* parse_l4 reads the TCP or UDP header at l4; room is what the IP
 * datagram has left from l4 on (the header must lie inside the datagram,
 * not only inside the frame). */
static __always_inline int parse_l4(void *l4, void *data_end, __u32 room, struct pkt *p)
{
	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *tcp = l4;

		if ((void *)(tcp + 1) > data_end || room < sizeof(*tcp) || tcp->doff < 5 ||
		    tcp->doff * 4 > room)
			return PARSE_BAD_L4;
		p->tcp_flags = ((__u8 *)tcp)[13];
	} else if (p->proto == IPPROTO_UDP) {
		struct udphdr *udp = l4;

		if ((void *)(udp + 1) > data_end || room < sizeof(*udp))
			return PARSE_BAD_L4;
	} else {
		return PARSE_OTHER_PROTO;
	}
	p->ports = *(__u32 *)l4;
	return PARSE_OK;
}

static __always_inline int parse_ipv4(void *data, void *data_end, struct pkt *p)
{
	struct iphdr *ip = data + p->l3_off;
	__u32 hlen, tot;

	if ((void *)(ip + 1) > data_end)
		return PARSE_BAD_L3;
	__builtin_memcpy(p->src, &ip->saddr, 4);
	__builtin_memcpy(p->dst, &ip->daddr, 4);
	p->have_dst = 1;
	p->family = XLB_AF_INET;
	p->proto = ip->protocol;
	p->tos = ip->tos;
	hlen = ip->ihl * 4;
	tot = bpf_ntohs(ip->tot_len);
	if (ip->version != 4 || hlen < IPV4_HLEN || tot < hlen ||
	    (void *)ip + tot > data_end)
		return PARSE_BAD_L3;
	p->l3_len = tot;
	if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return PARSE_FRAGMENT;
	p->l4_off = p->l3_off + hlen;
	return parse_l4((void *)ip + hlen, data_end, tot - hlen, p);
}

static __always_inline int parse_ipv6(void *data, void *data_end, struct pkt *p)
{
	struct ipv6hdr *ip6 = data + p->l3_off;
	void *cur = ip6 + 1;
	__u32 tot;
	__u8 next;

	if ((void *)(ip6 + 1) > data_end)
		return PARSE_BAD_L3;
	__builtin_memcpy(p->src, &ip6->saddr, 16);
	__builtin_memcpy(p->dst, &ip6->daddr, 16);
	p->have_dst = 1;
	p->family = XLB_AF_INET6;
	p->tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	tot = IPV6_HLEN + bpf_ntohs(ip6->payload_len);
	if (ip6->version != 6 || tot == IPV6_HLEN || (void *)ip6 + tot > data_end)
		return PARSE_BAD_L3;
	p->l3_len = tot;
	next = ip6->nexthdr;
#pragma unroll
	for (int i = 0; i < MAX_EXT_HDRS; i++) {
		__u8 *eh = cur;

		if (next != NEXTHDR_HOP && next != NEXTHDR_ROUTING && next != NEXTHDR_DEST &&
		    next != NEXTHDR_AUTH && next != NEXTHDR_FRAGMENT)
			break;
		if ((void *)(eh + 8) > data_end)
			return PARSE_BAD_L3;
		if (next == NEXTHDR_FRAGMENT) {
			/* offset and M flag; an atomic fragment (both 0) is whole. */
			if (*(__be16 *)(eh + 2) & bpf_htons(0xfff9))
				return PARSE_FRAGMENT;
			cur = eh + 8;
		} else if (next == NEXTHDR_AUTH) {
			cur = eh + ((__u32)eh[1] + 2) * 4;
		} else {
			cur = eh + ((__u32)eh[1] + 1) * 8;
		}
		next = eh[0];
	}
	if (next == NEXTHDR_HOP || next == NEXTHDR_ROUTING || next == NEXTHDR_DEST ||
	    next == NEXTHDR_AUTH || next == NEXTHDR_FRAGMENT)
		return PARSE_BAD_L3; /* chain longer than MAX_EXT_HDRS */
	p->proto = next;
	if (cur - (void *)ip6 > tot)
		return PARSE_BAD_L3; /* extension headers beyond the payload */
	p->l4_off = p->l3_off + (__u16)(cur - (void *)ip6);
	return parse_l4(cur, data_end, tot - (__u32)(cur - (void *)ip6), p);
}

/* parse_packet returns an enum parse_result. */
static __always_inline int parse_packet(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__be16 proto = parse_l2(data, data_end, p);

	if (proto == BE_ETH_P_IP)
		return parse_ipv4(data, data_end, p);
	if (proto == BE_ETH_P_IPV6)
		return parse_ipv6(data, data_end, p);
	return PARSE_NOT_IP;
}
