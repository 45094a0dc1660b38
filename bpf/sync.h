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

static __always_inline void sync_count(__u32 s)
{
	__u64 *c = bpf_map_lookup_elem(&xlb_sync_stats, &s);

	if (c)
		*c += 1;
}

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

/* sync_shift: the refresh period (log2, ticks) for a flow whose entry
 * times out after timeout ticks: the configured shift, made smaller until
 * a period is at most half the timeout. A peer's copy of the flow carries
 * the time of its last report, and the peer's sweep (sweep.h) frees and
 * uncounts it once that is older than the timeout: a flow that sees a
 * packet at least every half timeout is reported again before then. */
static __always_inline __u32 sync_shift(__u32 shift, __u64 timeout)
{
	for (int i = 0; i < 16 && shift && (1ULL << shift) > timeout / 2; i++)
		shift--;
	return shift;
}

#define sync_barrier() asm volatile("" ::: "memory")

/* xlb_sync_put writes a record into this CPU's part of xlb_sync_log: no
 * lock shared between CPUs (a ring buffer's spinlock cost 3 to 4 times as
 * much per record; docs/ARCHITECTURE.md). A run that finds another one on
 * this CPU writing (a packet's softirq interrupting a BPF_PROG_TEST_RUN
 * run, or such a run preempted mid-record) counts its record lost rather
 * than tear one: busy is taken with an atomic exchange. The head is
 * published after the record's bytes with an exchange (fully ordered on
 * every CPU), so xlbd never reads a record being written; a slot is
 * written again only after xlbd's tail passed it (full: the record is
 * lost, and counted). A global function: verified once, not in every
 * path of the forwarder that makes a decision. */
__attribute__((noinline)) int xlb_sync_put(__u64 hash, __u32 rid, __u32 state, __u32 kind)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct sync_cpu *c = bpf_map_lookup_elem(&xlb_sync_cpus, &cpu);
	struct sync_event *slot;
	__u64 head;
	__u32 idx;

	if (!c)
		return 0;
	if (__sync_lock_test_and_set(&c->busy, 1)) {
		sync_count(XLB_SYNC_STAT_LOST);
		return 0;
	}
	sync_barrier();
	head = c->head;
	idx = cpu * XLB_SYNC_SLOTS + (__u32)(head & (XLB_SYNC_SLOTS - 1));
	slot = bpf_map_lookup_elem(&xlb_sync_log, &idx);
	if (!slot || head - *(volatile __u64 *)&c->tail >= XLB_SYNC_SLOTS) {
		sync_count(XLB_SYNC_STAT_LOST);
	} else {
		slot->hash = hash;
		slot->rid = rid;
		slot->state = state;
		slot->kind = kind;
		slot->pad = 0;
		sync_barrier();
		__sync_lock_test_and_set(&c->head, head + 1);
	}
	sync_barrier();
	*(volatile __u64 *)&c->busy = 0;
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
