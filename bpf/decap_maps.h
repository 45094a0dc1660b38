/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* decap_maps.h: xlb-decap's maps (filled and read by internal/decap) and
 * the counter update. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "decap_types.h"

#define DECAP_LOCAL_MAX 8192

/* decap_counters: key enum decap_counter (as __u32), value struct
 * decap_stat, one slot per CPU; the Go side sums the CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DECAP_COUNTER_MAX);
	__type(key, __u32);
	__type(value, struct decap_stat);
} decap_counters SEC(".maps");

/* decap_local: key struct decap_addr, value __u32 (unused, 1): the
 * addresses of this host. Only tunnel packets whose outer destination is
 * in here are stripped. bpf_fib_lookup cannot answer "is this address
 * local": it returns BPF_FIB_LKUP_RET_FWD_DISABLED for every destination
 * when forwarding is off on the interface (the usual backend), and with
 * forwarding on, BPF_FIB_LKUP_RET_NOT_FWDED for local, broadcast,
 * link-local and unroutable destinations alike. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DECAP_LOCAL_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct decap_addr);
	__type(value, __u32);
} decap_local SEC(".maps");

/* decap_count is deliberately not inlined: a function taking the enum is
 * what makes clang emit enum decap_counter into BTF, where bpf2go -type
 * and the Go side's counter names find it. */
static __noinline void decap_count(enum decap_counter c, __u64 bytes)
{
	__u32 key = c;
	struct decap_stat *s;

	s = bpf_map_lookup_elem(&decap_counters, &key);
	if (!s)
		return;
	s->packets++;
	s->bytes += bytes;
}
