/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* decap_types.h: xlb-decap's wire formats, constants and the types shared
 * with the Go side (internal/decap, through bpf2go -type). */
#pragma once

#include <linux/types.h>
#include <bpf/bpf_endian.h>

#define DECAP_VLAN_HLEN 4
#define DECAP_VLAN_MAX 2 /* 802.1ad outer tag + 802.1Q inner tag */
#define DECAP_L2_MAX (14 + DECAP_VLAN_MAX * DECAP_VLAN_HLEN)

#define DECAP_IP4_HLEN 20
#define DECAP_IP6_HLEN 40
#define DECAP_IP_MF 0x2000
#define DECAP_IP_OFFSET 0x1fff

#define BE_ETH_P_IP bpf_htons(0x0800)
#define BE_ETH_P_IPV6 bpf_htons(0x86DD)
#define BE_ETH_P_8021Q bpf_htons(0x8100)
#define BE_ETH_P_8021AD bpf_htons(0x88A8)

struct decap_vlanhdr {
	__be16 tci;
	__be16 proto; /* ethertype of what follows */
};

/* GRE, RFC 2784 base header with the RFC 2890 key and sequence fields:
 *
 *    0                   1                   2                   3
 *    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
 *   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *   |C|R|K|S| Reserved0       | Ver |         Protocol Type         |
 *   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *   |      Checksum (if C)          |       Reserved1 (if C)        |
 *   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *   |                         Key (if K)                            |
 *   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *   |                   Sequence Number (if S)                      |
 *   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
 *
 * As Linux's ip_gre does, R (RFC 1701 routing) or a version other than 0
 * means "not a tunnel we understand"; the other Reserved0 bits (RFC 1701
 * strict route and recursion control) are ignored.
 */
struct decap_grehdr {
	__be16 flags;
	__be16 proto;
};

#define DECAP_GRE_HLEN 4
#define DECAP_GRE_OPT_LEN 4
#define BE_GRE_C bpf_htons(0x8000)
#define BE_GRE_R bpf_htons(0x4000)
#define BE_GRE_K bpf_htons(0x2000)
#define BE_GRE_S bpf_htons(0x1000)
#define BE_GRE_VERSION bpf_htons(0x0007)
#define DECAP_UDP_HLEN 8

/* The destination UDP port of GUE (network order), set by the loader
 * (xlb-decap attach --gue-port, default 6080: xlbd's node.gue_port). */
volatile const __be16 decap_gue_port = 0;

/* enum decap_counter indexes decap_counters. The Go side takes the names
 * from BTF: append only, never renumber. DECAP_RX_* are laid out so that
 * base + (outer is IPv6) * 2 + (inner is IPv6) picks the kind. */
enum decap_counter {
	DECAP_PASS_NOT_IP = 0,    /* neither IPv4 nor IPv6 (ARP, LLDP, ...) */
	DECAP_PASS_OUTER_INVALID, /* outer IP header invalid: the kernel judges */
	DECAP_PASS_NOT_TUNNEL,    /* IP, not GRE/IPIP (or IPv6 with ext. headers) */
	DECAP_PASS_NOT_LOCAL,     /* tunnel, outer destination not this host */
	DECAP_PASS_FRAGMENT,      /* outer IPv4 fragment: cannot strip in place */
	DECAP_PASS_GRE_OTHER,     /* GRE version != 0, routing, non-IP payload */
	DECAP_DROP_TRUNCATED,     /* GRE or inner header cut short */
	DECAP_DROP_INNER_VERSION, /* inner IP version != announced protocol */
	DECAP_DROP_INNER_LENGTH,  /* inner lengths disagree with the outer */
	DECAP_DROP_ADJUST,        /* bpf_xdp_adjust_head failed */
	DECAP_RX_IPIP_4IN4,       /* outer IPv4 proto 4 */
	DECAP_RX_IPIP_6IN4,       /* outer IPv4 proto 41 */
	DECAP_RX_IPIP_4IN6,       /* outer IPv6 next header 4 */
	DECAP_RX_IPIP_6IN6,       /* outer IPv6 next header 41 */
	DECAP_RX_GRE_4IN4,        /* GRE over IPv4, protocol 0x0800 */
	DECAP_RX_GRE_6IN4,        /* GRE over IPv4, protocol 0x86DD */
	DECAP_RX_GRE_4IN6,        /* GRE over IPv6, protocol 0x0800 */
	DECAP_RX_GRE_6IN6,        /* GRE over IPv6, protocol 0x86DD */
	DECAP_RX_GUE_4IN4,        /* UDP to the GUE port over IPv4, inner IPv4 (GUE version 1) */
	DECAP_RX_GUE_6IN4,        /* the same, inner IPv6 */
	DECAP_RX_GUE_4IN6,        /* UDP to the GUE port over IPv6, inner IPv4 */
	DECAP_RX_GUE_6IN6,        /* the same, inner IPv6 */
	DECAP_PASS_GUE_OTHER,     /* UDP to the GUE port, not GUE version 1 (a GUE header): the kernel's */
	DECAP_COUNTER_MAX,
};

/* Per-CPU value of decap_counters; bytes count whole frames as received. */
struct decap_stat {
	__u64 packets;
	__u64 bytes;
};

/* Key of decap_local: an address of this host, IPv4 as IPv4-mapped IPv6
 * (::ffff:a.b.c.d), so one map serves both families. */
struct decap_addr {
	__u8 addr[16];
};

/* Layouts internal/decap reads and writes through its bpf2go binding. */
_Static_assert(sizeof(struct decap_stat) == 16, "ABI: struct decap_stat size changed");
_Static_assert(sizeof(struct decap_addr) == 16, "ABI: struct decap_addr size changed");
