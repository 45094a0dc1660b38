/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sched/wlc.h: wlc, weighted least connections (IPVS wlc): the entry of
 * least ((active << 8) + inactive) / weight. */
#pragma once

#include "common.h"

static __always_inline long sched_wlc_entry(struct sched_least_walk *wk, const struct svc_sched *s,
					    __u32 k, __u32 rid, __u64 a, __u64 in)
{
	sched_least_better(wk, rid, (a << 8) + in, s->ent[k].weight);
	return 0;
}
