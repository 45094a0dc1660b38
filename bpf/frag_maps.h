/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* frag_maps.h: the maps of fragment support (bpf/frag.h).
 * Sizes here are defaults; the loader sets the real ones. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "types.h"

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

/* 0 -> per-CPU staging buffer of a HOLD record (header + frame). */
struct frag_hold_buf {
	struct frag_event ev;
	__u8 data[XLB_FRAG_HOLD_MAX];
};

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
