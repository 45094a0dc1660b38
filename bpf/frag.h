/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* frag.h: IP fragments to a VIP (Maglev paper section 4.3).
 *
 * A fragment carries its ports only in the first fragment, and routers
 * may spread one datagram's fragments over several nodes. So:
 *
 *  1. Redirect. A fragment that arrived from the network goes to the pool
 *     node its 3-tuple (src, dst, proto) hashes to, unless that is this
 *     node: GRE to the node's address with the RFC 1701 recursion-control
 *     field set to 1. All fragments of a datagram share the 3-tuple, so
 *     they all meet on one node.
 *
 *       [eth] [outer IPv4/IPv6 -> pool node] [GRE 0x0100 | ethertype] [fragment]
 *                                              ^ recursion control = 1
 *
 *  2. A GRE packet with recursion control set to this node's own address
 *     is decapsulated and handled here; it is never redirected again.
 *  3. The first fragment (offset 0, ports present) takes the path of the
 *     unfragmented flow (VIP, conntrack / Maglev) and records the real in
 *     the fragment table under (src, dst, proto, id); later fragments are
 *     forwarded by that entry to the same real.
 *  4. A later fragment that comes before its first is copied to xlbd over
 *     a ring buffer and dropped here; the table marks the datagram as
 *     waiting. The first fragment, finding the mark, sends a release event;
 *     xlbd then runs the held frames through the program again (live
 *     frames), which now forwards them by the table.
 *
 * Only services with `fragments: true` (XLB_VIP_F_FRAGMENTS) take
 * fragments; for the rest they are dropped (drop_fragment). Except the
 * pieces of a datagram this node fragmented itself (toobig.h): an entry
 * XLB_FRAG_LOCAL sends them to its real, never redirected. */
#pragma once

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "types.h"
#include "maps.h"
#include "maps.h"
#include "parse.h"
#include "hash.h"
#include "select.h"
#include "encap.h"
#include "methods.h"
#include "nexthop.h"
#include "stats.h"
#include "toobig.h"

/* First 16 bits of a redirect's GRE header: recursion control 1 (the low
 * three bits of the first byte, RFC 1701), no other flag, version 0. */
#define FRAG_GRE_FLAGS 0x0100

/* frag_vaddr_flags returns the xlb_vip_addrs bits of p's destination, 0
 * when it is not a VIP address. */
static __always_inline __u32 frag_vaddr_flags(const struct pkt *p)
{
	struct vip_key k = {};
	__u32 *f;

	__builtin_memcpy(k.addr, p->dst, 16);
	if (p->family == XLB_AF_INET)
		__builtin_memset(k.addr + 4, 0, 12);
	k.family = p->family;
	f = bpf_map_lookup_elem(&xlb_vip_addrs, &k);
	return f ? (*f ? *f : XLB_VADDR_F_VIP) : 0;
}

/* frag_hash3 hashes (src, dst, proto): flow hash v1 with zero ports. */
static __always_inline __u64 frag_hash3(const struct pkt *p)
{
	return select_hash_ports(p, 0);
}

/* Where a fragment goes: a real of a service, or (redirect) a pool node. */
struct frag_target {
	struct real_info *r;
	__u64 h;     /* the IPv6 outer flow label's source */
	__u32 svc;
	__u32 rid;
	__u32 new_flow;
	__u8 encap;
	__u8 redirect;
};

/* frag_parse reads a fragment's IP header at p->l3_off (family set): the
 * addresses, protocol, lengths, id and offset; l4_off is what follows the
 * IPv4 header or the IPv6 fragment header (found after any other
 * extension headers), proto the next header there. parse.h stops at
 * "a fragment"; the rest is here, verified once in xlb_frag. Returns 0, or
 * -1 when the packet is not a well-formed fragment. */
