/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* nat.h: method nat (docs/ARCHITECTURE.md, Forwarding methods). A client's
 * packet to VIP:vport leaves with its destination rewritten to the
 * backend's address and port; the backend routes its reply back through
 * this node, where xlb_nat_reply rewrites the reply's source back to
 * VIP:vport. Checksums are updated incrementally (RFC 1624): the IPv4
 * header's, and the TCP/UDP one, whose pseudo-header holds the addresses.
 *
 * Replies may come in on any CPU and any interface, so the flow's state is
 * not in the per-CPU conntrack slices but in xlb_nat, one LRU hash shared
 * by every CPU, keyed by the reply's own 5-tuple. The forward path writes
 * it when the flow is new to its CPU (a conntrack miss, reselection or
 * adoption from another CPU); every reply's lookup marks it used, so live
 * flows are the last the LRU evicts. The map is pinned: xlbd restarts keep
 * it. A reply that matches no entry is not touched. */
#pragma once

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "csum.h"
#include "maps.h"
#include "nathop.h"
#include "parse.h"
#include "stats.h"
#include "synclog.h"
#include "types.h"

/* Largest L4 offset rewritten: Ethernet, two VLAN tags and an IPv6 header
 * with extension headers (parse.h walks at most MAX_EXT_HDRS). */
#define NAT_MAX_L4_OFF 512

/* nat_addr4 replaces the IPv4 address at a (old) with new, updating the
 * header checksum; returns ~old + new for the L4 checksum. Words are as
 * loaded: byte order does not matter to the Internet checksum. */
static __always_inline __u64 nat_addr4(__u32 *a, __u16 *ipcheck, __u32 new)
{
	__u64 d = (__u64)(__u32)~*a + new;

	*a = new;
	*ipcheck = csum_fold64((__u16)~*ipcheck + d);
	return d;
}

/* nat_addr6: the same for an IPv6 address (no header checksum). */
static __always_inline __u64 nat_addr6(__u32 *a, const __u32 *new)
{
	__u64 d = 0;

#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u32 w = new[i];

		d += (__u64)(__u32)~a[i] + w;
		a[i] = w;
	}
	return d;
}

/* nat_rewrite replaces the source (src 1) or destination address and
 * port of p's TCP/UDP packet with addr and port, updating the checksums.
 * Returns 0 or an enum xlb_stat drop reason. */
static __always_inline int nat_rewrite(struct xdp_md *ctx, const struct pkt *p, int src,
				       const __u8 *addr, __be16 port)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3_off = p->l3_off, l4_off = p->l4_off;
	__be16 *ports, *check, oldp;
	__u64 sum;

	if (l3_off > ETH_HLEN + 2 * VLAN_HLEN || l4_off > NAT_MAX_L4_OFF)
		return XLB_STAT_DROP_INTERNAL;
	ports = data + l4_off;
	check = data + l4_off + (p->proto == IPPROTO_TCP ? 16 : 6);
	if ((void *)(ports + 2) > data_end || (void *)(check + 1) > data_end)
		return XLB_STAT_DROP_MALFORMED;
	if (p->family == XLB_AF_INET) {
		__u32 *a = data + l3_off + (src ? 12 : 16);

		if ((void *)(a + 1) > data_end)
			return XLB_STAT_DROP_MALFORMED;
		sum = nat_addr4(a, data + l3_off + 10, *(const __u32 *)addr);
	} else {
		__u32 *a = data + l3_off + (src ? 8 : 24);

		if ((void *)(a + 4) > data_end)
			return XLB_STAT_DROP_MALFORMED;
		sum = nat_addr6(a, (const __u32 *)addr);
	}
	oldp = ports[src ? 0 : 1];
	ports[src ? 0 : 1] = port;
	if (p->proto == IPPROTO_UDP && *check == 0 && p->family == XLB_AF_INET)
		return 0; /* no UDP checksum to keep */
	sum += (__u16)~*check + (__u32)(__u16)~oldp + port;
	__u16 c = csum_fold64(sum);

	*check = c || p->proto != IPPROTO_UDP ? c : 0xffff;
	return 0;
}

