/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* send.h: the last step of every forwarded packet, shared by the entry
 * and the stages: count it, fit it to its real's egress MTU or answer too
 * big, and send it by its method (methods.h), tracing it when asked; and
 * the tail call into a stage (xlb_stage). */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "types.h"
#include "maps.h"
#include "select.h"
#include "methods.h"
#include "stats.h"
#include "toobig.h"
#include "frag.h"
#include "trace.h"

/* xlb_send_too_big: p does not fit its real's egress once encapsulated
 * (toobig.h). IPv4 without DF goes to xlbd to be fragmented (dropped
 * here); otherwise the answer XLB_L4_TOO_BIG | MTU asks xlb_forward for
 * the ICMP error. The flow's conntrack entry stays, so the client's
 * smaller retries keep the backend. */
static __always_inline int xlb_send_too_big(struct xdp_md *ctx, const struct pkt *p,
					    const struct vip_info *v, const struct selection *sel,
					    __u8 encap, __u16 outer, __u64 h, __u32 egress)
{
	__u32 mtu = toobig_client_mtu(p, egress, outer);
	struct frag_entry e = {};
	struct frag_key k = {};
	__be16 id;

	if (sel->hit)
		stats_count(XLB_STAT_CT_HIT);
	if (!toobig_may_fragment(ctx, p, &id))
		return XLB_L4_TOO_BIG | mtu;
	frag_make_key(p, id, &k);
	e.hash = h;
	e.rid = sel->rid;
	e.svc_id = v->svc_id;
	e.encap = encap;
	return frag_hand_off(ctx, &k, &e, mtu);
}

/* xlb_send counts a packet of service v (unless it is a self-check probe)
 * and sends it to the selected real: p is the IP datagram carried whole, h
 * the hash of the flow it belongs to. too_big: a packet that does not fit
 * the real's egress MTU once encapsulated gets xlb_send_too_big (client
 * packets only: never an ICMP error about an ICMP error); otherwise it is
 * dropped (drop_too_big). inl: methods_send's (the entry's packets). */
static __always_inline int xlb_send(struct xdp_md *ctx, const struct pkt *p,
				    const struct vip_info *v, const struct node_info *n,
				    const struct selection *sel, __u64 h, int probe,
				    int trace, int too_big, const bool inl)
{
	__u8 encap = methods_of(sel->real, v);
	__u16 outer = methods_outer(sel->real, encap);

	if (too_big) {
		__u32 egress = toobig_egress_mtu(ctx, p, sel->real, n, outer);

		if (egress)
			return xlb_send_too_big(ctx, p, v, sel, encap, outer, h, egress);
	}
	if (probe) {
		stats_count(XLB_STAT_SELFCHECK_PROBE);
	} else {
		stats_add(&xlb_svc_stats, v->svc_id, p->l3_len, sel->new_flow);
		stats_add(&xlb_real_stats, sel->rid, p->l3_len, sel->new_flow);
	}

	int rc = methods_send(ctx, p, sel->real, sel->rid, encap, n, h, sel->hit, !sel->hit, inl);
	if (trace) { /* trace.h; the payload moved by the outer headers */
		__u32 mark = trace_marker_off(ctx, p, outer);

		if (mark)
			xlb_trace(ctx, p, mark, sel->rid, trace_info(rc, 0, sel));
	}
	return rc;
}

/* xlb_too_big: a client's packet too big once encapsulated, IPv4 with DF
 * or IPv6 (toobig.h): within node.icmp_too_big_rate it becomes the ICMP
 * error advertising mtu, sent back out of the ingress; over it, dropped.
 * A global function, called from xlb_forward (stack depth). */
__attribute__((noinline)) int xlb_too_big(struct xdp_md *ctx, const struct pkt *p, __u32 mtu)
{
	struct node_info *n;
	__u32 zero = 0;

	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!p || !n) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	if (!rl_allow(&xlb_too_big_rl, n->icmp_too_big_rate)) {
		stats_count(XLB_STAT_ICMP_TOO_BIG_LIMITED);
		return XDP_DROP;
	}
	if (toobig_icmp(ctx, p, mtu)) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	stats_count(XLB_STAT_ICMP_TOO_BIG_SENT);
	return XDP_TX;
}

/* A verdict from a global function, as the verifier cannot see its range. */
static __always_inline int xlb_verdict(int rc)
{
	return rc >= XDP_DROP && rc <= XDP_REDIRECT ? rc : XDP_DROP;
}

/* xlb_stage tail-calls stage (enum xlb_stage), an XDP program of its own
 * that the verifier checks apart from the entry (stage_*.c). The loader
 * fills xlb_stages with the entry's own stages before it attaches the
 * entry (the object's initializer), so the call does not return; if it
 * did, the packet is dropped and counted. */
static __always_inline int xlb_stage(struct xdp_md *ctx, __u32 stage)
{
	bpf_tail_call(ctx, &xlb_stages, stage);
	stats_count(XLB_STAT_DROP_INTERNAL);
	return XDP_DROP;
}
