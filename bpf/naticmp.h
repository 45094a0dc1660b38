/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* naticmp.h: ICMP errors about NAT flows, rewritten both ways
 * (docs/ARCHITECTURE.md, Forwarding methods), as VS/NAT must: the two ends
 * of a NAT flow know different addresses, so an error one end's network
 * sends quotes a packet the other end never sent.
 *
 *   to the backend  X -> VIP, quoting VIP:vport -> client (a router on the
 *                   client's side, or the client, about a reply): the outer
 *                   destination and the quoted source become the backend's
 *                   address and port (xlb_icmp, bpf/xlb.c)
 *   to the client   backend -> client, quoting client -> backend:bport (the
 *                   backend's stack about a packet it got): the outer source
 *                   and the quoted destination become VIP:vport
 *                   (xlb_nat_icmp_reply, found by the xlb_nat entry)
 *
 * Checksums are updated incrementally (RFC 1624): the outer IPv4 header's,
 * the quoted IPv4 header's, the quoted TCP/UDP checksum when the quote
 * holds it (a quoted IPv4 UDP checksum of 0 stays 0), and the ICMP one,
 * which covers the whole quote (and, for ICMPv6, the outer addresses). A
 * checksum that was wrong stays wrong. The ICMP "rest" (the MTU of a
 * frag-needed / packet-too-big) is kept: NAT adds no header, so the path
 * MTU either end learns is the one the error reports. */
#pragma once

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "csum.h"
#include "icmp.h"
#include "maps.h"
#include "methods.h"
#include "nat.h"
#include "parse.h"
#include "stats.h"
#include "types.h"

/* Largest frame offset of the quoted TCP/UDP header: the ICMP header at
 * NAT_MAX_L4_OFF at most, then a quoted IPv4 header with options. */
#define NATICMP_MAX_IN_L4 (NAT_MAX_L4_OFF + ICMP_HLEN + 60)

/* naticmp_quote_l4 rewrites the quoted port (destination if out, source
 * otherwise) to port and, when the quote holds it, the quoted TCP/UDP
 * checksum (pseudo: the address change). Returns the change to the ICMP
 * checksum, or -1 when the quote is too short for the ports. */
static __always_inline __s64 naticmp_quote_l4(struct xdp_md *ctx, __u32 off, __u32 end, __u8 proto,
					      int v4, __u32 out, __be16 port, __u64 pseudo)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__be16 *ports, *check, old;
	__u64 d, sum;

	if (off > NATICMP_MAX_IN_L4 || off + 4 > end)
		return -1;
	ports = data + off;
	if ((void *)(ports + 2) > data_end)
		return -1;
	old = ports[out ? 1 : 0];
	ports[out ? 1 : 0] = port;
	d = (__u64)(__u16)~old + port;
	sum = d;
	off += proto == IPPROTO_TCP ? 16 : 6;
	check = data + off;
	if ((void *)(check + 1) > data_end || off + 2 > end)
		return sum; /* the quote ends before the checksum */
	old = *check;
	if (proto == IPPROTO_UDP && old == 0 && v4)
		return sum; /* no UDP checksum to keep */
	__u16 c = csum_fold64((__u16)~old + pseudo + d);

	*check = c || proto != IPPROTO_UDP ? c : 0xffff;
	return sum + (__u16)~old + *check;
}

/* xlb_nat_icmp rewrites the ICMP error p about a NAT flow: out (to the
 * client): outer source, quoted destination address and port; else (to
 * the backend): outer destination, quoted source address and port; all to
 * to->vip and to->vport. icmp_parse has accepted the quote (TCP/UDP of
 * the outer family, the ports inside the datagram). Returns 0 or an enum
 * xlb_stat drop reason. A global function, verified once. */
__attribute__((noinline)) int xlb_nat_icmp(struct xdp_md *ctx, const struct pkt *p, const struct nat_val *to,
					   __u32 out)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3, l4, in, end;
	__u64 sum, pseudo;
	__u16 *icheck;
	__s64 l4sum;
	__u8 proto;

	if (!p || !to)
		return XLB_STAT_DROP_INTERNAL;
	l3 = p->l3_off;
	l4 = p->l4_off;
	end = l3 + p->l3_len;
	in = l4 + ICMP_HLEN;
	if (l3 > ETH_HLEN + 2 * VLAN_HLEN || l4 > NAT_MAX_L4_OFF)
		return XLB_STAT_DROP_INTERNAL;
	icheck = data + l4 + 2;
	if ((void *)(icheck + 1) > data_end)
		return XLB_STAT_DROP_MALFORMED;
	if (p->family == XLB_AF_INET) {
		struct iphdr *ip = data + l3, *q = data + in;
		__u16 qcheck;

		if ((void *)(ip + 1) > data_end || (void *)(q + 1) > data_end || in + IPV4_HLEN > end)
			return XLB_STAT_DROP_MALFORMED;
		nat_addr4(out ? (__u32 *)&ip->saddr : (__u32 *)&ip->daddr, (__u16 *)&ip->check, *(const __u32 *)to->vip);
		qcheck = q->check;
		pseudo = nat_addr4(out ? (__u32 *)&q->daddr : (__u32 *)&q->saddr, (__u16 *)&q->check, *(const __u32 *)to->vip);
		sum = pseudo + (__u16)~qcheck + q->check; /* ICMPv4: no pseudo-header */
		proto = q->protocol;
		in += q->ihl * 4;
	} else {
		struct ipv6hdr *ip6 = data + l3, *q6 = data + in;

		if ((void *)(ip6 + 1) > data_end || (void *)(q6 + 1) > data_end || in + IPV6_HLEN > end)
			return XLB_STAT_DROP_MALFORMED;
		/* the outer address is in the ICMPv6 pseudo-header */
		sum = nat_addr6(out ? (__u32 *)&ip6->saddr : (__u32 *)&ip6->daddr, (const __u32 *)to->vip);
		pseudo = nat_addr6(out ? (__u32 *)&q6->daddr : (__u32 *)&q6->saddr, (const __u32 *)to->vip);
		sum += pseudo;
		proto = q6->nexthdr;
		in += IPV6_HLEN;
	}
	l4sum = naticmp_quote_l4(ctx, in, end, proto, p->family == XLB_AF_INET, out, to->vport, pseudo);
	if (l4sum < 0)
		return XLB_STAT_DROP_MALFORMED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	icheck = data + l4 + 2;
	if ((void *)(icheck + 1) > data_end)
		return XLB_STAT_DROP_MALFORMED;
	*icheck = csum_fold64((__u16)~*icheck + sum + (__u64)l4sum);
	return 0;
}