static __always_inline int frag_parse(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 l3 = p->l3_off;

	if (l3 > ETH_HLEN + 2 * VLAN_HLEN)
		return -1;
	if (p->family == XLB_AF_INET) {
		struct iphdr *ip = data + l3;
		__u32 hlen, tot;

		if ((void *)(ip + 1) > data_end)
			return -1;
		hlen = ip->ihl * 4;
		tot = bpf_ntohs(ip->tot_len);
		if (ip->version != 4 || hlen < IPV4_HLEN || tot < hlen || (void *)ip + tot > data_end ||
		    !(ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)))
			return -1;
		__builtin_memcpy(p->src, &ip->saddr, 4);
		__builtin_memcpy(p->dst, &ip->daddr, 4);
		p->proto = ip->protocol;
		p->tos = ip->tos;
		p->l3_len = tot;
		p->l4_off = l3 + hlen;
		p->frag_id = ip->id;
		p->frag_off = bpf_ntohs(ip->frag_off) & IP_OFFSET;
		return 0;
	}
	struct ipv6hdr *ip6 = data + l3;
	__u32 off = l3 + IPV6_HLEN, tot;
	__u8 next, *eh;
	int r;

	if ((void *)(ip6 + 1) > data_end)
		return -1;
	tot = IPV6_HLEN + bpf_ntohs(ip6->payload_len);
	if (ip6->version != 6 || (void *)ip6 + tot > data_end)
		return -1;
	__builtin_memcpy(p->src, &ip6->saddr, 16);
	__builtin_memcpy(p->dst, &ip6->daddr, 16);
	p->tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	p->l3_len = tot;
	next = ip6->nexthdr;
	r = ext6_is(next) ? xlb_ext6_walk(ctx, off, next, 1) : -1;
	if (r < 0 || !(r & EXT6_WALK_FRAGMENT))
		return -1;
	off = (r >> 8) & 0xffff; /* the Fragment header's */
	if (off > 4096)
		return -1;
	/* the mask keeps the bound in the register used below */
	asm volatile("%0 &= 0x1fff" : "+r"(off));
	eh = data + off;
	if ((void *)(eh + 8) > data_end)
		return -1;
	p->frag_id = *(__u32 *)(eh + 4);
	p->frag_off = bpf_ntohs(*(__be16 *)(eh + 2)) >> 3;
	p->proto = eh[0];
	p->l4_off = off + 8;
	return off + 8 - l3 <= tot ? 0 : -1;
}

/* frag_first_l4 finds a first fragment's TCP/UDP header: p->l4_off is
 * what follows the IPv4 header or the IPv6 fragment header; for IPv6 the
 * extension headers of the fragmentable part come first. Sets proto,
 * l4_off, ports, tcp_flags and returns 1 when the header is complete. */
static __always_inline int frag_first_l4(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 off = p->l4_off;
	__u32 end = p->l3_off + p->l3_len;
	__u8 next = p->proto;

	if (p->family == XLB_AF_INET6 && ext6_is(next)) {
		int r = xlb_ext6_walk(ctx, off, next, 0);

		if (r < 0)
			return 0;
		off = (r >> 8) & 0xffff;
		next = r;
	}
	if (off > 4096 || off >= end)
		return 0;
	p->proto = next;
	p->l4_off = off;
	end -= off;
	asm volatile("%0 &= 0x1fff" : "+r"(off));
	return parse_l4(data + off, data_end, end, p) == PARSE_OK;
}

static __always_inline void frag_make_key(const struct pkt *p, __u32 id, struct frag_key *k)
{
	__builtin_memcpy(k->src, p->src, 16);
	__builtin_memcpy(k->dst, p->dst, 16);
	if (p->family == XLB_AF_INET) {
		__builtin_memset(k->src + 4, 0, 12);
		__builtin_memset(k->dst + 4, 0, 12);
	}
	k->id = id;
	k->family = p->family;
	k->proto = p->proto;
}

