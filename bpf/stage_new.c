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
 * local entry, put what it found in xlb_stage_arg (maps.h) and tail-calls
 * the stage xlb_new_stage (send.h) names through xlb_stages. */
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

/* new_flow: the packet of a new flow to a VIP (a: as the entry found it),
 * its backend chosen with the schedulers of family (a literal,
 * select_sched) and sent. */
static __always_inline int new_flow(struct xdp_md *ctx, struct stage_arg *a, const __u64 family)
{
	struct selection sel = {};
	const struct vip_info *v;
	const struct pkt *p;
	struct node_info *n;
	__u32 zero = 0, mark;
	int rc;

	if (!a)
		return XDP_DROP;
	p = &a->p;
	v = &a->v;
	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!n) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	rc = select_backend(p, v, n, a->h, &sel, true, family, 0);
	if (rc) {
		stats_count(rc);
		mark = trace_marker_off(ctx, p, 0);
		if (mark)
			xlb_trace(ctx, p, mark, 0, trace_info(XDP_DROP, rc, &sel));
		return XDP_DROP;
	}
	sync_note(&sel, a->h, p); /* sync.h: the decision, for the peers */
	rc = xlb_send(ctx, p, v, n, &sel, a->h, 0, 1, 1);
	if (rc & XLB_L4_TOO_BIG)
		rc = xlb_too_big(ctx, p, rc & 0xffff);
	return rc;
}

/* stage_new: a new-flow stage's program: choose, the family's global
 * function (verified once), gets the entry's argument. */
static __always_inline int stage_new(struct xdp_md *ctx, int (*choose)(struct xdp_md *, struct stage_arg *))
{
	__u32 zero = 0;

	return xlb_verdict(choose(ctx, bpf_map_lookup_elem(&xlb_stage_arg, &zero)));
}

/* The families' global functions and stages. */
__attribute__((noinline)) int xlb_new_cursor(struct xdp_md *ctx, struct stage_arg *a)
{
	return new_flow(ctx, a, XLB_SCHED_FAMILY_CURSOR);
}

__attribute__((noinline)) int xlb_new_least(struct xdp_md *ctx, struct stage_arg *a)
{
	return new_flow(ctx, a, XLB_SCHED_FAMILY_LEAST);
}

__attribute__((noinline)) int xlb_new_locality(struct xdp_md *ctx, struct stage_arg *a)
{
	return new_flow(ctx, a, XLB_SCHED_FAMILY_LOCALITY);
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