/* xlb_nat_track records the flow of p (to real r, rid, port bport) in
 * xlb_nat for its replies. A global function: its key and value stay off
 * the caller's stack (the 512-byte limit of the whole call chain). */
__attribute__((noinline)) int xlb_nat_track(const struct pkt *p, const struct real_info *r, __u32 rid,
					    __u32 bport)
{
	struct nat_key k = {};
	struct nat_val v = {};

	if (!p || !r)
		return -1;
	__builtin_memcpy(k.backend, r->addr, 16);
	__builtin_memcpy(k.client, p->src, 16);
	k.bport = bport;
	k.cport = (__be16)p->ports;
	k.proto = p->proto;
	k.family = p->family;
	__builtin_memcpy(v.vip, p->dst, 16);
	v.vport = pkt_dport(p);
	v.rid = rid;
	v.seen = (bpf_ktime_get_coarse_ns() >> XLB_TICK_SHIFT) & XLB_CT_TIME_MASK;
	return bpf_map_update_elem(&xlb_nat, &k, &v, BPF_ANY);
}

/* xlb_nat_note: with sync on, the NAT flow of p (to real rid) just
 * recorded for its replies goes to the peers too (a record of two slots,
 * XLB_SYNC_EV_NAT), so that a peer the routers move the flow or its
 * replies to rewrites them as this node does. Only NAT flows new to a
 * CPU come here: other methods pay nothing. A global function, called
 * beside xlb_nat_track (not from it: the call chain's stack). */
__attribute__((noinline)) int xlb_nat_note(const struct pkt *p, __u32 rid)
{
	__u32 cpu = bpf_get_smp_processor_id(), zero = 0;
	struct sync_conf *conf = bpf_map_lookup_elem(&xlb_sync_conf, &zero);
	struct sync_event *a, *b;
	struct sync_cpu *c;
	__u64 head;

	if (!p || !conf || !conf->enabled)
		return 0;
	c = sync_log_take(cpu);
	if (!c)
		return 0;
	head = c->head;
	a = sync_log_slot(c, cpu, head);
	b = sync_log_slot(c, cpu, head + 1);
	if (!a || !b) {
		sync_count(XLB_SYNC_STAT_LOST);
		sync_log_give(c, 0);
		return 0;
	}
	a->hash = p->ports; /* client port | VIP port << 16 */
	a->rid = rid;
	a->state = 0;
	a->kind = XLB_SYNC_EV_NAT;
	a->hold = 0;
	__builtin_memcpy(b, p->src, 16);
	sync_log_give(c, head + 2);
	return 0;
}

/* xlb_nat_forward: method nat toward r. track: the flow is new to this
 * CPU, record it for the replies (a failure is counted; the packet still
 * goes: its replies will reach the kernel untouched). Returns 0 or an enum
 * xlb_stat drop reason. A global function, verified once for its callers
 * (whole packets, ICMP errors, fragments). */
__attribute__((noinline)) int xlb_nat_forward(struct xdp_md *ctx, const struct pkt *p,
					      const struct real_info *r, __u32 rid, int track)
{
	if (!p || !r)
		return XLB_STAT_DROP_INTERNAL;

	__be16 bport = r->port ? r->port : pkt_dport(p);

	if (p->proto == IPPROTO_ICMP || p->proto == IPPROTO_ICMPV6)
		return 0; /* an error about a flow, rewritten by xlb_icmp (naticmp.h) */
	if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP)
		return XLB_STAT_DROP_INTERNAL;
	if (track && xlb_nat_track(p, r, rid, bport))
		stats_count(XLB_STAT_NAT_TRACK_FAIL);
	else if (track)
		xlb_nat_note(p, rid);
	return nat_rewrite(ctx, p, 0, r->addr, bport);
}

/* nat_reply_key: the xlb_nat key a reply p would have. */
static __always_inline void nat_reply_key(const struct pkt *p, struct nat_key *k)
{
	__builtin_memcpy(k->backend, p->src, 16);
	__builtin_memcpy(k->client, p->dst, 16);
	k->bport = (__be16)p->ports;
	k->cport = pkt_dport(p);
	k->proto = p->proto;
	k->family = p->family;
}

