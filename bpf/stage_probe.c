// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* stage_probe.c: the stage of self-check probes (XLB_STAGE_PROBE, trace.h).
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
#include "trace.h"

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
	return xlb_send(ctx, p, v, n, &sel, h, 1, 0, 0, false);
}

/* xlb_stage_probe: a TCP/UDP packet to a VIP that xlb_l4 found to carry a
 * self-check marker. */
SEC("xdp")
int xlb_stage_probe(struct xdp_md *ctx)
{
	struct pkt p = {};

	if (parse_packet(ctx, &p) != PARSE_OK) { /* never: the entry parsed the same */
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	return xlb_verdict(xlb_probe(ctx, &p));
}
