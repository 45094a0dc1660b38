/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* bench_wrap.h: the measurement wrapper's state. BPF_PROG_TEST_RUN with
 * repeat > 1 hands every iteration the frame the previous one left (here an
 * encapsulated packet), so before each iteration the wrapper gives the head
 * back, rewrites the template's first BENCH_HEAD bytes (everything an
 * encapsulation overwrites: the L2 header), and with bench_tail_len the bytes
 * after them (the IP and L4 headers NAT rewrites), writes the flow number
 * into the frame, then tail-calls bench_target[0]. bench/harness sets these globals
 * through the object's mmapped .bss; they are plain (not volatile const)
 * because they change between runs without reloading. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Bytes of the template restored each iteration: Ethernet and up to two
 * VLAN tags (22) with room to spare. Templates are at least this long. */
#define BENCH_HEAD 32
/* Room for the bytes after BENCH_HEAD restored too (bench_tail_len, at
 * most BENCH_TAIL - 1): method nat rewrites addresses, ports and checksums
 * up to the TCP checksum of an IPv6 frame (byte 72; 80 with two VLAN
 * tags). */
#define BENCH_TAIL 64
/* Upper bound of bench_var_off (bounds the packet offset for the verifier). */
#define BENCH_VAR_OFF_MAX 128

/* How the flow number changes from one iteration to the next. */
enum bench_flow_mode {
	BENCH_SAME = 0,  /* the template's flow every time: nothing written */
	BENCH_NEW = 1,   /* base + n: a flow never seen before each iteration */
	BENCH_CYCLE = 2, /* base + (n mod bench_flows): K flows round robin */
};

/* Program to run after the wrapper: the forwarder, bench_lru or bench_tx. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} bench_target SEC(".maps");

__u8 bench_head[BENCH_HEAD]; /* the template's first bytes */
__u8 bench_tail[BENCH_TAIL]; /* the template's next bytes */
__u32 bench_tail_len;        /* of them to restore: 0 unless the target rewrites headers in place */
__u32 bench_len;             /* the template's length */
__u32 bench_mode;            /* enum bench_flow_mode */
__u32 bench_var_off;         /* frame offset of the 32-bit field (a source address) */
__u32 bench_base;            /* first flow number, written big-endian */
__u32 bench_flows;           /* BENCH_CYCLE: number of flows */
__u32 bench_pos;             /* next flow number - base */
__u64 bench_iters;           /* iterations the wrapper ran (all runs) */
