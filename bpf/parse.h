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

/* ext6_is: type is an IPv6 extension header that xlb walks past (or, a
 * Fragment header, stops at). */
static __always_inline int ext6_is(__u32 type)
{
	return type == NEXTHDR_HOP || type == NEXTHDR_ROUTING || type == NEXTHDR_DEST ||
	       type == NEXTHDR_AUTH || type == NEXTHDR_FRAGMENT;
}

/* The longest extension header chain a walk of MAX_EXT_HDRS headers can
 * cover from an IPv6 header at the deepest VLAN offset: every offset the
 * walks compute is within it, so the checks against it only state the
 * bound for the verifier. */
#define EXT6_REACH (ETH_HLEN + 2 * VLAN_HLEN + IPV6_HLEN + MAX_EXT_HDRS * 2048)

/* xlb_ext6's answer for the Fragment header of a fragment (offset or M
 * flag set), ORed with the header's length and next type. */
#define EXT6_FRAGMENT 0x100000

/* xlb_ext6 reads the IPv6 extension header of type type (ext6_is) at
 * frame offset off. Returns its length << 8 | the type of the header
 * after it, with EXT6_FRAGMENT for the Fragment header of a fragment (an
 * atomic fragment's is walked past); -1 when it does not lie in the
 * frame. A global function: the verifier checks it once, and the walks
 * that call it (parse_ipv6, frag.h) go on from an offset it cannot tell
 * apart by header kind, so their paths do not multiply with each header
 * of the chain (inline, that walk was most of every program's
 * verification). */
__attribute__((noinline)) int xlb_ext6(struct xdp_md *ctx, __u32 off, __u32 type)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *eh;
	__u32 len;

	if (off > EXT6_REACH)
		return -1;
	eh = data + off;
	if ((void *)(eh + 8) > data_end)
		return -1;
	if (type == NEXTHDR_FRAGMENT) {
		/* offset and M flag; an atomic fragment (both 0) is whole. */
		if (*(__be16 *)(eh + 2) & bpf_htons(0xfff9))
			return EXT6_FRAGMENT | 8 << 8 | eh[0];
		len = 8;
	} else if (type == NEXTHDR_AUTH) {
		len = ((__u32)eh[1] + 2) * 4;
	} else {
		len = ((__u32)eh[1] + 1) * 8;
	}
	return len << 8 | eh[0];
}

/* xlb_ext6_walk's answer when the chain reaches the Fragment header of a
 * fragment, ORed with that header's offset << 8 and the type after it. */
#define EXT6_WALK_FRAGMENT (1 << 30)

/* xlb_ext6_walk walks the IPv6 extension headers from the one of type next
 * (ext6_is) at frame offset off, MAX_EXT_HDRS at most, as far as the first
 * header that is not one: returns its frame offset << 8 | its type. A
 * Fragment header of a fragment ends the walk (EXT6_WALK_FRAGMENT); that
 * of an atomic fragment is walked past, unless frags is 0: then every
 * Fragment header ends the walk like an upper-layer header. -1: a header
 * does not lie in the frame, or the chain is longer. A global function,
 * so that its callers' stacks stay apart from its calls. */
__attribute__((noinline)) int xlb_ext6_walk(struct xdp_md *ctx, __u32 off, __u32 next, __u32 frags)
{
	for (int i = 0; i < MAX_EXT_HDRS; i++) {
		int r;

		if (!ext6_is(next) || (!frags && next == NEXTHDR_FRAGMENT))
			return off << 8 | next;
		r = xlb_ext6(ctx, off, next);
		if (r < 0)
			return -1;
		if (r & EXT6_FRAGMENT)
			return EXT6_WALK_FRAGMENT | off << 8 | (r & 0xff);
		off += (r >> 8) & 0xfff;
		if (off > EXT6_REACH)
			return -1;
		next = r & 0xff;
	}
	if (ext6_is(next) && (frags || next != NEXTHDR_FRAGMENT))
		return -1; /* chain longer than MAX_EXT_HDRS */
	return off << 8 | next;
}

static __always_inline int parse_ipv6(struct xdp_md *ctx, void *data, void *data_end, struct pkt *p)
{
	struct ipv6hdr *ip6 = data + p->l3_off;
	__u32 tot, off = IPV6_HLEN; /* from ip6 */
	__u8 next;
	int r;

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
	if (ext6_is(next)) {
		r = xlb_ext6_walk(ctx, p->l3_off + IPV6_HLEN, next, 1);
		if (r < 0)
			return PARSE_BAD_L3;
		if (r & EXT6_WALK_FRAGMENT)
			return PARSE_FRAGMENT;
		off = ((r >> 8) & 0xffff) - p->l3_off;
		next = r;
	}
	p->proto = next;
	if (off > tot || off > EXT6_REACH)
		return PARSE_BAD_L3; /* extension headers beyond the payload */
	p->l4_off = p->l3_off + off;
	return parse_l4((void *)ip6 + off, data_end, tot - off, p);
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
		return parse_ipv6(ctx, data, data_end, p);
	return PARSE_NOT_IP;
}
