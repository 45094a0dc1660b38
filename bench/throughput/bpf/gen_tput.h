/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* gen_tput.h: the throughput harness's ABI (bench/throughput): what the
 * generator writes into each frame, and what the receiver counts. Go types
 * are generated from this file by bpf2go. Not part of the forwarder. */
#pragma once

#include <linux/types.h>

/* Bytes of the template the generator writes into every frame: Ethernet,
 * IPv4, TCP and a 10-byte payload (the first 8 bytes a timestamp). Frames
 * are exactly this long. */
#define GEN_FRAME 64
/* Frame offsets of the varied fields and of the timestamp. */
#define GEN_OFF_SADDR (14 + 12)
#define GEN_OFF_SPORT (14 + 20)
/* The same fields of the other end (gen_reply: the flows are clients). */
#define GEN_OFF_DADDR (14 + 16)
#define GEN_OFF_DPORT (14 + 22)
#define GEN_OFF_STAMP (14 + 20 + 20)
/* Frame offsets of the IPv4 header checksum and the TCP checksum. */
#define GEN_OFF_IPCSUM (14 + 10)
#define GEN_OFF_TCPCSUM (14 + 20 + 16)

/* How the 5-tuple changes from one generated packet to the next. Flow i is
 * source address gen_base + (i >> 15), source port 0x8000 | (i & 0x7fff). */
enum gen_mode {
	GEN_CONSTANT = 0,    /* the template's 5-tuple every time */
	GEN_NEW_FLOWS = 1,   /* flow gen_seq: a flow never seen before per packet */
	GEN_CYCLE_FLOWS = 2, /* flows 0 .. gen_flows-1 round robin */
};

/* What the receiver saw (per CPU; the harness sums them). */
struct gen_stats {
	__u64 rx;        /* frames that reached the counting program */
	__u64 encap;     /* sent to a backend by the method under test (rx_method) */
	__u64 plain;     /* the generated frame unchanged (baseline reflector) */
	__u64 bad;       /* anything else */
	__u64 bytes;     /* of encap frames */
	__u64 lat_n;     /* stamped frames timed */
	__u64 lat_sum;   /* ns, sum over lat_n */
};

/* One-way times of stamped frames are kept, in arrival order, in a ring of
 * GEN_LAT_SAMPLES (a power of two) entries. */
#define GEN_LAT_SAMPLES 4096

/* The forwarding method the receiver expects (rx_method): what it counts
 * as "sent to a backend" (gen_stats.encap). */
enum gen_method {
	GEN_M_GRE = 0, /* GRE/IPv4 from the node to a backend, inner to the VIP */
	GEN_M_GUE = 1, /* UDP/IPv4 from the node to a backend's rx_gue_port, inner to the VIP */
	GEN_M_DR = 2,  /* the frame unchanged from its IP header, to a backend's MAC */
	GEN_M_NAT = 3, /* TCP/IPv4 with the destination rewritten to a backend:rx_nat_port */
	/* NAT replies (the generator sends a backend's replies, gen_reply):
	 * TCP/IPv4 from the VIP:rx_port to a client outside the backends' prefix */
	GEN_M_NAT_REPLY = 4,
};

/* Backend 10.0.1.b's MAC for GEN_M_DR: GEN_DR_MAC0..4 then b. */
#define GEN_DR_MAC0 0x02
#define GEN_DR_MAC1 0x7a
#define GEN_DR_MAC2 0x00
#define GEN_DR_MAC3 0x00
#define GEN_DR_MAC4 0x01

/* Per-backend counts are indexed by the last byte of the outer destination. */
#define GEN_BACKENDS 256
