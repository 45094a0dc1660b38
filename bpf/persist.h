/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* persist.h: persistence templates (IPVS persistent services, -p / -M),
 * shared by all CPUs without a lock (docs/ARCHITECTURE.md,
 * "Persistence"). A template maps (client address under the service's
 * netmask, service or group) to a backend. The table is direct-mapped:
 * the template's hash names exactly one 8-byte slot,
 *
 *   63          35 34       16 15         0
 *  +--------------+-----------+------------+
 *  | tag (29)     | real (19) | last used  |
 *  +--------------+-----------+------------+
 *
 * written only by compare-and-swap. Two CPUs creating the same template
 * at once race for the same slot: one wins, the other reads the winner's
 * backend and uses it, so a client never gets two. A slot held by another
 * live template is not taken: that client goes without persistence until
 * the slot frees (bounded memory; templates expire by their time alone). */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"
#include "maps.h"
#include "hash.h"
#include "sched.h"

static __always_inline __u32 persist_real(__u64 w)
{
	return (w >> XLB_PERSIST_REAL_SHIFT) & XLB_CT_REAL_MASK;
}

/* persist_hash: the template's hash: the client address under the
 * persistence netmask, mixed with the service's or group's id. */
static __always_inline __u64 persist_hash(const struct pkt *p, const struct svc_sched *s)
{
	return hash_fmix64(hash_mix(sched_source_hash(p, s->pplen4, s->pplen6), s->persist_id));
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

/* persist_usable: the real of service s (its usable list) that is the
 * backend of template real tid, or 0: the backend left the service, or is
 * drained, unhealthy or of weight 0 (IPVS expire_quiescent). */
static __always_inline __u32 persist_usable(const struct svc_sched *s, __u32 tid)
{
	struct persist_find f = {.s = s, .want_id = tid};
	__u32 n = s->n;

	f.want = bpf_map_lookup_elem(&xlb_reals, &tid);
	if (!f.want || !n || n > XLB_SCHED_LIST_MAX)
		return 0;
	bpf_loop(n, persist_find_step, &f, 0);
	return f.found;
}

/* xlb_persist_use: for a new flow of service svc_id: the backend of the
 * client's live template, as a real of this service (the template is
 * refreshed), or, when there is none or its backend may not take the
 * flow, the template is set to rid (chosen by the scheduler) and rid is
 * returned; a template another CPU set meanwhile wins. Returns rid when
 * the service has no persistence. A global function, verified once. */
__attribute__((noinline)) int xlb_persist_use(const struct pkt *p, __u32 svc_id, __u32 rid, __u64 now)
{
	struct svc_sched *s = bpf_map_lookup_elem(&xlb_svc_sched, &svc_id);
	__u64 h, tag, w, *slot;
	__u32 key, got;

	if (!p || !s || !s->persist_timeout)
		return rid;
	h = persist_hash(p, s);
	key = (__u32)h & (XLB_PERSIST_SLOTS - 1);
	tag = h >> XLB_PERSIST_TAG_SHIFT;
	slot = bpf_map_lookup_elem(&xlb_persist, &key);
	if (!slot)
		return rid;
	for (int t = 0; t < 2; t++) {
		__u64 ne;

		w = *slot;
		if (w && (w >> XLB_PERSIST_TAG_SHIFT) == tag &&
		    ct_idle(now, w) <= s->persist_timeout &&
		    (got = persist_usable(s, persist_real(w)))) {
			if (ct_idle(now, w) != 0)
				__sync_val_compare_and_swap(slot, w, (w & ~(__u64)XLB_CT_TIME_MASK) |
									 (now & XLB_CT_TIME_MASK));
			return got;
		}
		if (w && (w >> XLB_PERSIST_TAG_SHIFT) != tag &&
		    ct_idle(now, w) <= s->persist_timeout)
			return rid; /* the slot is another client's: no template */
		ne = tag << XLB_PERSIST_TAG_SHIFT | (__u64)rid << XLB_PERSIST_REAL_SHIFT |
		     (now & XLB_CT_TIME_MASK);
		if (__sync_val_compare_and_swap(slot, w, ne) == w)
			return rid;
	}
	return rid;
}

/* xlb_persist_touch: a packet of a tracked flow of service svc_id moved
 * its entry on (at most once per tick): the client's template, if it names
 * the flow's backend rid, is used now. A global function. */
__attribute__((noinline)) int xlb_persist_touch(const struct pkt *p, __u32 svc_id, __u32 rid, __u64 now)
{
	struct svc_sched *s = bpf_map_lookup_elem(&xlb_svc_sched, &svc_id);
	__u64 h, w, *slot;
	__u32 key;

	if (!p || !s || !s->persist_timeout)
		return 0;
	h = persist_hash(p, s);
	key = (__u32)h & (XLB_PERSIST_SLOTS - 1);
	slot = bpf_map_lookup_elem(&xlb_persist, &key);
	if (!slot)
		return 0;
	w = *slot;
	if ((w >> XLB_PERSIST_TAG_SHIFT) != h >> XLB_PERSIST_TAG_SHIFT || persist_real(w) != rid ||
	    ct_idle(now, w) == 0)
		return 0;
	__sync_val_compare_and_swap(slot, w, (w & ~(__u64)XLB_CT_TIME_MASK) | (now & XLB_CT_TIME_MASK));
	return 1;
}