/* frag_release tells xlbd the datagram's held fragments can go. */
static __always_inline void frag_release(const struct frag_key *k)
{
	struct frag_event ev = {.kind = XLB_FRAG_EV_RELEASE};

	ev.key = *k;
	bpf_ringbuf_output(&xlb_frag_ring, &ev, sizeof(ev), 0);
	stats_count(XLB_STAT_FRAG_RELEASE);
}

/* frag_copy sends xlbd a record of kind with the frame (HOLD, FRAGMENT;
 * arg goes in the record's pad). 0, or -1 when the frame is larger than
 * the buffer or the ring is full. */
static __always_inline int frag_copy(struct xdp_md *ctx, const struct frag_key *k, __u32 kind,
				     __u32 arg)
{
	__u32 zero = 0;
	struct frag_hold_buf *b = bpf_map_lookup_elem(&xlb_frag_buf, &zero);
	__u64 len = (__u64)ctx->data_end - (__u64)ctx->data;

	asm volatile("" : "+r"(len)); /* compared as 64 bits: "R4 min value is negative" */

	if (!b || len < ETH_HLEN || len > XLB_FRAG_HOLD_MAX)
		return -1;
	b->ev.kind = kind;
	b->ev.len = len;
	b->ev.ifindex = ctx->ingress_ifindex;
	b->ev.pad = arg;
	b->ev.key = *k;
	if (bpf_xdp_load_bytes(ctx, 0, b->data, len) ||
	    bpf_ringbuf_output(&xlb_frag_ring, b, sizeof(b->ev) + len, 0))
		return -1;
	return 0;
}

/* frag_hold copies the frame to xlbd and drops it here. */
static __always_inline int frag_hold(struct xdp_md *ctx, const struct frag_key *k)
{
	stats_count(frag_copy(ctx, k, XLB_FRAG_EV_HOLD, 0) ? XLB_STAT_FRAG_HOLD_FAIL : XLB_STAT_FRAG_HELD);
	return XDP_DROP;
}

/* frag_entry_target sets t to the real of table entry e: 1, or 0 when
 * that real is gone (left its service or inactive). */
static __always_inline int frag_entry_target(const struct frag_entry *e, struct frag_target *t)
{
	__u32 rid = e->rid;
	struct real_info *r = bpf_map_lookup_elem(&xlb_reals, &rid);

	if (!r || r->svc_id != e->svc_id || !(r->flags & XLB_REAL_F_ACTIVE))
		return 0;
	t->r = r;
	t->h = e->hash;
	t->svc = e->svc_id;
	t->rid = rid;
	t->encap = e->encap;
	return 1;
}

/* How long a piece of a datagram this node fragments (toobig.h) follows
 * its XLB_FRAG_LOCAL entry: xlbd re-injects the pieces at once. */
#define FRAG_LOCAL_NS (2ULL * 1000000000ULL)

/* frag_local: a piece of a datagram this node fragmented itself
 * (XLB_FRAG_LOCAL entry, recent) goes to the recorded real: returns 1 and
 * sets t; else 0. */
static __always_inline int frag_local(const struct frag_key *k, struct frag_target *t)
{
	struct frag_entry *e = bpf_map_lookup_elem(&xlb_frags, k);

	if (!e || e->state != XLB_FRAG_LOCAL || bpf_ktime_get_coarse_ns() - e->ts_ns > FRAG_LOCAL_NS)
		return 0;
	return frag_entry_target(e, t);
}

/* xlbd stamps xlb_frag_reader every 200 ms while it reads the ring. */
#define FRAG_READER_SILENT_NS (2ULL * 1000000000ULL)

/* frag_split: the frame goes to xlbd, which splits it into pieces of at
 * most mtu bytes and runs them through the program; dropped here. */
