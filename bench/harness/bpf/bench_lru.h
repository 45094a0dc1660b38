/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* bench_lru.h: backend selection with a kernel LRU hash map as the connection
 * table, for the measured comparison with the forwarder's per-CPU way table
 * (select.h; docs/PERFORMANCE.md, the connection table against LRU maps). Everything
 * around the table is the forwarder's: the same VIP match, timeouts, state
 * machine, "write only when it changed" policy, coarse clock, Maglev lookup
 * and real checks. Not part of the forwarder. */
#pragma once

#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "maps.h"
#include "parse.h"
#include "select.h"
#include "stats.h"

/* The 5-tuple as parsed; IPv4 addresses use the first 4 bytes. */
struct lru_key {
	__u8 src[16];
	__u8 dst[16];
	__u32 ports; /* sport | dport << 16, as loaded from the wire */
	__u8 proto;
	__u8 family;
	__u16 pad;
};

struct lru_val {
	__u32 rid;       /* xlb_reals index */
	__u16 last_seen; /* conntrack ticks, as in the way table */
	__u8 state;      /* enum xlb_ct_state */
	__u8 pad;
};

/* 5-tuple -> backend. The loader sets the type (LRU_HASH or
 * LRU_PERCPU_HASH), BPF_F_NO_COMMON_LRU and the size before loading. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lru_key);
	__type(value, struct lru_val);
	__uint(max_entries, 1 << 20);
} bench_lru_ct SEC(".maps");

/* Connection table of bench_lru; set by the loader. */
enum bench_ct_kind {
	BENCH_CT_LRU = 0,  /* bench_lru_ct */
	BENCH_CT_NONE = 1, /* no table: the Maglev table for every packet */
};

volatile const __u32 bench_ct = BENCH_CT_LRU;

/* lru_usable mirrors ct_usable for an LRU entry: live, and its real may
 * still carry tracked flows of this service. */
static __always_inline struct real_info *lru_usable(const struct lru_val *e, __u64 now,
						     const struct node_info *n,
						     const struct pkt *p, const struct vip_info *v)
{
	__u64 state = e->state;
	__u32 rid = e->rid;
	struct real_info *r;

	if (state == XLB_CT_FREE)
		return NULL;
	if (((now - e->last_seen) & XLB_CT_TIME_MASK) > ct_timeout(n, p, state))
		return NULL;
	if (state == XLB_CT_CLOSING && p->proto == IPPROTO_TCP &&
	    (p->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN)
		return NULL;
	r = bpf_map_lookup_elem(&xlb_reals, &rid);
	if (!r || r->svc_id != v->svc_id || !(r->flags & XLB_REAL_F_ACTIVE))
		return NULL;
	return r;
}

/* lru_select_backend is select_backend with bench_lru_ct as the table.
 * Returns 0, or an enum xlb_stat drop reason. */
static __always_inline int lru_select_backend(const struct pkt *p, const struct vip_info *v,
					      const struct node_info *n, __u64 h,
					      struct selection *sel)
{
	__u64 now = bpf_ktime_get_coarse_ns() >> XLB_TICK_SHIFT;
	struct lru_key k = {};
	struct lru_val nv = {};
	struct lru_val *e;
	struct real_info *r;
	int rc;

	if (bench_ct == BENCH_CT_LRU) {
		__builtin_memcpy(k.src, p->src, 16);
		__builtin_memcpy(k.dst, p->dst, 16);
		k.ports = p->ports;
		k.proto = p->proto;
		k.family = p->family;
		e = bpf_map_lookup_elem(&bench_lru_ct, &k);
		if (e) {
			r = lru_usable(e, now, n, p, v);
			if (r) {
				__u8 state = ct_next_state(p, e->state);

				if (e->state != state || e->last_seen != (__u16)now) {
					e->state = state;
					e->last_seen = now;
				}
				sel->real = r;
				sel->rid = e->rid;
				stats_count(XLB_STAT_CT_HIT);
				return 0;
			}
			stats_count(XLB_STAT_CT_RESELECT);
		}
	}
	stats_count(XLB_STAT_CT_MISS);

	rc = select_maglev_real(v, h, sel);
	if (rc)
		return rc;
	sel->new_flow = 1;
	if (bench_ct == BENCH_CT_LRU) {
		nv.rid = sel->rid;
		nv.last_seen = now;
		nv.state = ct_next_state(p, XLB_CT_FREE);
		bpf_map_update_elem(&bench_lru_ct, &k, &nv, BPF_ANY);
	}
	return 0;
}
