// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* xlb.c: the XDP forwarder's entry point, a short dispatcher over the
 * steps in the headers: parse -> VIP -> conntrack/Maglev -> encap ->
 * next hop. Packets that are not for a VIP leave untouched (XDP_PASS).
 * ICMP, fragments and self-check probes go on in stages, programs of
 * their own (stage_*.c) tail-called through xlb_stages. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "types.h"
#include "maps.h"
#include "parse.h"
#include "hash.h"
#include "select.h"
#include "encap.h"
#include "nexthop.h"
#include "methods.h"
#include "stats.h"
#include "toobig.h"
#include "frag.h"
#include "trace.h"
#include "send.h"
#include "sync.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* BTF anchors: enums only the control plane reads, so bpf2go can emit them. */
const enum xlb_ct_state *xlb_anchor_ct_state __attribute__((unused));
const enum xlb_real_flags *xlb_anchor_real_flags __attribute__((unused));
const enum xlb_node_flags *xlb_anchor_node_flags __attribute__((unused));
const enum xlb_family *xlb_anchor_family __attribute__((unused));
const enum xlb_encap *xlb_anchor_encap __attribute__((unused));
const enum xlb_stat *xlb_anchor_stat __attribute__((unused));
const enum xlb_vip_flags *xlb_anchor_vip_flags __attribute__((unused));
const enum xlb_vip_addr_flags *xlb_anchor_vaddr_flags __attribute__((unused));
const enum xlb_frag_state *xlb_anchor_frag_state __attribute__((unused));
const enum xlb_frag_event_kind *xlb_anchor_frag_event_kind __attribute__((unused));
const struct frag_event *xlb_anchor_frag_event __attribute__((unused));
const struct trace_marker *xlb_anchor_trace_marker __attribute__((unused));
const struct trace_event *xlb_anchor_trace_event __attribute__((unused));
const enum xlb_ct_layout *xlb_anchor_ct_layout __attribute__((unused));
const enum xlb_vip_match *xlb_anchor_vip_match __attribute__((unused));
const enum xlb_trace_const *xlb_anchor_trace_const __attribute__((unused));
const enum xlb_probe_ct *xlb_anchor_probe_ct __attribute__((unused));
const enum xlb_flood_kind *xlb_anchor_flood_kind __attribute__((unused));
const enum xlb_sync_kind *xlb_anchor_sync_kind __attribute__((unused));
const enum xlb_sync_stat *xlb_anchor_sync_stat __attribute__((unused));
const enum xlb_sync_const *xlb_anchor_sync_const __attribute__((unused));
const struct sync_event *xlb_anchor_sync_event __attribute__((unused));
const struct sync_install *xlb_anchor_sync_install __attribute__((unused));
const struct nat_key *xlb_anchor_nat_key __attribute__((unused));
const struct nat_val *xlb_anchor_nat_val __attribute__((unused));
const enum xlb_sched *xlb_anchor_sched __attribute__((unused));
const struct svc_sched *xlb_anchor_svc_sched __attribute__((unused));
const struct real_conns *xlb_anchor_real_conns __attribute__((unused));
const struct sweep_ctx *xlb_anchor_sweep_ctx __attribute__((unused));
const enum xlb_persist_layout *xlb_anchor_persist_layout __attribute__((unused));
const enum xlb_stage *xlb_anchor_stage __attribute__((unused));

/* xlb_l4's answers for a self-check probe and for a packet to no VIP (not
 * XDP actions). */
#define XLB_L4_PROBE 0x100
#define XLB_L4_NOT_VIP 0x200

/* Verdicts for packets that parsing did not accept (documented in
 * docs/ARCHITECTURE.md): to a VIP address they are dropped, else passed;
 * ICMP goes to xlb_icmp. */