static __always_inline int frag_split(struct xdp_md *ctx, const struct frag_key *k, __u32 mtu)
{
	__u32 zero = 0;
	__u64 *seen = bpf_map_lookup_elem(&xlb_frag_reader, &zero);

	/* xlbd stopped: nothing would split it (nor read the ring) */
	if (!seen || bpf_ktime_get_coarse_ns() - *seen > FRAG_READER_SILENT_NS) {
		stats_count(XLB_STAT_TOO_BIG_NO_XLBD);
		return XDP_DROP;
	}
	if (frag_copy(ctx, k, XLB_FRAG_EV_FRAGMENT, mtu)) {
		stats_count(XLB_STAT_TOO_BIG_FRAGMENT_FAIL);
		return XDP_DROP;
	}
	stats_count(XLB_STAT_TOO_BIG_FRAGMENT);
	return XDP_DROP;
}

/* frag_hand_off: an IPv4 datagram or fragment too big for its real's
 * egress (toobig.h): the decision e goes to the fragment table under k as
 * XLB_FRAG_LOCAL, the frame to xlbd, which fragments it into pieces of at
 * most mtu bytes and runs them through the program (frag_local sends
 * them). The packet is dropped here. */
static __always_inline int frag_hand_off(struct xdp_md *ctx, const struct frag_key *k,
					 struct frag_entry *e, __u32 mtu)
{
	e->ts_ns = bpf_ktime_get_coarse_ns();
	e->state = XLB_FRAG_LOCAL;
	if (bpf_map_update_elem(&xlb_frags, k, e, BPF_ANY)) {
		stats_count(XLB_STAT_TOO_BIG_FRAGMENT_FAIL);
		return XDP_DROP;
	}
	return frag_split(ctx, k, mtu);
}

/* frag_too_big: fragment p for target t (a real, or a pool node) does not
 * fit that egress (MTU egress) once encapsulated: IPv4 is fragmented
 * further by xlbd (pieces for a real follow an XLB_FRAG_LOCAL entry;
 * pieces for a pool node are redirected again by their hash, to the same
 * node); IPv6 from the network gets the ICMPv6 error (the answer
 * XLB_L4_TOO_BIG | MTU, for the caller); an IPv6 fragment that came
 * redirected is dropped (drop_too_big): its sender is the pool node. */
static __always_inline int frag_too_big(struct xdp_md *ctx, const struct pkt *p,
					const struct frag_target *t, __u16 outer, __u32 from_peer,
					__u32 egress)
{
	__u32 mtu = toobig_client_mtu(p, egress, outer);
	struct frag_entry e = {};
	struct frag_key k = {};

	if (p->family == XLB_AF_INET) {
		frag_make_key(p, p->frag_id, &k);
		if (t->redirect)
			return frag_split(ctx, &k, mtu);
		e.hash = t->h;
		e.rid = t->rid;
		e.svc_id = t->svc;
		e.encap = t->encap;
		return frag_hand_off(ctx, &k, &e, mtu);
	}
	if (from_peer) {
		stats_count(XLB_STAT_DROP_TOO_BIG);
		return XDP_DROP;
	}
	return XLB_L4_TOO_BIG | mtu;
}

/* frag_send counts a fragment of a service (not a redirect) and sends it
 * to its target (as xlb_send does for whole datagrams); a redirect gets
 * GRE with recursion control set. */
