/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sched/common.h: what the scheduler files (sched/<name>.h) build on: the
 * hashes of addresses under a prefix, and the least-connection walk over
 * a service's list, into which each least scheduler plugs the test of
 * one entry (sched_<name>_entry, dispatched by sched_least_entry). */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "../consts.h"
#include "../types.h"
#include "../maps.h"
#include "../hash.h"
#include "../parse.h"

/* sched_in: whether kind is one of mask's (a family of sched/kinds.h). */
static __always_inline int sched_in(__u32 kind, __u64 mask)
{
	return kind < 64 && (mask >> kind) & 1;
}

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

/* A least-connection walk: bpf_loop over chunks of XLB_SCHED_CHUNK list
 * entries, each chunk unrolled: a call per chunk rather than per entry,
 * and a body the verifier checks once, whatever the list's length. The
 * chunk's size is the verifier's budget against speed: 8 entries cost
 * the verifier 16k more instructions than 4, 4 about 8k more than 2. A
 * call costs more than an entry's test: with 256 backends a new flow
 * took (medians side by side, lc / wlc) 1871 / 1729 ns with 8, 2072 /
 * 2403 with 4 and 2542 / 2596 with 2; with 10 backends the three are
 * within noise. 4, because with 8 the fragment stage as loaded went past
 * the verifier budget (102k of 100k instructions, TestVerifierBudget). */
enum { XLB_SCHED_CHUNK = 4 };

struct sched_least_walk {
	const struct svc_sched *s;
	__u64 best_oh, best_w; /* the best so far: overhead and weight */
	__u32 n;
	__u32 best; /* the pick, 0: none yet */
};

/* sched_least_better makes rid of overhead oh and weight w the walk's
 * best if it has none or oh / w is less than the best's, compared by
 * cross-multiplying as IPVS does (the first of equals stays). */
static __always_inline void sched_least_better(struct sched_least_walk *wk, __u32 rid, __u64 oh, __u64 w)
{
	if (!wk->best || oh * wk->best_w < wk->best_oh * w) {
		wk->best = rid;
		wk->best_oh = oh;
		wk->best_w = w;
	}
}

/* sched_least_entry: the least scheduler kind's test of entry k of s
 * (real rid with active connections a, inactive in); returns 1 to end the
 * walk. Generated (sched/dispatch.h): a switch over the kinds of the
 * least family, folded away since kind is a constant at every call. */
static __always_inline long sched_least_entry(const __u32 kind, struct sched_least_walk *wk,
					      const struct svc_sched *s, __u32 k, __u32 rid,
					      __u64 a, __u64 in);

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

		if (k >= wk->n)
			return 1;
		c = bpf_map_lookup_elem(&xlb_real_conns, &rid);
		if (c) {
			a = c->active > 0 ? c->active : 0;
			in = c->inactive > 0 ? c->inactive : 0;
		}
		if (sched_least_entry(kind, wk, s, k, rid, (__u64)a, (__u64)in))
			return 1;
	}
	return 0;
}

/* sched_walk: bpf_loop of cb over the chunks of s's n entries. The walk
 * of each kind is a function of its own (generated), so that each
 * bpf_loop call names one callback: the verifier then inlines the loop (a
 * direct call per chunk). A call reached with two callbacks (the compiler
 * merges like calls: it did with the calls of two kinds in one function)
 * stays a call of the helper, which makes an indirect call per chunk,
 * several times dearer. */
static __always_inline __u32 sched_walk(const struct svc_sched *s, __u32 n, long (*cb)(__u64, void *))
{
	struct sched_least_walk wk = {.s = s, .best_w = 1, .n = n};

	if (!s)
		return 0;
	bpf_loop((n + XLB_SCHED_CHUNK - 1) / XLB_SCHED_CHUNK, cb, &wk, 0);
	return wk.best;
}
