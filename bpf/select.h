/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* select.h: backend selection, paper section 3.3: the VIP match, the per-CPU
 * connection table, and the Maglev table lookup for flows it does not hold. */
#pragma once

#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "hash.h"
#include "maps.h"
#include "parse.h"
#include "conns.h"
#include "sched.h"
#include "persist.h"
#include "lblc.h"
#include "stats.h"
#include "defence.h"

/* vip_hash: the two candidate buckets of a VIP key are its low and high
 * 32 bits, masked. a0, a1: the address as two little-endian 64-bit loads
 * (IPv4: a0 = the 4 bytes, a1 = 0); tail: the key's last 4 bytes (port in
 * network order, proto, family) as one little-endian load. Its Go twin is
 * internal/datapath vipHash. */
static __always_inline __u64 vip_hash(__u64 a0, __u64 a1, __u32 tail)
{
	__u64 h = hash_mix(XLB_VIP_SEED, a0);

	h = hash_mix(h, a1);
	return hash_mix(h, tail);
}

/* vip_probe looks for the key in one bucket. */
static __always_inline struct vip_info *vip_probe(__u32 bucket, __u64 a0, __u64 a1, __u32 tail)
{
	struct vip_bucket *b = bpf_map_lookup_elem(&xlb_vip_index, &bucket);

	if (!b)
		return NULL;
#pragma unroll
	for (int i = 0; i < XLB_VIP_SLOTS; i++) {
		__u32 id = *(volatile __u32 *)&b->ent[i];
		struct vip_ent *e;

		if (!id)
			continue;
		e = bpf_map_lookup_elem(&xlb_vip_ents, &id);
		if (e && *(__u64 *)e->key.addr == a0 && *(__u64 *)(e->key.addr + 8) == a1 &&
		    *(__u32 *)&e->key.port == tail)
			return &e->info;
	}
	return NULL;
}

/* vip_match: the key's first bucket, then its second. */
static __always_inline struct vip_info *vip_match(__u64 a0, __u64 a1, __u32 tail)
{
	__u64 h = vip_hash(a0, a1, tail);
	__u32 mask = vip_buckets - 1;
	struct vip_info *v = vip_probe((__u32)h & mask, a0, a1, tail);

	if (v)
		return v;
	if (((__u32)(h >> 32) & mask) == ((__u32)h & mask))
		return NULL;
	return vip_probe((__u32)(h >> 32) & mask, a0, a1, tail);
}

/* select_vip matches (dst, dport, proto) exactly, then (dst, 0, proto). */
static __always_inline struct vip_info *select_vip(const struct pkt *p)
{
	__u64 a0, a1 = 0;
	__u32 tail = (__u32)p->proto << 16 | (__u32)p->family << 24;
	struct vip_info *v;

	if (p->family == XLB_AF_INET) {
		a0 = *(const __u32 *)p->dst;
	} else {
		/* 4-byte loads: struct pkt may be on the stack, 4-byte aligned */
		const __u32 *d = (const __u32 *)p->dst;

		a0 = (__u64)d[0] | (__u64)d[1] << 32;
		a1 = (__u64)d[2] | (__u64)d[3] << 32;
	}
	v = vip_match(a0, a1, tail | pkt_dport(p));
	if (v)
		return v;
	return vip_match(a0, a1, tail);
}

/* select_is_vip_addr tells whether dst is the address of any VIP. */
static __always_inline int select_is_vip_addr(const struct pkt *p)
{
	struct vip_key k = {};

	__builtin_memcpy(k.addr, p->dst, 16);
	if (p->family == XLB_AF_INET)
		__builtin_memset(k.addr + 4, 0, 12);
	k.family = p->family;
	return bpf_map_lookup_elem(&xlb_vip_addrs, &k) != NULL;
}

/* select_hash_ports: flow hash v1 of p's addresses and protocol with the
 * given ports (the fragment pool hashes with none). */
