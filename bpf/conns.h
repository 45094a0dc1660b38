/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* conns.h: active and inactive connections per backend, kept exact from
 * the data plane without a lock (docs/ARCHITECTURE.md, "Connection
 * counts"). The invariant: a real's counts are the live (non-free) ways of
 * the connection table that name it, ESTABLISHED ways active, SYN and
 * CLOSING ways inactive. Every change of a way's real or state is one
 * compare-and-swap of the whole way, and the CPU whose swap succeeded
 * moves the counts with atomic adds: ct_store (new flow, reselect,
 * eviction), ct_refresh (state transitions), the move of a flow from
 * another CPU's slice (select_remote), a peer's decision installed by
 * connection sync (sync.h, through the same two), and the sweep
 * (xlb_ct_sweep) that frees ways idle past their timeout, run by xlbd
 * every second. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"
#include "maps.h"

/* conns_add adds d to the count of real rid's class of state. */
static __always_inline void conns_add(__u32 rid, __u64 state, __s64 d)
{
	struct real_conns *c;

	if (state == XLB_CT_FREE)
		return;
	c = bpf_map_lookup_elem(&xlb_real_conns, &rid);
	if (!c)
		return;
	if (state == XLB_CT_ESTABLISHED)
		__sync_fetch_and_add(&c->active, d);
	else
		__sync_fetch_and_add(&c->inactive, d);
}

/* conns_move: a way of real rid went from state from to state to. */
static __always_inline void conns_move(__u32 rid, __u64 from, __u64 to)
{
	if ((from == XLB_CT_ESTABLISHED) == (to == XLB_CT_ESTABLISHED) &&
	    (from == XLB_CT_FREE) == (to == XLB_CT_FREE))
		return;
	conns_add(rid, from, -1);
	conns_add(rid, to, 1);
}

/* conns_way_real and conns_way_state unpack a way. */
static __always_inline __u32 conns_way_real(__u64 w)
{
	return (w >> XLB_CT_REAL_SHIFT) & XLB_CT_REAL_MASK;
}

static __always_inline __u64 conns_way_state(__u64 w)
{
	return (w >> XLB_CT_STATE_SHIFT) & XLB_CT_STATE_MASK;
}

/* conns_get: real rid's active connections, its inactive ones in *in,
 * both clamped at 0 (a reader may see another CPU's decrement first). */
static __always_inline __u64 conns_get(__u32 rid, __u64 *in)
{
	struct real_conns *c = bpf_map_lookup_elem(&xlb_real_conns, &rid);

	*in = 0;
	if (!c)
		return 0;
	*in = c->inactive > 0 ? c->inactive : 0;
	return c->active > 0 ? c->active : 0;
}
