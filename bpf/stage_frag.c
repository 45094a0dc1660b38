// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* stage_frag.c: the stage of IP fragments (XLB_STAGE_FRAG): a fragment, or
 * GRE that may be a fragment redirected by a pool peer (frag.h).
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
#include "frag.h"
#include "toobig.h"

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

/* xlb_stage_frag: a fragment (PARSE_FRAGMENT), or GRE (PARSE_OTHER_PROTO). */
SEC("xdp")
int xlb_stage_frag(struct xdp_md *ctx)
{
	struct pkt p = {};
	int rc = parse_packet(ctx, &p);

	if (rc == PARSE_FRAGMENT) {
		rc = xlb_frag(ctx, &p, 0);
		if (rc & XLB_L4_TOO_BIG) /* an IPv6 fragment too big (frag.h) */
			rc = xlb_too_big(ctx, &p, rc & 0xffff);
		return xlb_verdict(rc);
	}
	if (rc != PARSE_OTHER_PROTO || p.proto != IPPROTO_GRE) { /* never: the entry parsed the same */
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	rc = xlb_frag_gre(ctx, &p);
	if (rc == FRAG_GRE_DECAPPED)
		rc = xlb_frag(ctx, &p, 1); /* never XLB_L4_TOO_BIG */
	return xlb_verdict(rc);
}
