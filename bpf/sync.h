/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sync.h: connection sync between nodes (docs/ARCHITECTURE.md, Connection
 * sync). The forwarder reports what it decides for a flow, off the packet
 * path: a record in xlb_sync_log when a tracked flow is created, when its
 * state changes, and when its entry's time crosses a refresh boundary (so a
 * live flow is reported every 2^refresh_shift ticks, not per packet).
 * xlbd batches the records to the peers; a peer's xlbd installs them with
 * xlb_sync_apply (sync.c), run through BPF_PROG_TEST_RUN, into its own connection
 * table. Its types are in types.h, its maps in maps.h. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "types.h"
#include "maps.h"
#include "select.h"
#include "synclog.h"

/* sync_kind: what the way's change from prev to cur (low 32 bits of the
 * way: state and time; prev 0 for a new entry) is worth reporting as, 0
 * for nothing. */
static __always_inline __u32 sync_kind(__u32 prev, __u32 cur, __u32 shift)
{
	__u32 ps = (prev >> XLB_CT_STATE_SHIFT) & XLB_CT_STATE_MASK;
	__u32 cs = (cur >> XLB_CT_STATE_SHIFT) & XLB_CT_STATE_MASK;

	if (cs == XLB_CT_FREE)
		return 0;
	if (ps == XLB_CT_FREE)
		return XLB_SYNC_EV_NEW;
	if (ps != cs)
		return XLB_SYNC_EV_STATE;
	if (((prev & XLB_CT_TIME_MASK) >> shift) != ((cur & XLB_CT_TIME_MASK) >> shift))
		return XLB_SYNC_EV_REFRESH;
	return 0;
}

/* sync_timeout: the idle timeout of a flow of proto in state. */
static __always_inline __u64 sync_timeout(const struct node_info *n, __u32 proto, __u64 state)
{
	return proto != IPPROTO_TCP	 ? n->timeout_udp :
	       state == XLB_CT_SYN	 ? n->timeout_tcp_syn :
	       state == XLB_CT_CLOSING ? n->timeout_tcp_fin :
					   n->timeout_tcp;
}

/* sync_live: way e (of a flow of proto) is not idle past its timeout. */
static __always_inline int sync_live(const struct node_info *n, __u64 e, __u8 proto, __u64 now)
{
	return ct_idle(now, e) <= sync_timeout(n, proto, (e >> XLB_CT_STATE_SHIFT) & XLB_CT_STATE_MASK);
}

/* xlb_sync_note reports the conntrack write a selection made (struct
 * selection's ct_prev / ct_cur) for a flow of proto, if sync is on and it
 * is worth a record. The record wakes nobody: xlbd polls the CPUs' heads
 * every millisecond (a wakeup per record would cost more than the
 * record). A global function, like xlb_sync_put: the forwarder's verifier
 * budget is spent once on it, not on every path to it. */
__attribute__((noinline)) int xlb_sync_note(__u64 h, __u32 rid, __u32 prev, __u32 cur, __u32 proto)
{
	struct node_info *n;
	struct sync_conf *c;
	__u32 zero = 0, kind, state;

	if (!cur)
		return 0;
	c = bpf_map_lookup_elem(&xlb_sync_conf, &zero);
	if (!c || !c->enabled)
		return 0;
	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!n)
		return 0;
	state = (cur >> XLB_CT_STATE_SHIFT) & XLB_CT_STATE_MASK;
	kind = sync_kind(prev, cur, sync_shift(c->refresh_shift & 15, sync_timeout(n, proto, state)));
	if (kind)
		xlb_sync_put(h, rid, state, kind);
	return 0;
}

/* sync_note: xlb_sync_note for the selection sel of packet p. */
static __always_inline void sync_note(const struct selection *sel, __u64 h, const struct pkt *p)
{
	if (sel->ct_cur)
		xlb_sync_note(h, sel->rid, sel->ct_prev, sel->ct_cur, p->proto);
}

/* sync_write_way writes ne over way of bucket idx, which held e, with
 * xlb_ct_refresh (nothing to write when equal). Returns 0 when the swap
 * lost. */
static __always_inline int sync_write_way(__u32 idx, int way, __u64 e, __u64 ne)
{
	return ne == e || xlb_ct_refresh(idx, way, e, ne);
}

/* sync_install_one writes one peer decision into this CPU's slice. A way
 * of this flow that is live here to another real is kept (this node has
 * forwarded the flow itself) unless the peer saw the flow more than
 * XLB_SYNC_KEEP_TICKS later than this node did: then the peer's decision
 * is the newer one (the flow was placed again elsewhere while this node
 * was away, and its packets go there now). A way to the same real takes
 * the younger time and the peer's state. Every write is a compare-and-swap
 * that moves the reals' connection counts (xlb_ct_refresh over the flow's
 * way, xlb_ct_store for a new one: conns.h), so an installed flow counts
 * as a connection of its backend here as soon as it is installed, and the
 * sweep uncounts it when it times out. */
