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
#include "conns.h"

/* svc_sched.kind. Append only (pinned maps outlive binaries). */
enum xlb_sched {
	XLB_SCHED_MAGLEV = 0,        /* the 5-tuple's slot of the Maglev table */
	XLB_SCHED_MAGLEV_SOURCE = 1, /* the slot of the client address under plen4/plen6 (maglev-source, sh) */
	XLB_SCHED_DH = 2,            /* the slot of the destination address */
	XLB_SCHED_RR = 3,            /* ent[] in turn */
	XLB_SCHED_WRR = 4,           /* ent[] in proportion to the weights */
	XLB_SCHED_LC = 5,            /* least (active << 8) + inactive (conns.h) */
	XLB_SCHED_WLC = 6,           /* the same relative to the weight */
	XLB_SCHED_SED = 7,           /* least (active + 1) / weight */
	XLB_SCHED_NQ = 8,            /* the first without an active connection, else as SED */
	XLB_SCHED_LBLC = 9,          /* the destination's backend, wlc when overloaded (lblc.h) */
	XLB_SCHED_LBLCR = 10,        /* the destination's set of backends (lblc.h) */
	XLB_SCHED_LIST_MAX = 256,    /* entries of ent[], a power of two */
};

struct sched_ent {
	__u32 rid;    /* xlb_reals id */
	__u32 weight; /* wrr: > 0 */
};

/* xlb_svc_sched value, by service id; all zero: Maglev. Written whole by
 * the control plane: a new flow read during the write may take a backend
 * of the previous list (its real is checked as any table's is). */
struct svc_sched {
	__u8 kind;     /* enum xlb_sched */
	__u8 plen4;    /* MAGLEV_SOURCE: prefix lengths, 1..32 */
	__u8 plen6;    /* 1..128 */
	__u8 proto;    /* the service's IPPROTO_TCP or IPPROTO_UDP (the sweep's timeouts) */
	__u32 n;       /* entries in ent, 0..XLB_SCHED_LIST_MAX */
	__u32 total;   /* WRR: the sum of the weights */
	__u32 stride;  /* WRR: coprime with total, so consecutive new flows
			* walk the weight line in strides, not in blocks;
			* LBLC, LBLCR: an entry's expiration, ticks */
	/* Persistence (persist.h): templates of (client under pplen4 /
	 * pplen6, persist_id) live persist_timeout ticks after their last
	 * use; 0: none. persist_id names the service, or its group. With
	 * persistence ent[] lists the usable backends whatever the kind. */
	__u32 persist_id;
	__u16 persist_timeout;
	__u8 pplen4;
	__u8 pplen6;
	struct sched_ent ent[XLB_SCHED_LIST_MAX];
};

_Static_assert(sizeof(struct svc_sched) == 24 + 8 * XLB_SCHED_LIST_MAX, "ABI: struct svc_sched size changed");

/* Service id -> scheduler settings. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct svc_sched);
	__uint(max_entries, 4096);
} xlb_svc_sched SEC(".maps");

/* Service id -> new flows handed out by its list scheduler on this node:
 * the shared cursor, written only by fetch-and-add. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 4096);
} xlb_sched_cursor SEC(".maps");

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

/* A walk over a list (bpf_loop: its body is verified once, not once per
 * entry). */
struct sched_walk {
	const struct svc_sched *s;
	__u64 x;       /* wrr: weight units left before the pick */
	__u64 best_oh; /* least: the best overhead and weight so far */
	__u64 best_w;
	__u32 best;    /* the pick, 0: none yet */
	__u32 pad;
};

/* sched_least_step: entry i for sched_least. Overheads are compared
 * relative to the weights by cross-multiplying, as IPVS does. */
static long sched_least_step(__u64 i, void *arg)
{
	struct sched_walk *wk = arg;
	const struct svc_sched *s = wk->s;
	__u32 rid, k = (__u32)i & (XLB_SCHED_LIST_MAX - 1);
	__u64 w, oh;
	__s64 a = 0, in = 0;
	struct real_conns *c;

	if (!s)
		return 1;
	rid = s->ent[k].rid;
	w = s->ent[k].weight;
	c = bpf_map_lookup_elem(&xlb_real_conns, &rid);
	if (c) {
		a = c->active > 0 ? c->active : 0;
		in = c->inactive > 0 ? c->inactive : 0;
	}
	if (s->kind == XLB_SCHED_NQ && a == 0) {
		wk->best = rid;
		return 1;
	}
	if (s->kind == XLB_SCHED_LC || s->kind == XLB_SCHED_WLC)
		oh = ((__u64)a << 8) + (__u64)in;
	else
		oh = (__u64)a + 1;
	if (s->kind == XLB_SCHED_LC)
		w = 1;
	if (!wk->best || oh * wk->best_w < wk->best_oh * w) {
		wk->best = rid;
		wk->best_oh = oh;
		wk->best_w = w;
	}
	return 0;
}

/* sched_wrr_step: entry i for wrr: the entry whose weight interval holds
 * x. */
static long sched_wrr_step(__u64 i, void *arg)
{
	struct sched_walk *wk = arg;
	const struct svc_sched *s = wk->s;
	__u32 k = (__u32)i & (XLB_SCHED_LIST_MAX - 1);
	__u64 w;

	if (!s)
		return 1;
	w = s->ent[k].weight;
	if (wk->x < w) {
		wk->best = s->ent[k].rid;
		return 1;
	}
	wk->x -= w;
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
	__u64 *cur = bpf_map_lookup_elem(&xlb_sched_cursor, &svc_id);
	struct sched_walk wk = {.best_w = 1};
	__u64 c;
	__u32 n;

	if (!s || !cur)
		return 0;
	n = s->n;
	if (!n || n > XLB_SCHED_LIST_MAX)
		return 0;
	wk.s = s;
	if (s->kind >= XLB_SCHED_LC && s->kind <= XLB_SCHED_NQ) {
		bpf_loop(n, sched_least_step, &wk, 0);
		return wk.best;
	}
	c = __sync_fetch_and_add(cur, 1);
	if (s->kind == XLB_SCHED_RR) {
		__u32 i = c % n;

		asm volatile("" : "+r"(i)); /* keep the mask: the verifier needs it */
		return s->ent[i & (XLB_SCHED_LIST_MAX - 1)].rid;
	}
	if (s->kind != XLB_SCHED_WRR || !s->total)
		return 0;
	wk.x = (c % s->total) * s->stride % s->total;
	bpf_loop(n, sched_wrr_step, &wk, 0);
	return wk.best;
}
