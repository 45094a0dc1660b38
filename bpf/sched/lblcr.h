/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sched/lblcr.h: lblcr, locality-based least connections with
 * replication (IPVS lblcr): a destination address has a set of backends
 * (lblc_ent.rid), grown by wlc's choice under overload and shrunk when
 * unchanged for the expiration. The table, the walk and the entry's life
 * are the locality family's (lblc.h). */
#pragma once

#include "common.h"

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

/* sched_lblcr_pick: the lblcr decision on a live entry: the set's least loaded
 * usable member serves unless overloaded; the most loaded leaves a set of
 * two or more that did not change for the expiration (svc_sched.stride); under overload
 * wlc's choice over all serves and joins the set. */
static __always_inline __u32 sched_lblcr_pick(const struct svc_sched *s, struct lblc_ent *e,
						struct lblc_walk *wk, __u64 now)
{
	__u64 expire = s->stride;
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
