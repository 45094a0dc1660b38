/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sched/wrr.h: wrr, weighted round robin: the entry whose weight interval
 * (the weights laid end to end) holds (c mod total) * stride mod total, c
 * the service's shared cursor. The stride, coprime with the total, makes
 * consecutive new flows walk the weight line in strides, not in blocks. */
#pragma once

#include "common.h"

/* sched_wrr_at: the entry of s's n whose weight interval holds x, 0 past
 * the last. A plain bounded loop: a few instructions per entry, no call. */
static __always_inline __u32 sched_wrr_at(const struct svc_sched *s, __u32 n, __u64 x)
{
	for (__u32 k = 0; k < XLB_SCHED_LIST_MAX; k++) {
		__u64 w = s->ent[k].weight;

		if (k >= n)
			break;
		if (x < w)
			return s->ent[k].rid;
		x -= w;
	}
	return 0;
}

static __always_inline __u32 sched_wrr_pick(const struct svc_sched *s, __u32 n, __u64 c)
{
	if (!s->total)
		return 0;
	return sched_wrr_at(s, n, (c % s->total) * s->stride % s->total);
}
