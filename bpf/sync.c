// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sync.c: xlb_sync_apply, the program that installs the peers' decisions
 * (sync.h) into this node's connection table. Compiled into the
 * forwarder's object (included by xlb.c): it shares its maps. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"
#include "maps.h"
#include "sync.h"

/* xlb_sync_apply: run by xlbd through BPF_PROG_TEST_RUN (never attached)
 * with an array of struct sync_install as the frame's data. */
SEC("xdp")
int xlb_sync_apply(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 now = XLB_CLOCK_NS() >> XLB_TICK_SHIFT;
	struct node_info *n;
	__u32 zero = 0;

	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!n)
		return XDP_ABORTED;
	for (int i = 0; i < XLB_SYNC_APPLY_MAX; i++) {
		struct sync_install *in = data + i * sizeof(*in);

		if ((void *)(in + 1) > end)
			break;
		if (in->kind == XLB_SYNC_EV_TEMPLATE)
			xlb_sync_template(in->hash, in->rid, in->age, now);
		else
			xlb_sync_flow(in->hash, in->rid, in->age | (__u32)in->state << 16 | (__u32)in->hbits << 24,
				      in->proto);
	}
	return XDP_PASS;
}

/* xlb_sync_apply_state: run by xlbd through BPF_PROG_TEST_RUN (never
 * attached) with an array of struct sync_state as the frame's data: the
 * peers' NAT flows and lblc entries. A program apart from xlb_sync_apply,
 * so the flows' installs stay as they were. */
SEC("xdp")
int xlb_sync_apply_state(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	/* NAT entries are stamped on the kernel's clock (nat.h), lblc
	 * entries on the forwarder's (lblc.h: XLB_CLOCK_NS) */
	__u64 now = bpf_ktime_get_coarse_ns() >> XLB_TICK_SHIFT;
	__u64 lblc_now = XLB_CLOCK_NS() >> XLB_TICK_SHIFT;
	struct sync_state st;

	for (int i = 0; i < XLB_SYNC_STATE_MAX; i++) {
		const struct sync_state *in = data + i * sizeof(*in);

		if ((void *)(in + 1) > end)
			break;
		__builtin_memcpy(&st, in, sizeof(st));
		if (st.kind == XLB_SYNC_EV_NAT)
			xlb_sync_nat(&st, now);
		else if (st.kind == XLB_SYNC_EV_LBLC)
			xlb_sync_lblc(&st, lblc_now);
		else
			sync_count(XLB_SYNC_STAT_SKIPPED);
	}
	return XDP_PASS;
}
