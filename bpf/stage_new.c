// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* stage_new.c: the stages of a flow this CPU's slice of the connection
 * table does not answer for, one per scheduler family (sched/kinds.h):
 * another CPU's entry, or a backend chosen anew by the service's
 * scheduler, persistence and lblc, stored and reported to the peers
 * (select_backend, sync.h); then the packet is sent (send.h). Each stage
 * holds its own family's code only, so a Maglev service's new flow runs
 * none of the list or locality schedulers' and the verifier checks each
 * family apart. Compiled into the forwarder's object (included by xlb.c):
 * xlb_l4 found the packet for a VIP, no self-check probe and no usable
 * local entry, and the entry tail-calls the stage stage_new_of (send.h) names
 * through xlb_stages (maps.h). A stage parses the packet again: it gets
 * only the context. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "types.h"
#include "maps.h"
#include "parse.h"
#include "select.h"
#include "send.h"
#include "stats.h"
#include "sync.h"
#include "trace.h"

/* new_flow: the packet p of a new flow to a VIP, its backend chosen with
 * the schedulers of family (a literal, select_sched) and sent. */
static __always_inline int new_flow(struct xdp_md *ctx, const struct pkt *p, const __u64 family)
{
	struct selection sel = {};
	struct vip_info *v;
	struct node_info *n;
	__u32 zero = 0, mark;
	__u64 h;
	int rc;

	if (!p)
		return XDP_DROP;
	v = select_vip(p);
	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!v || !n) { /* never: the entry found both */
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	h = select_flow_hash(p);
	rc = select_backend(p, v, n, h, &sel, true, family);
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

/* stage_new: a new-flow stage's program: parse, then choose (choose, the
 * family's global function, verified once) and send. */
static __always_inline int stage_new(struct xdp_md *ctx, int (*choose)(struct xdp_md *, const struct pkt *))
{
	struct pkt p = {};
	int rc;

	if (parse_packet(ctx, &p) != PARSE_OK) { /* never: the entry parsed the same */
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	rc = choose(ctx, &p);
	if (rc & XLB_L4_TOO_BIG)
		rc = xlb_too_big(ctx, &p, rc & 0xffff);
	return xlb_verdict(rc);
}

/* The families' global functions and stages. */
__attribute__((noinline)) int xlb_new_hash(struct xdp_md *ctx, const struct pkt *p)
{
	return new_flow(ctx, p, XLB_SCHED_FAMILY_HASH);
}

__attribute__((noinline)) int xlb_new_cursor(struct xdp_md *ctx, const struct pkt *p)
{
	return new_flow(ctx, p, XLB_SCHED_FAMILY_CURSOR);
}

__attribute__((noinline)) int xlb_new_least(struct xdp_md *ctx, const struct pkt *p)
{
	return new_flow(ctx, p, XLB_SCHED_FAMILY_LEAST);
}

__attribute__((noinline)) int xlb_new_locality(struct xdp_md *ctx, const struct pkt *p)
{
	return new_flow(ctx, p, XLB_SCHED_FAMILY_LOCALITY);
}

SEC("xdp")
int xlb_stage_new_hash(struct xdp_md *ctx)
{
	return stage_new(ctx, xlb_new_hash);
}

SEC("xdp")
int xlb_stage_new_cursor(struct xdp_md *ctx)
{
	return stage_new(ctx, xlb_new_cursor);
}

SEC("xdp")
int xlb_stage_new_least(struct xdp_md *ctx)
{
	return stage_new(ctx, xlb_new_least);
}

SEC("xdp")
int xlb_stage_new_locality(struct xdp_md *ctx)
{
	return stage_new(ctx, xlb_new_locality);
}
