// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* stage_icmp.c: the stage of ICMP (XLB_STAGE_ICMP): errors about a VIP flow,
 * echo requests to a VIP, and NAT backends' errors.
 * Compiled into the forwarder's object (included by xlb.c); the entry,
 * xlb_forward, tail-calls it through xlb_stages (maps.h), and it parses
 * the packet again: a stage gets only the context. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "types.h"
#include "maps.h"
#include "parse.h"
#include "select.h"
#include "send.h"
#include "stats.h"
#include "icmp.h"
#include "icmp_echo.h"
#include "icmpflood.h"
#include "icmpfit.h"
#include "naticmp.h"

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
	return xlb_send(ctx, p, v, n, &sel, h, 0, 0, 0, false);
}

/* xlb_stage_icmp: ICMP or ICMPv6 that xlb_forward's parse left
 * (PARSE_OTHER_PROTO). */
SEC("xdp")
int xlb_stage_icmp(struct xdp_md *ctx)
{
	struct pkt p = {};
	int rc;

	if (parse_packet(ctx, &p) != PARSE_OTHER_PROTO) { /* never: the entry parsed the same */
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	rc = xlb_icmp(ctx, &p);
	if (rc == XLB_ICMP_NOT_VIP) /* naticmp.h: passes all but NAT backends' errors */
		rc = xlb_nat_icmp_reply(ctx, &p);
	return xlb_verdict(rc);
}
