/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sweep.h: the functions of xlb_ct_sweep (sweep.c), the program xlbd
 * runs (BPF_PROG_TEST_RUN) over the connection table every second: it
 * frees the ways idle past their state's timeout, or whose real may no
 * longer carry them, each with a compare-and-swap, and uncounts them
 * (conns.h). The forwarder itself only sees an idle entry when its flow
 * or a new one comes back to its bucket; the sweep is how a timeout
 * reaches the counts. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"
#include "maps.h"
#include "conns.h"
#include "sched.h"
#include "persist.h"

/* The sweep's context (BPF_PROG_TEST_RUN ctx_in / ctx_out). */
struct sweep_ctx {
	__u32 start; /* first xlb_ct index (cpu << ct_shift | bucket) */
	__u32 count; /* buckets from start */
	__u32 freed; /* out: ways freed */
	__u32 live;  /* out: live ways left */
	__u64 now;   /* the forwarder's clock in ticks (CLOCK_MONOTONIC_COARSE
		      * >> XLB_TICK_SHIFT, read by xlbd: a syscall program has
		      * no coarse clock) */
};

struct sweep_state {
	__u32 start;
	__u32 freed;
	__u32 live;
	__u32 pad;
	__u64 now;
	const struct node_info *n;
};

/* sweep_expired: way w may no longer carry its flow. */
static __always_inline int sweep_expired(const struct node_info *n, __u64 w, __u64 now)
{
	__u64 state = conns_way_state(w), timeout;
	__u32 rid = conns_way_real(w);
	struct real_info *r = bpf_map_lookup_elem(&xlb_reals, &rid);
	struct svc_sched *s;
	__u32 svc;

	if (!r || !r->svc_id || !(r->flags & XLB_REAL_F_ACTIVE))
		return 1;
	svc = r->svc_id;
	s = bpf_map_lookup_elem(&xlb_svc_sched, &svc);
	if (state == XLB_CT_SYN)
		timeout = n->timeout_tcp_syn;
	else if (state == XLB_CT_CLOSING)
		timeout = n->timeout_tcp_fin;
	else if (s && s->proto == IPPROTO_UDP)
		timeout = n->timeout_udp;
	else if (s && s->proto == IPPROTO_TCP)
		timeout = n->timeout_tcp;
	else /* not known: the longer */
		timeout = n->timeout_tcp > n->timeout_udp ? n->timeout_tcp : n->timeout_udp;
	return ct_idle(now, w) > timeout;
}

static long sweep_bucket(__u64 i, void *arg)
{
	struct sweep_state *st = arg;
	__u32 idx = st->start + (__u32)i;
	struct ct_bucket *b = bpf_map_lookup_elem(&xlb_ct, &idx);

	if (!b || !st->n)
		return 1;
#pragma unroll
	for (int k = 0; k < XLB_CT_WAYS; k++) {
		__u64 w = b->way[k];

		if (conns_way_state(w) == XLB_CT_FREE)
			continue;
		if (!sweep_expired(st->n, w, st->now)) {
			st->live++;
			continue;
		}
		if (__sync_val_compare_and_swap(&b->way[k], w, 0) == w) {
			conns_add(conns_way_real(w), conns_way_state(w), -1);
			st->freed++;
		}
	}
	return 0;
}

/* The template sweep (xlb_persist_sweep) over xlb_persist slots, with a
 * sweep_ctx: start and count are slots. */
static long sweep_template(__u64 i, void *arg)
{
	struct sweep_state *st = arg;
	__u32 key = st->start + (__u32)i;
	__u64 *slot = bpf_map_lookup_elem(&xlb_persist, &key);
	__u64 w;

	if (!slot)
		return 1;
	w = *slot;
	if (!w)
		return 0;
	if (persist_live(st->now, w)) {
		st->live++;
		return 0;
	}
	if (__sync_val_compare_and_swap(slot, w, 0) == w)
		st->freed++;
	return 0;
}
