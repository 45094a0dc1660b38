/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* sched/lblc.h: lblc, locality-based least connections (IPVS lblc): a
 * destination address keeps its backend (lblc_ent.rid[0]) while it is
 * usable and not overloaded, else wlc's choice over the list replaces it.
 * The table, the walk and the entry's life are the locality family's
 * (lblc.h). */
#pragma once

#include "common.h"

/* sched_lblc_pick: the lblc decision on a live entry. Overloaded: more active
 * connections than the weight while some backend is under half its own
 * (IPVS's test). */
static __always_inline __u32 sched_lblc_pick(const struct svc_sched *s, struct lblc_ent *e,
					       const struct lblc_walk *wk, __u64 now)
{
	__u32 r = wk->rid[0];

	if (r && wk->w[0] && !(wk->act[0] > wk->w[0] && wk->under))
		return r;
	/* a swap lost to another CPU leaves its choice recorded; mod marks
	 * the change (connection sync: the newer of two nodes' entries wins) */
	if (__sync_val_compare_and_swap(&e->rid[0], r, wk->best) == r && r != wk->best)
		e->mod = now;
	return wk->best;
}
