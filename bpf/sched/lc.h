/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sched/lc.h: lc, least connections (IPVS lc): the entry of least
 * (active << 8) + inactive, weight 1 (no products). */
#pragma once

#include "common.h"

static __always_inline long sched_lc_entry(struct sched_least_walk *wk, const struct svc_sched *s,
					   __u32 k, __u32 rid, __u64 a, __u64 in)
{
	__u64 oh = (a << 8) + in;

	if (!wk->best || oh < wk->best_oh) {
		wk->best = rid;
		wk->best_oh = oh;
	}
	return 0;
}