static __always_inline int xlb_unparsed(struct xdp_md *ctx, struct pkt *p, int rc)
{
	switch (rc) {
	case PARSE_NOT_IP:
		stats_count(XLB_STAT_PASS_NOT_IP);
		return XDP_PASS;
	case PARSE_OTHER_PROTO:
		if ((p->family == XLB_AF_INET && p->proto == IPPROTO_ICMP) ||
		    (p->family == XLB_AF_INET6 && p->proto == IPPROTO_ICMPV6))
			return xlb_stage(ctx, XLB_STAGE_ICMP);
		if (p->proto == IPPROTO_GRE)
			return xlb_stage(ctx, XLB_STAGE_FRAG);
		stats_count(XLB_STAT_PASS_OTHER_PROTO);
		return XDP_PASS;
	case PARSE_FRAGMENT:
		return xlb_stage(ctx, XLB_STAGE_FRAG);
	default: /* PARSE_BAD_L3, PARSE_BAD_L4 */
		if (p->have_dst && select_is_vip_addr(p)) {
			stats_count(XLB_STAT_DROP_MALFORMED);
			return XDP_DROP;
		}
		stats_count(XLB_STAT_PASS_BAD_L3);
		return XDP_PASS;
	}
}

/* xlb_l4: a TCP/UDP packet, headers complete (paper section 3.3): VIP
 * match, conntrack / scheduler, encapsulation, next hop: hits and new
 * flows. A global function, verified once whatever path parsing took. */
__attribute__((noinline)) int xlb_l4(struct xdp_md *ctx, const struct pkt *p)
{
	struct selection sel = {};
	struct vip_info *v;
	struct node_info *n;
	__u32 zero = 0, mark;
	__u64 h;
	int rc;

	if (!p) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	v = select_vip(p);
	if (!v)
		return XLB_L4_NOT_VIP; /* xlb_forward calls xlb_nat_reply: stack depth */
	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!n) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	/* trace.h: a tracer or self-check marker at the payload's start */
	mark = trace_marker_off(ctx, p, 0);
	if (mark && trace_is_probe(ctx, n, mark))
		return XLB_L4_PROBE; /* xlb_forward calls xlb_probe: stack depth */
	h = select_flow_hash(p);
	rc = select_backend(p, v, n, h, &sel, true);
	if (rc) {
		stats_count(rc);
		mark = trace_marker_off(ctx, p, 0);
		if (mark)
			xlb_trace(ctx, p, mark, 0, trace_info(XDP_DROP, rc, &sel));
		return XDP_DROP;
	}
	sync_note(&sel, h, p); /* sync.h: the decision, for the peers */
	return xlb_send(ctx, p, v, n, &sel, h, 0, 1, 1, true);
}

SEC("xdp")
int xlb_forward(struct xdp_md *ctx)
{
	struct pkt p = {};
	int rc;

	rc = parse_packet(ctx, &p);
	if (rc != PARSE_OK)
		return xlb_unparsed(ctx, &p, rc);
	rc = xlb_l4(ctx, &p);
	if (rc == XLB_L4_NOT_VIP) /* nat.h: passes all but NAT replies */
		return xlb_verdict(xlb_nat_reply(ctx, &p));
	if (rc == XLB_L4_PROBE)
		return xlb_stage(ctx, XLB_STAGE_PROBE);
	if (rc & XLB_L4_TOO_BIG) /* not an XDP action: the call kept out of xlb_l4 (stack depth) */
		rc = xlb_too_big(ctx, &p, rc & 0xffff);
	return xlb_verdict(rc);
}

/* The object's other programs, in .c files of their own, share its maps:
 * the stages, connection sync's install and the sweep. */
#include "stage_icmp.c"
#include "stage_frag.c"
#include "stage_probe.c"

/* xlb_stages (maps.h) holds the stages of this object. */
struct xlb_stage_array xlb_stages SEC(".maps") = {
	.values = {
		[XLB_STAGE_ICMP] = (void *)&xlb_stage_icmp,
		[XLB_STAGE_FRAG] = (void *)&xlb_stage_frag,
		[XLB_STAGE_PROBE] = (void *)&xlb_stage_probe,
	},
};
#include "sync.c"
#include "sweep.c"
