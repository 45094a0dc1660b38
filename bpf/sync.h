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
	state = (cur >> XLB_CT_STATE_SHIFT) & XLB_CT_STATE_MASK;
	if (state != ((prev >> XLB_CT_STATE_SHIFT) & XLB_CT_STATE_MASK)) {
		/* a new flow or a change of state: reported whatever the
		 * refresh period, which needs the node's timeouts */
		kind = sync_kind(prev, cur, 0);
	} else {
		n = bpf_map_lookup_elem(&xlb_node, &zero);
		if (!n)
			return 0;
		kind = sync_kind(prev, cur, sync_shift(c->refresh_shift & 15, sync_timeout(n, proto, state)));
	}
	if (kind)
		xlb_sync_put(h, rid, state, kind);
	return 0;
}

/* sync_note: xlb_sync_note for the selection sel of packet p. Whether
 * sync is on is read here, inline (an array lookup the verifier turns
 * into a load): with sync off, a new flow or a change of state costs no
 * call. */
static __always_inline void sync_note(const struct selection *sel, __u64 h, const struct pkt *p)
{
	__u32 zero = 0;
	struct sync_conf *c;

	if (!sel->ct_cur)
		return;
	c = bpf_map_lookup_elem(&xlb_sync_conf, &zero);
	if (c && c->enabled)
		xlb_sync_note(h, sel->rid, sel->ct_prev, sel->ct_cur, p->proto);
}

/* sync_write_way writes ne over way of bucket idx, which held e, with
 * xlb_ct_refresh (nothing to write when equal). Returns 0 when the swap
 * lost. */
static __always_inline int sync_write_way(__u32 idx, int way, __u64 e, __u64 ne)
{
	return ne == e || xlb_ct_refresh(idx, way, e, ne);
}

/* sync_find_flow: the way that holds the flow (bucket, tag), looked for
 * in this CPU's slice first, then in the others': its xlb_ct index in
 * *idx (set to this CPU's when none holds it), its value in *e; -1: none. */
static __always_inline int sync_find_flow(__u32 cpu, __u32 bucket, __u64 tag, __u32 *idx, __u64 *e)
{
	struct ct_bucket *b = bpf_map_lookup_elem(&xlb_ct, idx);
	int way = b ? ct_find_local(b, tag, e) : -1;

	for (__u32 c = 0; way < 0 && c < MAX_CPUS; c++) {
		__u32 k = c << ct_shift | bucket;

		if (c >= nr_cpus)
			break;
		if (c == cpu)
			continue;
		b = bpf_map_lookup_elem(&xlb_ct, &k);
		if (b && (way = ct_find_local(b, tag, e)) >= 0)
			*idx = k;
	}
	return way;
}

/* xlb_sync_flow writes one peer decision for the flow of hash (its low
 * hbits known): real rid, state, proto, seen by the peer age ticks ago
 * (meta: age | state << 16 | hbits << 24). The flow's way is looked for
 * in every CPU's slice, not only in this one (the install runs on
 * whichever CPU xlbd does): a flow keeps one entry, so an older one of
 * this node left in another slice cannot take the flow's packets back to
 * a real the peer has moved it from (a backend that went away and came
 * back). A way of this flow that is live here to another real is kept
 * (this node has forwarded the flow itself) unless the peer saw the flow
 * more than XLB_SYNC_KEEP_TICKS later than this node did: then the
 * peer's decision is the newer one (the flow was placed again elsewhere
 * while this node was away, and its packets go there now). A way to the
 * same real takes the younger time and the peer's state. Every write is
 * a compare-and-swap that moves the reals' connection counts
 * (xlb_ct_refresh over the flow's way, xlb_ct_store for a new one:
 * conns.h), so an installed flow counts as a connection of its backend
 * here as soon as it is installed, and the sweep uncounts it when it
 * times out. A global function: verified once, not in each of
 * xlb_sync_apply's records. */
