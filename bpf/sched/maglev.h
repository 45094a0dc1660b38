/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sched/maglev.h: maglev, Maglev consistent hashing on the 5-tuple (the
 * Maglev paper, section 3.4): the flow's own slot of the service's
 * table. The zero value of svc_sched, and the forwarder's inline path
 * (select.h reads the table without asking the scheduler). */
#pragma once

#include "common.h"

static __always_inline __u64 sched_maglev_hash(const struct svc_sched *s, const struct pkt *p, __u64 h)
{
	return h;
}
