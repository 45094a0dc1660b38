/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* maps.h: every map of the forwarder. Sizes here are defaults; the loader
 * sets the real ones from the config before creating the maps. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"

/* VIP (address, port, proto) -> service. Port 0 entries serve all ports.
 * The catalog: the forwarder matches VIPs with xlb_vip_index, below. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct vip_key);
	__type(value, struct vip_info);
	__uint(max_entries, 4096);
} xlb_vips SEC(".maps");

/* The forwarder's VIP match (see struct vip_bucket): a power-of-two
 * number of buckets, mmapped by the control plane for atomic stores. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct vip_bucket);
	__uint(max_entries, 4096);
} xlb_vip_index SEC(".maps");

/* Entry id -> VIP key and service (id 0 unused). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct vip_ent);
	__uint(max_entries, 8193);
} xlb_vip_ents SEC(".maps");

/* VIP address (port 0, proto 0) -> 1: lets a malformed packet to a VIP be
 * told from one to any other host. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct vip_key);
	__type(value, __u32);
	__uint(max_entries, 4096);
} xlb_vip_addrs SEC(".maps");

/* Maglev tables: slot (vip_info.table_id) -> inner ARRAY holding the M
 * real ids of a table, two per 64-bit element: slot 2k in the low 32 bits,
 * 2k+1 in the high ones (array elements are 8-byte aligned, so pairs halve
 * the memory). Inner maps are mmapable so
 * a table is written with one memcpy. A service's table is replaced whole:
 * a new inner map in a free slot, then the vip_info update that points to
 * it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_ARRAY);
		__uint(map_flags, BPF_F_INNER_MAP | BPF_F_MMAPABLE);
		__type(key, __u32);
		__type(value, __u64);
		__uint(max_entries, 1);
	});
} xlb_tables SEC(".maps");

/* Real id -> backend of one service. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct real_info);
	__uint(max_entries, 65536);
} xlb_reals SEC(".maps");

/* Connection table, sliced by CPU: see struct ct_bucket. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct ct_bucket);
	__uint(max_entries, 1 << 17);
} xlb_ct SEC(".maps");

/* 0 -> node settings. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct node_info);
	__uint(max_entries, 1);
} xlb_node SEC(".maps");

/* svc_id -> counters, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct xlb_counters);
	__uint(max_entries, 4096);
} xlb_svc_stats SEC(".maps");

/* real id -> counters, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct xlb_counters);
	__uint(max_entries, 65536);
} xlb_real_stats SEC(".maps");

/* 0 -> global counters indexed by enum xlb_stat, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct xlb_global);
	__uint(max_entries, 1);
} xlb_stats SEC(".maps");

/* enum xlb_flood_kind -> flood defence state, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct flood_state);
	__uint(max_entries, XLB_FLOOD__MAX);
} xlb_flood SEC(".maps");

/* 0 -> ICMP echo-reply token bucket, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct icmp_rl_state);
	__uint(max_entries, 1);
} xlb_icmp_rl SEC(".maps");

/* 0 -> ICMP too-big token bucket, per CPU (same layout as the echo one). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct icmp_rl_state);
	__uint(max_entries, 1);
} xlb_too_big_rl SEC(".maps");

/* 0 -> packet tracer token bucket, per CPU (same layout as the ICMP one). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct icmp_rl_state);
	__uint(max_entries, 1);
} xlb_trace_rl SEC(".maps");

/* Tracer records (struct trace_event) for the daemon, which sends them to
 * the receivers (XDP cannot send a second packet). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} xlb_trace_ring SEC(".maps");