static __always_inline void sync_install_one(const struct node_info *n,
					     const struct sync_install *in, __u64 now)
{
	__u32 cpu = bpf_get_smp_processor_id();
	__u32 bucket = (__u32)in->hash & ((1U << ct_shift) - 1);
	__u32 idx = cpu << ct_shift | bucket;
	__u64 tag = in->hash >> XLB_CT_TAG_SHIFT;
	__u64 seen = (now - in->age) & XLB_CT_TIME_MASK;
	struct ct_bucket *b;
	__u64 e = 0;
	int way;

	if (in->hbits < ct_shift || in->state == XLB_CT_FREE || in->state > XLB_CT_CLOSING ||
	    !in->rid || in->rid >= XLB_MAX_REALS) {
		sync_count(XLB_SYNC_STAT_SKIPPED);
		return;
	}
	b = bpf_map_lookup_elem(&xlb_ct, &idx);
	if (!b)
		return;
	way = ct_find_local(b, tag, &e);
	if (way >= 0 && way < XLB_CT_WAYS) {
		if (conns_way_real(e) != in->rid && sync_live(n, e, in->proto, now) &&
		    ct_idle(now, e) <= (__u64)in->age + XLB_SYNC_KEEP_TICKS) {
			sync_count(XLB_SYNC_STAT_KEPT);
			return;
		}
		if (ct_idle(now, e) < in->age)
			seen = e & XLB_CT_TIME_MASK;
		if (sync_write_way(idx, way, e, ct_make(tag, in->rid, in->state, seen))) {
			sync_count(XLB_SYNC_STAT_APPLIED);
			return;
		}
	}
	/* not held here, or the way changed under the swap (the sweep freed
	 * it, a forwarding CPU moved it): stored as a new entry */
	if (xlb_ct_store(idx, tag, ct_make(tag, in->rid, in->state, seen), now, XLB_CT_FREE))
		sync_count(XLB_SYNC_STAT_APPLIED);
	else
		sync_count(XLB_SYNC_STAT_SKIPPED);
}

/* xlb_sync_template writes a peer's persistence template (a sync_install
 * of kind XLB_SYNC_EV_TEMPLATE) into xlb_persist: the client of source
 * hash srch keeps backend (real) rid for hold ticks from now. The slot's
 * hash is this node's (the service's or group's persistence id here). A
 * live template of this node is never moved to another backend nor made
 * to expire sooner (it is kept, and counted so), and a slot another live
 * client holds is not taken (skipped): the peer's copy only fills in what
 * this node does not know. A global function, verified once rather than
 * in each of xlb_sync_apply's unrolled records. */
__attribute__((noinline)) int xlb_sync_template(__u64 srch, __u32 rid, __u32 hold, __u64 now)
{
	__u32 sid, key;
	const struct real_info *r = bpf_map_lookup_elem(&xlb_reals, &rid);
	const struct svc_sched *s;
	__u64 h, tag, w, ne, *slot;

	if (!r || !hold)
		goto skip;
	sid = r->svc_id;
	s = bpf_map_lookup_elem(&xlb_svc_sched, &sid);
	if (!s || !s->persist_timeout)
		goto skip;
	h = persist_key(srch, s->persist_id);
	key = (__u32)h & (XLB_PERSIST_SLOTS - 1);
	tag = h >> XLB_PERSIST_TAG_SHIFT;
	slot = bpf_map_lookup_elem(&xlb_persist, &key);
	if (!slot)
		goto skip;
	for (int t = 0; t < 2; t++) {
		w = *slot;
		if (persist_live(now, w) && (w >> XLB_PERSIST_TAG_SHIFT) != tag)
			goto skip;
		if (persist_live(now, w) && persist_real(w) != rid) {
			sync_count(XLB_SYNC_STAT_KEPT);
			return 0;
		}
		ne = persist_live(now, w) ? persist_hold(w, now, hold) :
					     tag << XLB_PERSIST_TAG_SHIFT | (__u64)rid << XLB_PERSIST_REAL_SHIFT |
						     ((now + hold) & XLB_PERSIST_TIME_MASK);
		if (!ne || __sync_val_compare_and_swap(slot, w, ne) == w) {
			sync_count(XLB_SYNC_STAT_APPLIED);
			return 1;
		}
	}
skip:
	sync_count(XLB_SYNC_STAT_SKIPPED);
	return 0;
}