static __always_inline int frag_send(struct xdp_md *ctx, const struct pkt *p,
				     const struct node_info *n, const struct frag_target *t,
				     __u32 from_peer)
{
	const struct real_info *r = t->r;
	__u16 ip_len = r->family == XLB_AF_INET ? IPV4_HLEN : IPV6_HLEN;
	__u16 outer = t->redirect ? ip_len + GRE_HLEN : methods_outer(r, t->encap);
	__u32 egress;
	int rc;

	if (t->encap == XLB_ENCAP_NAT) { /* refused by the config: no ports to rewrite */
		stats_count(XLB_STAT_DROP_FRAGMENT);
		return XDP_DROP;
	}
	egress = toobig_egress_mtu(ctx, p, r, n, outer);
	if (egress)
		return frag_too_big(ctx, p, t, outer, from_peer, egress);

	if (!t->redirect) {
		stats_add(&xlb_svc_stats, t->svc, p->l3_len, t->new_flow);
		stats_add(&xlb_real_stats, t->rid, p->l3_len, t->new_flow);
	}
	/* bounded here, in the register encap_push goes on to use: "R3
	 * offset is outside of the packet" otherwise */
	if (p->l3_off < ETH_HLEN || p->l3_off > ETH_HLEN + 2 * VLAN_HLEN) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	if (!t->redirect)
		return methods_send(ctx, p, r, t->rid, t->encap, n, t->h, 0, 0, false);
	rc = encap_push(ctx, p, r, t->encap, n, t->h);
	if (rc) {
		stats_count(rc);
		return XDP_DROP;
	}
	if (t->redirect) {
		void *data = (void *)(long)ctx->data;
		void *data_end = (void *)(long)ctx->data_end;
		__u32 off = p->l3_off + ip_len;

		if (off > ETH_HLEN + 2 * VLAN_HLEN + IPV6_HLEN)
			return XDP_DROP;
		__be16 *gre = data + off;

		if ((void *)(gre + 1) > data_end) {
			stats_count(XLB_STAT_DROP_INTERNAL);
			return XDP_DROP;
		}
		*gre = bpf_htons(FRAG_GRE_FLAGS);
		stats_count(XLB_STAT_FRAG_REDIRECT);
	}
	return nexthop_forward(ctx, r, n, outer + p->l3_len, 0);
}

/* frag_first: the first fragment chooses the backend as the unfragmented
 * flow would and records it. */
static __always_inline int frag_first(struct xdp_md *ctx, struct pkt *p,
				      const struct node_info *n, const struct frag_key *k,
				      struct frag_target *t)
{
	struct selection sel = {};
	struct frag_entry e = {};
	struct frag_entry *old;
	struct vip_info *v;
	__u64 h;
	int rc;

	p->frag_l4 = frag_first_l4(ctx, p);
	if (!p->frag_l4)
		return XLB_STAT_DROP_MALFORMED;
	v = select_vip(p);
	if (!v || !(v->flags & XLB_VIP_F_FRAGMENTS))
		return XLB_STAT_DROP_FRAGMENT;
	h = select_flow_hash(p);
	rc = select_backend(p, v, n, h, &sel, true);
	if (rc)
		return rc;
	if (sel.hit)
		stats_count(XLB_STAT_CT_HIT);
	e.ts_ns = bpf_ktime_get_coarse_ns();
	e.hash = h;
	e.rid = sel.rid;
	e.svc_id = v->svc_id;
	e.state = XLB_FRAG_DECIDED;
	e.encap = sel.real->encap ? sel.real->encap : v->encap;
	old = bpf_map_lookup_elem(&xlb_frags, k);
	if (old) {
		__u8 waiting = old->state == XLB_FRAG_WAITING;

		bpf_map_update_elem(&xlb_frags, k, &e, BPF_ANY);
		if (waiting)
			frag_release(k);
	} else if (bpf_map_update_elem(&xlb_frags, k, &e, BPF_NOEXIST)) {
		/* a later fragment marked it waiting in between */
		bpf_map_update_elem(&xlb_frags, k, &e, BPF_ANY);
		frag_release(k);
	}
	stats_count(XLB_STAT_FRAG_FIRST);
	t->r = sel.real;
	t->h = h;
	t->svc = e.svc_id;
	t->rid = e.rid;
	t->new_flow = sel.new_flow;
	t->encap = e.encap;
	return 0;
}

/* frag_later: a later fragment follows the table (returns 0, t set), or
 * waits for its first (returns -1: held or dropped, counted). Otherwise an
 * enum xlb_stat drop reason. */
