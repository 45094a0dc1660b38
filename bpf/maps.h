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

/* --- connection counts (conns.h) --- */

/* Real id -> its connection counts, shared by all CPUs (atomic adds). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct real_conns);
	__uint(max_entries, 65536);
} xlb_real_conns SEC(".maps");

/* --- schedulers (sched.h) --- */

/* Service id -> scheduler settings. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct svc_sched);
	__uint(max_entries, 4096);
} xlb_svc_sched SEC(".maps");

/* Service id -> new flows handed out by its list scheduler on this node:
 * the shared cursor, written only by fetch-and-add. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 4096);
} xlb_sched_cursor SEC(".maps");

/* --- lblc, lblcr (lblc.h) --- */

/* (service, destination) -> its backend(s). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lblc_key);
	__type(value, struct lblc_ent);
	__uint(max_entries, XLB_LBLC_ENTRIES);
} xlb_lblc SEC(".maps");

/* One lblc_walk per CPU: too large for the stack the forwarder has left
 * (a program runs on one CPU to its end, so its CPU's walk is its own). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lblc_walk);
	__uint(max_entries, 1);
} xlb_lblc_walk SEC(".maps");

/* --- persistence (persist.h) --- */

/* slot -> template (see above); 0: free. BPF_F_MMAPABLE marks the layout
 * of templates that hold their expiry tick: a pin of the older layout
 * (last-use stamps, without the flag) does not match and is recreated on
 * upgrade, rather than read in the new layout. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, XLB_PERSIST_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
} xlb_persist SEC(".maps");

/* --- NAT reply next hops (nathop.h) --- */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct nat_hop);
	__uint(max_entries, 1 << NAT_HOP_SLOTS_SHIFT);
} xlb_nat_hops SEC(".maps");

/* --- method nat (nat.h) --- */

/* Reply tuples -> VIP:port, shared by all CPUs (see above). The loader
 * sizes it from node.conntrack_entries. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct nat_key);
	__type(value, struct nat_val);
	__uint(max_entries, 1 << 18);
} xlb_nat SEC(".maps");

/* --- connection sync (sync.h) --- */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct sync_conf);
	__uint(max_entries, 1);
} xlb_sync_conf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, XLB_SYNC_STAT__MAX);
} xlb_sync_stats SEC(".maps");

/* Decision records for xlbd, one writer per CPU (xlb_sync_put): xlb_sync_log
 * holds XLB_SYNC_SLOTS records per CPU (CPU c's from c * XLB_SYNC_SLOTS:
 * 512 KiB, over 10 ms of new flows at the most one CPU forwards), and
 * xlb_sync_cpus each CPU's head and tail. The loader sizes both by the
 * possible CPUs; xlbd maps them into its memory. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct sync_event);
	__uint(max_entries, XLB_SYNC_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
} xlb_sync_log SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct sync_cpu);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
} xlb_sync_cpus SEC(".maps");

/* --- fragments (frag.h) --- */

/* 0 -> the fragment pool's size and this node's index in it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct frag_conf);
	__uint(max_entries, 1);
} xlb_frag_conf SEC(".maps");

/* Pool index -> a node of the LB pool (addr, family, cached next hop; the
 * other fields unused), sorted by address, identical on every node. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct real_info);
	__uint(max_entries, 64);
} xlb_frag_peers SEC(".maps");

/* Fragment table: datagram (src, dst, proto, id) -> the first fragment's
 * decision, or the mark that later fragments wait for it. Bounded: the
 * least recently used entry goes. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct frag_key);
	__type(value, struct frag_entry);
	__uint(max_entries, 65536);
} xlb_frags SEC(".maps");

/* Held fragments and release events for xlbd (struct frag_event records). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} xlb_frag_ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct frag_hold_buf);
	__uint(max_entries, 1);
} xlb_frag_buf SEC(".maps");

/* 0 -> when xlbd's fragment holder last read xlb_frag_ring
 * (bpf_ktime_get_coarse_ns clock, written by xlbd at least every
 * FRAG_READER_STAMP). A too-big datagram is not handed to a holder
 * silent for longer (xlbd stopped): see frag_split. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} xlb_frag_reader SEC(".maps");

/* --- the forwarder's stages (xlb.c) --- */

/* enum xlb_stage -> its program. The forwarder's object binds the
 * programs (xlb.c), so the array is filled when the object is loaded; it
 * is never adopted from a pin, since a program array holds the programs
 * of its own build: the loader pins each build's array after its entry is
 * attached (a pinned array keeps its programs while no xlbd holds it). */
struct xlb_stage_array {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, XLB_STAGE__MAX);
	__type(key, __u32);
	__array(values, int(struct xdp_md *));
};

struct xlb_stage_array xlb_stages SEC(".maps");
