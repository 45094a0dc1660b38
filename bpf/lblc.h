/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* lblc.h: the locality-based least-connection schedulers, IPVS's lblc and
 * lblcr (docs/ARCHITECTURE.md, "Schedulers"). A table shared by all CPUs
 * maps (service, destination address) to a backend (lblc) or a set of
 * backends (lblcr):
 *
 * - lblc: a new flow goes to the entry's backend while it is usable and
 *   not overloaded; overloaded means more active connections than its
 *   weight while some backend of the service has fewer than half its
 *   weight. Otherwise weighted least connections (wlc) chooses among the
 *   service's usable backends and the choice is recorded.
 * - lblcr: the flow goes to the set's least loaded usable backend (wlc
 *   among the set) unless it is overloaded; then wlc chooses among all
 *   and the choice joins the set. A set of more than one backend whose
 *   last change is older than the expiration loses its most loaded one.
 * - an entry not used for the expiration (svc_sched.stride, ticks) is
 *   forgotten: the next flow to its destination is scheduled afresh.
 *
 * Lock-free: the entry's fields are written by compare-and-swap (the
 * backends) or as whole aligned words (the times); creating an entry (or
 * replacing an expired one) is one map update: of two CPUs creating the
 * same entry at once each keeps its own choice for its flow, and the
 * later write stays. The map is an LRU hash: when full, the entries used
 * least recently make room. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"
#include "maps.h"
#include "sched.h"
#include "conns.h"
#include "synclog.h"

/* lblc_step's argument: the list and the walk. */
struct lblc_arg {
	const struct svc_sched *s;
	struct lblc_walk *wk;
};

static long lblc_step(__u64 i, void *arg)
{
	const struct lblc_arg *la = arg;
	const struct svc_sched *s = la->s;
	struct lblc_walk *wk = la->wk;
	__u32 rid, k = (__u32)i & (XLB_SCHED_LIST_MAX - 1);
	__u64 w, oh, a, in;

	if (!s || !wk)
		return 1;
	rid = s->ent[k].rid;
	w = s->ent[k].weight;
	a = conns_get(rid, &in);
	oh = (a << 8) + in;
	if (!wk->best || oh * wk->best_w < wk->best_oh * w) {
		wk->best = rid;
		wk->best_oh = oh;
		wk->best_w = w;
	}
	if (a * 2 < w)
		wk->under = 1;
#pragma unroll
	for (int j = 0; j < XLB_LBLC_SET_MAX; j++) {
		if (wk->rid[j] == rid) {
			wk->w[j] = (__u32)w;
			wk->oh[j] = oh;
			wk->act[j] = a;
		}
	}
	return 0;
}

/* lblc_member_step: list entry i, when it is a member of the entry: its
 * weight and load, as lblc_step records them. A live entry's usual decision (its backend, or the set's least
 * loaded, not overloaded) needs no more: no counts read for the others. */
static long lblc_member_step(__u64 i, void *arg)
{
	struct lblc_arg *la = arg;
	const struct svc_sched *s = la->s;
	struct lblc_walk *wk = la->wk;
	__u32 rid, k = (__u32)i & (XLB_SCHED_LIST_MAX - 1);
	__u64 a, in;
	int m = -1;

	if (!s || !wk)
		return 1;
	rid = s->ent[k].rid;
#pragma unroll
	for (int j = 0; j < XLB_LBLC_SET_MAX; j++)
		if (wk->rid[j] == rid)
			m = j;
	if (m < 0)
		return 0;
	m &= XLB_LBLC_SET_MAX - 1;
	a = conns_get(rid, &in);
	wk->w[m] = s->ent[k].weight;
	wk->oh[m] = (a << 8) + in;
	wk->act[m] = a;
	return 0;
}

/* lblc_members_decide: whether the members' weights and loads in wk
 * (lblc_member_step) make the decision of a live entry of s alone: its
 * lblc backend, or its lblcr set's least loaded usable member (the first
 * of equals, as sched/lblcr.h's scan finds it), is usable and has no more
 * active connections than its weight, so it serves whatever the other
 * backends' loads (the overload test needs both). Else the whole list is
 * walked. */
