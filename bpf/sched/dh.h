/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sched/dh.h: dh, destination hashing (IPVS dh): the slot of flow hash v1
 * of (0, destination address, 0, 0). */
#pragma once

#include "common.h"

static __always_inline __u64 sched_dh_hash(const struct svc_sched *s, const struct pkt *p, __u64 h)
{
	__u64 zero[2] = {};

	if (p->family == XLB_AF_INET)
		return hash_flow4(0, *(const __u32 *)p->dst, 0, 0);
	return hash_flow6(zero, (const __u64 *)p->dst, 0, 0);
}