static __always_inline int frag_later(struct xdp_md *ctx, const struct frag_conf *c,
				      const struct frag_key *k, struct frag_target *t)
{
	__u64 now = bpf_ktime_get_coarse_ns();
	struct frag_entry *e = bpf_map_lookup_elem(&xlb_frags, k);
	struct frag_entry w = {};

	if (!e || e->state != XLB_FRAG_DECIDED || now - e->ts_ns > c->timeout_ns) {
		w.ts_ns = now;
		w.state = XLB_FRAG_WAITING;
		if (!e) {
			if (bpf_map_update_elem(&xlb_frags, k, &w, BPF_NOEXIST))
				/* the first fragment recorded its decision in between */
				e = bpf_map_lookup_elem(&xlb_frags, k);
		} else if (e->state != XLB_FRAG_WAITING) {
			bpf_map_update_elem(&xlb_frags, k, &w, BPF_ANY); /* a stale decision */
			e = NULL;
		}
		if (!e || e->state != XLB_FRAG_DECIDED) {
			frag_hold(ctx, k);
			return -1;
		}
	}
	if (!frag_entry_target(e, t))
		return XLB_STAT_DROP_NO_BACKEND;
	stats_count(XLB_STAT_FRAG_FORWARD);
	return 0;
}

/* frag_handle: a fragment (PARSE_FRAGMENT) to an address that may be a
 * VIP's. from_peer: it came redirected, in GRE, from a pool node. */
static __always_inline int frag_handle(struct xdp_md *ctx, struct pkt *p, __u32 from_peer)
{
	struct frag_target t = {};
	struct frag_key k = {};
	struct frag_conf *c;
	struct node_info *n;
	__u32 zero = 0;
	__u32 fl;
	int rc;

	/* From the network, parse.h has the destination; a redirect's inner
	 * header is read first. */
	if (from_peer && frag_parse(ctx, p)) {
		stats_count(XLB_STAT_DROP_MALFORMED);
		return XDP_DROP;
	}
	fl = frag_vaddr_flags(p);
	if (!fl) {
		if (from_peer) {
			stats_count(XLB_STAT_DROP_MALFORMED);
			return XDP_DROP;
		}
		stats_count(XLB_STAT_PASS_NOT_VIP);
		return XDP_PASS;
	}
	if (!from_peer && frag_parse(ctx, p)) {
		stats_count(fl & (XLB_VADDR_F_FRAG_TCP | XLB_VADDR_F_FRAG_UDP) ? XLB_STAT_DROP_MALFORMED :
										   XLB_STAT_DROP_FRAGMENT);
		return XDP_DROP;
	}
	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!n) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	frag_make_key(p, p->frag_id, &k);
	if (!from_peer && frag_local(&k, &t))
		return frag_send(ctx, p, n, &t, 0);
	if (!(p->proto == IPPROTO_TCP && (fl & XLB_VADDR_F_FRAG_TCP)) &&
	    !(p->proto == IPPROTO_UDP && (fl & XLB_VADDR_F_FRAG_UDP))) {
		stats_count(XLB_STAT_DROP_FRAGMENT);
		return XDP_DROP;
	}
	c = bpf_map_lookup_elem(&xlb_frag_conf, &zero);
	if (!c) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	if (!from_peer && c->peers > 1) {
		__u64 h3 = frag_hash3(p);
		__u32 idx = hash_slot(h3, c->peers);

		if (idx != c->self) {
			t.r = bpf_map_lookup_elem(&xlb_frag_peers, &idx);
			if (!t.r || !t.r->family) {
				stats_count(XLB_STAT_DROP_INTERNAL);
				return XDP_DROP;
			}
			t.h = h3;
			t.encap = XLB_ENCAP_GRE;
			t.redirect = 1;
		}
	}
	if (!t.redirect) {
		rc = p->frag_off == 0 ? frag_first(ctx, p, n, &k, &t) : frag_later(ctx, c, &k, &t);
		if (rc < 0)
			return XDP_DROP;
		if (rc > 0 || !t.r) {
			stats_count(rc > 0 ? rc : XLB_STAT_DROP_INTERNAL);
			return XDP_DROP;
		}
	}
	return frag_send(ctx, p, n, &t, from_peer);
}

