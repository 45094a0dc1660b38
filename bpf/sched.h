/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sched.h: the schedulers besides Maglev on the 5-tuple, asked only for a
 * flow the connection table does not hold (docs/ARCHITECTURE.md,
 * "Schedulers"). Hash schedulers (maglev-source, sh, dh) read the
 * service's Maglev table at a slot of another hash; list schedulers (rr,
 * wrr) hand out the service's backend list through one shared cursor per
 * service, advanced with an atomic fetch-and-add: lock-free, and one
 * sequence for all CPUs of the node; least-connection schedulers (lc,
 * wlc, sed, nq) walk the same list reading each backend's counts
 * (conns.h). */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "consts.h"
#include "hash.h"
#include "parse.h"
#include "maps.h"
#include "conns.h"

/* sched_mask: an address word (network order, as loaded) under the
 * prefix bits of it that fall in word i. */
static __always_inline __u32 sched_mask(__u32 w, __u32 plen, __u32 i)
{
	__u32 bits;

	if (plen >= 32 * (i + 1))
		return w;
	if (plen <= 32 * i)
		return 0;
	bits = plen - 32 * i;
	return w & bpf_htonl(~0U << (32 - bits));
}

/* sched_source_hash: flow hash v1 of (client address under its family's
 * prefix, 0, ports 0, protocol 0); Go twin internal/maglev SourceHash. */
static __always_inline __u64 sched_source_hash(const struct pkt *p, __u32 plen4, __u32 plen6)
{
	const __u32 *s = (const __u32 *)p->src;
	__u32 w[4];
	__u64 zero[2] = {};

	if (p->family == XLB_AF_INET)
		return hash_flow4(sched_mask(s[0], plen4, 0), 0, 0, 0);
#pragma unroll
	for (int i = 0; i < 4; i++)
		w[i] = sched_mask(s[i], plen6, i);
	return hash_flow6((const __u64 *)w, zero, 0, 0);
}

/* sched_dest_hash: flow hash v1 of (0, destination address, 0, 0). */
static __always_inline __u64 sched_dest_hash(const struct pkt *p)
{
	__u64 zero[2] = {};

	if (p->family == XLB_AF_INET)
		return hash_flow4(0, *(const __u32 *)p->dst, 0, 0);
	return hash_flow6(zero, (const __u64 *)p->dst, 0, 0);
}

/* sched_wrr_pick: the entry of s's n whose weight interval holds x (the
 * weights laid end to end), 0 past the last. A plain bounded loop: a few
 * instructions per entry, no call. */
static __always_inline __u32 sched_wrr_pick(const struct svc_sched *s, __u32 n, __u64 x)
{
	for (__u32 k = 0; k < XLB_SCHED_LIST_MAX; k++) {
		__u64 w = s->ent[k].weight;

		if (k >= n)
			break;
		if (x < w)
			return s->ent[k].rid;
		x -= w;
	}
	return 0;
}

/* A least-connection walk: bpf_loop over chunks of XLB_SCHED_CHUNK list
 * entries, each chunk unrolled: a call per chunk rather than per entry,
 * and a body the verifier checks once, whatever the list's length. The
 * chunk's size is the verifier's budget against speed: 8 entries cost
 * the verifier 16k more instructions than 4, 4 about 8k more than 2, and
 * neither was measurably faster with 10 backends (lc new flow, medians
 * side by side: 425 ns with 4, 444 ns with 2, best 332 and 333). */
enum { XLB_SCHED_CHUNK = 2 };

struct sched_least_walk {
	const struct svc_sched *s;
	__u64 best_oh, best_w; /* the best so far: overhead and weight */
	__u32 n;
	__u32 best; /* the pick, 0: none yet */
};

/* sched_least_chunk: entries XLB_SCHED_CHUNK * i.. of a walk of kind
 * (a constant: each kind has its own callback, without the others'
 * terms). The best so far stays in *wk, written only when an entry beats
 * it. Returns 1 when the walk is over. */
static __always_inline long sched_least_chunk(__u64 i, struct sched_least_walk *wk, const __u32 kind)
{
	const struct svc_sched *s = wk->s;
	__u32 base = ((__u32)i & (XLB_SCHED_LIST_MAX / XLB_SCHED_CHUNK - 1)) * XLB_SCHED_CHUNK;

	if (!s)
		return 1;
#pragma unroll
	for (__u32 j = 0; j < XLB_SCHED_CHUNK; j++) {
		__u32 k = base + j, rid = s->ent[k].rid;
		struct real_conns *c;
		__s64 a = 0, in = 0;
		__u64 oh, w;

		if (k >= wk->n)
			return 1;
		c = bpf_map_lookup_elem(&xlb_real_conns, &rid);
		if (c) {
			a = c->active > 0 ? c->active : 0;
			in = c->inactive > 0 ? c->inactive : 0;
		}
		if (kind == XLB_SCHED_NQ && a == 0) {
			wk->best = rid;
			return 1;
		}
		if (kind == XLB_SCHED_LC) { /* weight 1: no products */
			oh = ((__u64)a << 8) + (__u64)in;
			if (!wk->best || oh < wk->best_oh) {
				wk->best = rid;
				wk->best_oh = oh;
			}
			continue;
		}
		oh = kind == XLB_SCHED_WLC ? ((__u64)a << 8) + (__u64)in : (__u64)a + 1;
		w = s->ent[k].weight;
		if (!wk->best || oh * wk->best_w < wk->best_oh * w) {
			wk->best = rid;
			wk->best_oh = oh;
			wk->best_w = w;
		}
	}
	return 0;
}

