/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* persist.h: persistence templates (IPVS persistent services, -p / -M),
 * shared by all CPUs without a lock (docs/ARCHITECTURE.md,
 * "Persistence"). A template maps (client address under the service's
 * netmask, service or group) to a backend. The table is direct-mapped:
 * the template's hash names exactly one 8-byte slot,
 *
 *   63          43 42       24 23           0
 *  +--------------+-----------+--------------+
 *  | tag (21)     | real (19) | expires (24) |
 *  +--------------+-----------+--------------+
 *
 * written only by compare-and-swap. Two CPUs creating the same template
 * at once race for the same slot: one wins, the other reads the winner's
 * backend and uses it, so a client never gets two. A slot held by another
 * live template is not taken: that client goes without persistence until
 * the slot frees (bounded memory). A template expires at a tick: its
 * timeout after its last use, or later while a tracked connection of it
 * lives (each packet that moves the connection's entry on holds the
 * template for that entry's timeout too, xlb_persist_touch), so an idle
 * open connection keeps its client on its backend. The sweep
 * (xlb_persist_sweep) frees expired slots. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"
#include "maps.h"
#include "hash.h"
#include "sched.h"
#include "conns.h"
#include "parse.h"
#include "synclog.h"

static __always_inline __u32 persist_real(__u64 w)
{
	return (w >> XLB_PERSIST_REAL_SHIFT) & XLB_CT_REAL_MASK;
}

/* persist_left: the ticks template w lives on after now, modulo the
 * stamp; persist_live: it has not expired (expires at or after now, by
 * less than half the stamp's cycle: an expired stamp reads as live again
 * only after ~26 days, and the sweep frees it long before). */
static __always_inline __u64 persist_left(__u64 now, __u64 w)
{
	return (w - now) & XLB_PERSIST_TIME_MASK;
}

static __always_inline int persist_live(__u64 now, __u64 w)
{
	return w && persist_left(now, w) < (1 << (XLB_PERSIST_TIME_BITS - 1));
}

/* persist_hold: w expiring at now + hold, or w when it expires later
 * already (0: nothing to write). */
static __always_inline __u64 persist_hold(__u64 w, __u64 now, __u64 hold)
{
	if (persist_live(now, w) && persist_left(now, w) >= hold)
		return 0;
	return (w & ~(__u64)XLB_PERSIST_TIME_MASK) | ((now + hold) & XLB_PERSIST_TIME_MASK);
}

/* persist_key: the template's hash: the client's source hash srch (its
 * address under the persistence netmask; the same on every node) mixed
 * with the service's or group's persistence id (this node's). */
static __always_inline __u64 persist_key(__u64 srch, __u32 persist_id)
{
	return hash_fmix64(hash_mix(srch, persist_id));
}

/* xlb_persist_source: the client's source hash for templates of a
 * service with persistence netmasks plen4 and plen6. A global function:
 * its address words stay off the frames of xlb_persist_use and
 * xlb_persist_touch, which sit deep in the fragment stage's call chain
 * (512 bytes of stack for all of it). */
__attribute__((noinline)) __u64 xlb_persist_source(const struct pkt *p, __u32 plen4, __u32 plen6)
{
	if (!p)
		return 0;
	return sched_source_hash(p, plen4, plen6);
}

static __always_inline __u64 persist_source(const struct pkt *p, const struct svc_sched *s)
{
	return xlb_persist_source(p, s->pplen4, s->pplen6);
}

/* xlb_persist_report: template ne (over old, 0 when new) was written for
 * the client of source hash srch: with sync on, peers are told when it is
 * new or its expiry crossed a refresh boundary (synclog.h), with the ticks
 * it lives on plus one refresh period, so that a peer's copy never
 * expires before this node's. Inline: a call deeper would pass the
 * combined stack limit of the entry's chain of global functions. */
static __always_inline int persist_report(__u64 srch, __u64 old, __u64 ne, __u64 now)
{
	struct sync_conf *c;
	__u32 zero = 0, shift;
	__u64 left = persist_left(now, ne);

	c = bpf_map_lookup_elem(&xlb_sync_conf, &zero);
	if (!c || !c->enabled)
		return 0;
	shift = sync_shift(c->refresh_shift & 15, left);
	if (old && ((old ^ ne) >> XLB_PERSIST_REAL_SHIFT) == 0 &&
	    ((old & XLB_PERSIST_TIME_MASK) >> shift) == ((ne & XLB_PERSIST_TIME_MASK) >> shift))
		return 0;
	left += 1ULL << shift;
	xlb_sync_put(srch, persist_real(ne), (left > 0xffff ? 0xffff : left) << 16, XLB_SYNC_EV_TEMPLATE);
	return 1;
}

/* A search of the service's list for a backend (bpf_loop). */
struct persist_find {
	const struct svc_sched *s;
	const struct real_info *want; /* the template's real */
	__u32 want_id;
	__u32 found; /* the service's real of that backend, 0: none */
};

static long persist_find_step(__u64 i, void *arg)
{
	struct persist_find *f = arg;
	const struct svc_sched *s = f->s;
	const struct real_info *r;
	__u32 rid;

	if (!s || !f->want)
		return 1;
	rid = s->ent[(__u32)i & (XLB_SCHED_LIST_MAX - 1)].rid;
	if (rid == f->want_id) {
		f->found = rid;
		return 1;
	}
	r = bpf_map_lookup_elem(&xlb_reals, &rid);
	if (r && r->family == f->want->family && *(__u64 *)r->addr == *(__u64 *)f->want->addr &&
	    *(__u64 *)(r->addr + 8) == *(__u64 *)(f->want->addr + 8)) {
		f->found = rid;
		return 1;
	}
	return 0;
}

/* xlb_persist_usable: the real of service s (its usable list) that is the
 * backend of template real tid, or 0: the backend left the service, or is
 * drained, unhealthy or of weight 0 (IPVS expire_quiescent). A global
 * function: its search stays off the frame of xlb_persist_use, deep in
 * the fragment stage's call chain (512 bytes of stack for all of it). */
__attribute__((noinline)) __u32 xlb_persist_usable(const struct svc_sched *s, __u32 tid)
{
	struct persist_find f = {.s = s, .want_id = tid};
	__u32 n;

	if (!s)
		return 0;
	n = s->n;

	f.want = bpf_map_lookup_elem(&xlb_reals, &tid);
	if (!f.want || !n || n > XLB_SCHED_LIST_MAX)
		return 0;
	bpf_loop(n, persist_find_step, &f, 0);
	return f.found;
}

/* persist_hold_ticks: how long a use by p, whose tracked connection is
 * now in state, holds the template of service s: its timeout, or the
 * connection's timeout in that state when longer (IPVS keeps a template
 * while a connection of it lives). */
static __always_inline __u64 persist_hold_ticks(const struct pkt *p, const struct svc_sched *s, __u64 state)
{
	__u32 zero = 0;
	const struct node_info *n = bpf_map_lookup_elem(&xlb_node, &zero);
	__u64 t = 0;

	if (!n)
		return s->persist_timeout;
	if (p->proto != IPPROTO_TCP)
		t = n->timeout_udp;
	else if (state == XLB_CT_SYN)
		t = n->timeout_tcp_syn;
	else if (state == XLB_CT_CLOSING)
		t = n->timeout_tcp_fin;
	else
		t = n->timeout_tcp;
	return t > s->persist_timeout ? t : s->persist_timeout;
}

/* persist_new_state: the state a new tracked flow of p starts in. */
static __always_inline __u64 persist_new_state(const struct pkt *p)
{
	if (p->proto != IPPROTO_TCP)
		return XLB_CT_ESTABLISHED;
	if (p->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST))
		return XLB_CT_CLOSING;
	if ((p->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN)
		return XLB_CT_SYN;
	return XLB_CT_ESTABLISHED;
}

/* xlb_persist_use: for a new flow of service svc_id: the backend of the
 * client's live template, as a real of this service (the template is
 * held on), or, when there is none or its backend may not take the
 * flow, the template is set to rid (chosen by the scheduler) and rid is
 * returned; a template another CPU set meanwhile wins. Returns rid when
 * the service has no persistence. A global function, verified once. */
__attribute__((noinline)) int xlb_persist_use(const struct pkt *p, __u32 svc_id, __u32 rid, __u64 now)
{
	struct svc_sched *s = bpf_map_lookup_elem(&xlb_svc_sched, &svc_id);
	__u64 srch, h, tag, w, hold, *slot;
	__u32 key, got;

	if (!p || !s || !s->persist_timeout)
		return rid;
	srch = persist_source(p, s);
	h = persist_key(srch, s->persist_id);
	key = (__u32)h & (XLB_PERSIST_SLOTS - 1);
	tag = h >> XLB_PERSIST_TAG_SHIFT;
	slot = bpf_map_lookup_elem(&xlb_persist, &key);
	if (!slot)
		return rid;
	hold = persist_hold_ticks(p, s, persist_new_state(p));
	for (int t = 0; t < 2; t++) {
		__u64 ne;

		w = *slot;
		if (persist_live(now, w) && (w >> XLB_PERSIST_TAG_SHIFT) == tag &&
		    (got = xlb_persist_usable(s, persist_real(w)))) {
			ne = persist_hold(w, now, hold);
			if (ne && __sync_val_compare_and_swap(slot, w, ne) == w)
				persist_report(srch, w, ne, now);
			return got;
		}
		if (persist_live(now, w) && (w >> XLB_PERSIST_TAG_SHIFT) != tag)
			return rid; /* the slot is another client's: no template */
		ne = tag << XLB_PERSIST_TAG_SHIFT | (__u64)rid << XLB_PERSIST_REAL_SHIFT |
		     ((now + hold) & XLB_PERSIST_TIME_MASK);
		if (__sync_val_compare_and_swap(slot, w, ne) == w) {
			persist_report(srch, 0, ne, now);
			return rid;
		}
	}
	return rid;
}

/* xlb_persist_touch: a packet of a tracked flow of service svc_id moved
 * its entry on (at most once per tick) to way (conntrack layout): the
 * client's live template, if it names the way's backend, is held for the
 * longer of its timeout and the way's state's. A global function. */
__attribute__((noinline)) int xlb_persist_touch(const struct pkt *p, __u32 svc_id, __u64 way, __u64 now)
{
	struct svc_sched *s = bpf_map_lookup_elem(&xlb_svc_sched, &svc_id);
	__u64 srch, h, w, ne, *slot;
	__u32 key;

	if (!p || !s || !s->persist_timeout)
		return 0;
	srch = persist_source(p, s);
	h = persist_key(srch, s->persist_id);
	key = (__u32)h & (XLB_PERSIST_SLOTS - 1);
	slot = bpf_map_lookup_elem(&xlb_persist, &key);
	if (!slot)
		return 0;
	w = *slot;
	if ((w >> XLB_PERSIST_TAG_SHIFT) != h >> XLB_PERSIST_TAG_SHIFT ||
	    persist_real(w) != conns_way_real(way) || !persist_live(now, w))
		return 0;
	ne = persist_hold(w, now, persist_hold_ticks(p, s, conns_way_state(way)));
	if (!ne || __sync_val_compare_and_swap(slot, w, ne) != w)
		return 0;
	persist_report(srch, w, ne, now);
	return 1;
}