static __always_inline int lblc_members_decide(const struct svc_sched *s, const struct lblc_walk *wk)
{
	int l = -1;

	if (s->kind == XLB_SCHED_LBLC)
		return wk->rid[0] && wk->w[0] && wk->act[0] <= wk->w[0];
#pragma unroll
	for (int j = 0; j < XLB_LBLC_SET_MAX; j++) {
		if (!wk->rid[j] || !wk->w[j])
			continue;
		if (l < 0 || wk->oh[j] * wk->w[l & (XLB_LBLC_SET_MAX - 1)] <
				     wk->oh[l & (XLB_LBLC_SET_MAX - 1)] * wk->w[j])
			l = j;
	}
	if (l < 0)
		return 0;
	l &= XLB_LBLC_SET_MAX - 1;
	return wk->act[l] <= wk->w[l];
}

/* lblc_create records wk's choice for the destination of wk's key (a
 * new entry, or one replacing an expired entry) and returns it. */
static __always_inline __u32 lblc_create(struct lblc_walk *wk, __u64 now)
{
	wk->ne.used = now;
	wk->ne.mod = now;
	wk->ne.rid[0] = wk->best;
	bpf_map_update_elem(&xlb_lblc, &wk->key, &wk->ne, BPF_ANY);
	return wk->best;
}

/* lblc_changed: entry e's backends differ from those wk read. */
static __always_inline int lblc_changed(const struct lblc_ent *e, const struct lblc_walk *wk)
{
	__u64 d = 0;

#pragma unroll
	for (int j = 0; j < XLB_LBLC_SET_MAX; j++)
		d |= *(volatile __u64 *)&e->rid[j] ^ wk->rid[j];
	return d != 0;
}

/* lblc_report: with sync on, service svc_id's entry (s's kind) goes to
 * the peers (XLB_SYNC_EV_LBLC, xlbd reads the entry) when it is new or
 * changed (used 0), or when its use moved across a refresh boundary from
 * used: a peer's copy is used as recently as this node's, to within a
 * period that is at most half the expiration (synclog.h). Only the
 * locality schedulers' new flows come here. */
static __always_inline void lblc_report(__u32 svc_id, __u32 rid, const struct svc_sched *s, __u64 used,
					__u64 now)
{
	__u32 zero = 0, shift;
	struct sync_conf *c = bpf_map_lookup_elem(&xlb_sync_conf, &zero);

	if (!c || !c->enabled || !rid)
		return;
	shift = sync_shift(c->refresh_shift & 15, s->stride);
	if (used && (used >> shift) == (now >> shift))
		return;
	xlb_sync_put(svc_id, rid, 0, XLB_SYNC_EV_LBLC);
}

/* xlb_sched_lblc: the real id service svc_id's lblc or lblcr scheduler
 * gives a new flow of p, recording it; 0: the service has no list. A
 * global function, verified once. */
__attribute__((noinline)) int xlb_sched_lblc(const struct pkt *p, __u32 svc_id)
{
	struct svc_sched *s = bpf_map_lookup_elem(&xlb_svc_sched, &svc_id);
	__u64 now = XLB_CLOCK_NS() >> XLB_TICK_SHIFT;
	struct lblc_arg la;
	struct lblc_walk *wk;
	struct lblc_ent *e;
	__u32 n, rid, zero = 0;
	__u64 used;

	wk = bpf_map_lookup_elem(&xlb_lblc_walk, &zero);
	if (!p || !s || !wk)
		return 0;
	n = s->n;
	if (!n || n > XLB_SCHED_LIST_MAX)
		return 0;
	__builtin_memset(wk, 0, sizeof(*wk));
	wk->best_w = 1;
	wk->key.svc_id = svc_id;
	wk->key.family = p->family;
	__builtin_memcpy(wk->key.addr, p->dst, sizeof(wk->key.addr));
	e = bpf_map_lookup_elem(&xlb_lblc, &wk->key);
	if (e && (__s64)(now - e->used) > (__s64)s->stride)
		e = NULL; /* expired: scheduled afresh, replaced below */
	la.s = s;
	la.wk = wk;
	if (e) {
#pragma unroll
		for (int j = 0; j < XLB_LBLC_SET_MAX; j++)
			wk->rid[j] = (__u32)*(volatile __u64 *)&e->rid[j];
		bpf_loop(n, lblc_member_step, &la, 0);
	}
	if (!e || !lblc_members_decide(s, wk)) {
		bpf_loop(n, lblc_step, &la, 0);
		if (!wk->best)
			return 0;
	}
	if (!e) {
		rid = lblc_create(wk, now);
		lblc_report(svc_id, rid, s, 0, now);
		return rid;
	}
	used = e->used;
	if (used != now)
		e->used = now;
	rid = sched_locality_pick(s, e, wk, now); /* sched/dispatch.h */
	lblc_report(svc_id, rid, s, lblc_changed(e, wk) ? 0 : used, now);
	return rid;
}
