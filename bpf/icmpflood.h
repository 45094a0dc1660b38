/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* icmpflood.h: the flood budget of ICMP errors about VIP flows.
 *
 * An ICMP error's backend comes from a read-only lookup: this CPU's slice,
 * then the other CPUs' (ct_find_remote, up to nr_cpus - 1 bucket reads),
 * then the Maglev table. Errors quoting random 5-tuples miss every slice,
 * so each would cost the whole scan. Like the non-SYN new flows of
 * select_backend, an error whose flow this CPU's slice does not hold is
 * charged to a budget per CPU and tick (XLB_FLOOD_ICMP, limit
 * node_info.flood_new_limit); over it, the other slices are not read and
 * the Maglev table answers (icmp_scan_limited). The table gives the
 * flow's backend unless the service's table changed since the flow began;
 * errors about flows this CPU tracks are hits and never charged. */
#pragma once

#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "maps.h"
#include "select.h"
#include "stats.h"

/* icmp_scan_over_budget: the flow (hash h) is not in this CPU's slice and
 * this CPU is over its ICMP budget: the caller skips the other slices. */
static __always_inline int icmp_scan_over_budget(const struct node_info *n, __u64 h)
{
	__u32 cpu = bpf_get_smp_processor_id();
	__u32 idx = cpu << ct_shift | ((__u32)h & ((1U << ct_shift) - 1));
	struct ct_bucket *b;
	__u64 e;

	if (nr_cpus < 2 || !n->flood_new_limit)
		return 0;
	b = bpf_map_lookup_elem(&xlb_ct, &idx);
	if (!b || ct_find_local(b, h >> XLB_CT_TAG_SHIFT, &e) >= 0)
		return 0;
	return flood_over_limit(n, bpf_ktime_get_coarse_ns() >> XLB_TICK_SHIFT, XLB_FLOOD_ICMP);
}

/* icmp_select: the backend of the flow an ICMP error is about (sel), read
 * only: select_backend's lookup, or the Maglev table alone over the
 * budget. Returns 0 or a drop reason. */
static __always_inline int icmp_select(const struct pkt *flow, const struct vip_info *v,
				       const struct node_info *n, __u64 h, struct selection *sel)
{
	if (icmp_scan_over_budget(n, h)) {
		stats_count(XLB_STAT_ICMP_SCAN_LIMITED);
		return select_maglev_real(v, h, sel);
	}
	return select_backend(flow, v, n, h, sel, false);
}
