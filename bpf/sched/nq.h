/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sched/nq.h: nq, never queue (IPVS nq): the first entry without an
 * active connection, else as sed. */
#pragma once

#include "common.h"

static __always_inline long sched_nq_entry(struct sched_least_walk *wk, const struct svc_sched *s,
					   __u32 k, __u32 rid, __u64 a, __u64 in)
{
	if (a == 0) {
		wk->best = rid;
		return 1;
	}
	sched_least_better(wk, rid, a + 1, s->ent[k].weight);
	return 0;
}
