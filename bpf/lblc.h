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

/* lblc_pick: the lblc decision on a live entry. Overloaded: more active
 * connections than the weight while some backend is under half its own
 * (IPVS's test). */
static __always_inline __u32 lblc_pick(struct lblc_ent *e, const struct lblc_walk *wk)
{
	__u32 r = wk->rid[0];

	if (r && wk->w[0] && !(wk->act[0] > wk->w[0] && wk->under))
		return r;
	/* a swap lost to another CPU leaves its choice recorded */
	__sync_val_compare_and_swap(&e->rid[0], r, wk->best);
	return wk->best;
}

/* A pass over an lblcr set (bpf_loop over its slots). */
struct lblcr_scan {
	struct lblc_walk *wk;
	int least, most; /* members' slots, -1: none */
	int free;        /* the first empty slot, -1: none */
	int size;        /* members */
	int have;        /* wlc's choice is a member */
	int pad;
};

/* lblcr_scan_step: slot j. The least loaded usable member: the first of
 * equals; the most loaded: a member no longer usable (weight 0 here)
 * first, else the last of equals. */
static long lblcr_scan_step(__u64 i, void *arg)
{
	struct lblcr_scan *sc = arg;
	struct lblc_walk *wk = sc->wk;
	__u32 j = (__u32)i & (XLB_LBLC_SET_MAX - 1), l, m;
	__u64 w, oh;

	if (!wk)
		return 1;
	if (!wk->rid[j]) {
		if (sc->free < 0)
			sc->free = j;
		return 0;
	}
	sc->size++;
	if (wk->rid[j] == wk->best)
		sc->have = 1;
	w = wk->w[j];
	oh = wk->oh[j];
	l = (__u32)sc->least & (XLB_LBLC_SET_MAX - 1);
	m = (__u32)sc->most & (XLB_LBLC_SET_MAX - 1);
	if (!w) {
		if (sc->most < 0 || wk->w[m])
			sc->most = j;
		return 0;
	}
	if (sc->least < 0 || oh * wk->w[l] < wk->oh[l] * w)
		sc->least = j;
	if (sc->most < 0 || (wk->w[m] && oh * wk->w[m] >= wk->oh[m] * w))
		sc->most = j;
	return 0;
}

/* lblcr_pick: the lblcr decision on a live entry: the set's least loaded
 * usable member serves unless overloaded; the most loaded leaves a set of
 * two or more that did not change for the expiration; under overload
 * wlc's choice over all serves and joins the set. */
static __always_inline __u32 lblcr_pick(struct lblc_ent *e, struct lblc_walk *wk, __u64 now, __u64 expire)
{
	struct lblcr_scan sc = {.wk = wk, .least = -1, .most = -1, .free = -1};
	__u32 k;
	__u64 r;

	bpf_loop(XLB_LBLC_SET_MAX, lblcr_scan_step, &sc, 0);
	if (sc.size > 1 && sc.most >= 0 && (__s64)(now - e->mod) > (__s64)expire) {
		k = (__u32)sc.most & (XLB_LBLC_SET_MAX - 1);
		r = wk->rid[k];
		if (__sync_val_compare_and_swap(&e->rid[k], r, 0) == r) {
			e->mod = now;
			if (r == wk->best)
				sc.have = 0;
			if (sc.free < 0)
				sc.free = sc.most;
		}
	}
	if (sc.least >= 0) {
		k = (__u32)sc.least & (XLB_LBLC_SET_MAX - 1);
		if (!(wk->act[k] > wk->w[k] && wk->under))
			return wk->rid[k];
	}
	k = (__u32)sc.free & (XLB_LBLC_SET_MAX - 1);
	if (!sc.have && sc.free >= 0 && __sync_val_compare_and_swap(&e->rid[k], 0, wk->best) == 0)
		e->mod = now;
	return wk->best;
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

/* xlb_sched_lblc: the real id service svc_id's lblc or lblcr scheduler
 * gives a new flow of p, recording it; 0: the service has no list. A
 * global function, verified once. */
__attribute__((noinline)) int xlb_sched_lblc(const struct pkt *p, __u32 svc_id)
{
	struct svc_sched *s = bpf_map_lookup_elem(&xlb_svc_sched, &svc_id);
	__u64 now = bpf_ktime_get_coarse_ns() >> XLB_TICK_SHIFT;
	struct lblc_arg la;
	struct lblc_walk *wk;
	struct lblc_ent *e;
	__u32 n, zero = 0;

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
	if (e) {
#pragma unroll
		for (int j = 0; j < XLB_LBLC_SET_MAX; j++)
			wk->rid[j] = (__u32)*(volatile __u64 *)&e->rid[j];
	}
	la.s = s;
	la.wk = wk;
	bpf_loop(n, lblc_step, &la, 0);
	if (!wk->best)
		return 0;
	if (!e)
		return lblc_create(wk, now);
	if (e->used != now)
		e->used = now;
	if (s->kind == XLB_SCHED_LBLC)
		return lblc_pick(e, wk);
	return lblcr_pick(e, wk, now, s->stride);
}