/* nat_icmp_to_backend rewrites the ICMP error p, about the client's flow
 * `flow` (icmp_parse) of a NAT service, for its backend r. Returns 0 or an
 * enum xlb_stat drop reason. */
static __always_inline int nat_icmp_to_backend(struct xdp_md *ctx, const struct pkt *p, const struct pkt *flow,
					       const struct real_info *r)
{
	struct nat_val to = {};

	if (r->family != p->family)
		return XLB_STAT_DROP_INTERNAL; /* NAT never crosses families (config) */
	__builtin_memcpy(to.vip, r->addr, 16);
	to.vport = r->port ? r->port : pkt_dport(flow);
	return methods_reason(xlb_nat_icmp(ctx, p, &to, 0));
}

/* xlb_nat_icmp_reply: ICMP to no VIP address. With NAT in use (node
 * flag), an error whose quote is a tracked NAT flow's packet to its
 * backend (client -> backend:bport, found in xlb_nat by the reversed
 * quote, as a reply is) is rewritten to VIP:vport and goes to the client
 * as the flow's replies do. Anything else passes untouched. A global
 * function, verified once. */
__attribute__((noinline)) int xlb_nat_icmp_reply(struct xdp_md *ctx, const struct pkt *p)
{
	struct pkt flow = {};
	struct nat_key k = {};
	struct node_info *n;
	struct nat_val *v;
	struct nat_val to;
	__u32 zero = 0;
	int kind;

	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!p || !n || !(n->flags & XLB_NODE_F_NAT))
		goto pass;
	kind = icmp_parse(ctx, p, &flow);
	if (kind == ICMP_K_OTHER || kind == ICMP_K_ECHO)
		goto pass;
	nat_reply_key(&flow, &k); /* flow: backend:bport -> client:cport */
	v = bpf_map_lookup_elem(&xlb_nat, &k);
	if (!v)
		goto pass;
	to = *v;
	if (xlb_nat_icmp(ctx, p, &to, 1)) {
		stats_count(XLB_STAT_DROP_MALFORMED);
		return XDP_DROP;
	}
	return nat_send_client(ctx, p, to.vip, XLB_STAT_NAT_ICMP_REPLY);
pass:
	stats_count(XLB_STAT_PASS_OTHER_PROTO);
	return XDP_PASS;
}
