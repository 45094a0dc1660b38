// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* xlb.c: the XDP forwarder's entry point, a short dispatcher over the
 * stages in the headers: parse -> VIP -> conntrack/Maglev -> encap ->
 * next hop. Packets that are not for a VIP leave untouched (XDP_PASS). */
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
#include "icmp.h"
#include "icmp_echo.h"
#include "icmpflood.h"
#include "icmpfit.h"
#include "toobig.h"
#include "frag.h"
#include "trace.h"
#include "sync.h"
#include "naticmp.h"

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
 * dropped (drop_too_big). */
static __always_inline int xlb_send(struct xdp_md *ctx, const struct pkt *p,
				    const struct vip_info *v, const struct node_info *n,
				    const struct selection *sel, __u64 h, int probe,
				    int trace, int too_big)
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

	int rc = methods_send(ctx, p, sel->real, sel->rid, encap, n, h, sel->hit, !sel->hit);
	if (trace) { /* trace.h; the payload moved by the outer headers */
		__u32 mark = trace_marker_off(ctx, p, outer);

		if (mark)
			xlb_trace(ctx, p, mark, sel->rid, trace_info(rc, 0, sel));
	}
	return rc;
}

/* xlb_icmp's answer for ICMP to no VIP address (not an XDP action). */
#define XLB_ICMP_NOT_VIP 0x300

/* xlb_icmp: ICMP to a VIP address (docs/ARCHITECTURE.md, ICMP). Errors about
 * a VIP flow go to the flow's backend (read-only lookup of the reversed
 * embedded tuple; NAT backends get it rewritten, naticmp.h), echo requests are answered within the rate; the rest goes to the kernel.
 * The verdicts are in docs/ARCHITECTURE.md. A global (BPF-to-BPF) function:
 * the verifier checks it once, apart from the TCP/UDP path. */
__attribute__((noinline)) int xlb_icmp(struct xdp_md *ctx, struct pkt *p)
{
	struct pkt flow = {};
	struct selection sel = {};
	struct vip_info *v;
	struct node_info *n;
	__u32 zero = 0;
	__u64 h;
	int kind, rc;

	if (!p) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	if (!select_is_vip_addr(p))
		return XLB_ICMP_NOT_VIP; /* xlb_unparsed calls xlb_nat_icmp_reply: stack depth */
	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!n) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	kind = icmp_parse(ctx, p, &flow);
	if (kind == ICMP_K_ECHO) {
		/* no IPv4 options, no IPv6 extension headers */
		if (p->l4_off != p->l3_off + (p->family == XLB_AF_INET ? IPV4_HLEN : IPV6_HLEN)) {
			stats_count(XLB_STAT_ICMP_PASS);
			return XDP_PASS;
		}
		if (!rl_allow(&xlb_icmp_rl, n->icmp_echo_rate)) {
			stats_count(XLB_STAT_ICMP_ECHO_LIMITED);
			return XDP_DROP;
		}
		if (icmp_echo_reply(ctx, p)) {
			stats_count(XLB_STAT_DROP_INTERNAL);
			return XDP_DROP;
		}
		stats_count(XLB_STAT_ICMP_ECHO_REPLY);
		return XDP_TX;
	}
	v = kind == ICMP_K_OTHER ? NULL : select_vip(&flow);
	if (!v) {
		stats_count(XLB_STAT_ICMP_PASS);
		return XDP_PASS;
	}
	h = select_flow_hash(&flow);
	rc = icmp_select(&flow, v, n, h, &sel); /* icmpflood.h: the scan's budget */
	if (rc) {
		stats_count(rc);
		return XDP_DROP;
	}
	stats_count(kind == ICMP_K_FRAG_NEEDED ? XLB_STAT_ICMP_FRAG_NEEDED :
		    kind == ICMP_K_UNREACH     ? XLB_STAT_ICMP_UNREACH :
						 XLB_STAT_ICMP_TIME_EXCEEDED);
	/* too big once encapsulated: cut to fit (icmpfit.h) */
	/* the same outer length as xlb_send's: the method's (methods_outer) */
	rc = icmpfit_fit(ctx, p, sel.real, n, methods_outer(sel.real, methods_of(sel.real, v)));
	if (!rc && methods_of(sel.real, v) == XLB_ENCAP_NAT) {
		/* naticmp.h: the quote as the backend sent it */
		rc = nat_icmp_to_backend(ctx, p, &flow, sel.real);
		if (!rc)
			stats_count(XLB_STAT_NAT_ICMP);
	}
	if (rc) {
		stats_count(rc);
		return XDP_DROP;
	}
	return xlb_send(ctx, p, v, n, &sel, h, 0, 0, 0);
}

