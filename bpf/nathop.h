/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* nathop.h: the next hops of NAT replies, cached per CPU
 * (docs/ARCHITECTURE.md, Forwarding methods).
 *
 * A reply (or a backend's ICMP error) rewritten to the VIP goes to its
 * client by the kernel's FIB, whose answer costs more than the rest of the
 * reply's work together (bpf_fib_lookup: ~100 ns IPv4, ~250 ns IPv6 here).
 * The forward path caches its backends' next hops in the reals (xlbd
 * resolves them); the clients are not known in advance, so the replies
 * keep what the FIB answered in a direct-mapped per-CPU cache: a slot per
 * hash of the client's address, holding the lookup's inputs (client, VIP,
 * ingress interface) and answer (egress interface, MACs). An answer is
 * used for NAT_HOP_TTL_JIFFIES, then asked again, so route and neighbour
 * changes are followed within that time; and only for datagrams no longer
 * than one the FIB accepted (it checks the egress MTU), a longer one asks
 * it again. A failed lookup is never cached. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "parse.h"
#include "types.h"
#include "maps.h"

/* An answer's life in jiffies (bpf_jiffies64: the verifier inlines it as
 * one load, where bpf_ktime_get_coarse_ns is a helper call that cost the
 * reply ~20 ns): 1 s at HZ 250, 0.26 s at HZ 1000, 2.6 s at HZ 100. */
#define NAT_HOP_TTL_JIFFIES 256

/* nathop_slot is the cache slot of the client address c (16 bytes, IPv4
 * in the first 4, the rest zero). */
static __always_inline struct nat_hop *nathop_slot(const __u8 *c)
{
	const __u32 *w = (const __u32 *)c;
	__u32 x = w[0] ^ (w[1] * 0x85ebca6bU) ^ (w[2] * 0xc2b2ae35U) ^ (w[3] * 0x27d4eb2fU);
	__u32 slot = (x * 0x9e3779b1U) >> (32 - NAT_HOP_SLOTS_SHIFT);

	return bpf_map_lookup_elem(&xlb_nat_hops, &slot);
}

/* nathop_same: slot h holds the lookup of (client c, vip v, interface
 * iif, family f). */
static __always_inline int nathop_same(const struct nat_hop *h, const __u8 *c, const __u8 *v, __u32 iif,
				       __u8 f)
{
	const __u64 *c8 = (const __u64 *)c, *v8 = (const __u64 *)v;

	return ((h->client[0] ^ c8[0]) | (h->client[1] ^ c8[1]) | (h->vip[0] ^ v8[0]) | (h->vip[1] ^ v8[1])) == 0 &&
	       h->iif == iif && h->family == f;
}
