/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* stats.h: per-CPU counters; the daemon sums the CPUs. */
#pragma once

#include <bpf/bpf_helpers.h>
#include "maps.h"

static __always_inline void stats_count(enum xlb_stat s)
{
	__u32 zero = 0;
	struct xlb_global *g = bpf_map_lookup_elem(&xlb_stats, &zero);

	if (g && s < XLB_STAT__MAX)
		g->count[s]++;
}

/* stats_count_hit counts s, and a conntrack hit when hit is 1, in one
 * update of the global counters (a hit's counter is deferred to its
 * packet's verdict: struct selection's hit). */
static __always_inline void stats_count_hit(enum xlb_stat s, __u32 hit)
{
	__u32 zero = 0;
	struct xlb_global *g = bpf_map_lookup_elem(&xlb_stats, &zero);

	if (!g)
		return;
	g->count[XLB_STAT_CT_HIT] += hit;
	if (s < XLB_STAT__MAX)
		g->count[s]++;
}

static __always_inline void stats_add(void *map, __u32 id, __u32 bytes, __u32 new_flow)
{
	struct xlb_counters *c = bpf_map_lookup_elem(map, &id);

	if (!c)
		return;
	c->packets++;
	c->bytes += bytes;
	c->new_flows += new_flow;
}