__attribute__((noinline)) int xlb_sync_flow(__u64 hash, __u32 rid, __u32 meta, __u32 proto)
{
	/* the forwarder's clock (XLB_CLOCK_NS), which stamps the ways */
	__u64 now = XLB_CLOCK_NS() >> XLB_TICK_SHIFT;
	__u32 cpu = bpf_get_smp_processor_id(), zero = 0;
	__u32 bucket = (__u32)hash & ((1U << ct_shift) - 1);
	__u32 idx = cpu << ct_shift | bucket, own = idx;
	__u32 age = meta & 0xffff, state = (meta >> 16) & 0xff, hbits = meta >> 24;
	const struct node_info *n = bpf_map_lookup_elem(&xlb_node, &zero);
	__u64 tag = hash >> XLB_CT_TAG_SHIFT;
	__u64 seen = (now - age) & XLB_CT_TIME_MASK;
	__u64 e = 0;
	int way;

	if (!n || hbits < ct_shift || state == XLB_CT_FREE || state > XLB_CT_CLOSING || !rid ||
	    rid >= XLB_MAX_REALS) {
		sync_count(XLB_SYNC_STAT_SKIPPED);
		return 0;
	}
	way = sync_find_flow(cpu, bucket, tag, &idx, &e);
	if (way >= 0 && way < XLB_CT_WAYS) {
		if (conns_way_real(e) != rid && sync_live(n, e, (__u8)proto, now) &&
		    ct_idle(now, e) <= (__u64)age + XLB_SYNC_KEEP_TICKS) {
			sync_count(XLB_SYNC_STAT_KEPT);
			return 0;
		}
		if (ct_idle(now, e) < age)
			seen = e & XLB_CT_TIME_MASK;
		if (sync_write_way(idx, way, e, ct_make(tag, rid, state, seen))) {
			sync_count(XLB_SYNC_STAT_APPLIED);
			return 1;
		}
	}
	/* not held here, or the way changed under the swap (the sweep freed
	 * it, a forwarding CPU moved it): stored as a new entry */
	if (xlb_ct_store(own, tag, ct_make(tag, rid, state, seen), now, XLB_CT_FREE)) {
		sync_count(XLB_SYNC_STAT_APPLIED);
		return 1;
	}
	sync_count(XLB_SYNC_STAT_SKIPPED);
	return 0;
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

/* sync_nat_real: real r is one of the service in sends to (its VIP and
 * port, or the VIP's all-ports service) and its method here is nat (the
 * real's own, else the service's: methods.h). */
static __always_inline int sync_nat_real(const struct sync_state *in, const struct real_info *r)
{
	struct vip_key vk = {};
	const struct vip_info *v;

	__builtin_memcpy(vk.addr, in->vip, 16);
	vk.port = in->vport;
	vk.proto = in->proto;
	vk.family = in->family;
	v = bpf_map_lookup_elem(&xlb_vips, &vk);
	if (!v || v->svc_id != r->svc_id) {
		vk.port = 0;
		v = bpf_map_lookup_elem(&xlb_vips, &vk);
	}
	return v && v->svc_id == r->svc_id && (r->encap ? r->encap : v->encap) == XLB_ENCAP_NAT;
}

/* xlb_sync_nat writes a peer's NAT flow (struct sync_state of kind
 * XLB_SYNC_EV_NAT) into xlb_nat, so this node rewrites the flow's
 * replies as the peer does: the key from this node's real (the backend's
 * address, and its port or the VIP's) and the record's client, the value
 * the VIP and the time the peer last recorded the flow. An entry of this
 * node for the same tuple to another VIP:port is kept unless the peer's
 * is more than XLB_SYNC_KEEP_TICKS newer (a stale record never overrides
 * newer local state); one to the same VIP:port only takes the newer
 * time. A real that is not NAT here, not of the VIP's service, or of
 * another family, is skipped.
 * NAT in xlb rewrites destinations only: the client's port is its own,
 * so no port is allocated that a peer would have to reserve. */
__attribute__((noinline)) int xlb_sync_nat(const struct sync_state *in, __u64 now)
{
	struct nat_key k = {};
	struct nat_val v = {};
	const struct real_info *r;
	struct nat_val *old;
	__u32 rid;

	if (!in)
		return 0;
	rid = in->rid[0];
	r = bpf_map_lookup_elem(&xlb_reals, &rid);
	if (!r || r->family != in->family || (in->proto != IPPROTO_TCP && in->proto != IPPROTO_UDP) ||
	    !sync_nat_real(in, r))
		goto skip;
	__builtin_memcpy(k.backend, r->addr, 16);
	__builtin_memcpy(k.client, in->addr, 16);
	k.bport = r->port ? r->port : in->vport;
	k.cport = in->cport;
	k.proto = in->proto;
	k.family = in->family;
	__builtin_memcpy(v.vip, in->vip, 16);
	v.vport = in->vport;
	v.rid = rid;
	v.seen = (now - in->age) & XLB_CT_TIME_MASK;
	old = bpf_map_lookup_elem(&xlb_nat, &k);
	if (old && old->vport == v.vport && *(__u64 *)old->vip == *(__u64 *)v.vip &&
	    *(__u64 *)(old->vip + 8) == *(__u64 *)(v.vip + 8)) {
		if (ct_idle(now, old->seen) > in->age)
			old->seen = v.seen;
		sync_count(XLB_SYNC_STAT_APPLIED);
		return 1;
	}
	if (old && ct_idle(now, old->seen) <= (__u64)in->age + XLB_SYNC_KEEP_TICKS) {
		sync_count(XLB_SYNC_STAT_KEPT);
		return 0;
	}
	if (!bpf_map_update_elem(&xlb_nat, &k, &v, BPF_ANY)) {
		sync_count(XLB_SYNC_STAT_APPLIED);
		return 1;
	}
skip:
	sync_count(XLB_SYNC_STAT_SKIPPED);
	return 0;
}

/* sync_lblc_members copies the record's backends that are reals of
 * service svc here into ne (lblc: the first only); returns how many. */
static __always_inline int sync_lblc_members(const struct sync_state *in, __u32 svc, __u8 kind,
					     struct lblc_ent *ne)
{
	int got = 0;

	for (int j = 0; j < XLB_LBLC_SET_MAX; j++) {
		__u32 rid = in->rid[j];
		const struct real_info *r = bpf_map_lookup_elem(&xlb_reals, &rid);

		if (!rid || !r || r->svc_id != svc)
			continue;
		ne->rid[got & (XLB_LBLC_SET_MAX - 1)] = rid;
		got++;
		if (kind == XLB_SCHED_LBLC || got == XLB_LBLC_SET_MAX)
			break;
	}
	return got;
}

/* xlb_sync_lblc writes a peer's lblc or lblcr entry (struct sync_state of
 * kind XLB_SYNC_EV_LBLC) into xlb_lblc, so this node's choice for the
 * destination agrees with the peer's. An entry of this node that is live
 * (used within the expiration) and whose backends changed later than the
 * peer's keeps its backends (a stale record never overrides newer local
 * state; counted kept; in the same tick the peer's wins, so a peer's two
 * changes within one tick arrive as the second); either way the entry is
 * used as recently as the newer of the two. Backends this node does not have in
 * the service are left out; none left: skipped. */
__attribute__((noinline)) int xlb_sync_lblc(const struct sync_state *in, __u64 now)
{
	struct lblc_key k = {};
	struct lblc_ent ne = {};
	const struct svc_sched *s;
	struct lblc_ent *e;
	__u32 svc;

	if (!in)
		return 0;
	svc = in->svc_id;
	s = bpf_map_lookup_elem(&xlb_svc_sched, &svc);
	if (!s || !sched_in(s->kind, XLB_SCHED_FAMILY_LOCALITY) || !sync_lblc_members(in, svc, s->kind, &ne))
		goto skip;
	ne.used = now - in->age;
	ne.mod = now - in->mod_age;
	k.svc_id = svc;
	k.family = in->family;
	__builtin_memcpy(k.addr, in->addr, 16);
	e = bpf_map_lookup_elem(&xlb_lblc, &k);
	if (e && (__s64)(now - e->used) <= (__s64)s->stride) {
		if ((__s64)(ne.used - e->used) > 0)
			e->used = ne.used;
		if ((__s64)(e->mod - ne.mod) > 0) {
			sync_count(XLB_SYNC_STAT_KEPT);
			return 0;
		}
#pragma unroll
		for (int j = 0; j < XLB_LBLC_SET_MAX; j++)
			*(volatile __u64 *)&e->rid[j] = ne.rid[j];
		e->mod = ne.mod;
		sync_count(XLB_SYNC_STAT_APPLIED);
		return 1;
	}
	if (!bpf_map_update_elem(&xlb_lblc, &k, &ne, BPF_ANY)) {
		sync_count(XLB_SYNC_STAT_APPLIED);
		return 1;
	}
skip:
	sync_count(XLB_SYNC_STAT_SKIPPED);
	return 0;
}
