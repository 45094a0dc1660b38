/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sched/sed.h: sed, shortest expected delay (IPVS sed): the entry of
 * least (active + 1) / weight. */
#pragma once

#include "common.h"

static __always_inline long sched_sed_entry(struct sched_least_walk *wk, const struct svc_sched *s,
					    __u32 k, __u32 rid, __u64 a, __u64 in)
{
	sched_least_better(wk, rid, a + 1, s->ent[k].weight);
	return 0;
}
