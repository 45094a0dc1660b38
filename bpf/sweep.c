// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sweep.c: xlb_ct_sweep, the program xlbd runs (BPF_PROG_TEST_RUN) over
 * the connection table every second (sweep.h). Compiled into the
 * forwarder's object (included by xlb.c): it shares its maps. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"
#include "maps.h"
#include "sweep.h"

SEC("syscall")
int xlb_ct_sweep(struct sweep_ctx *ctx)
{
	__u32 zero = 0;
	struct sweep_state st = {
		.start = ctx->start,
		.now = ctx->now,
		.n = bpf_map_lookup_elem(&xlb_node, &zero),
	};

	bpf_loop(ctx->count, sweep_bucket, &st, 0);
	ctx->freed = st.freed;
	ctx->live = st.live;
	return 0;
}

/* xlb_persist_sweep frees the persistence templates of xlb_persist that
 * expired (persist.h) and counts those live, over count slots from start. */
SEC("syscall")
int xlb_persist_sweep(struct sweep_ctx *ctx)
{
	struct sweep_state st = {.start = ctx->start, .now = ctx->now};

	bpf_loop(ctx->count, sweep_template, &st, 0);
	ctx->freed = st.freed;
	ctx->live = st.live;
	return 0;
}
