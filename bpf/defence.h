/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* defence.h: the defence modes xlbd switches on and off by the fill of
 * the connection table (internal/datapath/defence.go, after each sweep),
 * and what each does here. xlbd alone writes xlb_defence; the forwarder
 * reads it on the new-flow path only, never for a packet of a tracked
 * flow, so a mode that is off costs a hit nothing:
 * - drop_packet: a share of new flows is left untracked (forwarded by
 *   the Maglev table alone, like the flood budget's), the share rising
 *   with the fill (defence_untrack);
 * - drop_entry: a full bucket gives up a half-open or closing way before
 *   an established one (defence_victim_bias), and the sweep frees
 *   unestablished ways idle a tick and established ones idle
 *   defence_state.idle (defence_timeout);
 * - secure_tcp: the sweep frees SYN and CLOSING ways after shorter
 *   timeouts (defence_timeout). */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"

/* Bits of defence_state.modes. */
enum xlb_defence_mode {
	XLB_DEFENCE_DROP_ENTRY = 1,
	XLB_DEFENCE_DROP_PACKET = 2,
	XLB_DEFENCE_SECURE_TCP = 4,
};

/* xlb_defence value (one element), written by xlbd. Timeouts in
 * conntrack ticks; each is used only while its mode is on. */
struct defence_state {
	enum xlb_defence_mode modes; /* the bits of the modes that are on */
	__u32 untrack; /* drop_packet: a new flow is left untracked when a
			* random u32 is below it */
	__u16 syn_timeout; /* secure_tcp: the sweep's timeout of SYN ways */
	__u16 fin_timeout; /* secure_tcp: of CLOSING ways */
	__u16 idle;        /* drop_entry: of established (and UDP) ways */
	__u16 pad;
};
XLB_ABI_SIZE(defence_state, 16);

/* 0 -> the defence modes on (struct defence_state). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct defence_state);
	__uint(max_entries, 1);
} xlb_defence SEC(".maps");

static __always_inline const struct defence_state *defence_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&xlb_defence, &zero);
}

/* defence_untrack: drop_packet refuses to track this new flow. */
static __always_inline int defence_untrack(void)
{
	const struct defence_state *d = defence_get();

	return d && d->untrack && bpf_get_prandom_u32() < d->untrack;
}

/* defence_victim_bias: what ct_victim adds to the idle time of an
 * unestablished way, so that while drop_entry is on any of them goes
 * before an established one (idle times are below 1 << 16). */
static __always_inline __u64 defence_victim_bias(void)
{
	const struct defence_state *d = defence_get();

	return d && (d->modes & XLB_DEFENCE_DROP_ENTRY) ? 1ULL << 16 : 0;
}

/* defence_timeout: the sweep's timeout of a way in state, normally
 * timeout, shortened by the modes of d that are on. */
static __always_inline __u64 defence_timeout(const struct defence_state *d, __u64 state,
					     __u64 timeout)
{
	__u64 t = timeout;

	if (!d || !d->modes)
		return t;
	if ((d->modes & XLB_DEFENCE_SECURE_TCP) && state == XLB_CT_SYN && d->syn_timeout < t)
		t = d->syn_timeout;
	if ((d->modes & XLB_DEFENCE_SECURE_TCP) && state == XLB_CT_CLOSING && d->fin_timeout < t)
		t = d->fin_timeout;
	if (d->modes & XLB_DEFENCE_DROP_ENTRY) {
		__u64 e = state == XLB_CT_ESTABLISHED ? d->idle : 1;

		if (e < t)
			t = e;
	}
	return t;
}