/* xlb_frag: a fragment (bpf/frag.h): redirected to its pool
 * node, or forwarded by the fragment table, or held for xlbd; dropped for
 * services without fragments. from_peer: it came in a redirect (never
 * redirected again). A global function, verified once. */
__attribute__((noinline)) int xlb_frag(struct xdp_md *ctx, struct pkt *p, __u32 from_peer)
{
	if (!p) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	return frag_handle(ctx, p, from_peer);
}

/* xlb_frag_gre: GRE that is a fragment redirect to this node is
 * decapsulated (*p then names the inner family, same L2): returns
 * FRAG_GRE_DECAPPED, and the caller hands p to xlb_frag (not called from
 * here: two nested calls would exceed the 512-byte stack). Other GRE goes
 * to the kernel. */
#define FRAG_GRE_DECAPPED 100
__attribute__((noinline)) int xlb_frag_gre(struct xdp_md *ctx, struct pkt *p)
{
	__be16 et = 0;
	__u32 in_off;
	__u16 l3_off;

	if (!p) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	in_off = frag_gre_ours(ctx, p, &et);
	l3_off = p->l3_off;
	if (!in_off || in_off <= l3_off) {
		stats_count(XLB_STAT_PASS_OTHER_PROTO);
		return XDP_PASS;
	}
	if (frag_decap(ctx, l3_off, in_off - l3_off, et)) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	stats_count(XLB_STAT_FRAG_FROM_PEER);
	/* xlb_frag parses the inner header (frag_parse) */
	p->family = et == BE_ETH_P_IP ? XLB_AF_INET : XLB_AF_INET6;
	return FRAG_GRE_DECAPPED;
}
/* xlb_probe: a self-check probe (trace.h) to service v: selected read-only
 * (no conntrack entry made or refreshed), counted only as a probe, its
 * answer written in its marker (trace_probe_answer), then forwarded like
 * any packet so the control plane sees the verdict and the backend. */
__attribute__((noinline)) int xlb_probe(struct xdp_md *ctx, const struct pkt *p)
{
	struct selection sel = {};
	struct vip_info *v;
	struct node_info *n;
	__u32 zero = 0;
	__u64 h;
	int rc;

	if (!p)
		return XDP_DROP;
	v = select_vip(p);
	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!v || !n) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	h = select_flow_hash(p);
	rc = select_backend(p, v, n, h, &sel, false);
	trace_probe_answer(ctx, p, trace_marker_off(ctx, p, 0), sel.ct, rc);
	if (rc) {
		stats_count(rc);
		return XDP_DROP;
	}
	return xlb_send(ctx, p, v, n, &sel, h, 1, 0, 0);
}

/* xlb_l4's answers for a self-check probe and for a packet to no VIP (not
 * XDP actions). */
#define XLB_L4_PROBE 0x100
#define XLB_L4_NOT_VIP 0x200

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
		    (p->family == XLB_AF_INET6 && p->proto == IPPROTO_ICMPV6)) {
			rc = xlb_icmp(ctx, p);
			if (rc == XLB_ICMP_NOT_VIP) /* naticmp.h: passes all but NAT backends' errors */
				rc = xlb_nat_icmp_reply(ctx, p);
			return xlb_verdict(rc);
		}
		if (p->proto == IPPROTO_GRE) {
			rc = xlb_frag_gre(ctx, p);
			if (rc == FRAG_GRE_DECAPPED)
				return xlb_verdict(xlb_frag(ctx, p, 1)); /* never XLB_L4_TOO_BIG */
			return xlb_verdict(rc);
		}
		stats_count(XLB_STAT_PASS_OTHER_PROTO);
		return XDP_PASS;
	case PARSE_FRAGMENT:
		rc = xlb_frag(ctx, p, 0);
		if (rc & XLB_L4_TOO_BIG) /* an IPv6 fragment too big (frag.h) */
			rc = xlb_too_big(ctx, p, rc & 0xffff);
		return xlb_verdict(rc);
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
 * match, conntrack / Maglev, encapsulation, next hop. A global function,
 * verified once whatever path parsing took. */
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
	return xlb_send(ctx, p, v, n, &sel, h, 0, 1, 1);
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
	if (rc > XDP_REDIRECT) /* not an XDP action: calls kept out of xlb_l4 (stack depth) */
		rc = rc == XLB_L4_PROBE ? xlb_probe(ctx, &p) : xlb_too_big(ctx, &p, rc & 0xffff);
	return xlb_verdict(rc);
}

/* The object's other programs, in .c files of their own, share its maps. */
#include "sync.c"
#include "sweep.c"
