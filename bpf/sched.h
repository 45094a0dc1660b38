/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sched.h: the schedulers besides Maglev on the 5-tuple, asked only for a
 * flow the connection table does not hold (docs/ARCHITECTURE.md,
 * "Schedulers"). Each scheduler is a file of its own, bpf/sched/<name>.h;
 * the list internal/sched/list.go numbers them and generates
 * sched/kinds.h (enum xlb_sched, the families' masks) and
 * sched/dispatch.h (which function of which file each kind runs). The
 * families run them: hash schedulers (maglev-source, sh, dh) read the
 * service's Maglev table at a slot of another hash (xlb_sched_new,
 * select.h); cursor schedulers (rr, wrr) hand out the service's backend
 * list through one shared cursor per service, advanced with an atomic
 * fetch-and-add: lock-free, and one sequence for all CPUs of the node;
 * least schedulers (lc, wlc, sed, nq) walk the same list reading each
 * backend's counts (conns.h); locality schedulers (lblc, lblcr) are in
 * lblc.h. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "types.h"
#include "maps.h"
#include "conns.h"
#include "sched/common.h"
#include "sched/dispatch.h"

/* xlb_sched_list: the next real of service svc_id's cursor or least
 * scheduler, or 0 (no list, or another kind: the caller falls back to the
 * Maglev table). Least: the entry of least overhead by the counts of
 * conns.h, as this node's CPUs left them (the first of equals wins).
 * Cursor: one atomic fetch-and-add on the service's cursor orders every
 * new flow of the node, whichever CPU it arrives on. A global function,
 * verified once. */
__attribute__((noinline)) int xlb_sched_list(__u32 svc_id)
{
	struct svc_sched *s = bpf_map_lookup_elem(&xlb_svc_sched, &svc_id);
	__u64 c, *cur;
	__u32 n;

	if (!s)
		return 0;
	n = s->n;
	if (!n || n > XLB_SCHED_LIST_MAX)
		return 0;
	if (sched_in(s->kind, XLB_SCHED_FAMILY_LEAST))
		return sched_least(s, n);
	cur = bpf_map_lookup_elem(&xlb_sched_cursor, &svc_id);
	if (!cur)
		return 0;
	c = __sync_fetch_and_add(cur, 1);
	return sched_cursor_pick(s, n, c);
}
