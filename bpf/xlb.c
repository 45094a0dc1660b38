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
#include "stats.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* BTF anchors: enums only the control plane reads, so bpf2go can emit them. */
const enum xlb_ct_state *xlb_anchor_ct_state __attribute__((unused));
const enum xlb_real_flags *xlb_anchor_real_flags __attribute__((unused));
const enum xlb_node_flags *xlb_anchor_node_flags __attribute__((unused));
const enum xlb_family *xlb_anchor_family __attribute__((unused));
const enum xlb_encap *xlb_anchor_encap __attribute__((unused));
const enum xlb_stat *xlb_anchor_stat __attribute__((unused));

/* Verdicts for packets that parsing did not accept (documented in
 * docs/ARCHITECTURE.md): to a VIP address they are dropped, else passed. */
static __always_inline int xlb_unparsed(struct pkt *p, int rc)
{
	switch (rc) {
	case PARSE_NOT_IP:
		stats_count(XLB_STAT_PASS_NOT_IP);
		return XDP_PASS;
	case PARSE_OTHER_PROTO:
		stats_count(XLB_STAT_PASS_OTHER_PROTO);
		return XDP_PASS;
	case PARSE_FRAGMENT:
		if (select_is_vip_addr(p)) {
			stats_count(XLB_STAT_DROP_FRAGMENT);
			return XDP_DROP;
		}
		stats_count(XLB_STAT_PASS_NOT_VIP);
		return XDP_PASS;
	default: /* PARSE_BAD_L3, PARSE_BAD_L4 */
		if (p->have_dst && select_is_vip_addr(p)) {
			stats_count(XLB_STAT_DROP_MALFORMED);
			return XDP_DROP;
		}
		stats_count(XLB_STAT_PASS_BAD_L3);
		return XDP_PASS;
	}
}

SEC("xdp")
int xlb_forward(struct xdp_md *ctx)
{
	struct pkt p = {};
	struct selection sel = {};
	struct vip_info *v;
	struct node_info *n;
	__u32 zero = 0;
	__u64 h;
	int rc;

	rc = parse_packet(ctx, &p);
	if (rc != PARSE_OK)
		return xlb_unparsed(&p, rc);
	v = select_vip(&p);
	if (!v) {
		stats_count(XLB_STAT_PASS_NOT_VIP);
		return XDP_PASS;
	}
	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!n) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	h = select_flow_hash(&p);
	rc = select_backend(&p, v, n, h, &sel);
	if (rc) {
		stats_count(rc);
		return XDP_DROP;
	}
	stats_add(&xlb_svc_stats, v->svc_id, p.l3_len, sel.new_flow);
	stats_add(&xlb_real_stats, sel.rid, p.l3_len, sel.new_flow);

	__u8 encap = sel.real->encap ? sel.real->encap : v->encap;
	__u16 outer = (sel.real->family == XLB_AF_INET ? IPV4_HLEN : IPV6_HLEN) +
		      (encap == XLB_ENCAP_GRE ? GRE_HLEN : 0);

	rc = encap_push(ctx, &p, sel.real, encap, n, h);
	if (rc) {
		stats_count(rc);
		return XDP_DROP;
	}
	return nexthop_forward(ctx, sel.real, n, outer + p.l3_len);
}