static long sched_lc_chunk(__u64 i, void *wk)
{
	return sched_least_chunk(i, wk, XLB_SCHED_LC);
}

static long sched_wlc_chunk(__u64 i, void *wk)
{
	return sched_least_chunk(i, wk, XLB_SCHED_WLC);
}

static long sched_sed_chunk(__u64 i, void *wk)
{
	return sched_least_chunk(i, wk, XLB_SCHED_SED);
}

static long sched_nq_chunk(__u64 i, void *wk)
{
	return sched_least_chunk(i, wk, XLB_SCHED_NQ);
}

/* sched_walk: bpf_loop of cb over the chunks of s's n entries. */
static __always_inline __u32 sched_walk(const struct svc_sched *s, __u32 n, long (*cb)(__u64, void *))
{
	struct sched_least_walk wk = {.s = s, .best_w = 1, .n = n};

	if (!s)
		return 0;
	bpf_loop((n + XLB_SCHED_CHUNK - 1) / XLB_SCHED_CHUNK, cb, &wk, 0);
	return wk.best;
}

/* The walk of each kind is a function of its own, so that each bpf_loop
 * call names one callback: the verifier then inlines the loop (a direct
 * call per chunk). A call reached with two callbacks (the compiler merges
 * like calls: it did with the calls of two kinds in one function) stays a
 * call of the helper, which makes an indirect call per chunk, several
 * times dearer. */
static __attribute__((noinline)) __u32 sched_lc(const struct svc_sched *s, __u32 n)
{
	return sched_walk(s, n, sched_lc_chunk);
}

static __attribute__((noinline)) __u32 sched_wlc(const struct svc_sched *s, __u32 n)
{
	return sched_walk(s, n, sched_wlc_chunk);
}

static __attribute__((noinline)) __u32 sched_sed(const struct svc_sched *s, __u32 n)
{
	return sched_walk(s, n, sched_sed_chunk);
}

static __attribute__((noinline)) __u32 sched_nq(const struct svc_sched *s, __u32 n)
{
	return sched_walk(s, n, sched_nq_chunk);
}

/* sched_least: the entry of s's n of least overhead by the counts of
 * conns.h: lc (active << 8) + inactive; wlc the same, sed active + 1,
 * each relative to the entry's weight (lc: weight 1), compared by
 * cross-multiplying as IPVS does; nq the first entry without an active
 * connection, else as sed. The first of equals wins. */
static __always_inline __u32 sched_least(const struct svc_sched *s, __u32 n)
{
	switch (s->kind) {
	case XLB_SCHED_LC:
		return sched_lc(s, n);
	case XLB_SCHED_WLC:
		return sched_wlc(s, n);
	case XLB_SCHED_SED:
		return sched_sed(s, n);
	case XLB_SCHED_NQ:
		return sched_nq(s, n);
	}
	return 0;
}

/* xlb_sched_list: the next real of service svc_id's list scheduler, or 0
 * (no list: the caller falls back to the Maglev table). lc, wlc, sed, nq:
 * the entry of least overhead by the counts of conns.h, as this node's
 * CPUs left them (IPVS's lc, wlc, sed and nq; the first of equals wins).
 * rr, wrr: one atomic fetch-and-add on the service's cursor orders every
 * new flow of the node, whichever CPU it arrives on; rr gives entry c mod
 * n, wrr the entry whose weight interval holds (c mod total) * stride mod
 * total. A global function, verified once. */
__attribute__((noinline)) int xlb_sched_list(__u32 svc_id)
{
	struct svc_sched *s = bpf_map_lookup_elem(&xlb_svc_sched, &svc_id);
	__u64 c, *cur;
	__u32 n;

	if (!s)
		return 0;
	n = s->n;
	if (!n || n > XLB_SCHED_LIST_MAX)
		return 0;
	if (s->kind >= XLB_SCHED_LC && s->kind <= XLB_SCHED_NQ)
		return sched_least(s, n);
	cur = bpf_map_lookup_elem(&xlb_sched_cursor, &svc_id);
	if (!cur)
		return 0;
	c = __sync_fetch_and_add(cur, 1);
	if (s->kind == XLB_SCHED_RR) {
		__u32 i = c % n;

		asm volatile("" : "+r"(i)); /* keep the mask: the verifier needs it */
		return s->ent[i & (XLB_SCHED_LIST_MAX - 1)].rid;
	}
	if (s->kind != XLB_SCHED_WRR || !s->total)
		return 0;
	return sched_wrr_pick(s, n, (c % s->total) * s->stride % s->total);
}
