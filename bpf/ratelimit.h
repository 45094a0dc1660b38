/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* ratelimit.h: the per-CPU token bucket of the ICMP echo replies, the ICMP
 * too-big errors (toobig.h) and the
 * packet tracer's records (struct icmp_rl_state in types.h). */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"

#define NSEC_PER_SEC 1000000000ULL

/* rl_take takes a token from bucket rl, refilled at rate tokens per
 * second up to one second's worth; 1 if it had one. credit is in
 * nanoseconds times rate: a token costs 1e9. */
static __always_inline int rl_take(struct icmp_rl_state *rl, __u64 rate)
{
	__u64 now, elapsed, credit;

	now = bpf_ktime_get_ns();
	elapsed = now - rl->last_ns;
	if (elapsed > NSEC_PER_SEC)
		elapsed = NSEC_PER_SEC; /* the bucket holds one second's worth */
	credit = rl->credit + elapsed * rate;
	if (credit > NSEC_PER_SEC * rate)
		credit = NSEC_PER_SEC * rate;
	rl->last_ns = now;
	if (credit < NSEC_PER_SEC) {
		rl->credit = credit;
		return 0;
	}
	rl->credit = credit - NSEC_PER_SEC;
	return 1;
}

/* rl_allow takes a token from this CPU's bucket in map (a one-element
 * PERCPU_ARRAY of struct icmp_rl_state), refilled at rate per second; 1 if
 * it had one. Rate 0: never. */
static __always_inline int rl_allow(void *map, __u64 rate)
{
	__u32 zero = 0;
	struct icmp_rl_state *rl;

	if (!rate)
		return 0;
	rl = bpf_map_lookup_elem(map, &zero);
	if (!rl)
		return 0;
	return rl_take(rl, rate);
}
