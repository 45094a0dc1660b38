/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sched/rr.h: rr, round robin: entry c mod n of the list, c the service's
 * shared cursor (one sequence for all CPUs of the node). */
#pragma once

#include "common.h"

static __always_inline __u32 sched_rr_pick(const struct svc_sched *s, __u32 n, __u64 c)
{
	__u32 i = c % n;

	asm volatile("" : "+r"(i)); /* keep the mask: the verifier needs it */
	return s->ent[i & (XLB_SCHED_LIST_MAX - 1)].rid;
}
