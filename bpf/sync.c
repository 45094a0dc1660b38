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
			sync_install_one(n, in, now);
	}
	return XDP_PASS;
}
