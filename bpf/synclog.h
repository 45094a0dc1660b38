/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* synclog.h: the forwarder's side of connection sync's record log
 * (xlb_sync_log, read by xlbd), shared by the connection records (sync.h)
 * and the persistence templates' (persist.h), and the refresh period both
 * report live state at. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"
#include "maps.h"

static __always_inline void sync_count(__u32 s)
{
	__u64 *c = bpf_map_lookup_elem(&xlb_sync_stats, &s);

	if (c)
		*c += 1;
}

/* sync_shift: the refresh period (log2, ticks) for a flow whose entry
 * times out after timeout ticks: the configured shift, made smaller until
 * a period is at most half the timeout. A peer's copy of the flow carries
 * the time of its last report, and the peer's sweep (sweep.h) frees and
 * uncounts it once that is older than the timeout: a flow that sees a
 * packet at least every half timeout is reported again before then. */
static __always_inline __u32 sync_shift(__u32 shift, __u64 timeout)
{
	for (int i = 0; i < 16 && shift && (1ULL << shift) > timeout / 2; i++)
		shift--;
	return shift;
}

#define sync_barrier() asm volatile("" ::: "memory")

/* xlb_sync_put writes a record into this CPU's part of xlb_sync_log: no
 * lock shared between CPUs (a ring buffer's spinlock cost 3 to 4 times as
 * much per record; docs/ARCHITECTURE.md). A run that finds another one on
 * this CPU writing (a packet's softirq interrupting a BPF_PROG_TEST_RUN
 * run, or such a run preempted mid-record) counts its record lost rather
 * than tear one: busy is taken with an atomic exchange. The head is
 * published after the record's bytes with an exchange (fully ordered on
 * every CPU), so xlbd never reads a record being written; a slot is
 * written again only after xlbd's tail passed it (full: the record is
 * lost, and counted). A global function: verified once, not in every
 * path of the forwarder that makes a decision. state's high 16 bits are
 * the record's hold (four arguments: a fifth would cost the call chains'
 * stack). */
__attribute__((noinline)) int xlb_sync_put(__u64 hash, __u32 rid, __u32 state, __u32 kind)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct sync_cpu *c = bpf_map_lookup_elem(&xlb_sync_cpus, &cpu);
	struct sync_event *slot;
	__u64 head;
	__u32 idx;

	if (!c)
		return 0;
	if (__sync_lock_test_and_set(&c->busy, 1)) {
		sync_count(XLB_SYNC_STAT_LOST);
		return 0;
	}
	sync_barrier();
	head = c->head;
	idx = cpu * XLB_SYNC_SLOTS + (__u32)(head & (XLB_SYNC_SLOTS - 1));
	slot = bpf_map_lookup_elem(&xlb_sync_log, &idx);
	if (!slot || head - *(volatile __u64 *)&c->tail >= XLB_SYNC_SLOTS) {
		sync_count(XLB_SYNC_STAT_LOST);
	} else {
		slot->hash = hash;
		slot->rid = rid;
		slot->state = (__u8)state;
		slot->kind = kind;
		slot->hold = (__u16)(state >> 16);
		sync_barrier();
		__sync_lock_test_and_set(&c->head, head + 1);
	}
	sync_barrier();
	*(volatile __u64 *)&c->busy = 0;
	return 0;
}