/* frag_gre_ours tells whether p (PARSE_OTHER_PROTO, proto GRE) is a
 * redirect to this node: fragment support on, destination = this node's
 * address, GRE with recursion control set. Returns the inner datagram's
 * frame offset, or 0. */
static __always_inline __u32 frag_gre_ours(struct xdp_md *ctx, const struct pkt *p,
					   __be16 *ethertype)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct frag_conf *c;
	struct node_info *n;
	__u32 zero = 0;
	__u32 off = p->l4_off;
	__u8 *g;

	c = bpf_map_lookup_elem(&xlb_frag_conf, &zero);
	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!c || !n || !c->peers)
		return 0;
	if (p->family == XLB_AF_INET) {
		if (!(n->flags & XLB_NODE_F_ADDR4) || *(__u32 *)p->dst != *(__u32 *)n->addr4)
			return 0;
	} else {
		if (!(n->flags & XLB_NODE_F_ADDR6))
			return 0;
		__u64 a0, a1, b0, b1;

		__builtin_memcpy(&a0, p->dst, 8);
		__builtin_memcpy(&a1, p->dst + 8, 8);
		__builtin_memcpy(&b0, n->addr6, 8);
		__builtin_memcpy(&b1, n->addr6 + 8, 8);
		if (a0 != b0 || a1 != b1)
			return 0;
	}
	if (off > 512 || off + GRE_HLEN > p->l3_off + p->l3_len)
		return 0;
	g = data + off;
	if ((void *)(g + GRE_HLEN) > data_end)
		return 0;
	/* no checksum, routing, key or sequence; recursion > 0; version 0 */
	if ((g[0] & 0xf8) || !(g[0] & 0x07) || g[1])
		return 0;
	*ethertype = *(__be16 *)(g + 2);
	if (*ethertype != BE_ETH_P_IP && *ethertype != BE_ETH_P_IPV6)
		return 0;
	return off + GRE_HLEN;
}

/* frag_decap removes the outer IP and GRE headers (shift bytes in front
 * of the inner datagram), keeping the L2 header; returns 0 or -1. */
static __always_inline int frag_decap(struct xdp_md *ctx, __u16 l3_off, __u32 shift,
				      __be16 ethertype)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u8 buf[ETH_HLEN + 2 * VLAN_HLEN];

	if (shift > 512)
		return -1;
	if (data + ETH_HLEN + 2 * VLAN_HLEN > data_end)
		return -1;
	__builtin_memcpy(buf, data, ETH_HLEN + 2 * VLAN_HLEN);
	if (l3_off == ETH_HLEN) {
		__u8 *to = data + shift;

		if ((void *)(to + ETH_HLEN) > data_end)
			return -1;
		__builtin_memcpy(to, buf, ETH_HLEN - 2);
		*(__be16 *)(to + ETH_HLEN - 2) = ethertype;
	} else if (l3_off == ETH_HLEN + VLAN_HLEN) {
		__u8 *to = data + shift;

		if ((void *)(to + ETH_HLEN + VLAN_HLEN) > data_end)
			return -1;
		__builtin_memcpy(to, buf, ETH_HLEN + VLAN_HLEN - 2);
		*(__be16 *)(to + ETH_HLEN + VLAN_HLEN - 2) = ethertype;
	} else if (l3_off == ETH_HLEN + 2 * VLAN_HLEN) {
		__u8 *to = data + shift;

		if ((void *)(to + ETH_HLEN + 2 * VLAN_HLEN) > data_end)
			return -1;
		__builtin_memcpy(to, buf, ETH_HLEN + 2 * VLAN_HLEN - 2);
		*(__be16 *)(to + ETH_HLEN + 2 * VLAN_HLEN - 2) = ethertype;
	} else {
		return -1;
	}
	return bpf_xdp_adjust_head(ctx, (int)shift) ? -1 : 0;
}