/* nat_fib asks the kernel's FIB for the next hop of the rewritten reply
 * p from vip and keeps the answer in slot h (nathop.h). Returns 0, or -1
 * without an answer. */
static __always_inline int nat_fib(struct xdp_md *ctx, const struct pkt *p, const __u8 *vip,
				   struct nat_hop *h, __u64 now)
{
	struct bpf_fib_lookup fib = {};
	int same;

	fib.ifindex = ctx->ingress_ifindex;
	fib.tot_len = p->l3_len;
	if (p->family == XLB_AF_INET) {
		fib.family = AF_INET;
		__builtin_memcpy(&fib.ipv4_src, vip, 4);
		__builtin_memcpy(&fib.ipv4_dst, p->dst, 4);
	} else {
		fib.family = AF_INET6;
		__builtin_memcpy(fib.ipv6_src, vip, 16);
		__builtin_memcpy(fib.ipv6_dst, p->dst, 16);
	}
	if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS)
		return -1;
	if (!h)
		return -1;
	/* the same lookup still fresh: the longest length accepted grows */
	same = nathop_same(h, p->dst, vip, ctx->ingress_ifindex, p->family) && now - h->ts < NAT_HOP_TTL_JIFFIES;
	if (!same || h->max_len < p->l3_len) {
		h->max_len = p->l3_len;
	}
	if (!same) {
		__builtin_memcpy(h->client, p->dst, 16);
		__builtin_memcpy(h->vip, vip, 16);
		h->iif = ctx->ingress_ifindex;
		h->family = p->family;
		h->ts = now;
	}
	h->oif = fib.ifindex;
	__builtin_memcpy(h->dmac, fib.dmac, ETH_ALEN);
	__builtin_memcpy(h->smac, fib.smac, ETH_ALEN);
	return 0;
}

/* nat_send_client sends a rewritten reply p to its client by the kernel's
 * FIB (its answer cached per CPU, nathop.h), counted as sent; without an
 * answer (a neighbour not resolved yet, a route the FIB cannot give XDP)
 * the kernel forwards it. */
static __always_inline int nat_send_client(struct xdp_md *ctx, const struct pkt *p, const __u8 *vip,
					   enum xlb_stat sent)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct nat_hop *h = nathop_slot(p->dst);
	__u64 now = bpf_jiffies64();
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	if (!h || !nathop_same(h, p->dst, vip, ctx->ingress_ifindex, p->family) ||
	    now - h->ts >= NAT_HOP_TTL_JIFFIES || p->l3_len > h->max_len) {
		if (nat_fib(ctx, p, vip, h, now)) {
			stats_count(XLB_STAT_NAT_REPLY_PASS);
			return XDP_PASS;
		}
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end || !h)
		return XDP_DROP;
	__builtin_memcpy(eth->h_dest, h->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, h->smac, ETH_ALEN);
	stats_count(sent);
	if (h->oif == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(h->oif, 0);
}

/* xlb_nat_reply: a TCP/UDP packet to no VIP. With NAT in use (node flag)
 * it is looked up as a NAT backend's reply; one gets its source rewritten
 * to the VIP and goes to the client. Anything else passes untouched. A
 * global function, verified once. */
__attribute__((noinline)) int xlb_nat_reply(struct xdp_md *ctx, const struct pkt *p)
{
	struct nat_key k = {};
	struct node_info *n;
	struct nat_val *v;
	__u32 zero = 0;
	__u8 vip[16];
	int rc;

	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!p || !n || !(n->flags & XLB_NODE_F_NAT)) {
		stats_count(XLB_STAT_PASS_NOT_VIP);
		return XDP_PASS;
	}
	nat_reply_key(p, &k);
	v = bpf_map_lookup_elem(&xlb_nat, &k);
	if (!v) {
		stats_count(XLB_STAT_PASS_NOT_VIP);
		return XDP_PASS;
	}
	__builtin_memcpy(vip, v->vip, 16);
	rc = nat_rewrite(ctx, p, 1, vip, v->vport);
	if (rc) {
		stats_count(rc);
		return XDP_DROP;
	}
	return nat_send_client(ctx, p, vip, XLB_STAT_NAT_REPLY);
}
