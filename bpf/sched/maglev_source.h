/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sched/maglev_source.h: maglev-source (and IPVS's sh): the slot of the
 * client address under the service's prefix lengths (svc_sched.plen4,
 * plen6), so every connection of a client network reaches one backend,
 * on every CPU and every node. */
#pragma once

#include "common.h"

static __always_inline __u64 sched_maglev_source_hash(const struct svc_sched *s, const struct pkt *p, __u64 h)
{
	return sched_source_hash(p, s->plen4, s->plen6);
}
