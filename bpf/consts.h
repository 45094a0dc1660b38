/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* consts.h: protocol constants and the load-time settings (volatile const,
 * set by the loader before the program is verified; the verifier sees their
 * values and prunes what they switch off). */
#pragma once

#include <stdbool.h> /* compile-time flags, e.g. select_backend's track */
#include <linux/types.h>
#include <bpf/bpf_endian.h>

#define ETH_ALEN 6
#define ETH_HLEN 14
#define VLAN_HLEN 4
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8

#define BE_ETH_P_IP bpf_htons(ETH_P_IP)
#define BE_ETH_P_IPV6 bpf_htons(ETH_P_IPV6)
#define BE_ETH_P_8021Q bpf_htons(ETH_P_8021Q)
#define BE_ETH_P_8021AD bpf_htons(ETH_P_8021AD)

#define IPV4_HLEN 20
#define IPV6_HLEN 40
#define GRE_HLEN 4
#define IP_DF 0x4000
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff
#define OUTER_TTL 64

#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_AUTH 51
#define NEXTHDR_NONE 59
#define NEXTHDR_DEST 60

/* IPv6 extension headers walked before giving up on a packet. */
#define MAX_EXT_HDRS 8
/* Upper bound on CPUs the cross-CPU conntrack lookup visits. */
#define MAX_CPUS 256

#define AF_INET 2
#define AF_INET6 10

/* Set by the loader (internal/datapath). */
volatile const __u32 ct_shift = 17;  /* log2(conntrack buckets per CPU) */
volatile const __u32 nr_cpus = 1;    /* possible CPUs: slices in xlb_ct */
volatile const __u32 vip_buckets = 4096; /* buckets in xlb_vip_index, a power of two */