static __always_inline __u64 select_hash_ports(const struct pkt *p, __u32 ports)
{
	if (p->family == XLB_AF_INET)
		return hash_flow4(*(__u32 *)p->src, *(__u32 *)p->dst, ports, p->proto);
	return hash_flow6((const __u64 *)p->src, (const __u64 *)p->dst, ports, p->proto);
}

/* select_flow_hash: flow hash v1 of p's 5-tuple. */
static __always_inline __u64 select_flow_hash(const struct pkt *p)
{
	return select_hash_ports(p, p->ports);
}

/* The state a packet moves its flow to. */
static __always_inline __u64 ct_next_state(const struct pkt *p, __u64 cur)
{
	if (p->proto != IPPROTO_TCP)
		return XLB_CT_ESTABLISHED;
	if (p->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST))
		return XLB_CT_CLOSING;
	if ((p->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN)
		return cur == XLB_CT_FREE ? XLB_CT_SYN : cur;
	return cur == XLB_CT_CLOSING ? XLB_CT_CLOSING : XLB_CT_ESTABLISHED;
}

static __always_inline __u64 ct_timeout(const struct node_info *n, const struct pkt *p,
					__u64 state)
{
	if (p->proto != IPPROTO_TCP)
		return n->timeout_udp;
	if (state == XLB_CT_SYN)
		return n->timeout_tcp_syn;
	if (state == XLB_CT_CLOSING)
		return n->timeout_tcp_fin;
	return n->timeout_tcp;
}

/* ct_usable: the entry is of this flow (tag), live (not idle past its
 * timeout) and its real may still carry tracked flows of this service. */
static __always_inline struct real_info *ct_usable(__u64 e, __u64 tag, __u64 now,
						    const struct node_info *n,
						    const struct pkt *p, const struct vip_info *v)
{
	__u64 state = (e >> XLB_CT_STATE_SHIFT) & XLB_CT_STATE_MASK;
	__u32 rid = (e >> XLB_CT_REAL_SHIFT) & XLB_CT_REAL_MASK;
	struct real_info *r;

	if ((e >> XLB_CT_TAG_SHIFT) != tag || state == XLB_CT_FREE)
		return NULL;
	if (ct_idle(now, e) > ct_timeout(n, p, state))
		return NULL;
	/* A SYN (no ACK) on a flow past its handshake starts a new connection
	 * on a reused 5-tuple: choose afresh, so it follows the table (a
	 * drained or removed backend takes no new connection). The old
	 * connection's end may have been seen on another CPU only, leaving
	 * this CPU's entry established. */
	if (state != XLB_CT_SYN && p->proto == IPPROTO_TCP &&
	    (p->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN)
		return NULL;
	r = bpf_map_lookup_elem(&xlb_reals, &rid);
	if (!r || r->svc_id != v->svc_id || !(r->flags & XLB_REAL_F_ACTIVE))
		return NULL;
	return r;
}

static __always_inline __u64 ct_make(__u64 tag, __u32 rid, __u64 state, __u64 now)
{
	return tag << XLB_CT_TAG_SHIFT | (__u64)rid << XLB_CT_REAL_SHIFT |
	       state << XLB_CT_STATE_SHIFT | (now & XLB_CT_TIME_MASK);
}

/* ct_victim: the way of bucket b for a flow of tag: the way that holds
 * it, else a free way, else the way idle longest, an unestablished way
 * counting bias more (defence_victim_bias); its value in *w. */
static __always_inline __u32 ct_victim(struct ct_bucket *b, __u64 tag, __u64 now, __u64 *w,
				       __u64 bias)
{
	__u32 victim = 0;
	__u64 oldest = 0;

#pragma clang loop unroll(disable) /* the stack: xlb_frag -> xlb_ct_store */
	for (int i = 0; i < XLB_CT_WAYS; i++) {
		__u64 x = b->way[i];
		__u64 age = ct_idle(now, x);

		if (conns_way_state(x) != XLB_CT_ESTABLISHED)
			age += bias;
		if ((x >> XLB_CT_TAG_SHIFT) == tag || conns_way_state(x) == XLB_CT_FREE) {
			*w = x;
			return i;
		}
		if (age >= oldest) {
			oldest = age;
			victim = i;
			*w = x;
		}
	}
	return victim;
}

/* xlb_ct_store puts e in bucket idx of xlb_ct (ct_victim's way) with a
 * compare-and-swap, uncounting the entry it replaces (conns.h); the sweep
 * or another CPU may change a way meanwhile, so it tries again, up to
 * three times. from: the state e's flow had in the count (XLB_CT_FREE for
 * a new flow, the moved entry's state for a move): stored, the count
 * moves from it to e's state; not stored, from is uncounted. Returns 1
 * when stored. A global function, verified once. */
__attribute__((noinline)) int xlb_ct_store(__u32 idx, __u64 tag, __u64 e, __u64 now, __u64 from)
{
	struct ct_bucket *b = bpf_map_lookup_elem(&xlb_ct, &idx);
	__u64 bias = defence_victim_bias();

#pragma clang loop unroll(disable)
	for (int t = 0; b && t < 3; t++) {
		__u64 w = 0;
		__u32 i = ct_victim(b, tag, now, &w, bias);

		if (i >= XLB_CT_WAYS)
			break;
		if (__sync_val_compare_and_swap(&b->way[i], w, e) == w) {
			conns_add(conns_way_real(w), conns_way_state(w), -1);
			conns_move(conns_way_real(e), from, conns_way_state(e));
			return 1;
		}
	}
	conns_add(conns_way_real(e), from, -1);
	return 0;
}

/* xlb_ct_refresh writes ne over way of bucket idx if it still holds e (a
 * compare-and-swap: the sweep or another CPU may have freed or moved it;
 * then the entry is left alone), moving the real's count on a change of
 * state, or from e's real to ne's when they differ (a peer's decision
 * installed over an expired entry, sync.h). A global function: the hit
 * path calls it only on a change. */
__attribute__((noinline)) int xlb_ct_refresh(__u32 idx, __u32 way, __u64 e, __u64 ne)
{
	struct ct_bucket *b = bpf_map_lookup_elem(&xlb_ct, &idx);

	asm volatile("" : "+r"(way)); /* keep the mask: the verifier needs it */
	way &= XLB_CT_WAYS - 1;
	if (!b || __sync_val_compare_and_swap(&b->way[way], e, ne) != e)
		return 0;
	if (conns_way_real(e) == conns_way_real(ne)) {
		conns_move(conns_way_real(e), conns_way_state(e), conns_way_state(ne));
	} else {
		conns_add(conns_way_real(e), conns_way_state(e), -1);
		conns_add(conns_way_real(ne), conns_way_state(ne), 1);
	}
	return 1;
}

/* ct_find_remote looks for the flow in the other CPUs' slices: a flow whose
 * packets moved to this CPU (RSS change, veth) keeps its backend. An
 * 8-byte way is read whole, so a concurrent write is seen before or
 * after; *at: where it was found (for select_remote's move). */
static __always_inline __u64 ct_find_remote(__u32 cpu, __u32 bucket, __u64 tag, __u64 **at)
{
	for (__u32 c = 0; c < MAX_CPUS; c++) {
		struct ct_bucket *ob;
		__u32 idx;

		if (c >= nr_cpus)
			break;
		if (c == cpu)
			continue;
		idx = c << ct_shift | bucket;
		ob = bpf_map_lookup_elem(&xlb_ct, &idx);
		if (!ob)
			continue;
#pragma unroll
		for (int i = 0; i < XLB_CT_WAYS; i++) {
			__u64 w = ob->way[i];

			if ((w >> XLB_CT_TAG_SHIFT) == tag && conns_way_state(w) != XLB_CT_FREE) {
				*at = &ob->way[i];
				return w;
			}
		}
	}
	return 0;
}

/* select_maglev_at reads Maglev table table_id (of table_size slots) at
 * the flow's slot. */
static __always_inline __u32 select_maglev_at(__u32 table_id, __u32 table_size, __u64 h)
{
	__u32 slot = hash_slot(h, table_size);
	__u32 pair = slot >> 1;
	void *table = bpf_map_lookup_elem(&xlb_tables, &table_id);
	__u64 *two;

	if (!table)
		return 0;
	two = bpf_map_lookup_elem(table, &pair);
	return two ? (__u32)(*two >> ((slot & 1) * 32)) : 0;
}

/* select_maglev reads the service's table at the flow's slot. */
static __always_inline __u32 select_maglev(const struct vip_info *v, __u64 h)
{
	return select_maglev_at(v->table_id, v->table_size, h);
}

/* xlb_sched_new: the real id service svc_id's scheduler (sched.h) gives
 * a flow no connection table entry answers for, by the Maglev table;
 * 0: none. table: the service's Maglev table id << 32 | its size. Hash
 * schedulers read it at their own hash's slot, the others at the flow's.
 * A global function, verified once for all its callers. */
__attribute__((noinline)) int xlb_sched_new(const struct pkt *p, __u32 svc_id, __u64 table, __u64 h)
{
	struct svc_sched *s = bpf_map_lookup_elem(&xlb_svc_sched, &svc_id);

	if (!p || !s)
		return 0;
	h = sched_hash(s, p, h); /* sched/dispatch.h */
	return select_maglev_at(table >> 32, (__u32)table, h);
}

/* flood_kind: the flood budget a new flow of p is counted in. */
static __always_inline __u32 flood_kind(const struct pkt *p)
{
	return p->proto == IPPROTO_TCP && (p->tcp_flags & TCP_FLAG_SYN) ? XLB_FLOOD_SYN : XLB_FLOOD_NEW;
}

/* flood_over_limit counts a new flow of this CPU in its kind's budget
 * (enum xlb_flood_kind) and tells whether it is over the node's limit for
 * the current tick (IPVS drop_entry in spirit: under a flood, stop
 * creating state). */
static __always_inline int flood_over_limit(const struct node_info *n, __u64 now, __u32 kind)
{
	__u32 limit = kind == XLB_FLOOD_SYN ? n->flood_syn_limit : n->flood_new_limit;
	struct flood_state *f;

	if (!limit)
		return 0;
	f = bpf_map_lookup_elem(&xlb_flood, &kind);
	if (!f)
		return 0;
	if (f->tick != now) {
		if (f->count <= limit)
			f->active = 0;
		f->tick = now;
		f->count = 0;
	}
	if (++f->count <= limit)
		return 0;
	if (!f->active) {
		f->active = 1;
		stats_count(XLB_STAT_FLOOD_ACTIVATIONS);
	}
	return 1;
}

struct selection {
	struct real_info *real;
	__u32 rid;
	__u32 new_flow;
	__u32 hit; /* a same-CPU conntrack hit, not yet counted: the caller
		    * counts XLB_STAT_CT_HIT with the verdict (stats_count_hit) */
	__u32 ct;  /* read-only selection: enum xlb_probe_ct */
	/* The conntrack way's low 32 bits (state, time) before and after this
	 * packet, when it wrote the way (ct_cur 0: no write; ct_prev 0: a new
	 * entry): connection sync reports from them (sync.h). */
	__u32 ct_prev, ct_cur;
};

/* ct_find_local: the way of bucket b that holds the flow (tag) in *e, or
 * -1. */
static __always_inline int ct_find_local(const struct ct_bucket *b, __u64 tag, __u64 *e)
{
#pragma unroll
	for (int i = 0; i < XLB_CT_WAYS; i++) {
		__u64 w = b->way[i];

		if ((w >> XLB_CT_TAG_SHIFT) == tag &&
		    ((w >> XLB_CT_STATE_SHIFT) & XLB_CT_STATE_MASK) != XLB_CT_FREE) {
			*e = w;
			return i;
		}
	}
	return -1;
}

/* ct_refresh moves the hit way's state and time on for p, writing only
 * when it changed (xlb_ct_refresh); then the client's persistence
 * template of service svc_id is held too (xlb_persist_touch). Returns the
 * way as written, or e when nothing was (no change, or the swap lost to
 * the sweep or another CPU): what connection sync reports (sync.h). */
static __always_inline __u64 ct_refresh(__u32 idx, int way, __u64 e, const struct pkt *p, __u64 now,
					__u32 svc_id)
{
	__u64 ne = (e & ~((XLB_CT_STATE_MASK << XLB_CT_STATE_SHIFT) | XLB_CT_TIME_MASK)) |
		   ct_next_state(p, conns_way_state(e)) << XLB_CT_STATE_SHIFT | (now & XLB_CT_TIME_MASK);

	if (ne == e || !xlb_ct_refresh(idx, way, e, ne))
		return e;
	xlb_persist_touch(p, svc_id, ne, now);
	return ne;
}

/* ct_free_moved frees the way at, of a flow stored anew in this CPU's
 * slice (select_remote), which held e when read, and uncounts it
 * (conns.h). The flow's CPU may refresh it meanwhile: tried again with
 * the value it wrote, up to three times; a way freed or taken by
 * another flow meanwhile was uncounted by whoever did it. */
static __always_inline void ct_free_moved(__u64 *at, __u64 tag, __u64 e)
{
#pragma clang loop unroll(disable)
	for (int t = 0; at && t < 3; t++) {
		__u64 w = __sync_val_compare_and_swap(at, e, 0);

		if (w == e) {
			conns_add(conns_way_real(e), conns_way_state(e), -1);
			return;
		}
		if ((w >> XLB_CT_TAG_SHIFT) != tag || conns_way_state(w) == XLB_CT_FREE)
			return;
		e = w;
	}
}

/* select_remote: the flow's entry in another CPU's slice, when usable
 * (sel filled). Tracked: the entry moves into bucket b: stored here
 * first, then freed there (ct_free_moved), so that a packet of the flow
 * on either CPU meanwhile finds one or the other (freed first, it was in
 * neither for a moment, and such a packet took the scheduler's backend).
 * Each way counts once (conns.h): the one stored here as a new one, the
 * one freed there is uncounted. Not stored here, the packet is forwarded
 * by the entry, left where it is. Returns 1 when found. */
static __always_inline int select_remote(const struct pkt *p, const struct vip_info *v,
					 const struct node_info *n, struct ct_bucket *b,
					 __u32 cpu, __u32 bucket, __u64 tag, __u64 now,
					 struct selection *sel, const bool track)
{
	__u64 *at = NULL;
	__u64 e = ct_find_remote(cpu, bucket, tag, &at);
	struct real_info *r = e ? ct_usable(e, tag, now, n, p, v) : NULL;

	if (!r)
		return 0;
	sel->real = r;
	sel->rid = conns_way_real(e);
	if (track) {
		__u64 next = ct_next_state(p, conns_way_state(e));
		__u64 ne = ct_make(tag, sel->rid, next, now);

		/* stored: reported like a refresh (sync.h), so a state change
		 * seen first on this CPU reaches the peers too */
		if (xlb_ct_store(cpu << ct_shift | bucket, tag, ne, now, XLB_CT_FREE)) {
			ct_free_moved(at, tag, e);
			sel->ct_prev = (__u32)e;
			sel->ct_cur = (__u32)ne;
		}
		stats_count(XLB_STAT_CT_REMOTE_HIT);
	} else {
		sel->ct = XLB_PROBE_CT_REMOTE_HIT;
	}
	return 1;
}

/* select_real: real rid of service v in sel, when it may carry the
 * service's flows. Returns 0 or XLB_STAT_DROP_NO_BACKEND. */
static __always_inline int select_real(const struct vip_info *v, __u32 rid, struct selection *sel)
{
	struct real_info *r;

	sel->rid = rid;
	if (!rid)
		return XLB_STAT_DROP_NO_BACKEND;
	r = bpf_map_lookup_elem(&xlb_reals, &sel->rid);
	if (!r || r->svc_id != v->svc_id || !(r->flags & XLB_REAL_F_ACTIVE))
		return XLB_STAT_DROP_NO_BACKEND;
	sel->real = r;
	return 0;
}

/* select_maglev_real: the real the service's table gives for h, in sel.
 * Returns 0 or XLB_STAT_DROP_NO_BACKEND. */
static __always_inline int select_maglev_real(const struct vip_info *v, __u64 h,
					      struct selection *sel)
{
	return select_real(v, select_maglev(v, h), sel);
}

/* select_sched: the real of a flow no connection table entry answers for,
 * by the service's scheduler: Maglev on the flow hash inline, list
 * schedulers (sched.h) and lblc, lblcr (lblc.h) only when stateful (the
 * flow is being tracked),
 * else the Maglev table in xlb_sched_new: a read-only selection or an
 * untracked flow (flood) reads it at the flow's slot, the same for every
 * packet of the flow, hash schedulers at their own hash's. */
static __always_inline int select_sched(const struct pkt *p, const struct vip_info *v, __u64 h,
					struct selection *sel, bool stateful)
{
	__u32 id = v->svc_id;
	struct svc_sched *s = bpf_map_lookup_elem(&xlb_svc_sched, &id);

	if (!s || s->kind == XLB_SCHED_MAGLEV)
		return select_maglev_real(v, h, sel);
	if (stateful && sched_in(s->kind, XLB_SCHED_FAMILY_LOCALITY) &&
	    !select_real(v, xlb_sched_lblc(p, id), sel))
		return 0;
	if (stateful && sched_in(s->kind, XLB_SCHED_USES_LIST) &&
	    !select_real(v, xlb_sched_list(id), sel))
		return 0;
	return select_real(v, xlb_sched_new(p, id, (__u64)v->table_id << 32 | v->table_size, h), sel);
}

/* select_persists: service svc_id has persistence (an array lookup the
 * verifier turns into a load: a service without it does not call
 * xlb_persist_use, a call and a lookup per new flow that gave the
 * scheduler's choice back). Looked up again rather than kept from
 * select_sched: a pointer live across the scheduler took the fragment
 * stage's call chain past the verifier's 512 bytes of stack ("combined
 * stack size of 5 calls is 528"). */
static __always_inline int select_persists(__u32 svc_id)
{
	struct svc_sched *s = bpf_map_lookup_elem(&xlb_svc_sched, &svc_id);

	return s && s->persist_timeout;
}

/* select_new: select_sched, then, for a flow being tracked, the client's
 * persistence template (persist.h) overrides the choice or records it. */
static __always_inline int select_new(const struct pkt *p, const struct vip_info *v, __u64 h,
				      struct selection *sel, bool stateful, __u64 now)
{
	int rc = select_sched(p, v, h, sel, stateful);
	__u32 chosen = sel->rid, rid;

	if (rc || !stateful || !select_persists(v->svc_id))
		return rc;
	rid = xlb_persist_use(p, v->svc_id, chosen, now);
	if (rid != chosen && select_real(v, rid, sel))
		return select_real(v, chosen, sel);
	return 0;
}

/* select_local_hit fills sel for the usable entry e of real r, at way of
 * bucket idx in this CPU's slice. track: the entry is refreshed and the
 * hit left for the caller to count (sel->hit); else read only. */
static __always_inline void select_local_hit(const struct pkt *p, const struct vip_info *v,
					     __u32 idx, int way, __u64 e, __u64 now,
					     struct real_info *r, struct selection *sel,
					     const bool track)
{
	if (track) {
		__u64 ne = ct_refresh(idx, way, e, p, now, v->svc_id);

		if (ne != e) {
			sel->ct_prev = (__u32)e;
			sel->ct_cur = (__u32)ne;
		}
		sel->hit = 1;
	} else {
		sel->ct = XLB_PROBE_CT_HIT;
	}
	sel->real = r;
	sel->rid = conns_way_real(e);
}

/* select_backend fills sel for a packet of service v. Returns 0, or an enum
 * xlb_stat drop reason.
 *
 * track (a literal at every call: the compiler drops the other side's code)
 * true: the packet is of the flow, tracked in this CPU's slice: a hit is
 * refreshed, a flow adopted from another CPU or chosen by the Maglev table
 * is stored, and the ct_* counters move. A flow this CPU's slice does not
 * hold is first counted in its flood budget (flood_over_limit): over it,
 * the flow is forwarded by the Maglev table alone, untracked, without
 * looking in the other CPUs' slices; so is a share of them while the
 * drop_packet defence is on (defence.h); a flow whose packet has SYN starts
 * afresh and is never looked for there.
 * track false: read only, for packets about a flow rather than of it (ICMP
 * errors) and for self-check probes: the flow's entry in this
 * CPU's slice, else in another CPU's (SYN or not), else the Maglev table;
 * no entry is inserted or refreshed and no conntrack counter moves
 * (sel->ct tells which answered). A node that does not track the flow
 * picks the backend the table gives, as the flow's own node did. */
static __always_inline int select_backend(const struct pkt *p, const struct vip_info *v,
					  const struct node_info *n, __u64 h, struct selection *sel,
					  const bool track)
{
	__u32 cpu = bpf_get_smp_processor_id();
	__u32 bucket = (__u32)h & ((1U << ct_shift) - 1);
	__u32 idx = cpu << ct_shift | bucket;
	__u64 now = XLB_CLOCK_NS() >> XLB_TICK_SHIFT;
	__u64 tag = h >> XLB_CT_TAG_SHIFT;
	struct ct_bucket *b = bpf_map_lookup_elem(&xlb_ct, &idx);
	struct real_info *r;
	int way = -1, untracked = 0, rc;
	__u64 e = 0;

	if (!b && track)
		return XLB_STAT_DROP_INTERNAL;
	if (b)
		way = ct_find_local(b, tag, &e);
	if (way >= 0) {
		r = ct_usable(e, tag, now, n, p, v);
		if (r) {
			select_local_hit(p, v, idx, way, e, now, r, sel, track);
			return 0;
		}
	}
	if (way >= 0) {
		if (track)
			stats_count(XLB_STAT_CT_RESELECT);
		else
			sel->ct = XLB_PROBE_CT_RESELECT;
	} else if (track && (flood_over_limit(n, now, flood_kind(p)) || defence_untrack())) {
		stats_count(XLB_STAT_FLOOD_UNTRACKED);
		untracked = 1;
	} else if (nr_cpus > 1 && !(track && flood_kind(p) == XLB_FLOOD_SYN) &&
		   select_remote(p, v, n, b, cpu, bucket, tag, now, sel, track)) {
		return 0;
	}
	if (track)
		stats_count(XLB_STAT_CT_MISS);
	else if (way < 0)
		sel->ct = XLB_PROBE_CT_MISS;
	rc = select_new(p, v, h, sel, track && !untracked, now);
	if (rc || !track)
		return rc;
	sel->new_flow = 1;
	if (!untracked) {
		e = ct_make(tag, sel->rid, ct_next_state(p, XLB_CT_FREE), now);
		if (xlb_ct_store(idx, tag, e, now, XLB_CT_FREE))
			sel->ct_cur = (__u32)e;
	}
	return 0;
}
